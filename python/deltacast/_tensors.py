"""Named tensors in, DLPack capsules out: what the C++ engine reads and writes
in place. Any object with ``__dlpack__`` works (torch tensors, numpy arrays,
JAX/CuPy arrays on the host...). A value may also be ``(array, dtype)`` with
a deltacast dtype name ("bf16", "f8e4m3", "f8e5m2"...) of the array's element
width: bf16 or float8 weights held in numpy integer arrays."""
from collections.abc import Mapping

from .errors import InvalidArgumentError


def named_items(named_tensors):
    """Accepts a mapping name -> tensor (order kept) or an iterable of
    (name, tensor) pairs, such as ``model.named_parameters()``."""
    if isinstance(named_tensors, Mapping):
        items = list(named_tensors.items())
    else:
        try:
            items = [(name, tensor) for name, tensor in named_tensors]
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                "named_tensors: give a dict {name: tensor} or (name, tensor) pairs") from None
    seen = set()
    for name, tensor in items:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"tensor names must be non-empty strings, got {name!r}")
        if name in seen:
            raise InvalidArgumentError(f"tensor name '{name}' appears twice")
        seen.add(name)
        if isinstance(tensor, tuple):
            if len(tensor) != 2 or not isinstance(tensor[1], str):
                raise InvalidArgumentError(f"tensor '{name}': give a tensor or a pair (array, dtype name)")
            tensor = tensor[0]
        if not hasattr(tensor, "__dlpack__"):
            raise InvalidArgumentError(
                f"tensor '{name}' ({type(tensor).__name__}) does not support DLPack (__dlpack__)")
    return items


def _plain(tensor):
    # A torch parameter or a tensor that needs grad cannot be exported directly: its data can.
    detach = getattr(tensor, "detach", None)
    return detach() if callable(detach) else tensor


def capsules(items):
    """Returns (names, capsules, dtypes, keepalive): the capsules refer to the
    tensors' memory; dtypes holds each override ("" for none); keepalive holds
    the exported objects for as long as the engine lives."""
    names, caps, dtypes, keep = [], [], [], []
    for name, tensor in items:
        dtype = ""
        if isinstance(tensor, tuple):
            tensor, dtype = tensor
        plain = _plain(tensor)
        names.append(name)
        caps.append(plain.__dlpack__())
        dtypes.append(dtype)
        keep.append(plain)
    return names, caps, dtypes, keep


SECRET_PREFIXES = ("hex:", "file:", "env:", "pass:", "legacy:")


def parse_token(token):
    """The group's secret as the engine reads it (a text trust::GroupSecret::parse takes):
    32 bytes; a path (os.PathLike) to a file of 32 bytes or 64 hex digits; a str with one of
    the prefixes hex:, file:, env:, pass:, or else a passphrase (stretched with PBKDF2, the same
    on every member); an int below 2**64 (legacy token); None: no secret (an open group)."""
    import os
    if token is None:
        return "0"
    if isinstance(token, bool):
        raise InvalidArgumentError("token: give bytes, a str, a path or an int")
    if isinstance(token, int):
        if not 0 <= token < 2 ** 64:
            raise InvalidArgumentError("an integer token must lie in [0, 2**64)")
        return f"legacy:{token}"
    if isinstance(token, (bytes, bytearray, memoryview)):
        raw = bytes(token)
        if len(raw) != 32:
            raise InvalidArgumentError(f"token: {len(raw)} bytes given; a group secret is exactly 32 bytes")
        return "hex:" + raw.hex()
    if isinstance(token, os.PathLike):
        return "file:" + os.fspath(token)
    if isinstance(token, str):
        if not token:
            raise InvalidArgumentError("token: the passphrase is empty")
        return token if token.startswith(SECRET_PREFIXES) else "pass:" + token
    raise InvalidArgumentError(f"token: give bytes, a str, a path or an int, got {type(token).__name__}")


def parse_protection(encrypt, insecure):
    """What every connection of this engine protects: "encrypted" (encrypt=True: payloads and
    control encrypted with AES-256-GCM), "insecure" (insecure=True, for benchmarks only: no tags;
    every member must choose it) or "authenticated" (the default: everything tagged, payloads in
    clear)."""
    if encrypt and insecure:
        raise InvalidArgumentError("encrypt and insecure: choose one")
    return "encrypted" if encrypt else "insecure" if insecure else "authenticated"


def parse_stream(stream, what="stream"):
    """A CUDA stream as its raw handle: None (the default stream), an int, or an object that
    carries one (torch.cuda.Stream's ``cuda_stream``, CuPy's ``ptr``)."""
    if stream is None:
        return 0
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int) and not isinstance(handle, bool):
            stream = handle
            break
    if isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream < 2 ** 64:
        raise InvalidArgumentError(f"{what}: give a CUDA stream (torch.cuda.Stream, a CuPy stream, or its handle "
                                   f"as an int), got {type(stream).__name__}")
    return stream
