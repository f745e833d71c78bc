"""A rollout worker on a GPU for tests/python_gpu: holds a model's bf16 parameters on CUDA as
torch tensors or as CuPy arrays of the bf16 bits, poisoned (NaN) until the first version lands,
joins the producer and commits each version in the background on a CUDA stream of its own.
Speaks tests/python/consumer_proc.py's JSON lines: joined, committed (with the model hash and a
sha256 of the bytes read back to the host), stopped; stdin: {"cmd": "stop"}."""
import argparse
import hashlib
import json
import sys

import deltacast


def emit(**message):
    print(json.dumps(message), flush=True)


def torch_tensors(spec):
    import torch
    tensors = {name: torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda") for name, _, shape in spec}
    stream = torch.cuda.Stream()

    def digest():
        h = hashlib.sha256()
        for t in tensors.values():
            h.update(t.view(torch.int16).cpu().numpy().tobytes())
        return h.hexdigest()
    return tensors, stream, digest


def cupy_arrays(spec):
    import cupy
    arrays = {name: cupy.full(shape, 0x7FC1, dtype=cupy.uint16) for name, _, shape in spec}  # bf16 NaN bits
    stream = cupy.cuda.Stream(non_blocking=True)

    def digest():
        h = hashlib.sha256()
        for a in arrays.values():
            h.update(a.get().tobytes())
        return h.hexdigest()
    return {name: (a, "bf16") for name, a in arrays.items()}, stream, digest


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--spec", required=True, help="[[name, dtype, shape], ...] (bf16)")
    parser.add_argument("--mode", choices=["background"], default="background")
    parser.add_argument("--name", default="gpu-worker")
    parser.add_argument("--kind", choices=["torch", "cupy"], default="torch")
    parser.add_argument("--out")
    args = parser.parse_args()
    spec = json.loads(args.spec)
    named, stream, digest = (torch_tensors if args.kind == "torch" else cupy_arrays)(spec)
    try:
        consumer = deltacast.Consumer(named, connect=args.address, token=args.token, name=args.name, stream=stream)
    except deltacast.DeltacastError as e:
        emit(event="error", kind=type(e).__name__, message=str(e))
        return 3
    emit(event="joined", version=consumer.version)
    consumer.start(on_commit=lambda v: emit(event="committed", version=v, hash=consumer.model_hash(), sha=digest()))
    for line in sys.stdin:
        if json.loads(line)["cmd"] == "stop":
            break
    version = consumer.version
    consumer.close()
    emit(event="stopped", version=version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
