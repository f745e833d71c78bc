#!/usr/bin/env python3
"""The obvious PyTorch pipeline for the work `deltacast-bench kernels` does,
on the same model layout and density, on the same GPU:
sender:   idx = (cur != prev).nonzero(); vals = cur[idx]   (per tensor)
receiver: target.view(-1).index_copy_(0, idx, vals)        (per tensor)
Prints one JSON object with the median times (CUDA events)."""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", required=True, help="JSON written by deltacast-bench kernels --layout-out")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print(json.dumps({"torch": None, "reason": "PyTorch is not importable"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"torch": None, "reason": "PyTorch sees no CUDA device"}))
        return 0
    layout = json.load(open(args.layout))
    density = layout["density"]
    gen = torch.Generator(device="cuda").manual_seed(layout["seed"])
    prev, cur, target = [], [], []
    for t in layout["tensors"]:
        p = ((torch.rand(t["shape"], device="cuda", generator=gen) - 0.5) * 0.12).to(torch.bfloat16)
        bits = p.view(torch.int16)
        change = torch.rand(t["shape"], device="cuda", generator=gen) < density
        c = torch.where(change, bits + 1, bits).view(torch.bfloat16)  # one representable step
        prev.append(p)
        cur.append(c)
        target.append(p.clone())

    def timed(fn):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop), out

    def sender():
        out = []
        for p, c in zip(prev, cur):
            idx = (c != p).view(-1).nonzero().view(-1)
            out.append((idx, c.view(-1)[idx]))
        return out

    def receiver(delta):
        def run():
            for t, (idx, vals) in zip(target, delta):
                t.view(-1).index_copy_(0, idx, vals)
        return run

    send_ms, recv_ms = [], []
    for r in range(args.reps + 1):
        ms, delta = timed(sender)
        for t, p in zip(target, prev):
            t.copy_(p)
        torch.cuda.synchronize()
        ms_recv, _ = timed(receiver(delta))
        if r > 0:  # the first repetition warms up
            send_ms.append(ms)
            recv_ms.append(ms_recv)
    exact = all(torch.equal(t.view(torch.int16), c.view(torch.int16)) for t, c in zip(target, cur))
    send_ms.sort()
    recv_ms.sort()
    print(json.dumps({
        "torch": torch.__version__,
        "tensors": len(cur),
        "elements": sum(c.numel() for c in cur),
        "changed": int(sum(len(i) for i, _ in delta)),
        "torch_encode_ms": send_ms[len(send_ms) // 2],
        "torch_apply_ms": recv_ms[len(recv_ms) // 2],
        "exact": exact,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
