"""deltacast-bench simulate, small: 16 and 64 simulated consumers (2 and 8
nodes of 8 GPUs, 8 x 400 Gbit rails), a dense and a sparse version, with node
deaths, flapping rails and a slow node. The report must carry every documented
field; every surviving consumer must complete in every scenario; a single
chain through every node (the ring baseline) must land at a chain's pipelined
bound for the dense version, which checks the simulated network against the theory it is judged by;
and the binary tree, which halves every sender's rate, must take longer than
the chain; --plot must draw its PNG; hung nodes must be routed around before
the control link's timeout. How close deltacast itself comes to the
bound is a benchmark number (benchmarks/README.md), not judged here."""
import json
import os
import subprocess
import sys
import tempfile

bench = sys.argv[1]
png = os.path.join(tempfile.mkdtemp(prefix="deltacast-simulate-"), "sim.png")
out = subprocess.run([bench, "simulate", "--consumers", "16", "64", "--gbytes", "2", "--warmup-gbytes", "1",
                      "--dead-fraction", "0.2", "--flapping-rails", "2", "--slow-nodes", "1", "--detect-seconds",
                      "0.05", "--json", "--plot", png], capture_output=True, text=True, timeout=300)
assert out.returncode == 0, out.stderr[-4000:]
rows = json.loads(out.stdout)["scenarios"]
assert [(r["consumers"], r["kind"]) for r in rows] == [(16, "dense"), (16, "sparse"), (64, "dense"), (64, "sparse")]
for r in rows:
    for key in ["seconds", "bound_seconds", "chain_bound_seconds", "fanout", "ratio_to_bound", "binary_tree_seconds",
                "ring_seconds", "survivors_complete", "deltacast", "faults"]:
        assert key in r, (key, r)
    assert r["survivors_complete"] is True, r
    assert r["faults"]["dead_nodes"] >= 1 and r["faults"]["replans"] >= 1, r["faults"]
    assert 0 < r["seconds"] < 100 * r["bound_seconds"], r
    if r["kind"] == "dense":
        # (A sparse version is over before the sprayers have measured the rails: cold, it is slower.)
        ring_bound = r["chain_bound_seconds"]
        assert 0.9 * ring_bound <= r["ring_seconds"] <= 1.1 * ring_bound, (r["scenario"], "ring vs a chain's bound")
        # The bound is the best over every shape the planner builds, a chain's among them.
        assert r["bound_seconds"] <= ring_bound * (1 + 1e-9), r
        if r["nodes"] >= 4:  # two nodes make the same chain either way
            assert r["binary_tree_seconds"] > 1.5 * r["ring_seconds"], (r["scenario"], "tree vs ring")
        # Every byte leaves the producer once (plus re-sends).
        assert r["bytes"] <= r["deltacast"]["producer_bytes_out"] <= 1.05 * r["bytes"], r["deltacast"]
    if "slow" in r:
        assert r["slow"]["survivors_complete"] is True
# --plot drew the picture (matplotlib), and --json then carries every consumer's time.
with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
assert os.path.getsize(png) > 10_000, os.path.getsize(png)
assert len(rows[2]["deltacast"]["consumer_seconds"]) == 64
# Silent deaths (hung nodes: ports silent, connections open): their parents, hearing nothing of
# them, report them after 300 ms and they go to the tails, so every survivor completes before the
# control link would drop them (1.5 s). Where one hung node fed the other in some stripe, the
# other's new parent reports it once two connects to it failed (1 s more): 1.307 s here; 0.31 s
# with the seeds (3, 4, 6 of 1-6) that kill two nodes apart.
out = subprocess.run([bench, "simulate", "--consumers", "64", "--gbytes", "2", "--warmup-gbytes", "1", "--density", "0",
                      "--dead-fraction", "0.2", "--silent-deaths", "--slow-nodes", "0", "--no-baselines", "--json"],
                     capture_output=True, text=True, timeout=300)
assert out.returncode == 0, out.stderr[-4000:]
(silent,) = json.loads(out.stdout)["scenarios"]
assert silent["survivors_complete"] is True, silent
faults = silent["faults"]
assert faults["dead_nodes"] >= 1 and faults["replans"] >= 1, faults
assert faults["seconds"] < 1.5, f"hung nodes were not routed around before the control link's timeout: {faults}"
# A 10x-slow node at the tails moves the median consumer by at most 5%, dense and sparse (the
# issue's 140 GB and 2% shapes at 64 consumers; the simulation is deterministic). Without a warm
# start for new children (the plan changes around the slow node) the sparse one moved 15%.
out = subprocess.run([bench, "simulate", "--consumers", "64", "--dead-fraction", "0", "--no-baselines", "--json"],
                     capture_output=True, text=True, timeout=300)
assert out.returncode == 0, out.stderr[-4000:]
for r in json.loads(out.stdout)["scenarios"]:
    moved = r["slow"]["median_vs_fault_free"]
    assert 0.95 <= moved <= 1.05, f"{r['scenario']}: a slow node moved the median consumer x{moved:.3f}"
# The sparse shape at 1024 consumers (2.8 GB, 128 nodes; 0.2 s of simulation each):
# within 1.15x of the bound (the best over the planner's shapes), a slow node moving the median
# by at most 5%. (Slices sized for 100 us on ports that charged nothing per slice made it 1.21x;
# the 8192-consumer numbers are in benchmarks/README.md.)
# The planner takes trees for it; chains, where a death costs nothing (the dead member's parent
# feeds its child, whose load stays one copy), are held to 5% for one, and so are trees. In a tree
# every forwarding member's uplink is full (each forwards in about one stripe): spliced to their
# nearest ancestor alone, the dead one's children loaded it (1.087x); they now go to the uplinks
# the death freed (spread_orphans): 1.010x.
def sparse_1024(*extra):
    out = subprocess.run([bench, "simulate", "--consumers", "1024", "--versions", "sparse", "--no-baselines", "--json",
                          *extra], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    (row,) = json.loads(out.stdout)["scenarios"]
    assert row["survivors_complete"] is True, row
    assert 0.95 <= row["slow"]["median_vs_fault_free"] <= 1.05, row["slow"]
    return row


sparse = sparse_1024()
assert sparse["fanout"] > 1, "a 2% version to 128 nodes is latency-bound: a tree"
assert sparse["ratio_to_bound"] <= 1.15, f"1024 consumers, sparse: x{sparse['ratio_to_bound']:.3f} of the bound"
assert sparse["faults"]["vs_fault_free"] <= 1.05, sparse["faults"]
chains = sparse_1024("--fanout", "1")
assert chains["fanout"] == 1
assert chains["seconds"] <= 1.15 * chains["chain_bound_seconds"], chains
assert chains["faults"]["vs_fault_free"] <= 1.05, chains["faults"]
assert sparse["faults"]["seconds"] < chains["seconds"], "a tree with a death finishes before chains without one"
# A version per size, each fixed shape beside the planner's choice, and the plot of time against
# size per shape: at 1024 consumers the choice is the fastest fixed shape (within 5%) and within
# 1.15x of the bound, 8 MB and 500 MB alike.
png = os.path.join(tempfile.mkdtemp(prefix="deltacast-shapes-"), "shapes.png")
out = subprocess.run([bench, "simulate", "--consumers", "1024", "--sizes-gbytes", "0.008", "0.5", "--warmup-gbytes",
                      "1", "--shapes", "--no-baselines", "--dead-fraction", "0", "--slow-nodes", "0", "--json",
                      "--plot", png], capture_output=True, text=True, timeout=300)
assert out.returncode == 0, out.stderr[-4000:]
sized = json.loads(out.stdout)["scenarios"]
assert [r["bytes"] for r in sized] == [8_000_000, 500_000_000], sized
for r in sized:
    assert set(r["fixed_shapes_seconds"]) == {"1", "2", "4", "8"}, r
    assert r["vs_best_fixed"] <= 1.05, (r["scenario"], r["fixed_shapes_seconds"], r["seconds"])
    assert r["ratio_to_bound"] <= 1.15, (r["scenario"], r["ratio_to_bound"])
    assert r["fixed_shapes_seconds"]["1"] > 2 * r["seconds"], "a small version down chains through 128 nodes"
with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n", "not a PNG"
# A small first version leaves the next one a rate to plan with and rails ready to carry it: at
# 1024 consumers, a 64 MB version after a first version of 0.2 GB takes at most 1.1x what it takes
# after 1 GB. On 100 Gbit/s rails it took 1.84x: that first version's rails were measured two or
# three of eight per link (the rest, too little used to be measured, counted as nothing), and in
# such short rounds only the longest-busy links are measured at all, the slowest ones. On 400
# Gbit/s rails 2.5x: about 14 slices per rail left nearly every rail short of its first sample,
# held to two slices in flight while the few measured ones queued the next version.
def after_first_version(gbit, gbytes):
    out = subprocess.run([bench, "simulate", "--consumers", "1024", "--rail-gbit", gbit, "--sizes-gbytes", "0.064",
                          "--warmup-gbytes", gbytes, "--no-baselines", "--dead-fraction", "0", "--slow-nodes", "0",
                          "--jobs", "1", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    (row,) = json.loads(out.stdout)["scenarios"]
    assert row["survivors_complete"] is True, row
    return row["seconds"]


for gbit in ("100", "400"):
    small_first, large_first = after_first_version(gbit, "0.2"), after_first_version(gbit, "1")
    assert small_first <= 1.1 * large_first, f"{gbit} Gbit/s rails, 64 MB after 0.2 GB: {small_first:.6f} s, after 1 GB: {large_first:.6f} s"
# --extrapolate: a 32 GB version to 1024 consumers, simulated until every node takes slices at a
# steady rate and finished at those rates, lands within 2% of the whole simulation (0.8% over it
# when written: the pipeline still speeds up a little early in the version), having simulated
# under half of it. And a version whose doublings run out before it is steady (trees 4 wide, 16 GB:
# counts at 256, 512 and 1,024 of 3,815 slices) stops at half the version, also within 2% (1.4%
# under when written), where it was once simulated whole.
def version(gbytes, *extra):
    out = subprocess.run([bench, "simulate", "--consumers", "1024", "--sizes-gbytes", gbytes, "--no-baselines",
                          "--dead-fraction", "0", "--slow-nodes", "0", "--jobs", "1", "--json", *extra],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    (row,) = json.loads(out.stdout)["scenarios"]
    assert row["survivors_complete"] is True, row
    return row


for gbytes, extra, share in (("32", (), lambda s: s < 0.5),
                             ("16", ("--fanout", "4", "--warmup-gbytes", "0.5"), lambda s: s == 0.5)):
    whole, extrapolated = version(gbytes, *extra), version(gbytes, "--extrapolate", *extra)
    assert whole["deltacast"]["simulated_share"] == 1, whole["deltacast"]
    assert share(round(extrapolated["deltacast"]["simulated_share"], 3)), (gbytes, extrapolated["deltacast"])
    assert 0.98 * whole["seconds"] <= extrapolated["seconds"] <= 1.02 * whole["seconds"], \
        (gbytes, whole["seconds"], extrapolated["seconds"])
# Sites: 64 consumers in 4 sites joined by 100 Gbit/s WAN links of 20-80 ms. Each version crosses
# into each site once (its WAN bytes within 2% of one copy), in chains and in trees; with the last
# site's links cut mid-version but the one to site 1, everyone still gets it, through site 1.
for fanout in ("1", "2", "0"):  # chains, trees 2 wide, the planner's choice
    out = subprocess.run([bench, "simulate", "--consumers", "64", "--sites", "4", "--fanout", fanout, "--versions",
                          "sparse", "--no-baselines", "--dead-fraction", "0", "--slow-nodes", "0", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    site_row = json.loads(out.stdout)["scenarios"][0]
    assert site_row["sites"] == 4 and len(site_row["wan_copies"]) == 3, site_row
    assert all(1.0 <= copies <= 1.02 for copies in site_row["wan_copies"]), (fanout, site_row["wan_copies"])
    assert site_row["survivors_complete"] and site_row["wan_cut"]["survivors_complete"], (fanout, site_row["wan_cut"])
    assert site_row["wan_cut"]["replans"] >= 1, site_row["wan_cut"]
    # The cut costs at most the version's time over the detour: chains go on through site 1 at
    # once, the relay there starting its new child's rails from the WAN the round measured into
    # site 3 (cold, the cut cost 1.49 s against a 0.38 s detour); trees go to site 1 too, the
    # standby links having found site 2 cut off from site 3 as well (without them, through site 2
    # first: 1.41 s). A site's parent that hears it on no rail for 150 ms says so early, and the
    # standby links' word moves it then, not 150 ms later (+0.41 s in trees before that).
    cut = site_row["wan_cut"]
    assert cut["extra_seconds"] <= cut["detour_seconds"], (fanout, cut)
# Huge pages: running one simulation at a time, the heap asks for them (simulate runs itself again
# with glibc's malloc tunables set, where the kernel gives them on request) and gets them; a
# caller's own setting of the tunable stands; simulations side by side do not ask.
try:
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        modes = f.read()
    thp = modes[modes.index("[") + 1:modes.index("]")]
except (OSError, ValueError):
    thp = "never"  # no transparent huge pages here
libc, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")
if thp == "madvise" and (libc != "glibc" or tuple(map(int, version.split(".")[:2])) < (2, 35)):
    thp = "never"  # malloc has no hugetlb tunable to ask with


def memory(jobs, tunables=None):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    out = subprocess.run([bench, "simulate", "--consumers", "1024", "--versions", "sparse", "--no-baselines",
                          "--dead-fraction", "0", "--slow-nodes", "0", "--jobs", jobs, "--json"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout)["memory"]


alone, side_by_side, refused = memory("1"), memory("2"), memory("1", "glibc.malloc.hugetlb=0")
assert alone["peak_resident_bytes"] > 0, alone
assert alone["huge_pages_asked"] == (thp in ("always", "madvise")), (thp, alone)
assert side_by_side["huge_pages_asked"] == (thp == "always"), (thp, side_by_side)
assert refused["huge_pages_asked"] == (thp == "always"), (thp, refused)
if thp == "madvise":
    assert alone["huge_page_bytes"] > 0, alone
    assert refused["huge_page_bytes"] == 0, refused
print("simulate ok:", ", ".join(f"{r['scenario']}: x{r['ratio_to_bound']:.2f} of the bound" for r in rows))
