"""Registered checkpoints as host copies: safetensors files and named tensors
(torch tensors on any device, numpy arrays, ``(array, dtype)`` pairs) copied
into memory deltacast owns, so that a checkpoint is what it was when it was
registered, whatever the trainer does to its tensors afterwards. Copies are
numpy arrays (bf16 and float8 held as same-width integers with their
deltacast dtype name); with CUDA present they are in pinned memory, and a GPU
tensor is copied straight into it."""
from collections.abc import Mapping

import numpy as np

from .. import safetensors_io
from .._dtypes import TORCH_DTYPES, deltacast_dtype_of_torch
from ..errors import DTypeError, InvalidArgumentError

# Dtypes numpy has no type of: held in integers of their width, named beside the array.
_NARROW = ("bf16", "f8e4m3", "f8e5m2")
_HOLDER = {d: h for d, h in TORCH_DTYPES.values()}
_NUMPY = {np.dtype(h): d for d, h in _HOLDER.items() if d not in _NARROW}


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
    return (array, dtype) if dtype in _NARROW else array


def array_of(value):
    """The numpy array inside a value as the engine takes it."""
    return value[0] if isinstance(value, tuple) else value


def _source(name, value):
    """(deltacast dtype, the value as a host numpy array or a torch tensor of the holder's width)."""
    if isinstance(value, tuple):
        array, dtype = value
        array = np.asarray(array)
        if dtype not in _HOLDER or np.dtype(_HOLDER[dtype]).itemsize != array.dtype.itemsize:
            raise DTypeError(f"tensor '{name}': dtype '{dtype}' does not fit a {array.dtype} array")
        return dtype, array
    if hasattr(value, "detach") and hasattr(value, "dtype") and not isinstance(value, np.ndarray):  # torch
        dtype = deltacast_dtype_of_torch(value.dtype)
        if dtype is None:
            raise DTypeError(f"tensor '{name}': {value.dtype} is not a dtype deltacast carries")
        plain = value.detach()
        if dtype in _NARROW:
            import torch
            plain = plain.view(torch.int16 if dtype == "bf16" else torch.uint8)
        return dtype, plain
    array = np.asarray(value)
    dtype = _NUMPY.get(array.dtype)
    if dtype is None:
        raise DTypeError(f"tensor '{name}': {array.dtype} is not a dtype deltacast carries")
    return dtype, array


def _copy_into(destination, source):
    """Copies a numpy array or torch tensor into `destination` (a host array): a GPU tensor goes
    straight into it (pinned: one DMA), not through pageable memory."""
    if isinstance(source, np.ndarray):
        np.copyto(destination, source.view(destination.dtype) if source.dtype != destination.dtype else source)
        return
    import torch
    # torch takes no uint16 arrays: bf16 is held as uint16, copied as int16 of the same bits.
    target = destination.view(np.int16) if destination.dtype == np.uint16 else destination
    torch.from_numpy(target).copy_(source.reshape(target.shape))


def _check_fits(name, dtype, shape, into, what):
    if name not in into:
        raise InvalidArgumentError(f"{what}: the shared memory pool holds other tensors ('{name}' is not in it; "
                                   "its shape is fixed by its first user: unregister that one with force=True)")
    have = metas_of({name: into[name]})[0]
    if (have["dtype"], have["shape"]) != (dtype, list(shape)):
        raise InvalidArgumentError(f"{what}: the shared memory pool holds other tensors ('{name}' is {have['dtype']} "
                                   f"{tuple(have['shape'])} there, {dtype} {tuple(shape)} here; unregister its "
                                   "first user with force=True)")


def snapshot(files, named_tensors, into=None, what="checkpoint"):
    """{name: host copy} of every tensor of `files` (safetensors) and `named_tensors`, in that
    order; a name given twice is an error naming it and where. `into`: copies made before (the
    shared pool), which must hold exactly these tensors, written in place."""
    sources, where = {}, {}
    for path in files or []:
        for name, value in safetensors_io.load(path).items():
            if name in sources:
                raise InvalidArgumentError(f"tensor '{name}' is in {where[name]} and in {path}")
            sources[name] = value
            where[name] = str(path)
    if named_tensors is not None:
        if not isinstance(named_tensors, Mapping):
            raise InvalidArgumentError("named_tensors: give a dict {name: tensor}")
        for name, value in named_tensors.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"named_tensors: tensor names must be non-empty strings, got {name!r}")
            if name in sources:
                raise InvalidArgumentError(f"tensor '{name}' is both in {where[name]} and in named_tensors")
            sources[name] = value
            where[name] = "named_tensors"
    typed = {name: _source(name, value) for name, value in sources.items()}
    if into is not None:
        for name, (dtype, source) in typed.items():
            _check_fits(name, dtype, tuple(source.shape), into, what)
        if set(into) != set(typed):
            missing = sorted(set(into) - set(typed))[0]
            raise InvalidArgumentError(f"{what}: the shared memory pool holds other tensors ('{missing}' is not "
                                       "here; unregister its first user with force=True)")
    out = {}
    for name, (dtype, source) in typed.items():
        copy = into[name] if into is not None else host_buffer(dtype, tuple(source.shape))
        _copy_into(array_of(copy), source)
        out[name] = copy
    return out


def metas_of(tensors):
    """[{name, dtype, shape}] of host copies."""
    out = []
    for name, value in tensors.items():
        array = array_of(value)
        dtype = value[1] if isinstance(value, tuple) else _NUMPY[array.dtype]
        out.append({"name": name, "dtype": dtype, "shape": list(array.shape)})
    return out
