#!/usr/bin/env python3
"""Prints the table of a device run from deltacast-bench kernels --json and
the PyTorch baseline's JSON, with the ratios the targets are stated in; with
--sync, the table of gpu_sync_bench.py's JSON (versions end to end); with
--compat, compat_bench.py's (the checkpoint-engine script on both engines)."""
import json
import statistics
import sys


def print_rows(rows):
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def sync_report(path):
    s = json.load(open(path))
    split = {key: statistics.median(d[key] for d in s["deltas"]) * 1e3 for key in ("encode_s", "wire_s", "apply_s")}
    print_rows([
        ("device", s["device"]),
        ("model", f"{s['elements']:,} bf16 elements on the GPU, {s['tensors']} tensors, "
                  f"{100 * s['density']:.2f}% changed per version, {s['consumers']} consumer processes, "
                  f"shadow in {s.get('shadow', 'device')} memory"),
        ("delta, publish -> committed", f"{s['delta_median_ms']:.1f} ms median of {len(s['deltas'])} "
                                        f"(target <= 100 ms); encode {split['encode_s']:.1f}, "
                                        f"wire {split['wire_s']:.1f}, apply {split['apply_s']:.1f} ms"),
        ("delta wire bytes", f"{statistics.median(d['wire_bytes'] for d in s['deltas']):,.0f}"),
        ("dense reload", f"{s['dense_median_ms']:.1f} ms median of {len(s['dense'])}"),
        ("delta vs dense reload", f"{s['delta_vs_dense']:.1f}x faster (target >= 20x)"),
        ("first (full) version", f"{s['first']['seconds'] * 1e3:.1f} ms"),
        ("exact on every consumer", "yes" if s["all_exact"] else "NO"),
    ])


def first_and_later(seconds):
    """'first update X s; later updates median Y s' of seconds per update (at least one)."""
    later = f"; later updates median {statistics.median(seconds[1:]):.3f} s" if len(seconds) > 1 else ""
    return f"first update {seconds[0]:.3f} s{later}"


def compat_report(path):
    c = json.load(open(path))
    rows = [("device", c["gpu"]), ("model", f"{c['parameters']:,} bf16 parameters (TinyLlama {c['model']})")]
    for run in c["runs"]:
        seconds = run["seconds_per_update"]
        rows.append((run["engine"], f"{first_and_later(seconds)}; exact "
                                    f"{sum(run['exact'])}/{len(run['exact'])}" if seconds else
                     f"no update finished (exit {run['returncode']})"))
        net = run.get("engine_seconds_per_update")
        if net:
            rows.append(("  without the check", f"{first_and_later(net)} (the stand-in's hashing, "
                                                 f"{', '.join(f'{c:.3f}' for c in run['standin_check_seconds'])} s, "
                                                 "taken out)"))
        workers = run.get("worker_seconds")
        if workers:
            rows.append(("  of which workers", ", ".join(f"{w:.3f}" for w in workers) + " s (update_weights_from_ipc)"))
    print_rows(rows)


def main():
    if sys.argv[1] == "--sync":
        sync_report(sys.argv[2])
        return
    if sys.argv[1] == "--compat":
        compat_report(sys.argv[2])
        return
    k = json.load(open(sys.argv[1]))
    t = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else {"torch": None}
    rows = [
        ("device", k["device"]),
        ("model", f"{k['elements']:,} bf16 elements, {k['tensors']:,} tensors ({k.get('layout', 'transformer')}), "
                  f"{100 * k['density']:.3f}% changed"),
        ("wire bytes", f"{k['wire_bytes']:,} ({k['ratio']:.1f}x smaller than dense)"),
        ("device copy", f"{k['copy_gbps']:.1f} GB/s (read + written)"),
        ("diff+encode kernels", f"{k['encode_kernel_ms']:.2f} ms, reads {k['encode_read_gbps']:.1f} GB/s "
                                f"= {k['encode_vs_copy']:.2f} x copy (target >= 0.70, goal 0.85)"),
        ("encode end to end", f"{k['encode_total_ms']:.2f} ms"),
        ("verify+apply kernels", f"{k['apply_kernel_ms']:.2f} ms (end to end {k['apply_total_ms']:.2f} ms), changes "
                                 f"{'kept by the check pass' if k.get('apply_kept_changes') else 'decoded again'}"),
    ]
    if "apply_decoded_again_kernel_ms" in k:
        rows.append(("  groups decoded again", f"{k['apply_decoded_again_kernel_ms']:.2f} ms, the same run "
                                             f"(kept: {k['apply_kept_speedup']:.2f}x faster)"))
    rows += [
        ("bit-exact", "yes" if k["exact"] else "NO"),
    ]
    if t.get("torch"):
        # Per-tensor launches cost PyTorch the most on the many small tensors of an MoE.
        apply_target = 30 if k.get("layout") == "moe" else 2
        rows += [
            ("torch sender", f"{t['torch_encode_ms']:.2f} ms ((cur != prev).nonzero() + gather, per tensor)"),
            ("torch receiver", f"{t['torch_apply_ms']:.2f} ms (index_copy_ per tensor)"),
            ("apply speedup", f"{t['torch_apply_ms'] / k['apply_kernel_ms']:.1f}x kernels, "
                              f"{t['torch_apply_ms'] / k['apply_total_ms']:.1f}x end to end "
                              f"(target: kernels >= {apply_target}x)"),
            ("encode speedup", f"{t['torch_encode_ms'] / k['encode_kernel_ms']:.1f}x kernels"),
        ]
    else:
        rows.append(("torch baseline", t.get("reason", "not run")))
    print_rows(rows)


if __name__ == "__main__":
    main()
