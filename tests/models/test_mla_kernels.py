"""Measured latent attention (issue 35, "MLA priced by measured kernels"): the reader of
aiconfigurator's MLA tables, the MLA kernel model's physics, and the predictor pricing
`attention/mla_core` with it where the artifact has one (roofline and flag elsewhere).
Skipped without ../shared/data where a test reads the measurements."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.data import MLA_KINDS, load
from dse.errors import DataError
from dse.fitting import plausible
from dse.models.mla import DEEPSEEK_V3_GEOMETRY, ContextMLAModel, GenerationMLAModel, mla_inputs

TABLE_DIR = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/{gpu}/mla/{engine}/{v}"
TRTLLM = {"engine": "trtllm", "v": "1.3.0rc20"}
FAST = {"max_rows": 2000, "max_iter": 40}


@pytest.fixture(scope="module")
def mla(data_dir: Path) -> dict[str, pd.DataFrame]:
    return load(data_dir, list(MLA_KINDS))


def _table(data_dir: Path, gpu: str, stem: str) -> Path:
    return data_dir / TABLE_DIR.format(gpu=gpu, **TRTLLM) / f"{stem}.parquet"


# ---------------------------------------------------------------------------- the reader
def test_every_mla_table_is_read_in_seconds_with_its_geometry(mla) -> None:
    for kind in MLA_KINDS:
        t = mla[kind]
        assert {"h100_sxm", "b200_sxm"} <= set(t["gpu"]), kind
        for key, value in DEEPSEEK_V3_GEOMETRY.items():
            assert (t[key] == value).all(), (kind, key)
        assert set(t["num_heads"]) == {2, 4, 8, 16, 32, 64, 128}, kind
        assert set(t["kv_cache_dtype"]) == {"bfloat16", "fp8"}, kind
    engines = {k: set(mla[k]["engine"]) for k in MLA_KINDS}
    assert engines["context_mla"] == engines["generation_mla"] == {"trtllm", "sglang"}
    assert engines["context_mla_module"] == {"trtllm", "vllm"}
    # the README's unit: ms per call. H100 TensorRT-LLM, one sequence of one token: ~15 us
    c = mla["context_mla"]
    one = c[(c["gpu"] == "h100_sxm") & (c["engine"] == "trtllm") & (c["isl"] == 1)]
    assert 5e-6 < one["latency_s"].median() < 5e-5
    g = mla["generation_mla"]
    assert g["kv_len"].min() == 1 and g["kv_len"].max() == 131071  # cached tokens (step)
    assert set(mla["context_mla_module"]["gemm_type"]) >= {"bfloat16", "fp8_block"}


def _copy(data_dir: Path, tmp_path: Path, stem: str, edit) -> Path:
    src = _table(data_dir, "h100_sxm", stem)
    dst = tmp_path / TABLE_DIR.format(gpu="h100_sxm", **TRTLLM) / src.name
    dst.parent.mkdir(parents=True)
    edit(pd.read_parquet(src)).to_parquet(dst)
    return dst


def test_a_table_in_seconds_is_refused_naming_the_file(data_dir: Path, tmp_path: Path) -> None:
    def seconds(df: pd.DataFrame) -> pd.DataFrame:
        return df.assign(latency=df["latency"] / 1000.0)

    _copy(data_dir, tmp_path, "generation_mla_perf", seconds)
    with pytest.raises(DataError, match=r"generation_mla_perf\.parquet: .*wrong units"):
        load(tmp_path, ["generation_mla"])


def test_a_missing_column_is_named(data_dir: Path, tmp_path: Path) -> None:
    _copy(data_dir, tmp_path, "context_mla_perf", lambda df: df.drop(columns=["num_heads"]))
    with pytest.raises(
        DataError, match=r"context_mla_perf\.parquet: missing column\(s\) num_heads"
    ):
        load(tmp_path, ["context_mla"])


def test_rows_below_the_physical_floor_are_dropped_and_counted(mla) -> None:
    for kind in MLA_KINDS:  # the measured rows all sit above their floor
        assert plausible.screen(kind, mla[kind])[1]["rows"] == 0, kind
    g = mla["generation_mla"]
    g = g[g["gpu"] == "h100_sxm"].reset_index(drop=True)
    bad = g.copy()
    # long caches of many sequences stream near the HBM bandwidth: 10x faster is impossible
    big = (bad["kv_len"] >= 16383) & (bad["batch_size"] >= 64)
    big &= bad["kv_cache_dtype"] == "bfloat16"
    bad.loc[big, "latency_s"] /= 10.0
    kept, report = plausible.screen("generation_mla", bad)
    assert report["rows"] == int(big.sum()) > 0
    assert len(kept) == len(g) - report["rows"]
    assert "kv_len=" in report["examples"][0]


# ---------------------------------------------------------------------------- the model
@pytest.fixture(scope="module")
def fitted(mla) -> dict[str, object]:
    out = {}
    for kind, cls in (("context_mla", ContextMLAModel), ("generation_mla", GenerationMLAModel)):
        out[kind] = cls(gpu="h100_sxm", engine="trtllm", **FAST).fit(mla[kind])
    return out


def _grid(kind: str) -> pd.DataFrame:
    """Shapes across and beyond the tables: 1-2048 sequences, 1-262144 tokens, 1-256 heads."""
    length = "isl" if kind == "context_mla" else "kv_len"
    b, s, h = np.meshgrid([1, 7, 64, 2048], [1, 100, 4096, 262144], [1, 3, 16, 128, 256])
    n = b.size
    return pd.DataFrame(
        {
            "gpu": "h100_sxm",
            "dtype": "bfloat16",
            "batch_size": b.ravel(),
            length: s.ravel(),
            "num_heads": h.ravel(),
            "kv_cache_dtype": np.where(np.arange(n) % 2, "fp8", "bfloat16"),
            **{k: np.full(n, v) for k, v in DEEPSEEK_V3_GEOMETRY.items()},
        }
    )


@pytest.mark.parametrize("kind", ["context_mla", "generation_mla"])
def test_predictions_stay_above_the_physical_floor(fitted, kind: str) -> None:
    """Never faster than the floor a measured row must respect (`plausible`), in the tables'
    range and far beyond it."""
    grid = _grid(kind)
    pred = fitted[kind].predict(**mla_inputs(grid))
    floor = plausible.floor_s(kind, grid)
    assert np.isfinite(pred["latency_s"]).all() and np.isfinite(floor).all()
    assert (pred["latency_s"] >= floor * (1.0 - plausible.MARGIN)).all()
    # and the work grows the time: 64x the sequences at the longest length cost more
    big = grid[length_of(kind)] == 262144
    t = pd.Series(pred["latency_s"][big], index=grid.index[big])
    rows = grid[big]
    for h in (16, 128):
        one = t[(rows["num_heads"] == h) & (rows["batch_size"] == 1)].max()
        many = t[(rows["num_heads"] == h) & (rows["batch_size"] == 64)].max()
        assert many > one


def length_of(kind: str) -> str:
    return "isl" if kind == "context_mla" else "kv_len"


def test_the_fitted_range_holds_the_one_measured_geometry(fitted) -> None:
    rng = fitted["generation_mla"].fitted_range()
    for key, value in DEEPSEEK_V3_GEOMETRY.items():
        assert rng[key] == (value, value)
    assert rng["num_heads"] == (2.0, 128.0)
    misses = fitted["generation_mla"].range_misses(kv_lora_rank=np.array([256.0, 512.0]))
    assert misses["kv_lora_rank"].outside.tolist() == [True, False]


def test_a_held_out_head_count_is_priced_within_a_few_percent(mla) -> None:
    """Head counts the fit never saw (16 held out, H100 TensorRT-LLM prefill): the physics
    carries the heads (experiments/mla_heads_cv.py has every table and count)."""
    c = mla["context_mla"]
    c = c[(c["gpu"] == "h100_sxm") & (c["engine"] == "trtllm")]
    held = c["num_heads"] == 16
    model = ContextMLAModel(gpu="h100_sxm", engine="trtllm", **FAST).fit(c[~held])
    pred = model.predict(**mla_inputs(c[held]))["latency_s"]
    err = np.abs(pred / c.loc[held, "latency_s"].to_numpy() - 1.0)
    assert err.mean() < 0.10  # ~3% with the full fit (MAX_ITER); the roofline misses ~40%


# ---------------------------------------------------------------------------- the predictor
def _deepseek(**over) -> dict:
    from dse.spec.catalogue import lookup_model

    cfg = {**lookup_model("DeepSeek-V3").to_dict(), "gpu": "h100_sxm", "tensor_parallel": 8,
           "prompt_tokens": 2048, "output_tokens": 64, "batch_size": 4}  # fmt: skip
    return {**cfg, **over}


def _has_mla(gpu: str) -> bool:
    from dse.predict.artifacts import load_artifact

    art = load_artifact(gpu)[0]
    return art is not None and bool(art.names("context_mla")) and bool(art.names("generation_mla"))


@pytest.mark.parametrize("gpu", ["h100_sxm", "b200_sxm"])
def test_an_mla_model_is_priced_by_the_measured_kernels(gpu: str) -> None:
    from dse.predict import predict

    if not _has_mla(gpu):
        pytest.fail(f"the shipped {gpu} artifact has no MLA models (dse fit --only mla)")
    out = predict(_deepseek(gpu=gpu))
    assert "attention/mla_core" not in out["roofline_ops"][0].split(",")
    for phase in ("prefill", "decode"):
        assert out[f"breakdown.{phase}.attention/mla_core_s"][0] > 0
    # another latent rank is outside the measured geometry: the roofline, and said so
    other = predict(_deepseek(gpu=gpu, kv_lora_rank=256))
    assert "attention/mla_core" in other["roofline_ops"][0].split(",")
    assert np.isfinite(other["latency_s"][0])


def test_a_batch_mixing_latent_ranks_prices_each_row_as_alone() -> None:
    from dse.predict import predict

    rows = [_deepseek(), _deepseek(kv_lora_rank=256)]
    both = predict({k: [r[k] for r in rows] for k in rows[0]})
    for i, r in enumerate(rows):
        alone = predict(r)
        # rel 1e-6: float32 MLPs may differ in the last bits across batch layouts on another
        # CPU's BLAS; a row priced by the wrong table is off by 2x or more
        assert both["latency_s"][i] == pytest.approx(alone["latency_s"][0], rel=1e-6)
        assert both["roofline_ops"][i] == alone["roofline_ops"][0]
