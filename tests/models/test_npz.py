"""`dse.models._npz.read_npz` reads what `np.load(allow_pickle=False)` reads, bit for bit, and
fails where it fails: on every shipped artifact's weights and on members of every form numpy
writes (orders, 0-d, empty, byte orders, texts, header version 2) or cannot read."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dse.models._npz import _array, read_npz
from dse.models.artifact import WEIGHTS
from dse.resources import surrogates_dir


def _np_load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for k, w in want.items():
        g = got[k]
        assert g.dtype == w.dtype, k
        assert g.shape == w.shape, k
        assert g.flags.c_contiguous == w.flags.c_contiguous, k
        assert g.flags.f_contiguous == w.flags.f_contiguous, k
        assert g.flags.writeable and w.flags.writeable, k
        assert g.tobytes(order="A") == w.tobytes(order="A"), k


def _shipped() -> list[Path]:
    return sorted(p for p in surrogates_dir().glob(f"*/{WEIGHTS}"))


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: p.parent.name)
def test_every_shipped_artifact_reads_as_np_load(path: Path) -> None:
    got = read_npz(path)
    assert len(got) > 100
    _same(got, _np_load(path))
    # the header regex reads every member numpy wrote (none falls back to numpy's parser)
    with zipfile.ZipFile(path) as zf:
        assert all(_array(zf.read(i)) is not None for i in zf.infolist())


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "f64": rng.normal(size=(3, 5)),
        "f32_fortran": np.asfortranarray(rng.normal(size=(4, 6)).astype(np.float32)),
        "f16": rng.normal(size=7).astype(np.float16),
        "big_endian": rng.normal(size=(2, 3)).astype(">f8"),
        "int64": np.arange(11, dtype=np.int64),
        "uint8_3d": np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
        "bool": np.array([True, False, True]),
        "text": np.array(["gemm", "attention", "x"]),
        "bytes": np.array([b"ab", b"c"]),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 4)),
        "empty_text": np.array([], dtype="<U3"),
        "nan_inf": np.array([np.nan, np.inf, -np.inf, -0.0]),
        "complex": np.array([1 + 2j, 3 - 4j]),
        "structured": np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
    }


@pytest.mark.parametrize("compressed", [False, True])
def test_members_of_every_form(tmp_path: Path, compressed: bool) -> None:
    path = tmp_path / "w.npz"
    (np.savez_compressed if compressed else np.savez)(path, **_arrays())
    got = read_npz(path)
    _same(got, _np_load(path))
    assert got["f32_fortran"].flags.f_contiguous and not got["f32_fortran"].flags.c_contiguous
    got["f64"][0, 0] = 1.0  # writable, as numpy returns it


def _zip(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)


def _npy(arr: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version, allow_pickle=True)
    return buf.getvalue()


def test_header_version_2_and_3(tmp_path: Path) -> None:
    path = tmp_path / "v.npz"
    arr = np.arange(6.0).reshape(2, 3)
    _zip(path, {"a.npy": _npy(arr, (2, 0)), "b.npy": _npy(arr, (3, 0)), "c.npy": _npy(arr)})
    got = read_npz(path)
    _same(got, _np_load(path))
    assert all(np.array_equal(v, arr) for v in got.values())


@pytest.mark.parametrize(
    "member",
    [
        _npy(np.array([{"a": 1}], dtype=object)),  # an object array: no pickles
        _npy(np.arange(100.0))[:-8],  # a truncated body
    ],
    ids=["object", "truncated"],
)
def test_unreadable_member_fails_as_np_load_fails(tmp_path: Path, member: bytes) -> None:
    path = tmp_path / "u.npz"
    _zip(path, {"ok.npy": _npy(np.ones(2)), "bad.npy": member})
    with pytest.raises(ValueError) as want:
        _np_load(path)
    with pytest.raises(ValueError) as got:
        read_npz(path)
    assert str(got.value) == str(want.value)


def test_member_without_npy_suffix_read_by_numpy(tmp_path: Path) -> None:
    path = tmp_path / "n.npz"
    _zip(path, {"a.npy": _npy(np.arange(3)), "b": _npy(np.arange(4))})
    _same(read_npz(path), _np_load(path))


def test_not_a_zip_fails_as_np_load_fails(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises((zipfile.BadZipFile, OSError, ValueError, EOFError)):
        read_npz(path)
