"""Level-1 adapters are an explicit table (issue 23): every operator kind a forward pass is
built from has an adapter in `level1_adapters.ADAPTERS`, and nothing registers on import."""

from __future__ import annotations

import numpy as np

from dse.predict.adapters import ADAPTERS
from dse.predict.ops import forward_ops
from dse.spec import columns as C


def test_every_operator_kind_has_an_adapter() -> None:
    cols, _ = C.as_columns(
        {
            "d_model": [4096, 4096],
            "n_layers": [32, 32],
            "n_heads": [32, 32],
            "d_ff": [14336, 14336],
            "n_experts": [1, 8],
            "top_k": [1, 2],
            "tensor_parallel": [2, 2],
        }
    )
    kinds = {op.kind for phase in ("prefill", "decode") for op in forward_ops(cols, phase)}
    assert kinds <= set(ADAPTERS), f"operator kinds without an adapter: {kinds - set(ADAPTERS)}"
    assert {"gemm", "attention_prefill", "attention_decode", "moe", "allreduce"} <= kinds
    assert all(callable(fn) for fn in ADAPTERS.values())
    assert np.unique([fn.__module__ for fn in ADAPTERS.values()]).tolist() == [
        "dse.predict.adapters"
    ]
