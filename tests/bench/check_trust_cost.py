"""benchmarks/wire/trust_cost.py, small and quick: every mode's wire transfer and sparse versions
run (each exact, or the script fails) and the figures name every mode with its ratio to
insecure, with each rail end's payload work inline and on its helper thread (--piece-helpers
compare). Timing is not judged here; the full run's figures are in benchmarks/README.md."""
import json
import os
import subprocess
import sys
import tempfile

bench = sys.argv[1]
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "wire", "trust_cost.py")
out = os.path.join(tempfile.mkdtemp(prefix="deltacast-trust-"), "trust.json")
done = subprocess.run([sys.executable, script, bench, "--rounds", "1", "--bytes", str(32 << 20), "--rails", "2",
                       "--sync-elements", str(1 << 20), "--sync-versions", "2", "--piece-helpers", "compare", "--json", out],
                      capture_output=True, text=True, timeout=600)
assert done.returncode == 0, done.stdout + done.stderr[-4000:]
with open(out) as f:
    figures = json.load(f)
assert set(figures["modes"]) == {"insecure", "authenticated", "encrypted"}, figures
for mode, row in figures["modes"].items():
    assert row["protection"] == [mode] * figures["rounds"], (mode, row)
    assert row["sync_median_seconds"] > 0, (mode, row)
    for helpers in ("off", "on"):
        assert row[f"wire_median_gbps_helpers_{helpers}"] > 0, (mode, helpers, row)
for helpers in ("off", "on"):
    assert figures["modes"]["insecure"][f"wire_ratio_helpers_{helpers}"] == 1.0
    assert f"| encrypted | {helpers} |" in done.stdout, done.stdout

# DELTACAST_PIECE_HELPERS decides for a run left on auto; a value it does not know is named.
for value, expected in (("on", True), ("off", False), ("sideways", None)):
    env = dict(os.environ, DELTACAST_PIECE_HELPERS=value)
    ran = subprocess.run([bench, "wire", "--rails", "1", "--bytes", str(1 << 20), "--trials", "1",
                          "--baseline-seconds", "0", "--json", "--piece-helpers", "auto"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert ran.returncode == 0, ran.stderr[-2000:]
    report = json.loads(ran.stdout)
    if expected is None:
        assert "DELTACAST_PIECE_HELPERS='sideways' is not on, off or auto" in ran.stderr, ran.stderr[-2000:]
    else:
        assert report["piece_helpers"] is expected, (value, report["piece_helpers"])
print(done.stdout)
