"""deltacast-bench sync with a sharded trainer, small and quick: four trainer
ranks (row, column and flat shards) to three rollout processes of their own
layouts (TP2 rank 0, TP2 rank 1, TP1 with fused qkv_proj). Every version must
be exact on every consumer, each consumer must receive about its share of
each sparse version (the TP2 ranks half, TP1 all), and the report must carry
the fields the README documents. Timing is not judged here."""
import json
import subprocess
import sys

bench = sys.argv[1]
out = subprocess.run([bench, "sync", "--producers", "4", "--consumer-layout", "tp2,tp2,tp1", "--elements", str(1 << 22),
                      "--versions", "3", "--json"], capture_output=True, text=True, timeout=500)
assert out.returncode == 0, out.stderr[-4000:]
report = json.loads(out.stdout)
for key in ["mode", "producers", "consumer_layouts", "versions", "max_received_over_share",
            "median_encode_vs_single_producer", "all_exact"]:
    assert key in report, f"report without '{key}'"
assert report["mode"] == "sharded" and report["producers"] == 4
assert report["consumer_layouts"] == ["tp2:0", "tp2:1", "tp1:0"], report["consumer_layouts"]
rows = report["versions"]
assert len(rows) == 4 and rows[0]["full"] and not any(r["full"] for r in rows[1:]), rows
for r in rows:
    consumers = r["consumers"]
    assert [c["name"] for c in consumers] == ["c0", "c1", "c2"], consumers
    for c in consumers:
        assert set(c) == {"name", "layout", "received_bytes", "share_bytes", "exact"}, c
        assert c["exact"] is True, (r["version"], c)
    # Fixed per-version overhead: a bucket header and a few chunk headers per rank. Full versions
    # are resharded too: each consumer gets the dense chunks of what it holds.
    for c in consumers:
        assert c["received_bytes"] <= 1.1 * c["share_bytes"] + 4 * 512, (r["version"], c)
    if r["full"]:
        continue
    tp2 = consumers[0]["received_bytes"] + consumers[1]["received_bytes"]
    assert consumers[2]["received_bytes"] == r["wire_bytes"], (r, "TP1 holds everything and gets all of it")
    assert 0.98 * r["wire_bytes"] <= tp2 <= 1.05 * r["wire_bytes"], (r, "the TP2 ranks split the version between them")
assert report["all_exact"] is True
print(f"sharded sync ok: received/share at most {report['max_received_over_share']:.3f}; encode with 4 ranks vs one "
      f"producer {report['median_encode_vs_single_producer']:.2f}x")
