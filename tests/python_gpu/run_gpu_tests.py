"""Runs tests/python_gpu with pytest where torch sees a CUDA GPU; exits 77 (CTest: skipped)
where it does not, or where torch, transformers or CuPy are missing."""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    for package in ("torch", "transformers", "cupy", "pytest"):
        if importlib.util.find_spec(package) is None:
            print(f"{package} is not installed: GPU Python tests skipped")
            return 77
    import torch
    if not torch.cuda.is_available():
        print("no CUDA GPU: GPU Python tests skipped")
        return 77
    import pytest
    return pytest.main(["-q", "-p", "no:cacheprovider", HERE, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
