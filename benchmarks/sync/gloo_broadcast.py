#!/usr/bin/env python3
"""Baseline for deltacast-bench sync: torch.distributed (gloo) broadcast of the
same bf16 tensors, tensor by tensor, from one root to N receivers on this
machine: the obvious way to push weights when nothing smarter is at hand.

Started once per benchmark run. Rank 0 (this process) starts the receivers,
then reads commands on stdin, one per line:
    broadcast     read the tensors from --data (raw bytes, manifest order),
                  broadcast them, print {"seconds": s, "exact": bool}
    exit          stop every rank
Each receiver checks what it got against the root's checksum, so the
baseline is held to the same bit-exactness as deltacast.
"""
import argparse
import json
import subprocess
import sys
import time


def checksum(tensors):
    """A hash of every tensor's bytes, as an int64 tensor (for all_gather)."""
    import hashlib
    import torch
    h = hashlib.blake2b(digest_size=8)
    for t in tensors:
        h.update(t.contiguous().view(torch.int16).numpy())
    return torch.tensor(int.from_bytes(h.digest(), "little", signed=True), dtype=torch.int64)


def make_tensors(shapes):
    import torch
    return [torch.empty(shape, dtype=torch.bfloat16) for shape in shapes]


def wire_view(t):
    """What gloo is asked to move: the bf16 tensor's bytes. gloo in torch 1.x
    takes neither bf16 nor int16; the bytes, and so the work, are the same."""
    import torch
    return t.view(-1).view(torch.uint8)


def load_tensors(path, shapes):
    import torch
    sizes = [2 * int(torch.Size(s).numel()) for s in shapes]
    with open(path, "rb") as f:
        data = bytearray(f.read())
    flat = torch.frombuffer(data, dtype=torch.bfloat16) if data else torch.empty(0, dtype=torch.bfloat16)
    out, at = [], 0
    for shape, size in zip(shapes, sizes):
        out.append(flat[at // 2:(at + size) // 2].view(shape))
        at += size
    return out, data


def run_rank(rank, world, port, shapes, data_path):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    command = torch.zeros(1, dtype=torch.int64)
    if rank == 0:
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            line = line.strip()
            if line == "exit" or not line:
                break
            if line != "broadcast":
                print(json.dumps({"error": f"unknown command {line!r}"}), flush=True)
                continue
            tensors, keep = load_tensors(data_path, shapes)
            expected = checksum(tensors)
            command[0] = 1
            start = time.perf_counter()
            dist.broadcast(command, 0)
            for t in tensors:
                dist.broadcast(wire_view(t), 0)
            dist.barrier()
            seconds = time.perf_counter() - start
            sums = [torch.zeros((), dtype=torch.int64) for _ in range(world)]
            dist.all_gather(sums, expected)
            exact = all(int(s) == int(expected) for s in sums)
            print(json.dumps({"seconds": seconds, "exact": exact}), flush=True)
            del tensors, keep
        command[0] = 0
        dist.broadcast(command, 0)
    else:
        tensors = make_tensors(shapes)
        while True:
            dist.broadcast(command, 0)
            if int(command[0]) == 0:
                break
            for t in tensors:
                dist.broadcast(wire_view(t), 0)
            dist.barrier()
            dist.all_gather([torch.zeros((), dtype=torch.int64) for _ in range(world)], checksum(tensors))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--receivers", type=int, required=True)
    parser.add_argument("--shapes", required=True, help="JSON file: list of tensor shapes, manifest order")
    parser.add_argument("--data", required=True, help="file the tensors' bytes are written to before each broadcast")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args()
    with open(args.shapes) as f:
        shapes = [tuple(s) for s in json.load(f)]
    world = args.receivers + 1
    if args.rank != 0:
        run_rank(args.rank, world, args.port, shapes, args.data)
        return
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    receivers = [
        subprocess.Popen([sys.executable, __file__, "--receivers", str(args.receivers), "--shapes", args.shapes,
                          "--data", args.data, "--port", str(port), "--rank", str(r)], stdin=subprocess.DEVNULL)
        for r in range(1, world)
    ]
    try:
        run_rank(0, world, port, shapes, args.data)
    finally:
        for p in receivers:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
