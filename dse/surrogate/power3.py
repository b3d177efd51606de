"""Level-3 power calibration: whole-request average board power from the operator power model.

The operator power model (Level 1) gives each kernel's power; Level 3 of latency stretches the
kernels and adds host-side gaps. What a board really draws over a whole request also depends on
clocks, temperature and the engine's idle gaps, so a tiny linear map, fitted on the argonne
GPU-0 power rows, calibrates the dynamic fraction of the predicted average power:

    u = (P_model - P_idle) / (P_board - P_idle)          predicted dynamic fraction
    y = (P_measured - P_idle) / (P_board - P_idle)       measured dynamic fraction
    y ~= k0 + k1 * u + k2 * log2(batch) / 8              (ridge, closed form)

With so few rows (argonne measured power at 1024/1024 tokens, batch 1-64, TP 1), the held-out
scheme is leave-one-model-out where two models exist, else leave-one-batch-size-out.

A calibration is physical only if the calibrated power rises with the modelled one (k1 > 0).
A fit with k1 <= 0 says the rows carry no usable signal of the power model beyond batch size
(two engines or two models drawing differently at the same modelled power); the operator power
model is then used as it is (k = IDENTITY), in every held-out fold as in the final fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.hardware import GPU, get_gpu
from dse.surrogate.artifact import register_model

if TYPE_CHECKING:
    import pandas as pd

    from dse.surrogate.artifact import Artifact
    from dse.surrogate.level3 import GlobalInputs, Level3

RIDGE = 1e-3
IDENTITY = np.array([0.0, 1.0, 0.0])  # y = u: the operator power model uncalibrated
BAND_QUANTILES = (0.05, 0.95)


def _phi(u: np.ndarray, batch: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(u), u, np.log2(np.maximum(batch, 1.0)) / 8.0], axis=-1)


@register_model("level3_power")
class Power3:
    """Calibrated average power of a whole request (one GPU)."""

    kind: ClassVar[str]

    def __init__(self, ridge: float = RIDGE) -> None:
        self.ridge = ridge

    def fit_arrays(
        self, u: np.ndarray, batch: np.ndarray, y: np.ndarray, groups: np.ndarray
    ) -> Self:
        self.coef_ = _physical(_ridge(_phi(u, batch), y, self.ridge))
        self.calibrated_ = not np.array_equal(self.coef_, IDENTITY)
        held = np.full(len(y), np.nan)
        for grp in np.unique(groups):
            te = groups == grp
            if te.all():
                continue
            k = _physical(_ridge(_phi(u[~te], batch[~te]), y[~te], self.ridge))
            held[te] = _phi(u[te], batch[te]) @ k
        self.held_out_ = held
        self.range_ = {
            "u": (float(u.min()), float(u.max())),
            "batch": (float(batch.min()), float(batch.max())),
        }
        self.band_log_ = np.zeros(2)
        return self

    def fit(self, df: Any) -> Self:  # protocol: fitting happens through fit_arrays
        raise NotImplementedError("Power3 is fitted with fit_arrays (see fit_power3)")

    def power_w(self, p_model_w: np.ndarray, batch: np.ndarray, gpu: GPU) -> np.ndarray:
        span = gpu.board_power_w - gpu.idle_power_w
        u = (p_model_w - gpu.idle_power_w) / span
        y = np.clip(_phi(u, batch) @ self.coef_, 0.0, 1.0)
        return gpu.idle_power_w + y * span

    def scale(
        self, g: GlobalInputs, energy_j: np.ndarray, time_s: np.ndarray, gpu: GPU
    ) -> tuple[np.ndarray, np.ndarray]:
        """Factor to multiply the modelled energy by, and the (2, n) log band of power."""
        p_model = energy_j / np.maximum(time_s, 1e-12)
        p = self.power_w(p_model, g.value("batch"), gpu)
        n = len(p)
        band = np.broadcast_to(self.band_log_[:, None], (2, n))
        return p / np.maximum(p_model, 1e-9), np.abs(band)

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        gpu = get_gpu(str(arrays["gpu"]))
        return {
            "power_w": self.power_w(
                np.asarray(arrays["p_model_w"]), np.asarray(arrays["batch"]), gpu
            )
        }

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "coef": self.coef_,
            "band_log": self.band_log_,
            "range_names": np.array(list(self.range_)),
            "range": np.array(list(self.range_.values()), dtype=float),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        self = cls()
        self.coef_ = np.asarray(state["coef"], dtype=float)
        self.band_log_ = np.asarray(state["band_log"], dtype=float)
        self.range_ = {
            str(k): (float(a), float(b))
            for k, (a, b) in zip(state["range_names"], state["range"], strict=True)
        }
        return self

    def fitted_range(self) -> dict[str, tuple[float, float]]:
        return dict(self.range_)


def _physical(k: np.ndarray) -> np.ndarray:
    """`k`, or IDENTITY when the calibrated power would fall as the modelled power rises."""
    return k if k[1] > 0 else IDENTITY.copy()


def _ridge(X: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    reg = lam * np.eye(X.shape[1])
    reg[0, 0] = 0.0  # the intercept is not shrunk
    return np.linalg.solve(X.T @ X + reg, X.T @ y)


def model_power_w(
    parts: Mapping[str, np.ndarray], extra: Mapping[str, np.ndarray], gpus: np.ndarray
) -> np.ndarray:
    """Average power per GPU the operator power model predicts for whole requests: kernels at
    their modelled power, stretched to their Level-3 time, host gaps at idle power.

    `parts`: `Level3.correct` output; `extra`: `price_rows` kernel energy and time; `gpus`:
    registry name per row."""
    t = parts["ttft_s"] + parts["decode_s"]
    over = parts["pre_overhead_s"] + parts["dec_overhead_s"]
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    # The same sum as dse.predictor.predict_columns before calibration.
    dec_rest = (
        extra["decode_energy_j"] - extra["decode_attn_energy_j"] - extra["decode_comm_energy_j"]
    )
    e = (
        extra["prefill_energy_j"] * parts["pre_factor"]
        + dec_rest * parts["dec_factor"]
        + extra["decode_attn_energy_j"] * parts["dec_attn_factor"]
        + extra["decode_comm_energy_j"] * parts["dec_comm_factor"]
        + idle * over
    )
    return e / t


def dynamic_fraction(power_w: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """(P - P_idle) / (P_board - P_idle) per row."""
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    board = np.array([get_gpu(str(x)).board_power_w for x in gpus])
    return (power_w - idle) / (board - idle)


def from_fraction(y: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    board = np.array([get_gpu(str(x)).board_power_w for x in gpus])
    return idle + np.clip(y, 0.0, 1.0) * (board - idle)


def power_groups(kept: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Held-out groups: models where two or more exist, else batch sizes (held-out shapes)."""
    models = kept["model"].to_numpy()
    if len(np.unique(models)) > 1:
        return models, "leave-one-model-out"
    return kept["batch_size"].to_numpy(), "leave-one-batch-size-out"


def fit_power3(
    gpu: str,
    energy_rows: pd.DataFrame,
    artifact: Artifact | None,
    level3: Level3,
    lookup: Any = None,
) -> tuple[Power3 | None, dict[str, Any]]:
    """Fit the power calibration of artifact `gpu` on the argonne power rows of its chip."""
    from dse.surrogate.hymell_fit import LEVEL3_ROWS, e2e_configs, price_rows

    sources = LEVEL3_ROWS.get(gpu, (gpu,))
    rows = energy_rows[energy_rows["gpu"].isin(sources)]
    cfg, kept = e2e_configs(rows, lookup)
    if len(cfg) < 3:
        return None, {"cv": {}}
    g, extra = price_rows(cfg, artifact, gpu)
    gpus = cfg["gpu"].to_numpy()
    p_model = model_power_w(level3.correct(g), extra, gpus)
    measured = kept["power_w"].to_numpy(float)
    groups, scheme = power_groups(kept)
    pw = Power3().fit_arrays(
        dynamic_fraction(p_model, gpus), g.value("batch"), dynamic_fraction(measured, gpus), groups
    )
    held_p = from_fraction(pw.held_out_, gpus)
    ok = np.isfinite(pw.held_out_)
    logres = np.log(measured[ok] / held_p[ok])
    pw.band_log_ = np.quantile(logres, BAND_QUANTILES) if ok.any() else np.zeros(2)
    cv = {
        "scheme": scheme,
        "rows": int(ok.sum()),
        "power_mape_pct": float(np.mean(np.abs(held_p[ok] / measured[ok] - 1)) * 100)
        if ok.any()
        else None,
        "uncalibrated_power_mape_pct": float(np.mean(np.abs(p_model / measured - 1)) * 100),
    }
    info = {
        "cv": cv,
        "rows_from_gpus": list(sources),
        "rows_used": len(kept),
        "coefficients": [float(v) for v in pw.coef_],
        # False: the fit was not physical (k1 <= 0); the operator power model is used as is.
        "calibrated": bool(pw.calibrated_),
    }
    return pw, info
