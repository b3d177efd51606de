"""The MoE table `dse predict` prices with records, and checks, the range of the input
combinations a layout is made of (issue 19: experts per top-k, routed tokens per expert), not
only each input's own: a layout whose every input lies inside the table but whose sparsity no
fitted layout had is flagged, by name, on every GPU's shipped artifact."""

from __future__ import annotations

import numpy as np
import pytest

from dse.models.moe import MoEModel, combination_inputs
from dse.predict import predict
from dse.predict.adapters import _search_model
from dse.predict.artifacts import resolve_artifact

GPUS = ("h100_sxm", "h200_sxm", "a100_sxm", "gh200")


def _moe(n_experts: int, top_k: int, gpu: str = "h100_sxm") -> dict[str, np.ndarray]:
    return {
        "d_model": np.array([4096]),
        "n_layers": np.array([32]),
        "n_heads": np.array([32]),
        "n_kv_heads": np.array([8]),
        "d_ff": np.array([14336]),
        "d_ff_expert": np.array([14336]),
        "n_experts": np.array([n_experts]),
        "top_k": np.array([top_k]),
        "vocab_size": np.array([32000]),
        "batch_size": np.array([8]),
        "prompt_tokens": np.array([512]),
        "output_tokens": np.array([64]),
        "gpu": np.array([gpu]),
    }


def test_combinations_are_the_layouts_sparsity_and_fill() -> None:
    c = combination_inputs(
        {"num_tokens": np.array([64.0]), "topk": np.array([2.0]), "num_experts": np.array([8.0])}
    )
    assert c["experts_per_topk"][0] == 4.0
    assert c["tokens_per_expert"][0] == 16.0  # 64 tokens x top-2 over 8 experts
    assert MoEModel().range_arrays(num_tokens=1.0) == {}  # a combination needs all three


@pytest.mark.parametrize("gpu", GPUS)
def test_the_predict_table_records_the_combination_range(gpu: str) -> None:
    art, _ = resolve_artifact(gpu, "auto")
    name = _search_model(art, "moe")
    rng = art.manifest["models"][name]["fitted_range"]
    assert {"experts_per_topk", "tokens_per_expert"} <= set(rng), name
    lo, hi = rng["experts_per_topk"]
    assert 1 <= lo < hi < rng["num_experts"][1] / rng["topk"][0], name


@pytest.mark.parametrize("gpu", GPUS)
def test_a_sparsity_no_layout_had_is_flagged_by_name(gpu: str) -> None:
    art, _ = resolve_artifact(gpu, "auto")
    rng = art.manifest["models"][_search_model(art, "moe")]["fitted_range"]
    hi = rng["experts_per_topk"][1]
    # more experts per top-k than any fitted layout, each input inside its own range
    e = int(min(rng["num_experts"][1], 2 ** np.ceil(np.log2(hi * rng["topk"][0] * 2))))
    k = max(int(rng["topk"][0]), 1)
    assert e / k > hi and e <= rng["num_experts"][1]
    sparse = predict(_moe(e, k, gpu))
    assert "experts_per_topk" in sparse["out_of_range_inputs"][0]
    # a layout of ordinary sparsity (4 experts per top-k when the table holds it) is not
    dense_ratio = predict(_moe(8, 2, gpu))
    if rng["experts_per_topk"][0] <= 4 <= hi:
        assert "experts_per_topk" not in dense_ratio["out_of_range_inputs"][0]
