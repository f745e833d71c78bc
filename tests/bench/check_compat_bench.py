"""benchmarks/device/compat_bench.py on this CPU, small (the GPU machine runs it with CUDA
weights and a 1 Gi-parameter model): the checkpoint-engine script on deltacast against the vLLM
stand-in, every update exact, and the stand-in's own hashing reported and taken out of the
figures. Timing is not judged here."""
import json
import os
import subprocess
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
device = os.path.join(root, "benchmarks", "device")
done = subprocess.run([sys.executable, os.path.join(device, "compat_bench.py"), "--device", "cpu", "--model", "tiny",
                       "--engines", "deltacast", "--steps", "3"], capture_output=True, text=True, timeout=600)
assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
results = json.loads(done.stdout)
run, = results["runs"]
assert run["engine"] == "deltacast" and run["exact"] == [True, True, True], run
raw, net, checks = run["seconds_per_update"], run["engine_seconds_per_update"], run["standin_check_seconds"]
assert len(raw) == len(net) == len(checks) == 3, run
for whole, engine, check in zip(raw, net, checks):
    # The script prints its seconds to two decimals; the rest are the stand-in's own clock.
    assert check >= 0 and engine <= whole + 1e-9 and abs(whole - check - engine) < 2e-3, run
report = subprocess.run([sys.executable, os.path.join(device, "report.py"), "--compat", "/dev/stdin"],
                        input=done.stdout, capture_output=True, text=True, timeout=60)
assert report.returncode == 0 and "without the check" in report.stdout, report.stdout + report.stderr
print(report.stdout)
