"""Which of an inference engine's parameters deltacast can write in place, and
as what part of the checkpoint's (Hugging Face named) tensors each one is.

vLLM names a tensor-parallel rank's parameters after the fused modules it
runs: ``qkv_proj`` holds this rank's rows of q, k and v, ``gate_up_proj`` its
rows of gate and up (the model's ``packed_modules_mapping``), a row-parallel
layer its columns. A parameter is written in place when its dtype is the
checkpoint's, it is contiguous, and its shape is the checkpoint tensor's (or
one tensor-parallel share of it along one dimension, or the fused rows of its
packed tensors). Everything else (quantized or repacked weights, vocabularies
padded per partition, replicated kv heads) is received whole and handed to the
engine's own ``load_weights``."""
from dataclasses import dataclass

from ..group import fused, piece
from .._dtypes import deltacast_dtype_of_torch


@dataclass
class LayoutPlan:
    in_place: dict   # parameter name -> deltacast Piece or Fused of the checkpoint's tensors
    fallback: list   # checkpoint tensor names for load_weights


def _share(name, logical_shape, shape, tp_rank, tp_size):
    """`shape` as the whole of `logical_shape`, or as rank tp_rank's share along one dimension."""
    if not shape or len(shape) != len(logical_shape):
        return None
    if tuple(shape) == tuple(logical_shape):
        return piece(name, 0, 0, shape[0])
    differ = [d for d in range(len(shape)) if shape[d] != logical_shape[d]]
    if len(differ) != 1:
        return None
    d = differ[0]
    if shape[d] * tp_size != logical_shape[d]:
        return None
    return piece(name, d, tp_rank * shape[d], (tp_rank + 1) * shape[d])


def _packed(param_name, shape, dtype, logical, packed_modules, tp_rank, tp_size):
    """`param_name` as the fused rows of the tensors its module packs, or None."""
    dotted = "." + param_name
    for packed_name, parts in packed_modules.items():
        token = f".{packed_name}."
        if token not in dotted:
            continue
        names = [dotted.replace(token, f".{part}.", 1)[1:] for part in parts]
        pieces, rows = [], 0
        for name in names:
            if name not in logical or logical[name][0] != dtype:
                return None
            logical_shape = logical[name][1]
            if tuple(logical_shape[1:]) != tuple(shape[1:]) or logical_shape[0] % tp_size:
                return None
            share = logical_shape[0] // tp_size
            pieces.append(piece(name, 0, tp_rank * share, (tp_rank + 1) * share))
            rows += share
        return fused(*pieces) if rows == shape[0] else None
    return None


def plan(parameters, logical, packed_modules=None, tp_rank=0, tp_size=1):
    """``parameters``: {name: tensor} of the engine's model; ``logical``: {name: (deltacast dtype,
    shape)} of the checkpoint. Every checkpoint tensor that no parameter takes in place is
    received whole (fallback)."""
    in_place, covered = {}, set()
    for name, param in parameters.items():
        dtype = deltacast_dtype_of_torch(param.dtype)
        if dtype is None or not param.is_contiguous():
            continue
        shape = tuple(param.shape)
        if name in logical:
            spec = _share(name, logical[name][1], shape, tp_rank, tp_size) if logical[name][0] == dtype else None
        else:
            spec = _packed(name, shape, dtype, logical, packed_modules or {}, tp_rank, tp_size)
        if spec is None:
            continue
        in_place[name] = spec
        covered.update(p.tensor for p in getattr(spec, "pieces", (spec,)))
    return LayoutPlan(in_place, [n for n in logical if n not in covered])
