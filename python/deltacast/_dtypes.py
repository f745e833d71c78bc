"""deltacast's dtype names against torch's (and the numpy type of the same width that holds each
in host memory), for the modules that move torch tensors in and out of the engine."""
import numpy as np

from .errors import DTypeError

# torch dtype name -> (deltacast dtype, numpy dtype of the same width that holds it)
TORCH_DTYPES = {"bfloat16": ("bf16", np.uint16), "float8_e4m3fn": ("f8e4m3", np.uint8),
                "float8_e5m2": ("f8e5m2", np.uint8), "float16": ("f16", np.float16), "float32": ("f32", np.float32),
                "float64": ("f64", np.float64), "int8": ("i8", np.int8), "int16": ("i16", np.int16),
                "int32": ("i32", np.int32), "int64": ("i64", np.int64), "uint8": ("u8", np.uint8),
                "bool": ("bool", np.bool_)}


def torch_dtype_of(name):
    """The torch dtype for a deltacast dtype name."""
    import torch
    for torch_name, (dtype, _) in TORCH_DTYPES.items():
        if dtype == name and hasattr(torch, torch_name):
            return getattr(torch, torch_name)
    raise DTypeError(f"dtype '{name}' has no torch counterpart here")


def deltacast_dtype_of_torch(dtype):
    """A torch dtype's deltacast name (None where deltacast does not carry it)."""
    entry = TORCH_DTYPES.get(str(dtype).replace("torch.", ""))
    return entry[0] if entry else None
