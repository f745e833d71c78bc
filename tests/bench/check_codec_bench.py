#!/usr/bin/env python3
"""Runs `deltacast-bench codec --json` on the acceptance trace and checks what
does not depend on timing: every field is present, every step is bit-exact,
and the compression ratios at step 3 meet the targets (>= 125x with ulp
values, >= 70x with raw values, both clearly above the int32 baselines).
--plot must draw its PNG. Speeds are reported by the benchmark, never asserted here."""
import json
import os
import subprocess
import sys
import tempfile

REQUIRED = [
    "step", "elements", "dtype", "value_codec", "density", "dense_bytes", "wire_bytes", "ratio",
    "baseline_int32_bytes", "baseline_int32_zstd1_bytes", "entropy_bound_bytes", "encode_gbps",
    "decode_apply_gbps", "memcpy_gbps", "exact",
]


def run(binary, codec, elements, plot=None):
    out = subprocess.run(
        [binary, "codec", "--elements", str(elements), "--lr", "3e-7", "--steps", "3", "--value-codec", codec,
         "--reps", "1", "--json"] + (["--plot", plot] if plot else []),
        check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(rows) == 3, f"expected 3 JSON lines, got {len(rows)}: {out!r}"
    for row in rows:
        missing = [k for k in REQUIRED if k not in row]
        assert not missing, f"missing fields {missing}"
        assert row["exact"] is True, f"step {row['step']} not bit-exact"
        assert row["value_codec"] == codec
        assert row["wire_bytes"] < row["baseline_int32_bytes"], row
    return rows[2]


def main():
    binary = sys.argv[1]
    elements = int(sys.argv[2]) if len(sys.argv) > 2 else 67108864
    png = os.path.join(tempfile.mkdtemp(prefix="deltacast-codec-"), "codec.png")
    ulp = run(binary, "ulp", elements, plot=png)
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", "--plot drew no PNG"
    assert os.path.getsize(png) > 10_000, os.path.getsize(png)
    raw = run(binary, "raw", elements)
    print(f"step 3: density {ulp['density']:.4%}, ulp ratio {ulp['ratio']:.1f}x, raw ratio {raw['ratio']:.1f}x, "
          f"int32 {ulp['dense_bytes'] / ulp['baseline_int32_bytes']:.1f}x, "
          f"int32+zstd1 {ulp['dense_bytes'] / ulp['baseline_int32_zstd1_bytes']:.1f}x, "
          f"entropy bound {ulp['dense_bytes'] / ulp['entropy_bound_bytes']:.1f}x")
    assert 0.006 < ulp["density"] < 0.010, ulp["density"]
    assert ulp["ratio"] >= 125, ulp["ratio"]
    assert raw["ratio"] >= 70, raw["ratio"]
    assert ulp["wire_bytes"] < ulp["baseline_int32_zstd1_bytes"] / 2.5
    assert ulp["wire_bytes"] >= ulp["entropy_bound_bytes"], "below the entropy bound: the bound is miscomputed"


if __name__ == "__main__":
    main()
