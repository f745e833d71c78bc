#!/usr/bin/env python3
"""Versions of a bf16 model on the GPU from publish() to committed on consumer processes on the
same GPU, through deltacast's Python API (torch CUDA tensors in, torch CUDA tensors out).

The model follows a layout written by `deltacast-bench kernels --layout-out` (run.sh makes one per
layout). Version 1 is a full sync; then --versions deltas, each changing --density of the elements
by one representable step on the GPU (as an RL step at a small learning rate does); then as many
dense reloads of the same tensors (publish(full=True)), the baseline measured in the same run.
Every version is checked exact on every consumer (the producer's hash check: the consumers hash
their GPU tensors on the GPU). Prints one JSON object: per version the time from publish() to
committed everywhere and the producer's encode / wire / apply split, and the medians."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TOKEN = "gpu-sync-bench"


def model(layout, device):
    import torch
    return {t["name"]: torch.empty(t["shape"], dtype=torch.bfloat16, device=device) for t in layout["tensors"]}


def consumer_main(args):
    import torch
    import deltacast
    tensors = model(json.load(open(args.layout)), "cuda")
    stream = torch.cuda.Stream()
    consumer = deltacast.Consumer(tensors, connect=args.address, token=TOKEN, name=args.name, stream=stream,
                                  join_timeout=120)
    print(json.dumps({"event": "joined"}), flush=True)
    consumer.start(on_commit=lambda v: print(json.dumps({"event": "committed", "version": v}), flush=True))
    sys.stdin.readline()  # until the producer says stop
    consumer.close()
    return 0


def change(tensors, density, generator):
    import torch
    for t in tensors.values():
        bits = t.view(torch.int16)
        mask = torch.rand(t.shape, device=t.device, generator=generator) < density
        bits.copy_(torch.where(mask, bits + 1, bits))


def producer_main(args):
    import torch
    import deltacast
    layout = json.load(open(args.layout))
    generator = torch.Generator(device="cuda").manual_seed(layout.get("seed", 1))
    tensors = model(layout, "cuda")
    for t in tensors.values():
        t.copy_(((torch.rand(t.shape, device="cuda", generator=generator) - 0.5) * 0.12).to(torch.bfloat16))
    torch.cuda.synchronize()
    elements = sum(t.numel() for t in tensors.values())
    with deltacast.Producer(tensors, token=TOKEN, stream=torch.cuda.current_stream(), shadow=args.shadow) as producer:
        workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "consumer", "--layout",
                                     args.layout, "--address", producer.address, "--name", f"rollout-{i}"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                   for i in range(args.consumers)]
        for w in workers:
            assert json.loads(w.stdout.readline())["event"] == "joined"
        producer.wait_for_consumers(args.consumers, timeout=300)

        def sync(full):
            torch.cuda.synchronize()
            start = time.perf_counter()
            version = producer.publish(full=full)
            producer.wait(version, timeout=600)
            seconds = time.perf_counter() - start
            check = producer.check(version, timeout=600)
            assert check["all_exact"], check
            report = producer.report(version)
            return {"version": version, "full": full, "seconds": seconds, "encode_s": report["encode_seconds"],
                    "wire_s": report["wire_seconds"], "apply_s": report["apply_seconds"],
                    "wire_bytes": report["wire_bytes"], "density": report["density"], "exact": check["all_exact"]}

        first = sync(True)
        print(f"full version 1: {first['seconds']:.3f} s", file=sys.stderr)
        deltas, dense = [], []
        for _ in range(args.versions):
            change(tensors, args.density, generator)
            deltas.append(sync(False))
            print(f"delta {deltas[-1]['version']}: {deltas[-1]['seconds'] * 1e3:.1f} ms", file=sys.stderr)
        for _ in range(args.versions):
            dense.append(sync(True))
            print(f"dense reload {dense[-1]['version']}: {dense[-1]['seconds']:.3f} s", file=sys.stderr)
        for w in workers:
            w.stdin.write("stop\n")
            w.stdin.flush()
        for w in workers:
            w.wait(60)
    delta_s = statistics.median(d["seconds"] for d in deltas)
    dense_s = statistics.median(d["seconds"] for d in dense)
    print(json.dumps({
        "device": torch.cuda.get_device_name(), "elements": elements, "tensors": len(tensors), "shadow": args.shadow,
        "consumers": args.consumers, "density": args.density, "first": first, "deltas": deltas, "dense": dense,
        "delta_median_ms": delta_s * 1e3, "dense_median_ms": dense_s * 1e3, "delta_vs_dense": dense_s / delta_s,
        "all_exact": all(v["exact"] for v in [first, *deltas, *dense]),
    }))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layout", required=True, help="JSON written by deltacast-bench kernels --layout-out")
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--versions", type=int, default=5, help="deltas, and as many dense reloads")
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--shadow", choices=["device", "host"], default="device",
                        help="where the producer keeps the version it diffs against")
    parser.add_argument("--role", choices=["producer", "consumer"], default="producer")
    parser.add_argument("--address")
    parser.add_argument("--name")
    args = parser.parse_args()
    return consumer_main(args) if args.role == "consumer" else producer_main(args)


if __name__ == "__main__":
    sys.exit(main())
