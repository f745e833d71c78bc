#!/usr/bin/env python3
"""Draws what `deltacast-bench sync --json` reports (the bench runs this for
`--plot FILE`): on the left, each version's seconds split into encode, wire and
apply (stacked, linear scale), against its lower bound (its wire bytes at the run's fastest full-sync
rate) and the dense and gloo baselines of the same step; on the right, what
each version carried: its share of elements changed and its bytes on the wire.

    deltacast-bench sync --json > sync.json
    python3 benchmarks/sync/plot_sync.py sync.json sync.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def column(rows, key):
    return [r.get(key) for r in rows]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    report = json.load(open(sys.argv[1]))
    rows = report["versions"]
    steps = column(rows, "step")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))

    bottom = [0.0] * len(rows)
    for key, label in [("encode_seconds", "encode"), ("wire_seconds", "wire"), ("apply_seconds", "apply")]:
        values = [v or 0.0 for v in column(rows, key)]
        left.bar(steps, values, bottom=bottom, label=f"deltacast: {label}")
        bottom = [b + v for b, v in zip(bottom, values)]
    for key, label, style in [("lower_bound_seconds", "lower bound (wire bytes at the link rate)", "k_"),
                              ("dense_seconds", "dense sync (baseline)", "rv"),
                              ("gloo_seconds", "torch.distributed gloo (baseline)", "m^")]:
        points = [(s, v) for s, v in zip(steps, column(rows, key)) if v]
        if points:
            left.plot([p[0] for p in points], [p[1] for p in points], style, markersize=12, label=label,
                      linestyle="none", zorder=3, markeredgewidth=2)
    left.set_xlabel("step (0: the first, full version)")
    left.set_ylabel("seconds until every consumer committed")
    left.set_title(f"1 producer -> {report['consumers']} consumers, {report['rails']} rail(s), {report['mode']}")
    left.legend(fontsize=7, loc="upper right")
    left.grid(True, axis="y", alpha=0.3)

    right.bar(steps, [100 * (d or 0) for d in column(rows, "density")], color="tab:green", label="changed elements")
    right.set_yscale("log")
    right.set_xlabel("step")
    right.set_ylabel("% of elements changed", color="tab:green")
    wire = right.twinx()
    wire.plot(steps, [(b or 0) / 2**20 for b in column(rows, "wire_bytes")], "o-", color="tab:blue")
    wire.set_yscale("log")
    wire.set_ylabel("MiB on the wire", color="tab:blue")
    right.set_title(f"What each version carried ({report['elements']} bf16 elements)")
    right.grid(True, which="both", axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
