"""Reading (and, for tests and examples, writing) safetensors files into numpy
arrays without a framework: an 8-byte little-endian header length, a JSON
header {name: {dtype, shape, data_offsets}}, then the raw bytes. bf16 and
float8 tensors come back as integer arrays paired with deltacast's dtype
name, which Producer/Consumer accept as ``(array, dtype)``."""
import json
import struct

import numpy as np

# safetensors dtype -> (numpy storage dtype, deltacast dtype name or "" when numpy's own is right)
_DTYPES = {
    "F64": (np.float64, ""), "F32": (np.float32, ""), "F16": (np.float16, ""), "BF16": (np.uint16, "bf16"),
    "F8_E4M3": (np.uint8, "f8e4m3"), "F8_E5M2": (np.uint8, "f8e5m2"),
    "I64": (np.int64, ""), "I32": (np.int32, ""), "I16": (np.int16, ""), "I8": (np.int8, ""),
    "U8": (np.uint8, ""), "BOOL": (np.bool_, ""),
}
_NAMES = {"bf16": "BF16", "f8e4m3": "F8_E4M3", "f8e5m2": "F8_E5M2"}


def load(path):
    """Returns {name: array or (array, dtype)} in file order; the arrays are owned copies."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: too short for a safetensors file")
        (header_len,) = struct.unpack("<Q", raw)
        if header_len > 100 << 20:
            raise ValueError(f"{path}: header of {header_len} bytes is not plausible")
        header = json.loads(f.read(header_len))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has dtype {meta['dtype']}, which deltacast does not carry")
        storage, dtype = _DTYPES[meta["dtype"]]
        begin, end = meta["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor '{name}' lies outside the file")
        array = np.frombuffer(data, dtype=storage, count=(end - begin) // np.dtype(storage).itemsize,
                              offset=begin).reshape(meta["shape"]).copy()
        out[name] = (array, dtype) if dtype else array
    return out


def save(path, named_arrays):
    """Writes {name: array or (array, dtype)} as a safetensors file."""
    header, blobs, offset = {}, [], 0
    reverse = {np.dtype(v[0]): k for k, v in _DTYPES.items() if not v[1]}
    for name, value in named_arrays.items():
        array, dtype = value if isinstance(value, tuple) else (value, "")
        array = np.ascontiguousarray(array)
        code = _NAMES[dtype] if dtype else reverse[array.dtype]
        blob = array.tobytes()
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
