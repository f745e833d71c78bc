#!/usr/bin/env python3
"""Draws what `deltacast-bench wire` measured (the bench runs this for
`--plot FILE`): each rail's throughput over the last trial's transfer, with
the faults injected into it marked (a rail cut, restored, throttled), beside
the plain-stream baseline of each rail when one was measured.

    deltacast-bench wire --json > wire.json
    python3 benchmarks/wire/plot_wire.py wire.json wire.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

FAULT_STYLE = {"cut": ("tab:red", "--"), "restored": ("tab:green", "--"), "throttled": ("tab:orange", ":")}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    report = json.load(open(sys.argv[1]))
    trials = [t for t in report["trials"] if "timeline" in t]
    if not trials:
        sys.exit("no trial with a timeline in the report (did every trial fail?)")
    trial = trials[-1]
    timeline = trial["timeline"]
    fig, ax = plt.subplots(figsize=(11, 5))
    bin_ms = timeline["bin_ms"]
    for name, rates in zip(timeline["rails"], timeline["gbps"]):
        ax.step([i * bin_ms for i in range(len(rates))], rates, where="post", label=name)
    total = [sum(v) for v in zip(*timeline["gbps"])]
    ax.step([i * bin_ms for i in range(len(total))], total, where="post", color="black", linewidth=1.5,
            label="all rails")
    for fault in timeline["faults"]:
        color, style = FAULT_STYLE.get(fault["kind"], ("gray", "-."))
        ax.axvline(fault["at_ms"], color=color, linestyle=style)
        ax.annotate(f" rail {fault['rail']} {fault['kind']}", (fault["at_ms"], ax.get_ylim()[1] * 0.5), rotation=90,
                    va="center", ha="left", fontsize=8, color=color)
    if report.get("baseline_stream_gbps"):
        ax.axhline(report["baseline_stream_gbps"], color="gray", linestyle=":", label="plain TCP streams, all rails")
    ax.set_xlabel("ms into the transfer")
    ax.set_ylabel("Gbit/s acknowledged")
    ax.set_title(f"{report['bytes'] / 2**20:.0f} MiB over {report['rails']} rails ({report['mode']}, "
                 f"{report['transport']}{', namespaces' if report['netns'] else ''}): "
                 f"{trial['aggregate_gbps']:.2f} Gbit/s, verified {trial['verified']}")
    ax.legend(fontsize=8, loc="center right")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
