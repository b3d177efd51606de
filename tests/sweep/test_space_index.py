"""Configuration columns from enumeration indices (`dse.sweep.space_index`): the GPU names come
as the str array the checker would make of objects (values, dtype and width, chunk by chunk),
so every column equals the one built from object values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.spec.space import SearchSpace, load_space
from dse.sweep.space_index import digit_columns, space_columns

REPO = Path(__file__).resolve().parents[2]
# GPU names of different lengths, so a chunk holding only the short one has a narrower dtype
SPACE = """\
name: idx
hardware: {values: [gh200, h100_sxm, a100_sxm]}
workload:
  batch_size: {values: [1, 8]}
  prompt_tokens: 512
  output_tokens: 64
space:
  d_model: {values: [2048, 4096]}
  n_layers: {values: [16, 32]}
  n_heads: {values: [16, 32]}
  n_kv_heads: {values: [4, 8]}
  d_ff: {values: [8192, 11008]}
  vocab_size: 32000
objectives:
  latency: {metric: tpot}
  energy: {source: hymell, metric: per_output_token}
"""


def _from_objects(space: SearchSpace, idx: np.ndarray) -> dict[str, np.ndarray]:
    """The columns as built before: every text value an object, the checker converting them."""
    digits = np.unravel_index(idx, [len(p.values) for p in space.searched])
    cols = {k: np.full(len(idx), v) for k, v in space.fixed.items()}
    for p, d in zip(space.searched, digits, strict=True):
        typ = object if isinstance(p.values[0], str) else None
        cols[p.name] = np.asarray(p.values, dtype=typ)[d]
    return dict(space.complete(cols, own=True))


@pytest.mark.parametrize(
    "space_file",
    ["own", "benchmarks/sweep_3m_space.yaml", "search_spaces/gpu_batch.yaml",
     "examples/mamba_hybrids_8b.yaml"],
)  # fmt: skip
def test_columns_equal_those_built_from_objects(tmp_path: Path, space_file: str) -> None:
    if space_file == "own":
        path = tmp_path / "idx.yaml"
        path.write_text(SPACE)
    else:
        path = REPO / space_file
    space = load_space(path)
    size = space.size()
    rng = np.random.default_rng(0)
    chunks = [np.sort(rng.choice(size, min(size, 3000), replace=False)), np.arange(min(size, 5))]
    if space_file == "own":  # the first third: the short name alone
        chunks.append(np.arange(size // 3))
    for idx in chunks:
        want = _from_objects(space, idx)
        for got in (space_columns(space, idx), digit_columns(space, _digits(space, idx))):
            assert list(got) == list(want)
            for k, v in want.items():
                assert got[k].dtype == v.dtype, k
                np.testing.assert_array_equal(got[k], v)


def _digits(space: SearchSpace, idx: np.ndarray) -> np.ndarray:
    return np.column_stack(np.unravel_index(idx, [len(p.values) for p in space.searched]))
