#!/usr/bin/env python3
"""A trainer loop publishing through deltacast to two rollout processes.

A small MLP is trained with AdamW in bf16 on the CPU for 20 steps; every step
is published; two consumer processes receive each version in place (one in
background mode, one pulling) and the producer checks after every step that
both hold exactly the trainer's bits. At the end the consumers' tensors are
compared byte for byte with the trainer's.

    python3 examples/trainer_loop.py [--steps 20] [--hidden 1024]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch

import deltacast

TOKEN = "trainer-loop-example"


def make_model(hidden):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden),
                                torch.nn.GELU(), torch.nn.Linear(hidden, 256))
    return model.to(torch.bfloat16)


def consumer(args):
    model = make_model(args.hidden)
    tensors = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    with deltacast.Consumer(tensors, connect=args.connect, token=TOKEN, name=args.name) as c:
        if args.mode == "background":
            c.start()
            sys.stdin.readline()  # until the trainer says stop
        else:
            for line in sys.stdin:
                if line.strip() != "pull":
                    break
                c.pull(timeout=60)
                print("ok", flush=True)
    torch.save(tensors, args.out)


def bits(t):
    return t.detach().view(torch.int16).numpy().tobytes()


def trainer(args):
    model = make_model(args.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    params = dict(model.named_parameters())
    elements = sum(p.numel() for p in params.values())
    print(f"model: {len(params)} bf16 tensors, {elements:,} elements ({2 * elements / 2**20:.1f} MiB)")
    tmp = tempfile.mkdtemp(prefix="deltacast-example-")
    with deltacast.Producer(params, token=TOKEN) as producer:
        workers = []
        for i, mode in enumerate(["background", "pull"]):
            cmd = [sys.executable, os.path.abspath(__file__), "--role", "consumer", "--connect", producer.address,
                   "--mode", mode, "--name", f"rollout-{i}", "--out", os.path.join(tmp, f"{i}.pt"),
                   "--hidden", str(args.hidden)]
            workers.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        producer.wait_for_consumers(2, timeout=60)
        print(f"{'step':>4} {'loss':>8} {'changed':>10} {'density':>8} {'wire bytes':>11} {'vs dense':>8} "
              f"{'sync ms':>8}  exact")
        all_exact = True
        start = time.monotonic()
        for step in range(args.steps):
            x = torch.randn(64, 256, dtype=torch.bfloat16)
            loss = (model(x) - x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            version = producer.publish()
            workers[1].stdin.write("pull\n")
            workers[1].stdin.flush()
            workers[1].stdout.readline()
            producer.wait(version, timeout=60)
            exact = producer.check(version, timeout=60)["all_exact"]
            all_exact &= exact
            r = producer.report(version)
            print(f"{step + 1:>4} {loss.item():>8.4f} {r['changed']:>10,} {100 * r['density']:>7.2f}% "
                  f"{r['wire_bytes']:>11,} {r['dense_bytes'] / r['wire_bytes']:>7.1f}x {1e3 * r['seconds']:>8.1f}  "
                  f"{'yes' if exact else 'NO'}{'  (first version: full)' if r['full'] else ''}")
        for w in workers:
            w.stdin.write("stop\n")
            w.stdin.flush()
            w.wait(60)
        print(f"{args.steps} steps in {time.monotonic() - start:.1f} s; wire bytes in all: "
              f"{producer.stats()['wire_bytes']:,}")
    for i in range(2):
        received = torch.load(os.path.join(tmp, f"{i}.pt"))
        all_exact &= all(bits(received[n]) == bits(p) for n, p in params.items())
    print("bit-exact: yes, both consumers hold the trainer's weights bit for bit" if all_exact else "bit-exact: NO")
    return 0 if all_exact else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--role", choices=["trainer", "consumer"], default="trainer", help=argparse.SUPPRESS)
    parser.add_argument("--connect", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "consumer":
        consumer(args)
        return 0
    return trainer(args)


if __name__ == "__main__":
    sys.exit(main())
