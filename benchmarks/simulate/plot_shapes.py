#!/usr/bin/env python3
"""Draws `deltacast-bench simulate --sizes-gbytes ... --shapes --json` (the bench runs this for
`--plot FILE` with --sizes-gbytes): for each consumer count, the time of a version against its
size, one line per fixed shape the planner builds (chains, trees 2, 4, 8 wide), the shape the
planner chose (markers) and the bound (the best the model gives over the shapes), as a ratio to
the bound so that every size fits one axis.

    deltacast-bench simulate --consumers 8192 --sizes-gbytes 0.008 0.1 1 10 140 --shapes --json > s.json
    python3 benchmarks/simulate/plot_shapes.py s.json shapes.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {"1": "chains", "2": "trees 2 wide", "4": "trees 4 wide", "8": "trees 8 wide"}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = json.load(open(sys.argv[1]))["scenarios"]
    counts = sorted({r["consumers"] for r in rows})
    fig, axes = plt.subplots(1, len(counts), figsize=(6.5 * len(counts), 4.5), squeeze=False)
    for ax, n in zip(axes[0], counts):
        mine = sorted((r for r in rows if r["consumers"] == n), key=lambda r: r["bytes"])
        sizes = [r["bytes"] / 1e9 for r in mine]
        for key, name in NAMES.items():
            points = [(s, r["fixed_shapes_seconds"][key] / r["bound_seconds"]) for s, r in zip(sizes, mine)
                      if key in r.get("fixed_shapes_seconds", {})]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], "-", label=name)
        ax.plot(sizes, [r["seconds"] / r["bound_seconds"] for r in mine], "ko", label="planner's choice")
        ax.axhline(1.0, color="grey", linestyle="--", label="bound (best over the shapes)")
        ax.set_xscale("log")
        ax.set_xlabel("version size, GB")
        ax.set_ylabel("time / bound")
        ax.set_title(f"{n} consumers ({mine[0]['nodes']} nodes)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
