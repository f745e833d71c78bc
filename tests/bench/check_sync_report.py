"""deltacast-bench sync end to end on loopback, small and quick: a producer and
three consumer processes, a full sync and four sparse versions; every version
(and the dense baseline) must be bit-exact on every consumer, and the JSON
report must carry every field the README documents; --plot draws its PNG. Timing is not judged here
(the machine is shared); benchmarks report it."""
import json
import os
import subprocess
import sys
import tempfile

bench = sys.argv[1]
png = os.path.join(tempfile.mkdtemp(prefix="deltacast-sync-"), "sync.png")
out = subprocess.run([bench, "sync", "--consumers", "3", "--rails", "2", "--elements", str(1 << 22), "--versions", "4",
                      "--gloo", "off", "--json", "--plot", png], capture_output=True, text=True, timeout=500)
assert out.returncode == 0, out.stderr[-4000:]
report = json.loads(out.stdout)
for key in ["mode", "consumers", "rails", "elements", "link_rate_bytes_per_second", "all_exact", "versions"]:
    assert key in report, f"report without '{key}'"
assert report["mode"] == "loopback" and report["consumers"] == 3
rows = report["versions"]
assert len(rows) == 5, rows
assert rows[0]["full"] and all(not r["full"] for r in rows[1:])
assert [r["step"] for r in rows] == list(range(len(rows))), "steps number the rows 0, 1, 2, ..."
# Each step's dense baseline is a version of its own, published right after the step's delta.
assert [r["version"] for r in rows] == [1] + [2 * k for k in range(1, len(rows))], [r["version"] for r in rows]
assert [d["version"] for d in report["dense_syncs"]] == [2 * k + 1 for k in range(1, len(rows))], report["dense_syncs"]
for r in rows:
    for key in ["version", "density", "wire_bytes", "dense_bytes", "seconds", "lower_bound_seconds", "dense_seconds",
                "gloo_seconds", "exact", "encode_seconds", "wire_seconds", "apply_seconds", "committed"]:
        assert key in r, f"version row without '{key}'"
    assert r["exact"] is True, r
    assert r["committed"] == 3, r
    assert r["gloo_seconds"] is None
    if not r["full"]:
        assert 0 < r["density"] < 0.1 and r["wire_bytes"] < r["dense_bytes"] / 10, r
        assert r["dense_seconds"] is not None and r["dense_exact"] is True, r
assert report["all_exact"] is True
# --plot drew the picture (matplotlib) of the same run.
with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
assert os.path.getsize(png) > 10_000, os.path.getsize(png)
assert not os.path.exists(png + ".json"), "the plot's data was left behind"
print(f"sync report ok: {len(rows)} versions exact on 3 consumers; sparse wire bytes "
      f"{[r['wire_bytes'] for r in rows[1:]]} of {rows[1]['dense_bytes']} dense")
