"""Reads a Loom checkpoint directory from the formats' specifications alone, independent of
Loom's reader: safetensors (u64 header length, JSON header, raw little-endian data) and the
sharded layout's manifest.json (every tensor: dtype, shape and its pieces -- file, key, element
range, xxhash64 of the piece's bytes). Every piece's checksum is recomputed with python-xxhash
and the pieces must tile each tensor exactly."""
import json
import os
import struct

import numpy as np
import xxhash

DTYPES = {"F32": np.float32, "I64": np.int64, "BF16": np.uint16}


def read_safetensors(path, with_metadata=False):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return (out, header.get("__metadata__", {})) if with_metadata else out


def read_checkpoint(ckpt):
    """{"model": {name: array}, "optimizer": {...}, ...} from a sharded checkpoint."""
    with open(os.path.join(ckpt, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["format"] == "loom-sharded-checkpoint", manifest["format"]
    files, parts = {}, {}
    for name, spec in manifest["tensors"].items():
        numel = int(np.prod(spec["shape"], dtype=np.int64))
        flat = np.empty(numel, dtype=DTYPES[spec["dtype"]])
        at = 0
        for p in sorted(spec["pieces"], key=lambda p: p["begin"]):
            if p["begin"] != at:
                raise ValueError(f"{name}: pieces do not tile at element {at}")
            if p["file"] not in files:
                files[p["file"]] = read_safetensors(os.path.join(ckpt, p["file"]))
            data = files[p["file"]][p["key"]]
            if xxhash.xxh64(data.tobytes()).hexdigest() != p["xxh64"]:
                raise ValueError(f"{name}: checksum of {p['file']}:{p['key']} does not match")
            flat[p["begin"]:p["end"]] = data
            at = p["end"]
        if at != numel:
            raise ValueError(f"{name}: pieces cover {at} of {numel} elements")
        part, _, tensor = name.partition("/")
        parts.setdefault(part, {})[tensor] = flat.reshape(spec["shape"])
    for file, spec in manifest["files"].items():
        with open(os.path.join(ckpt, file), "rb") as f:
            if xxhash.xxh64(f.read()).hexdigest() != spec["xxh64"]:
                raise ValueError(f"checksum of {file} does not match")
    return parts
