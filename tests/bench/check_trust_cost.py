"""benchmarks/wire/trust_cost.py, small and quick: every mode's wire transfer and sparse versions
run (each exact, or the script fails) and the figures name every mode with its ratio to
insecure, with each rail end's payload work inline and on its helper thread (--piece-helpers
compare), each sealed transfer under both AES-GCM libraries (--aes-gcm compare) where the
build has ipsec-mb, and each authenticated one with its payload's leaf tags made once and with
every rail tagging the payload (--leaf-tags compare). Timing is not judged here; the full run's figures are in
benchmarks/README.md."""
import json
import os
import subprocess
import sys
import tempfile

bench = sys.argv[1]
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "wire", "trust_cost.py")
out = os.path.join(tempfile.mkdtemp(prefix="deltacast-trust-"), "trust.json")
done = subprocess.run([sys.executable, script, bench, "--rounds", "1", "--bytes", str(32 << 20), "--rails", "2",
                       "--sync-elements", str(1 << 20), "--sync-versions", "2", "--piece-helpers", "compare", "--aes-gcm", "compare",
                       "--leaf-tags", "compare", "--json", out],
                      capture_output=True, text=True, timeout=600)
assert done.returncode == 0, done.stdout + done.stderr[-4000:]
with open(out) as f:
    figures = json.load(f)
assert set(figures["modes"]) == {"insecure", "authenticated", "encrypted"}, figures

def usable(library):
    probe = subprocess.run([bench, "wire", "--rails", "1", "--bytes", "65536", "--trials", "1", "--baseline-seconds",
                            "0", "--json", "--aes-gcm", library], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        assert f"AES-GCM library {library} is not usable here" in probe.stderr, probe.stderr[-2000:]
    return probe.returncode == 0


assert usable("openssl")
libraries = ["ipsec-mb", "openssl"] if usable("ipsec-mb") else ["openssl"]
for mode, row in figures["modes"].items():
    assert row["protection"] == [mode] * figures["rounds"], (mode, row)
    assert row["sync_median_seconds"] > 0, (mode, row)
    for helpers in ("off", "on"):
        if mode == "insecure" or len(libraries) == 1:
            for leaf in ("payload", "off") if mode == "authenticated" else (None,):
                key = f"helpers_{helpers}" + (f"_leaf_tags_{leaf}" if leaf else "")
                assert row[f"wire_median_gbps_{key}"] > 0, (mode, key, row)
            continue
        for library in libraries:
            # Only authenticated transfers make leaf tags (the bench says whether it used them, and
            # trust_cost.py fails a run whose answer is not the one asked for).
            for leaf in ("payload", "off") if mode == "authenticated" else (None,):
                key = f"helpers_{helpers}_{library.replace('-', '_')}" + (f"_leaf_tags_{leaf}" if leaf else "")
                assert row[f"wire_median_gbps_{key}"] > 0, (mode, key, row)
                # The transfer ran under the library asked for, as the bench reports it.
                assert row[f"aes_gcm_{key}"] == [library] * figures["rounds"], (mode, key, row)
                assert f"| {mode} | {helpers} | {library} | {leaf or '-'} |" in done.stdout, done.stdout
for helpers in ("off", "on"):
    assert figures["modes"]["insecure"][f"wire_ratio_helpers_{helpers}"] == 1.0
    assert f"| encrypted | {helpers} |" in done.stdout, done.stdout

# deltacast-bench seal: every usable library's GMAC and AES-GCM rates against memcpy, in one run.
sealed = subprocess.run([bench, "seal", "--bytes", str(16 << 20), "--reps", "1", "--json"],
                        capture_output=True, text=True, timeout=120)
assert sealed.returncode == 0, sealed.stderr[-2000:]
seal_report = json.loads(sealed.stdout)
assert seal_report["memcpy_gbps"] > 0, seal_report
assert [row["library"] for row in seal_report["libraries"]] == libraries, seal_report
for row in seal_report["libraries"]:
    assert row["gmac_gbps"] > 0 and row["aes_gcm_gbps"] > 0, row
    assert "gmac_vs_openssl" in row, row
refused = subprocess.run([bench, "seal", "--piece", "2097152", "--buffer", "1048576"], capture_output=True, text=True,
                         timeout=60)
assert refused.returncode != 0 and "--piece (2097152) must be between 1 and --buffer (1048576)" in refused.stderr, \
    refused.stderr[-2000:]

# DELTACAST_AES_GCM chooses the library where no --aes-gcm is given; a name it does not know is
# said, and the fastest usable library seals.
for value, expected in (("openssl", "openssl"), ("sideways", libraries[0])):
    env = dict(os.environ, DELTACAST_AES_GCM=value)
    ran = subprocess.run([bench, "wire", "--rails", "1", "--bytes", str(1 << 20), "--trials", "1",
                          "--baseline-seconds", "0", "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout)["aes_gcm"] == expected, (value, ran.stdout)
    if value == "sideways":
        assert "DELTACAST_AES_GCM: unknown AES-GCM library 'sideways'" in ran.stderr, ran.stderr[-2000:]

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
