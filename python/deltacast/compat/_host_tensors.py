"""Registered checkpoints as host copies: safetensors files and named tensors
(torch tensors on any device, numpy arrays, ``(array, dtype)`` pairs) copied
into memory deltacast owns, so that a checkpoint is what it was when it was
registered, whatever the trainer does to its tensors afterwards. Copies are
numpy arrays (bf16 and float8 held as same-width integers with their
deltacast dtype name); with CUDA present they are in pinned memory, so
copying a GPU tensor out runs at full PCIe speed."""
from collections.abc import Mapping

import numpy as np

from .. import safetensors_io
from ..errors import DTypeError, InvalidArgumentError

# torch dtype name -> (deltacast dtype, numpy dtype of the same width that holds it)
_TORCH = {"bfloat16": ("bf16", np.uint16), "float8_e4m3fn": ("f8e4m3", np.uint8), "float8_e5m2": ("f8e5m2", np.uint8),
          "float16": ("f16", np.float16), "float32": ("f32", np.float32), "float64": ("f64", np.float64),
          "int8": ("i8", np.int8), "int16": ("i16", np.int16), "int32": ("i32", np.int32), "int64": ("i64", np.int64),
          "uint8": ("u8", np.uint8), "bool": ("bool", np.bool_)}
_NUMPY = {np.dtype(n): d for d, n in (("f16", np.float16), ("f32", np.float32), ("f64", np.float64), ("i8", np.int8),
                                      ("i16", np.int16), ("i32", np.int32), ("i64", np.int64), ("u8", np.uint8),
                                      ("bool", np.bool_))}
_HOLDER = {d: h for d, h in _TORCH.values()}


def torch_dtype_of(name):
    """The torch dtype for a deltacast dtype name."""
    import torch
    for torch_name, (dtype, _) in _TORCH.items():
        if dtype == name and hasattr(torch, torch_name):
            return getattr(torch, torch_name)
    raise DTypeError(f"dtype '{name}' has no torch counterpart here")


def deltacast_dtype_of_torch(dtype):
    """A torch dtype's deltacast name (None where deltacast does not carry it)."""
    entry = _TORCH.get(str(dtype).replace("torch.", ""))
    return entry[0] if entry else None


def _pinned(nbytes):
    """A host buffer of `nbytes`: pinned where CUDA is present, plain otherwise."""
    try:
        import torch
        if torch.cuda.is_available():
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()
    except ImportError:
        pass
    return np.empty(nbytes, dtype=np.uint8)


def host_buffer(dtype, shape):
    """An uninitialised host array for a deltacast dtype and shape, as the engine takes it."""
    holder = np.dtype(_HOLDER[dtype])
    count = int(np.prod(shape, dtype=np.int64))
    array = _pinned(count * holder.itemsize).view(holder).reshape(shape)
    return (array, dtype) if dtype in ("bf16", "f8e4m3", "f8e5m2") else array


def array_of(value):
    """The numpy array inside a value as the engine takes it."""
    return value[0] if isinstance(value, tuple) else value


def _copy(name, value):
    """(deltacast dtype, host copy) of one registered tensor."""
    if isinstance(value, tuple):
        array, dtype = value
        array = np.asarray(array)
        if dtype not in _HOLDER or np.dtype(_HOLDER[dtype]).itemsize != array.dtype.itemsize:
            raise DTypeError(f"tensor '{name}': dtype '{dtype}' does not fit a {array.dtype} array")
        source = array
    elif hasattr(value, "detach") and hasattr(value, "dtype") and not isinstance(value, np.ndarray):  # torch
        dtype = deltacast_dtype_of_torch(value.dtype)
        if dtype is None:
            raise DTypeError(f"tensor '{name}': {value.dtype} is not a dtype deltacast carries")
        plain = value.detach()
        if dtype in ("bf16", "f8e4m3", "f8e5m2"):
            import torch
            plain = plain.view(torch.int16 if dtype == "bf16" else torch.uint8)
        source = plain.cpu().contiguous().numpy().view(_HOLDER[dtype])
    else:
        source = np.asarray(value)
        dtype = _NUMPY.get(source.dtype)
        if dtype is None:
            raise DTypeError(f"tensor '{name}': {source.dtype} is not a dtype deltacast carries")
    copy = host_buffer(dtype, source.shape)
    np.copyto(array_of(copy), source.view(_HOLDER[dtype]) if source.dtype != np.dtype(_HOLDER[dtype]) else source)
    return dtype, copy


def snapshot(files, named_tensors):
    """{name: host copy} of every tensor of `files` (safetensors) and `named_tensors`, in that
    order; a name given twice is an error naming it and where."""
    tensors, where = {}, {}
    for path in files or []:
        for name, value in safetensors_io.load(path).items():
            if name in tensors:
                raise InvalidArgumentError(f"tensor '{name}' is in {where[name]} and in {path}")
            tensors[name] = _copy(name, value)[1]
            where[name] = str(path)
    if named_tensors is not None:
        if not isinstance(named_tensors, Mapping):
            raise InvalidArgumentError("named_tensors: give a dict {name: tensor}")
        for name, value in named_tensors.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"named_tensors: tensor names must be non-empty strings, got {name!r}")
            if name in tensors:
                raise InvalidArgumentError(f"tensor '{name}' is both in {where[name]} and in named_tensors")
            tensors[name] = _copy(name, value)[1]
            where[name] = "named_tensors"
    return tensors


def metas_of(tensors):
    """[{name, dtype, shape}] of host copies."""
    out = []
    for name, value in tensors.items():
        array = array_of(value)
        dtype = value[1] if isinstance(value, tuple) else _NUMPY[array.dtype]
        out.append({"name": name, "dtype": dtype, "shape": list(array.shape)})
    return out
