"""One prediction, end to end: HYMELL, the project's three-level hybrid predictor of inference
latency and energy. Level 1 prices every operator of a forward pass with a fitted kernel model
(or the roofline), Level 2 corrects whole blocks with residual MLPs, Level 3 corrects whole
requests for the serving engine; power is calibrated on the whole request.

    from dse.predict import predict
    out = predict({"d_model": [4096], "n_layers": [32], ..., "gpu": ["h100_sxm"]})

numpy only at import time. The modules: `ops` (the operators of one forward pass), `adapters`
(the Level-1 model of each operator kind, `ADAPTERS`), `pricing` (Levels 1-2 over an operator
list), `request` (waves, quadrature, Level 3 and power, the outputs), `flags` (range flags),
`artifacts` (which artifact prices a GPU), `gemm_choice`, `op_power`, `_rows`.
"""

from __future__ import annotations

from dse.predict.artifacts import load_artifact
from dse.predict.request import predict, predict_columns

__all__ = ["load_artifact", "predict", "predict_columns"]
