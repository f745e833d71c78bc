"""A rollout worker for the tests: holds zeroed torch tensors of a given spec,
joins the producer and receives versions, in pull or background mode.
stdout: JSON lines (joined, committed, stopped with the tensors' path, error).
stdin: JSON commands: {"cmd": "pull"}, {"cmd": "stop"}."""
import argparse
import json
import sys

import torch

import deltacast


def emit(**message):
    print(json.dumps(message), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--spec", required=True, help='[[name, dtype, shape], ...]')
    parser.add_argument("--mode", choices=["pull", "background"], default="pull")
    parser.add_argument("--name", default="worker")
    parser.add_argument("--out", help="write the tensors here (torch.save) when stopping")
    args = parser.parse_args()
    tensors = {name: torch.zeros(shape, dtype=getattr(torch, dtype)) for name, dtype, shape in json.loads(args.spec)}
    try:
        # Each its own node, as consumers on separate hosts: the producer's plan fans out over them.
        consumer = deltacast.Consumer(tensors, connect=args.address, token=args.token, name=args.name,
                                      node=f"host-{args.name}")
    except deltacast.DeltacastError as e:
        emit(event="error", kind=type(e).__name__, message=str(e))
        return 3
    emit(event="joined", version=consumer.version)
    if args.mode == "background":
        consumer.start(on_commit=lambda v: emit(event="committed", version=v, hash=consumer.model_hash()))
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "pull":
            try:
                version = consumer.pull(timeout=command.get("timeout", 30))
                emit(event="committed", version=version, hash=consumer.model_hash())
            except deltacast.DeltacastError as e:
                emit(event="error", kind=type(e).__name__, message=str(e))
        elif command["cmd"] == "stop":
            break
    version = consumer.version
    consumer.close()
    if args.out:
        torch.save(tensors, args.out)
    emit(event="stopped", version=version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
