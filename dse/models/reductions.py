"""Level-1 model of the row reductions and GELU LLMCompass measured on an A100: softmax and
LayerNorm over an (m x n) tensor, GELU over m elements (`ReductionOpModel`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ArtifactError, DataError
from dse.models import _curves
from dse.models import base as _base
from dse.models.threads import threaded_fit
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd

# ---------------------------------------------------------------------------- llmcompass ops
# Softmax / LayerNorm over an (m x n) tensor and GELU over m elements: LLMCompass's A100
# micro-benchmarks (PyTorch eager, so the floor includes the framework's dispatch).
LLMCOMPASS_OPS: tuple[str, ...] = ("softmax", "layernorm", "gelu")
# Regimes of the per-element cost: knots every half decade of elements, 1e5 .. 1e9.
RED_LOG_E_KNOTS = np.log(10.0) * np.arange(5.0, 9.01, 0.5)
RED_SMOOTH = 1e-2


def _red_features(m: np.ndarray, n: np.ndarray) -> np.ndarray:
    """[1, E x tents(log E), E log2 n, m log2 n] in microseconds per million (elements)."""
    e = m * n
    H = _curves.hat_basis(np.log(np.maximum(e, 1.0)), RED_LOG_E_KNOTS)
    depth = np.log2(n + 1)
    return np.column_stack(
        [np.ones_like(e), (e * 1e-6)[:, None] * H, e * depth * 1e-6, m * depth * 1e-6]
    )


class ReductionOpModel(_base.Model):
    """Softmax, LayerNorm (row reductions over n) and GELU (n = 1) on one GPU:

        t = launch + E s(log E) + (q E + r m) log2(n + 1),   E = m n elements

    s the per-element cost per element-count regime (memory-bound with a fixed overhead; the
    knots are the regimes), q and r the reduction-depth costs of rows of n (log2 n tree levels:
    long rows need more passes per element, and each row pays its tree). For
    the causal softmax of unfused attention over N x N scores per head: m = N x heads x batch,
    n = N. Fitted on LLMCompass's A100 rows; other GPUs get the A100 fit with the memory term
    scaled by the HBM bandwidth ratio (`bw_scale`, analytical: no measurements behind it).

    predict(op, m, n=1) -> latency_s, launch_s, t_memory_s, t_reduce_s (sum), regime, covered.
    """

    kind: ClassVar[str] = "reduction_op"  # the manifest's kind; dse.models.MODEL_CLASSES

    def __init__(self, gpu: str = "a100_sxm", fitted_on: str | None = None) -> None:
        """`fitted_on`: the GPU whose rows the fit reads (None: `gpu` itself)."""
        self.gpu = gpu
        self.fitted_on = fitted_on

    @property
    def source_gpu(self) -> str:
        """The GPU the rows come from: `fitted_on`, else `gpu`."""
        return self.fitted_on or self.gpu

    @threaded_fit
    def fit(self, tables: Mapping[str, pd.DataFrame]) -> Self:
        """`tables`: kind -> rows (softmax, layernorm, gelu) of `source_gpu`."""
        ops, coefs, rng_m, rng_n = [], [], [], []
        for op in LLMCOMPASS_OPS:
            d = tables.get(op)
            if d is None or d.empty:
                continue
            d = d[d["gpu"] == self.source_gpu]
            if len(d) < 4:
                continue
            m = d["m"].to_numpy(np.float64)
            n = d["n"].to_numpy(np.float64) if "n" in d else np.ones(len(d))
            n = np.where(np.isfinite(n), n, 1.0)
            X = _red_features(m, n)
            nk = len(RED_LOG_E_KNOTS)
            pen = np.zeros((nk - 2, X.shape[1]))
            pen[:, 1 : 1 + nk] = _curves.second_difference(nk)
            pen *= np.sqrt(RED_SMOOTH * len(m))
            keep = np.ptp(X, axis=0) > 0
            keep[0] = True
            c = np.zeros(X.shape[1])
            c[keep] = _curves.relative_lstsq(
                X[:, keep],
                d["latency_s"].to_numpy() * 1e6,
                pen[:, keep],
                lower=np.zeros(keep.sum()),
            )
            ops.append(op)
            coefs.append(c)
            rng_m.append(m)
            rng_n.append(n)
        if not ops:
            raise DataError(f"no softmax/layernorm/gelu rows for gpu {self.source_gpu!r}")
        self.ops_ = np.array(ops, dtype=str)
        self.coef_ = np.array(coefs)
        g, f = get_gpu(self.gpu), get_gpu(self.source_gpu)
        self.bw_scale_ = f.hbm_bw_bytes_per_s / g.hbm_bw_bytes_per_s
        self.range_ = _base.fitted_range({"m": np.concatenate(rng_m), "n": np.concatenate(rng_n)})
        return self

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        n_rows = _base.batch_size_of(arrays)
        op = np.broadcast_to(np.asarray(arrays.get("op", "softmax"), dtype=str), (n_rows,))
        m = _base.as_float("m", arrays["m"], n_rows)
        n = _base.as_float("n", arrays.get("n", 1.0), n_rows)
        out = {k: np.full(n_rows, np.nan) for k in ("launch_s", "t_memory_s", "t_reduce_s")}
        nk = len(RED_LOG_E_KNOTS)
        for i, name in enumerate(self.ops_):
            sel = op == name
            if not sel.any():
                continue
            c = self.coef_[i]
            e = m[sel] * n[sel]
            per_el = _curves.hat_eval(np.log(np.maximum(e, 1.0)), RED_LOG_E_KNOTS, c[1 : 1 + nk])
            out["launch_s"][sel] = c[0] * 1e-6
            out["t_memory_s"][sel] = e * 1e-6 * per_el * 1e-6 * self.bw_scale_
            depth = np.log2(n[sel] + 1)
            out["t_reduce_s"][sel] = (c[1 + nk] * e + c[2 + nk] * m[sel]) * depth * 1e-12
        out["latency_s"] = out["launch_s"] + out["t_memory_s"] + out["t_reduce_s"]
        out["regime"] = _curves.nearest_knot(np.log(np.maximum(m * n, 1.0)), RED_LOG_E_KNOTS)
        out["covered"] = np.isfinite(out["latency_s"])
        return out

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "gpu": np.array(self.gpu),
            "fitted_on": np.array(self.source_gpu),
            "ops": self.ops_,
            "coef": self.coef_,
            "bw_scale": np.array(self.bw_scale_),
            "log_e_knots": RED_LOG_E_KNOTS.copy(),
            **_base.range_to_state(self.range_),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        _base.need(
            state, ("gpu", "fitted_on", "ops", "coef", "bw_scale", "log_e_knots"), "reduction_op"
        )
        if not np.allclose(np.asarray(state["log_e_knots"]), RED_LOG_E_KNOTS):
            raise ArtifactError(
                "reduction_op state was fitted with other knots; re-fit with dse fit"
            )
        m = cls(str(state["gpu"]), str(state["fitted_on"]))
        m.ops_ = np.asarray(state["ops"], dtype=str)
        m.coef_ = np.asarray(state["coef"], dtype=np.float64)
        m.bw_scale_ = float(state["bw_scale"])
        m.range_ = _base.range_from_state(state)
        return m
