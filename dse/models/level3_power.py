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

Measurement protocol. argonne's TensorRT-LLM scripts decode copies of one prompt greedily
(identical sequences, `hymell_fit.IDENTICAL_SEQUENCE_ENGINES`); its vLLM scripts draw random
prompts and sample (independent sequences, as a user's batch). At the same model and batch the
vLLM runs draw more than the operator model says, relative to the TensorRT-LLM runs, and the gap
grows with the batch from none at batch 1 (where a batch cannot be copies of one sequence) -- on
both GPUs, about 4x more on H100 than on A100 (docs/accuracy.md). Independent sequences get

    y += c * log2(batch) / 6                              (c >= 0, 0 at batch 1, c at batch 64)

with c fitted on the pairs of rows measured under both protocols (same model and batch): the
difference of their (y - u) residuals, so each GPU's absolute power-model error cancels. The
calibration k above is then fitted on the rows with the protocol term taken out. User
predictions are independent sequences; `dse validate` predicts argonne's identical-sequence
rows without the term, as they were measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ConfigError
from dse.models import base as _base
from dse.models.band import BAND_QUANTILES as BAND_QUANTILES
from dse.models.base import Model
from dse.models.threads import threaded_fit
from dse.spec.hardware import GPU

if TYPE_CHECKING:
    from dse.models.level3 import GlobalInputs

RIDGE = 1e-3
IDENTITY = np.array([0.0, 1.0, 0.0])  # y = u: the operator power model uncalibrated
PROTOCOL_BATCH = 64.0  # x = log2(batch) / log2(PROTOCOL_BATCH): 0 at batch 1, 1 at batch 64


def protocol_x(batch: np.ndarray) -> np.ndarray:
    """Regressor of the independent-sequence power term: log2(batch) / 6."""
    return np.log2(np.maximum(np.asarray(batch, dtype=float), 1.0)) / np.log2(PROTOCOL_BATCH)


def fit_protocol(
    resid: np.ndarray, batch: np.ndarray, identical: np.ndarray, keys: np.ndarray
) -> float:
    """c >= 0 of the independent-sequence term from pairs of rows with the same key (model,
    batch) measured under both protocols: d = resid(independent) - resid(identical) = c x.
    `resid`: measured minus modelled dynamic fraction. 0 where no pair exists."""
    x, d = [], []
    for k in np.unique(keys):
        at = keys == k
        ind, ide = at & ~identical, at & identical
        if ind.any() and ide.any():
            x.append(float(protocol_x(batch[at]).mean()))
            d.append(float(resid[ind].mean() - resid[ide].mean()))
    xa, da = np.asarray(x), np.asarray(d)
    den = float(xa @ xa)
    return max(float(xa @ da) / den, 0.0) if den > 0 else 0.0


def _batch_x(batch: np.ndarray) -> np.ndarray:
    """The calibration's batch regressor: log2(batch) / 8."""
    return np.log2(np.maximum(batch, 1.0)) / 8.0


def _phi(u: np.ndarray, batch: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(u), u, _batch_x(batch)], axis=-1)


class Power3(Model):
    """Calibrated average power of a whole request (one GPU)."""

    kind: ClassVar[str] = "level3_power"  # the manifest's kind; dse.models.MODEL_CLASSES

    def __init__(self, ridge: float = RIDGE) -> None:
        self.ridge = ridge

    @threaded_fit
    def fit(
        self,
        u: np.ndarray,
        batch: np.ndarray,
        y: np.ndarray,
        groups: np.ndarray,
        identical: np.ndarray | None = None,
        pair_keys: np.ndarray | None = None,
        protocol: float | None = None,
    ) -> Self:
        """`identical`: rows measured on copies of one sequence (None: none); `pair_keys`: the
        configuration of each row (model and batch), pairing the two protocols' rows;
        `protocol`: c given (fitted elsewhere, e.g. on another GPU's rows) instead of fitted."""
        identical = np.zeros(len(y), bool) if identical is None else np.asarray(identical, bool)
        keys = np.arange(len(y)) if pair_keys is None else np.asarray(pair_keys)
        self.protocol_, self.coef_ = self._fit_once(u, batch, y, identical, keys, protocol)
        self.calibrated_ = not np.array_equal(self.coef_, IDENTITY)
        held = np.full(len(y), np.nan)
        for grp in np.unique(groups):
            te = groups == grp
            if te.all():
                continue
            tr = ~te
            c, k = self._fit_once(u[tr], batch[tr], y[tr], identical[tr], keys[tr], protocol)
            held[te] = _phi(u[te], batch[te]) @ k + c * protocol_x(batch[te]) * ~identical[te]
        self.held_out_ = held
        self.range_ = {
            "u": (float(u.min()), float(u.max())),
            "batch": (float(batch.min()), float(batch.max())),
        }
        self.band_log_ = np.zeros(2)
        return self

    def _fit_once(
        self,
        u: np.ndarray,
        batch: np.ndarray,
        y: np.ndarray,
        identical: np.ndarray,
        keys: np.ndarray,
        protocol: float | None,
    ) -> tuple[float, np.ndarray]:
        c = fit_protocol(y - u, batch, identical, keys) if protocol is None else protocol
        y_neutral = y - c * protocol_x(batch) * ~identical
        return c, _physical(_ridge(_phi(u, batch), y_neutral, self.ridge))

    def power_w(
        self,
        p_model_w: np.ndarray,
        batch: np.ndarray,
        gpu: GPU,
        identical: np.ndarray | bool = False,
    ) -> np.ndarray:
        """Calibrated power of independent sequences (a user's batch), or of copies of one
        sequence where `identical` (argonne's TensorRT-LLM rows)."""
        span = gpu.board_power_w - gpu.idle_power_w
        u = (p_model_w - gpu.idle_power_w) / span
        # elementwise, not `_phi(u, batch) @ coef`: a BLAS matrix-vector product rounds a row
        # differently with the batch's length, and a batch of one must equal its row in a sweep
        k0, k1, k2 = (float(v) for v in self.coef_)
        y = k0 + k1 * u + k2 * _batch_x(batch)
        if self.protocol_:
            y = y + self.protocol_ * protocol_x(batch) * ~np.asarray(identical, bool)
        return gpu.idle_power_w + _base.clip(y, 0.0, 1.0) * span

    def as_identical(
        self,
        power_w: np.ndarray,
        batch: np.ndarray,
        gpu: GPU,
        p_model_w: np.ndarray | None = None,
    ) -> np.ndarray:
        """Calibrated power of independent sequences (`power_w`) turned into that of copies of
        one sequence: the protocol term taken out.

        `power_w` is clipped to the idle..board span after the term was added, so below the
        board power the term comes out exactly, but at the board-power clip the unclipped value
        is lost and this is a lower bound (board minus the term, where the copies may draw up
        to board power too). Given `p_model_w`, the uncalibrated power `power_w` was calibrated
        from, the term is left out before the clip (`power_w(..., identical=True)`): exact."""
        if p_model_w is not None:
            return self.power_w(np.asarray(p_model_w, dtype=float), batch, gpu, identical=True)
        span = gpu.board_power_w - gpu.idle_power_w
        y = (np.asarray(power_w, dtype=float) - gpu.idle_power_w) / span
        y = y - self.protocol_ * protocol_x(batch)
        return gpu.idle_power_w + _base.clip(y, 0.0, 1.0) * span

    def scale(
        self, g: GlobalInputs, energy_j: np.ndarray, time_s: np.ndarray, gpu: GPU
    ) -> tuple[np.ndarray, np.ndarray]:
        """Factor to multiply the modelled energy by, and the (2, n) log band of power."""
        p_model = energy_j / np.maximum(time_s, 1e-12)
        p = self.power_w(p_model, g.value("batch"), gpu)
        n = len(p)
        # |band| repeated over the rows (a new (2, n) array, as np.abs of the broadcast view
        # gives, without np.broadcast_to's ~5 us)
        band = np.abs(np.asarray(self.band_log_)[:, None]).repeat(n, axis=1)
        return p / np.maximum(p_model, 1e-9), band

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        """power_w of `p_model_w` (W) at `batch` on `gpu`: the spec of the GPU predicted (the
        caller resolves its name, `dse.spec.hardware.get_gpu`; this model never looks one up)."""
        gpu = arrays["gpu"]
        if not isinstance(gpu, GPU):
            raise ConfigError(
                f"Power3.predict: gpu must be a GPU spec (dse.spec.hardware.get_gpu(name)), "
                f"got {gpu!r}"
            )
        return {
            "power_w": self.power_w(
                np.asarray(arrays["p_model_w"]), np.asarray(arrays["batch"]), gpu
            )
        }

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "coef": self.coef_,
            "protocol": np.array([self.protocol_]),
            "band_log": self.band_log_,
            "range_names": np.array(list(self.range_)),
            "range": np.array(list(self.range_.values()), dtype=float),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        self = cls()
        self.coef_ = np.asarray(state["coef"], dtype=float)
        self.band_log_ = np.asarray(state["band_log"], dtype=float)
        # Artifacts saved before the protocol term have none (they predict as before).
        self.protocol_ = float(np.asarray(state["protocol"])[0]) if "protocol" in state else 0.0
        self.range_ = {
            str(k): (float(a), float(b))
            for k, (a, b) in zip(state["range_names"], state["range"], strict=True)
        }
        return self


def _physical(k: np.ndarray) -> np.ndarray:
    """`k`, or IDENTITY when the calibrated power would fall as the modelled power rises."""
    return k if k[1] > 0 else IDENTITY.copy()


def _ridge(X: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    reg = lam * np.eye(X.shape[1])
    reg[0, 0] = 0.0  # the intercept is not shrunk
    return np.linalg.solve(X.T @ X + reg, X.T @ y)
