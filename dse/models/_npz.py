"""Reading a frozen artifact's weights.npz: every array, the same as `np.load`, in half the time.

    arrays = read_npz(path)        # {name: array}, as {k: np.load(path)[k] for k in files}

An artifact holds ~1,600 small arrays; `np.load` reads each through `NpzFile.__getitem__`,
whose header parse (`ast.literal_eval` of the npy header dict) and per-member file objects
cost ~65 us an array: 0.10 s of a cold `dse predict` (~0.4 s) and 0.4 s of a sweep over four
GPUs. Here each member's bytes come from one `ZipFile.read` and a header in the form numpy
writes (`{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`) is read by one regular
expression. Any other member (another header form, a truncated body, a name not ending in
`.npy`) is read by numpy's own reader, so what this returns, and the errors it raises
(ValueError for object arrays: no pickles), are `np.load(..., allow_pickle=False)`'s.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import numpy as np

_MAGIC = b"\x93NUMPY"
_SUFFIX = ".npy"
# The header dict as numpy's `write_array` formats it; a dtype given by one type string
# (no structured or object dtypes: those take numpy's path).
_HEADER = re.compile(
    rb"\{'descr': '([<>|=]?[a-zA-Z]\d*)', 'fortran_order': (False|True), "
    rb"'shape': \(((?:\d+, ?)*\d*)\), \}"
)


def _array(raw: bytes) -> np.ndarray | None:
    """The array of one .npy member's bytes, or None where numpy's reader must decide."""
    if raw[:6] != _MAGIC or raw[6] not in (1, 2):
        return None
    # version 1: 2-byte little-endian header length; version 2: 4 bytes
    start = 10 if raw[6] == 1 else 12
    length = int.from_bytes(raw[8:start], "little")
    m = _HEADER.match(raw, start, start + length)
    if m is None:
        return None
    dtype = np.dtype(m.group(1).decode("ascii"))
    if dtype.hasobject or dtype.itemsize == 0:
        return None
    shape = tuple(int(s) for s in m.group(3).split(b",") if s.strip())
    body = raw[start + length :]
    if len(body) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        return None  # truncated or padded: numpy's reader says which
    # a bytearray keeps the array writable, as numpy's reader returns it
    flat = np.frombuffer(bytearray(body), dtype=dtype)
    return flat.reshape(shape, order="F" if m.group(2) == b"True" else "C")


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of the .npz at `path` by name (the member name less `.npy`). Raises what
    `np.load(path, allow_pickle=False)` raises for a file or member it cannot read (OSError,
    ValueError, zipfile.BadZipFile, EOFError)."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        if not all(i.filename.endswith(_SUFFIX) for i in infos):
            with np.load(path, allow_pickle=False) as npz:
                return {k: npz[k] for k in npz.files}
        out: dict[str, np.ndarray] = {}
        for info in infos:
            raw = zf.read(info)
            arr = _array(raw)
            if arr is None:
                arr = np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False)
            out[info.filename[: -len(_SUFFIX)]] = arr
        return out
