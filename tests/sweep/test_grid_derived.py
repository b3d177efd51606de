"""The exact scan's `derived` from grid tables (`dse.sweep._grid_derived`): the rules and sizes
computed once per distinct combination of the searched fields they read, over a space's chunks,
equal `dse.spec.columns.derived` on each whole chunk: keys in order, dtypes and values; and so
do the predictor's KV sizes (`dse.predict.request.kv_sizes`) the memory table keeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.predict.request import kv_sizes
from dse.spec import columns as C
from dse.spec.space import load_space
from dse.sweep._grid_derived import GridDerived, grid_derived
from dse.sweep.space_index import space_columns, space_digits

REPO = Path(__file__).resolve().parents[2]
# Searched workload fields on both sides of the architecture's, tensor parallelism that breaks
# rules (48 heads over 4 GPUs is fine, 3 KV heads is not), MLA and FP8 KV mixed in.
SPACE = """\
name: grid
hardware: {values: [h100_sxm, a100_sxm]}
workload:
  batch_size: {values: [1, 16]}
  prompt_tokens: {values: [512, 4096]}
  output_tokens: 64
  tensor_parallel: {values: [1, 2, 4]}
space:
  d_model: {values: [2048, 3072]}
  n_layers: {values: [8, 12]}
  n_heads: {values: [16, 24, 48]}
  n_kv_heads: {values: [1, 3, 8]}
  kv_dtype: {values: [bfloat16, fp8]}
  d_ff: {values: [6144, 7000]}
  vocab_size: 32000
objectives:
  latency: {metric: tpot}
  energy: {source: hymell, metric: per_output_token}
"""


def _assert_equal_chunks(space_path: Path, chunk: int, limit: int | None = None) -> None:
    space = load_space(space_path)
    grid = GridDerived.of(space)
    assert grid is not None
    size = space.size() if limit is None else min(space.size(), limit)
    for start in range(0, size, chunk):
        idx = np.arange(start, min(start + chunk, size), dtype=np.int64)
        digits = space_digits(space, idx)
        cols = space_columns(space, idx, digits)
        got, sizes = grid.with_sizes(cols, digits)
        want = C.derived(cols, cols.n, texts=False)
        assert tuple(got) == tuple(want)
        for k, v in want.items():
            assert np.asarray(got[k]).dtype == np.asarray(v).dtype, k
            assert np.array_equal(got[k], v, equal_nan=True), k
        # the predictor's KV sizes, from the memory table, as `kv_sizes` computes them
        for k, v in kv_sizes(cols).items():
            assert sizes[k].dtype == np.asarray(v).dtype, k
            assert np.array_equal(sizes[k], np.broadcast_to(v, (cols.n,))), k


@pytest.mark.parametrize("chunk", [7, 100, 1000])
def test_grid_tables_equal_derived_chunk_by_chunk(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(SPACE)
    _assert_equal_chunks(path, chunk)


@pytest.mark.parametrize(
    "space_file",
    ["benchmarks/sweep_3m_space.yaml", "search_spaces/gpu_batch.yaml",
     "examples/attention_families_8b.yaml", "examples/mamba_hybrids_8b.yaml"],
)  # fmt: skip
def test_grid_tables_equal_derived_on_repo_spaces(space_file: str) -> None:
    _assert_equal_chunks(REPO / space_file, 4096, limit=40_000)


def test_a_space_with_fp4_weights_takes_no_tables(tmp_path: Path) -> None:
    path = tmp_path / "fp4.yaml"
    path.write_text(
        SPACE.replace("  vocab_size: 32000", "  vocab_size: 32000\n  weight_dtype: nvfp4")
    )
    space = load_space(path)
    assert GridDerived.of(space) is None
    assert grid_derived(space) is None


def test_threads_sharing_the_tables_get_derived_of_their_own_chunks(tmp_path: Path) -> None:
    """A Dask worker with several threads evaluates chunks at once on one space's tables."""
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "grid.yaml"
    path.write_text(SPACE)
    space = load_space(path)
    grid = GridDerived.of(space)
    assert grid is not None
    chunk = 97

    def one(start: int) -> bool:
        idx = np.arange(start, min(start + chunk, space.size()), dtype=np.int64)
        digits = space_digits(space, idx)
        cols = space_columns(space, idx, digits)
        got, want = grid(cols, digits), C.derived(cols, cols.n, texts=False)
        return all(np.array_equal(got[k], v, equal_nan=True) for k, v in want.items())

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, range(0, space.size(), chunk)))
