"""Sharded groups: trainer ranks that each publish the pieces they own of the
group's logical tensors, and rollout processes that hold a layout of their own
(a tensor-parallel rank's fused ``qkv_proj``, column shards...).

A layout maps each local tensor name to what it is: a piece of one logical
tensor (``rows``, ``columns``, ``piece`` along any dimension, ``flat`` for a
range of the flattened tensor) or several pieces concatenated (``fused``)::

    group = deltacast.Group({"q": ("bf16", (4096, 4096)), "k": ("bf16", (1024, 4096)), ...})
    # trainer rank r of 4 (tensor parallel): its rows of q, its columns of o
    shards = {"q": deltacast.rows("q", 1024 * r, 1024 * (r + 1)),
              "o": deltacast.columns("o", 1024 * r, 1024 * (r + 1)), ...}
    # a rollout TP rank 0 of 2: q, k and v rows fused into one tensor
    layout = {"qkv_proj": deltacast.fused(deltacast.rows("q", 0, 2048), deltacast.rows("k", 0, 512),
                                          deltacast.rows("v", 0, 512)), ...}
"""
import json
from collections.abc import Mapping
from dataclasses import dataclass

from . import _core
from .errors import InvalidArgumentError


@dataclass(frozen=True)
class Piece:
    """Elements [start, stop) of logical tensor ``tensor`` along dimension
    ``dim`` (every other dimension whole), or, with ``flat``, of its row-major
    flattened elements."""

    tensor: str
    dim: int
    start: int
    stop: int
    flat: bool = False

    def _json(self):
        return {"tensor": self.tensor, "dim": self.dim, "start": self.start, "stop": self.stop, "flat": self.flat}


@dataclass(frozen=True)
class Fused:
    """Pieces concatenated along dimension ``dim`` into one local tensor."""

    pieces: tuple
    dim: int = 0


def piece(tensor, dim, start, stop):
    """Elements [start, stop) of ``tensor`` along dimension ``dim``."""
    return Piece(str(tensor), int(dim), int(start), int(stop))


def rows(tensor, start, stop):
    """Rows [start, stop) of ``tensor`` (a column-parallel shard, a TP rank's rows)."""
    return piece(tensor, 0, start, stop)


def columns(tensor, start, stop):
    """Columns [start, stop) of a 2-D ``tensor`` (a row-parallel shard: o_proj, down_proj)."""
    return piece(tensor, 1, start, stop)


def whole(tensor, shape):
    """All of ``tensor`` (of ``shape``) as one piece; a 0-d tensor travels as a 1-element one."""
    return rows(tensor, 0, shape[0] if shape else 1)


def flat(tensor, start, stop):
    """Elements [start, stop) of ``tensor`` flattened row-major (an FSDP flat shard)."""
    return Piece(str(tensor), 0, int(start), int(stop), True)


def fused(*pieces, dim=0):
    """Pieces concatenated along ``dim`` (``qkv_proj`` = rows of q, k and v)."""
    if not pieces or not all(isinstance(p, Piece) for p in pieces):
        raise InvalidArgumentError("fused: give one or more pieces (deltacast.rows, columns, piece, flat)")
    return Fused(tuple(pieces), int(dim))


class Group:
    """The group's logical tensors: ``{name: (dtype, shape)}`` with deltacast
    dtype names ("bf16", "f32", ...), in a fixed order every member shares."""

    def __init__(self, tensors):
        if not isinstance(tensors, Mapping) or not tensors:
            raise InvalidArgumentError("Group: give {name: (dtype, shape)} for every logical tensor")
        self.tensors = {}
        for name, spec in tensors.items():
            try:
                dtype, shape = spec
                shape = tuple(int(d) for d in shape)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"Group: tensor '{name}': give (dtype, shape)") from None
            self.tensors[str(name)] = (str(dtype), shape)

    def _json(self):
        return json.dumps([{"name": n, "dtype": d, "shape": list(s)} for n, (d, s) in self.tensors.items()])

    def resolve(self, layout):
        """The local tensors of ``layout`` as {name: (dtype, shape)}; raises
        deltacast.InvalidArgumentError naming the tensor when the layout does
        not fit the group's tensors."""
        specs = json.loads(_core.resolve_layout(self._json(), layout_json(layout)))
        return {s["name"]: (s["dtype"], tuple(s["shape"])) for s in specs}


def layout_json(layout):
    """The JSON the engine reads for ``{local name: Piece | Fused | [Piece, ...]}``."""
    if not isinstance(layout, Mapping) or not layout:
        raise InvalidArgumentError("layout: give {local tensor name: piece or fused pieces}")
    out = []
    for name, spec in layout.items():
        if isinstance(spec, Piece):
            spec = Fused((spec,))
        elif isinstance(spec, (list, tuple)):
            spec = fused(*spec)
        if not isinstance(spec, Fused):
            raise InvalidArgumentError(f"layout: tensor '{name}' is {spec!r}, not a piece or fused pieces")
        out.append({"name": str(name), "dim": spec.dim, "pieces": [p._json() for p in spec.pieces]})
    return json.dumps(out)


def ordered_like(layout, items, role):
    """``items`` (name, tensor) in the order of ``layout``'s names; every name in both, or an error naming them."""
    by_name = dict(items)
    missing = [n for n in layout if n not in by_name]
    extra = [n for n in by_name if n not in layout]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"no tensor for {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"tensors {', '.join(map(repr, extra))} are not in the {role}")
        raise InvalidArgumentError(f"{role}: " + "; ".join(parts))
    return [(n, by_name[n]) for n in layout]
