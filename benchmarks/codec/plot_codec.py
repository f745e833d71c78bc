#!/usr/bin/env python3
"""Draws what `deltacast-bench codec` measured (the bench runs this for
`--plot FILE`): on the left, each step's compression ratio (dense bytes over
wire bytes) against the int32 index + value baselines and the entropy bound;
on the right, each step's share of elements changed.

    deltacast-bench codec --json | python3 -c 'import json,sys; print(json.dumps({"steps": [json.loads(l) for l in sys.stdin]}))' > codec.json
    python3 benchmarks/codec/plot_codec.py codec.json codec.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = json.load(open(sys.argv[1]))["steps"]
    steps = [r["step"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for key, label, style in [("ratio", "deltacast", "o-"), ("entropy_bound_ratio", "entropy bound", "k:"),
                              ("baseline_int32_zstd1_ratio", "int32 index + value, zstd-1", "s--"),
                              ("baseline_int32_ratio", "int32 index + value", "^--")]:
        left.plot(steps, [r[key] for r in rows], style, label=label)
    left.set_yscale("log")
    left.set_xlabel("optimizer step")
    left.set_ylabel("compression ratio (dense bytes / wire bytes)")
    first = rows[0]
    left.set_title(f"{first['elements']} {first['dtype']} elements, {first['value_codec']} values")
    left.legend(fontsize=8)
    left.grid(True, which="both", alpha=0.3)
    right.bar(steps, [100 * r["density"] for r in rows], color="tab:green")
    right.set_xlabel("optimizer step")
    right.set_ylabel("% of elements changed")
    right.set_title("Density per step")
    right.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
