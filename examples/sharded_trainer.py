#!/usr/bin/env python3
"""A tensor-parallel trainer publishing through deltacast to rollout processes
with their own layouts.

Two trainer ranks (processes) hold Megatron-style shards of a SwiGLU MLP:
rows of gate and up, columns of down. Each trains its replica of the model
with AdamW in bf16 on the same data (so their shards agree, as a real
tensor-parallel step's would) and publishes only its shards, by step. Rank 0
runs the group's coordinator; the rollout processes are given only its
address: one holds a vLLM-style tensor-parallel rank 0 of 2 (fused
gate_up_proj, its columns of down_proj), one the whole model (TP1, fused).
At the end each rollout process's tensors are compared byte for byte with
its view of rank 0's model.

    python3 examples/sharded_trainer.py [--steps 10] [--hidden 1024]
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile

import torch

import deltacast

TOKEN = "sharded-trainer-example"
WORLD = 2
DIM = 256


def group(hidden):
    return deltacast.Group({"gate": ("bf16", (hidden, DIM)), "up": ("bf16", (hidden, DIM)),
                            "down": ("bf16", (DIM, hidden))})


def make_model(hidden):
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"gate": torch.nn.Linear(DIM, hidden, bias=False),
                                 "up": torch.nn.Linear(DIM, hidden, bias=False),
                                 "down": torch.nn.Linear(hidden, DIM, bias=False)})
    return model.to(torch.bfloat16)


def forward(model, x):
    return model["down"](torch.nn.functional.silu(model["gate"](x)) * model["up"](x))


def trainer_shards(rank, hidden):
    """Megatron-style: this rank's rows of gate and up, its columns of down."""
    part = hidden // WORLD
    lo, hi = part * rank, part * (rank + 1)
    return {"gate": deltacast.rows("gate", lo, hi), "up": deltacast.rows("up", lo, hi),
            "down": deltacast.columns("down", lo, hi)}


def rollout_layout(tp_rank, tp_world, hidden):
    """An inference engine's tensor-parallel rank: gate and up fused, down by columns."""
    part = hidden // tp_world
    lo, hi = part * tp_rank, part * (tp_rank + 1)
    return {"gate_up_proj": deltacast.fused(deltacast.rows("gate", lo, hi), deltacast.rows("up", lo, hi)),
            "down_proj": deltacast.columns("down", lo, hi)}


def view(model_state, spec):
    """What a piece (or fused pieces) of the logical model is, as a tensor."""
    if isinstance(spec, deltacast.group.Piece):
        return model_state[spec.tensor].narrow(spec.dim, spec.start, spec.stop - spec.start).contiguous()
    return torch.cat([view(model_state, p) for p in spec.pieces], dim=spec.dim)


def trainer_rank(args):
    model = make_model(args.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    weights = {n: m.weight for n, m in model.items()}
    shards = trainer_shards(args.rank, args.hidden)
    mine = {n: view(weights, s).detach().clone() for n, s in shards.items()}
    producer = deltacast.Producer(mine, token=TOKEN, group=group(args.hidden), rank=args.rank, world_size=WORLD,
                                  shards=shards, coordinator=args.coordinator, threads=1)
    # Like a real tensor-parallel step, the ranks go in lockstep: here the driver says when the
    # rollout processes are in, and each wait() below holds a rank until the group committed the
    # step (which needs every rank's part of it).
    sys.stdin.readline()
    data = torch.Generator().manual_seed(1)
    for step in range(1, args.steps + 1):
        x = torch.randn(64, DIM, generator=data).to(torch.bfloat16)
        loss = (forward(model, x) - x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for n, s in shards.items():
                mine[n].copy_(view(weights, s))
        producer.publish(version=step)
        producer.wait(step, timeout=60)
        if args.rank == 0:
            report = producer.report(step)
            print(f"step {step:>3}  loss {loss.item():.4f}  rank 0 sent {report['wire_bytes']:>9,} bytes "
                  f"({100 * report['density']:.2f}% of its elements changed)", flush=True)
    if args.rank == 0:
        torch.save({n: w.detach() for n, w in weights.items()}, args.out)
    sys.stdin.readline()  # until the rollout processes are done
    producer.close()


def rollout(args):
    tp_rank, tp_world = (int(v) for v in args.layout.split("/"))
    layout = rollout_layout(tp_rank, tp_world, args.hidden)
    shapes = {"gate_up_proj": (2 * args.hidden // tp_world, DIM), "down_proj": (DIM, args.hidden // tp_world)}
    tensors = {n: torch.zeros(shapes[n], dtype=torch.bfloat16) for n in layout}
    with deltacast.Consumer(tensors, layout=layout, connect=args.coordinator, token=TOKEN, threads=1,
                            name=f"tp{tp_rank}of{tp_world}") as consumer:
        print("joined", flush=True)
        consumer.wait(args.steps, timeout=120)
        torch.save(tensors, args.out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--role", choices=["driver", "trainer", "rollout"], default="driver", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--layout", help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "trainer":
        return trainer_rank(args)
    if args.role == "rollout":
        return rollout(args)

    tmp = tempfile.mkdtemp(prefix="deltacast-sharded-")
    coordinator = f"127.0.0.1:{free_port()}"  # a torchrun job would use MASTER_ADDR and a port of its own
    common = [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps), "--hidden", str(args.hidden),
              "--lr", str(args.lr), "--coordinator", coordinator]
    ranks = [subprocess.Popen([*common, "--role", "trainer", "--rank", str(r), "--out", os.path.join(tmp, "model.pt")],
                              stdin=subprocess.PIPE, text=True) for r in range(WORLD)]
    layouts = ["0/2", "0/1"]
    rollouts = [subprocess.Popen([*common, "--role", "rollout", "--layout", lay, "--out", os.path.join(tmp, f"r{i}.pt")],
                                 stdout=subprocess.PIPE, text=True) for i, lay in enumerate(layouts)]
    if not all(p.stdout.readline().strip() == "joined" for p in rollouts):
        for p in ranks + rollouts:
            p.kill()
        print("a rollout process could not join the group")
        return 1
    for p in ranks:  # go
        p.stdin.write("go\n")
        p.stdin.flush()
    ok = all(p.wait(300) == 0 for p in rollouts)
    for p in ranks:
        try:
            p.stdin.write("done\n")
            p.stdin.flush()
        except BrokenPipeError:  # it failed already, and said why
            pass
        ok &= p.wait(60) == 0
    if not ok:
        print("a process failed")
        return 1
    model = torch.load(os.path.join(tmp, "model.pt"))
    exact = True
    for i, lay in enumerate(layouts):
        tp_rank, tp_world = (int(v) for v in lay.split("/"))
        received = torch.load(os.path.join(tmp, f"r{i}.pt"))
        for name, spec in rollout_layout(tp_rank, tp_world, args.hidden).items():
            same = torch.equal(received[name].view(torch.int16), view(model, spec).view(torch.int16))
            exact &= same
            print(f"rollout TP{tp_world} rank {tp_rank}: {name} {tuple(received[name].shape)} "
                  f"{'bit-exact' if same else 'DIFFERS'}")
    print("bit-exact: yes, every rollout layout holds its view of the trainer's weights" if exact else
          "bit-exact: NO")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
