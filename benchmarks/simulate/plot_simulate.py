#!/usr/bin/env python3
"""Draws what `deltacast-bench simulate --json` reports (the bench runs this
for `--plot FILE`): on the left, the time of a version against the number of
consumers for deltacast, the pipelined bound, the binary tree and the ring,
dense and sparse; on the right, how the completion times of every consumer of
the largest dense scenario are spread, fault free, with nodes dying, and with
a slow node.

    deltacast-bench simulate --json --per-consumer > sim.json
    python3 benchmarks/simulate/plot_simulate.py sim.json sim.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def series(rows, kind, key):
    points = [(r["consumers"], r[key]) for r in rows if r["kind"] == kind and key in r]
    return [p[0] for p in points], [p[1] for p in points]


def spread(ax, row):
    drawn = False
    for label, result, style in [("fault free", row.get("deltacast"), "-"), ("nodes dying", row.get("faults"), "--"),
                                 ("a slow node", row.get("slow"), ":")]:
        if not result or "consumer_seconds" not in result:
            continue
        times = sorted(t for t in result["consumer_seconds"] if t is not None and t >= 0)
        if not times:
            continue
        ax.plot(times, [(i + 1) / len(times) for i in range(len(times))], style, label=label)
        drawn = True
    ax.set_xlabel("seconds until the consumer holds the version")
    ax.set_ylabel("share of consumers")
    ax.set_title(f"{row['scenario']}")
    if drawn:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no per-consumer times\n(run with --per-consumer)", ha="center", va="center",
                transform=ax.transAxes)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = json.load(open(sys.argv[1]))["scenarios"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for kind, marker in [("dense", "o"), ("sparse", "s")]:
        for key, label, style in [("seconds", "deltacast", "-"), ("bound_seconds", "bound T*", ":"),
                                  ("binary_tree_seconds", "binary tree", "--"), ("ring_seconds", "ring", "-.")]:
            x, y = series(rows, kind, key)
            if x:
                left.plot(x, y, style, marker=marker, label=f"{label}, {kind}")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("consumers (GPUs)")
    left.set_ylabel("seconds per version")
    left.set_title("A version to N consumers")
    left.legend(fontsize=7)
    left.grid(True, which="both", alpha=0.3)
    dense = [r for r in rows if r["kind"] == "dense"]
    spread(right, max(dense or rows, key=lambda r: r["consumers"]))
    right.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
