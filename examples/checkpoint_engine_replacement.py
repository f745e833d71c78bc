#!/usr/bin/env python3
"""A safetensors checkpoint pushed to two inference workers through the
checkpoint-engine-style facade (deltacast.compat), where checkpoint-engine's
ParameterServer would be used: register, gather metas, update, unregister.

    python3 examples/checkpoint_engine_replacement.py [--mib 64]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from deltacast import compat, safetensors_io

TOKEN = "checkpoint-engine-example"


def worker(address, spec_json, out):
    """An inference engine's side: its own (here zeroed) weights, filled in place."""
    spec = json.loads(spec_json)
    weights = {t["name"]: (np.zeros(t["shape"], np.uint16), "bf16") for t in spec}
    version = compat.receive_into(weights, address, token=TOKEN, timeout=120)
    np.savez(out, **{n: w[0] for n, w in weights.items()})
    print(f"worker {os.getpid()}: received version {version}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64, help="checkpoint size")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    tmp = tempfile.mkdtemp(prefix="deltacast-ckpt-")
    path = os.path.join(tmp, "model.safetensors")
    rng = np.random.default_rng(0)
    per = args.mib * 2**20 // 2 // 8
    safetensors_io.save(path, {f"layers.{i}.weight": (rng.integers(0, 2**16, per, dtype=np.uint16), "bf16")
                               for i in range(8)})
    print(f"checkpoint: {path} ({os.path.getsize(path) / 2**20:.0f} MiB, 8 bf16 tensors)")
    with compat.ParameterServer(token=TOKEN) as ps:
        ps.register_checkpoint("step-100", files=[path])
        metas = ps.gather_metas("step-100")
        outs = [os.path.join(tmp, f"worker{i}.npz") for i in range(2)]

        def req_func(address):  # in a deployment: ask each inference engine to load from `address`
            procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", address,
                                       json.dumps(metas["tensors"]), out]) for out in outs]
            for p in procs:
                if p.wait(120) != 0:
                    raise RuntimeError("a worker failed")

        start = time.monotonic()
        report = ps.update("step-100", req_func=req_func, ranks=[0, 1], timeout=120)
        print(f"update: version {report['version']}, {report['wire_bytes'] / 2**20:.1f} MiB on the wire, "
              f"{time.monotonic() - start:.2f} s including the workers' start")
        ps.unregister_checkpoint("step-100")
    expected = safetensors_io.load(path)
    exact = all(np.load(out)[n].tobytes() == a.tobytes() for out in outs for n, (a, _) in expected.items())
    print("bit-exact: yes, both workers hold the checkpoint" if exact else "bit-exact: NO")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
