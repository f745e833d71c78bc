"""An inference worker for the compat test: zeroed numpy arrays of a spec,
filled once through deltacast.compat.receive_into, then saved (.npz)."""
import json
import sys

import numpy as np

from deltacast import compat


def main():
    address, token, spec, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    tensors = {}
    for name, dtype, shape in spec:
        storage = {"bf16": np.uint16}.get(dtype, dtype)
        array = np.zeros(shape, dtype=storage)
        tensors[name] = (array, dtype) if dtype == "bf16" else array
    version = compat.receive_into(tensors, address, token=token, timeout=60)
    np.savez(out, **{n: (t[0] if isinstance(t, tuple) else t) for n, t in tensors.items()})
    print(json.dumps({"version": version}), flush=True)


if __name__ == "__main__":
    main()
