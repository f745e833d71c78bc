#!/usr/bin/env python3
"""On a GPU machine: the checkpoint-engine script (examples/checkpoint_engine_replacement.py,
CUDA weights) against the vLLM stand-in holding its model on the GPU, once on deltacast and
once on the real checkpoint-engine 0.4.2 (the same script with its three import lines set back
to checkpoint_engine's, the stand-in given checkpoint-engine's worker extension): seconds per
update for both, and every update's weights held to what the stand-in's vLLM loaders make of
the step. Prints one JSON object. The script's seconds include the stand-in hashing its weights
before it answers (its check of the update): engine_seconds_per_update leaves that out.

    PYTHONPATH=build-gpu/python python3 benchmarks/device/compat_bench.py [--site /tmp/ce-site]

--site: where checkpoint-engine and its needs were installed (pip --target), added to the
checkpoint-engine run's PYTHONPATH only."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "checkpoint_engine_replacement.py")
STANDIN = os.path.join(ROOT, "benchmarks", "device", "vllm_standin")  # vLLM does not install on the GPU machine
sys.path[:0] = [STANDIN, os.path.join(ROOT, "tests", "python", "fakes")]
from tiny_llama import CONFIG, checkpoint_tensors, save_checkpoint, step_digests  # noqa: E402

# About 1 Gi parameters (2 GiB of bf16): four Llama-7B-sized layers and the vocabulary.
MODEL = dict(CONFIG, vocab=32000, hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=11008, layers=4)
IMPORTS = {"import deltacast.compat.distributed as dist": "import checkpoint_engine.distributed as dist",
           "from deltacast.compat import request_inference_to_update":
               "from checkpoint_engine import request_inference_to_update",
           "from deltacast.compat.ps import ParameterServer": "from checkpoint_engine.ps import ParameterServer"}
EXTENSIONS = {"deltacast": "deltacast.compat.worker.VllmColocateWorkerExtension",
              "checkpoint-engine": "checkpoint_engine.worker.VllmColocateWorkerExtension"}


def checkpoint_engine_script(directory):
    """The example with its imports set back to checkpoint-engine's: nothing else changes."""
    text = open(EXAMPLE).read()
    for ours, theirs in IMPORTS.items():
        assert ours in text, ours
        text = text.replace(ours, theirs)
    path = os.path.join(directory, "checkpoint_engine_update.py")
    with open(path, "w") as f:
        f.write(text)
    return path


def run(engine, directory, steps, env, port, model_config, device):
    port_file = os.path.join(directory, f"{engine}.port")
    server = subprocess.Popen([sys.executable, os.path.join(STANDIN, "server.py"), "--tp", "1", "--device", device,
                               "--config", json.dumps(model_config), "--extension", EXTENSIONS[engine],
                               "--port-file", port_file], env=env, stdout=sys.stderr, stderr=sys.stderr)
    try:
        while not os.path.exists(port_file):
            if server.poll() is not None:
                raise RuntimeError(f"{engine}: the stand-in exited")
            time.sleep(0.2)
        endpoint = f"http://127.0.0.1:{open(port_file).read()}"
        script = EXAMPLE if engine == "deltacast" else checkpoint_engine_script(directory)
        command = [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1", "--nproc_per_node", "1",
                   "--master_port", str(port),
                   script, "--checkpoint-path", os.path.join(directory, "checkpoint"), "--endpoint", endpoint,
                   "--inference-parallel-size", "1", "--steps", str(steps), "--device", device, "--timeout", "600"]
        start = time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - start
        output = done.stdout + done.stderr
        seconds = [float(s) for s in re.findall(r"Update weights to \S+ duration: ([0-9.]+) seconds", output)]
        with urllib.request.urlopen(f"{endpoint}/standin/log", timeout=120) as answer:
            log = json.loads(answer.read())
        return {"engine": engine, "returncode": done.returncode, "seconds_per_update": seconds, "wall_seconds": wall,
                "log": log, "tail": output[-3000:] if done.returncode else ""}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", default=None, help="checkpoint-engine's pip --target directory")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--engines", default="deltacast,checkpoint-engine")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke run of this script")
    parser.add_argument("--model", default="llama", choices=("llama", "tiny"))
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    from checkpoint_engine_replacement import trained

    directory = tempfile.mkdtemp(prefix="deltacast-compat-bench-")
    os.makedirs(os.path.join(directory, "checkpoint"))
    model_config = MODEL if args.model == "llama" else CONFIG
    tensors = checkpoint_tensors(model_config, seed=3)
    save_checkpoint(os.path.join(directory, "checkpoint"), tensors, files=4)
    expected = [ranks[0] for ranks in step_digests({n: t.to(args.device) for n, t in tensors.items()}, args.steps,
                                                   trained, 1, model_config, args.device)]
    results = {"model": model_config, "parameters": sum(t.numel() for t in tensors.values()),
               "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "none (cpu)", "runs": []}
    for k, engine in enumerate(args.engines.split(",")):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if engine == "checkpoint-engine" and args.site:
            env["PYTHONPATH"] = args.site + os.pathsep + env.get("PYTHONPATH", "")
        result = run(engine, directory, args.steps, env, 29500 + 10 * k, model_config, args.device)
        log = result.pop("log")
        result["exact"] = [all(status == "ok" for status, _ in entry["outcomes"]) and entry["digests"][0] == want
                           for entry, want in zip(log, expected)]
        result["updates_logged"] = len(log)
        # How long the workers' update_weights_from_ipc call took, per update: the rest of the
        # trainer's "Update weights" time is its own side (staging, encoding, handing out buckets).
        result["worker_seconds"] = [round(entry["rpc_seconds"], 3) for entry in log]
        # The stand-in hashes its weights before it answers (its check, not the engine's work): the
        # script's figure less that is what the update took.
        checks = [entry["check_seconds"] for entry in log]
        result["standin_check_seconds"] = [round(c, 3) for c in checks]
        if len(checks) == len(result["seconds_per_update"]):
            result["engine_seconds_per_update"] = [round(s - c, 3) for s, c in zip(result["seconds_per_update"], checks)]
        results["runs"].append(result)
        print(json.dumps(result), file=sys.stderr, flush=True)
    print(json.dumps(results, indent=1))
    return 0 if all(r["returncode"] == 0 and all(r["exact"]) and len(r["exact"]) == args.steps
                    for r in results["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
