"""dse.files: the one atomic writer (whole file or the old one, ordinary permissions)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from dse.files import atomic_path, sha256_file, write_atomic


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_write_atomic_text_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "a.json"  # folders are created
    write_atomic(path, "é\n")
    assert path.read_bytes() == "é\n".encode()
    write_atomic(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert os.listdir(path.parent) == ["a.json"]  # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's 0600


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["summary.json"]


def test_writers_that_want_a_path(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    path = tmp_path / "front.parquet"
    with atomic_path(path) as tmp:
        assert tmp.parent == path.parent and tmp.name.startswith(".front.parquet.")
        pd.DataFrame({"x": [1, 2]}).to_parquet(tmp, index=False)
    assert pd.read_parquet(path)["x"].tolist() == [1, 2]


def test_sha256_file(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    data = os.urandom(3 << 20)  # more than one 1 MiB chunk
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
