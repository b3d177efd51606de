"""Level-3 power calibration: whole-request average board power from the operator power model.

The operator power model (Level 1) gives each kernel's power at its duration; Level 3 of latency
stretches the kernels and adds host-side gaps. What a board really draws over a whole request
also depends on clocks, temperature and the engine's idle gaps, so a small linear map calibrates
the dynamic fraction of the predicted average power per GPU:

    u = (P_model - P_idle) / (P_board - P_idle)          predicted dynamic fraction
    y = (P_measured - P_idle) / (P_board - P_idle)       measured dynamic fraction
    y ~= k0 + k1 u + k2 log2(batch)/8 + k3 log2(tp)/3 + k4 kv_share      (ridge, closed form)

`kv_share` is the share of the request's Level-1/2 time spent reading the KV cache in decode
attention (memory-bound, drawing less than the GEMMs at the same modelled utilisation).
`dse.fitting.power_calibration` fits it on per-GPU power of every source that measured it
(argonne's static batches on H100, A100 and GH200; ml-energy v2 serving on H100 and A100;
ml-energy v3 serving on H100), many models and tensor-parallel splits, held out by whole model.
The calibrated power is clipped to [idle, board]: it never leaves the GPU's physical range, and
with k1 > 0 it rises with the modelled power (a fit with k1 <= 0 is not a calibration: the
operator power model is used as it is, k = IDENTITY). Outside the fitted batch and
tensor-parallel range a prediction is flagged (`range_misses`).

An older form (artifacts before 2026-12-03) added an engine term for independent sequences,
c log2(batch)/6, fitted on pairs of argonne rows of one or two models (vLLM against
TensorRT-LLM); across many models it did not hold (docs/accuracy.md "Energy and power"), so
new fits leave it at 0 (`protocol=0`). Its machinery stays so those artifacts load and predict
as before: `protocol_x`, `fit_protocol`, `as_identical`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ConfigError
from dse.models import _base
from dse.models._base import Model, RangeMiss, range_misses
from dse.models._threads import threaded_fit
from dse.models.band import BAND_QUANTILES as BAND_QUANTILES
from dse.spec.hardware import GPU

if TYPE_CHECKING:
    from dse.models.level3 import GlobalInputs

RIDGE = 1e-3
# y = u: the operator power model uncalibrated; coefficients of (1, u, batch, tp, kv_share)
IDENTITY = np.array([0.0, 1.0, 0.0, 0.0, 0.0])
N_COEF = len(IDENTITY)
# an engine-only term is fitted only on pairs of at least this many models (held-out groups)
MIN_ENGINE_MODELS = 5
PROTOCOL_BATCH = 64.0  # x = log2(batch) / log2(PROTOCOL_BATCH): 0 at batch 1, 1 at batch 64


def protocol_x(batch: np.ndarray) -> np.ndarray:
    """Regressor of the independent-sequence power term: log2(batch) / 6."""
    return np.log2(np.maximum(np.asarray(batch, dtype=float), 1.0)) / np.log2(PROTOCOL_BATCH)


def fit_protocol(
    resid: np.ndarray,
    batch: np.ndarray,
    identical: np.ndarray,
    keys: np.ndarray,
    models: np.ndarray | None = None,
    min_models: int = 1,
) -> float:
    """c >= 0 of the independent-sequence term from pairs of rows with the same key (model,
    batch) measured under both protocols: d = resid(independent) - resid(identical) = c x.
    `resid`: measured minus modelled dynamic fraction. 0 where no pair exists, or where the
    pairs come from fewer than `min_models` distinct `models` (an engine term fitted on one or
    two models is that model's, not the engine's: issue 33)."""
    x, d, seen = [], [], set()
    for k in np.unique(keys):
        at = keys == k
        ind, ide = at & ~identical, at & identical
        if ind.any() and ide.any():
            x.append(float(protocol_x(batch[at]).mean()))
            d.append(float(resid[ind].mean() - resid[ide].mean()))
            if models is not None:
                seen.update(str(m) for m in np.asarray(models)[at])
    if models is not None and len(seen) < min_models:
        return 0.0
    xa, da = np.asarray(x), np.asarray(d)
    den = float(xa @ xa)
    return max(float(xa @ da) / den, 0.0) if den > 0 else 0.0


def _batch_x(batch: np.ndarray) -> np.ndarray:
    """The calibration's batch regressor: log2(batch) / 8 (0 at batch 1, 1 at 256)."""
    return np.log2(np.maximum(batch, 1.0)) / 8.0


def _tp_x(tp: np.ndarray) -> np.ndarray:
    """The tensor-parallel regressor: log2(tp) / 3 (0 on one GPU, 1 on eight)."""
    return np.log2(np.maximum(tp, 1.0)) / 3.0


def _phi(
    u: np.ndarray, batch: np.ndarray, tp: np.ndarray | float = 1.0, kv: np.ndarray | float = 0.0
) -> np.ndarray:
    u = np.asarray(u, dtype=float)
    one = np.ones_like(u)
    return np.stack(
        [one, u, _batch_x(batch) * one, _tp_x(np.asarray(tp, float)) * one, kv * one], axis=-1
    )


def kv_share(g: GlobalInputs) -> np.ndarray:
    """Share of the request's Level-1/2 time in decode attention over the KV cache, in [0, 1]."""
    total = g.value("t_pre_s") + g.value("t_dec_s")
    return np.clip(g.value("t_dec_attn_s") / np.maximum(total, 1e-12), 0.0, 1.0)


def _coef(k: np.ndarray) -> np.ndarray:
    """Coefficients of every term; a 3-term state (before tp and kv_share) padded with 0."""
    k = np.asarray(k, dtype=float)
    return np.concatenate([k, np.zeros(N_COEF - len(k))]) if len(k) < N_COEF else k


class Power3(Model):
    """Calibrated average power of a whole request (one GPU)."""

    kind: ClassVar[str] = "level3_power"  # the manifest's kind; dse.models.MODEL_CLASSES

    def __init__(self, ridge: float = RIDGE) -> None:
        self.ridge = ridge
        self.protocol_ = 0.0
        self.offsets_: dict[str, float] = {}

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
        *,
        tp: np.ndarray | None = None,
        kv: np.ndarray | None = None,
        busy: np.ndarray | None = None,
        wait_key: np.ndarray | None = None,
        gpu_key: np.ndarray | None = None,
        weight: np.ndarray | None = None,
    ) -> Self:
        """Fit on rows of modelled (`u`) and measured (`y`) dynamic fraction, held out by `groups`.

        `tp`, `kv`: tensor parallelism and KV-read share per row (None: 1 and 0).
        `busy`: the share of a row's measured wall time the GPU computes (None: 1); the rest it
        waits at a draw fitted per `wait_key` (a nuisance of the fit: serving runs whose host
        time is measured, ml-energy v2), so such a row reads y = busy y_gpu + (1 - busy) w.
        `gpu_key`: the GPU of each row, "" for none; a GPU named gets its own offset of the
        dynamic fraction (clocks and cooling differ per board), applied when that GPU is
        predicted. `weight`: each row's weight in the least squares (None: 1).
        `identical` / `pair_keys` / `protocol`: the older independent-sequence term (None:
        fitted on pairs, if they come from MIN_ENGINE_MODELS groups or more, else 0; a number:
        used as given; `dse fit` passes 0)."""
        n = len(y)
        identical = np.zeros(n, bool) if identical is None else np.asarray(identical, bool)
        keys = np.arange(n) if pair_keys is None else np.asarray(pair_keys)
        tp = np.ones(n) if tp is None else np.asarray(tp, float)
        kv = np.zeros(n) if kv is None else np.asarray(kv, float)
        busy = np.ones(n) if busy is None else np.clip(np.asarray(busy, float), 0.0, 1.0)
        wk = np.full(n, "") if wait_key is None else np.asarray(wait_key).astype(str)
        gk = np.full(n, "") if gpu_key is None else np.asarray(gpu_key).astype(str)
        X = _phi(u, batch, tp, kv)
        w = np.ones(n) if weight is None else np.asarray(weight, float)
        data = (X, y, identical, keys, batch, busy, wk, gk, np.asarray(groups), w)
        self.protocol_, self.coef_, self.wait_, self.offsets_ = self._fit_once(
            data, np.ones(n, bool), protocol
        )
        self.calibrated_ = not np.array_equal(self.coef_, IDENTITY)
        held = np.full(n, np.nan)
        held_gpu = np.full(n, np.nan)
        for grp in np.unique(groups):
            te = groups == grp
            if te.all():
                continue
            c, k, wait, off = self._fit_once(data, ~te, protocol)
            g = X[te] @ k + c * protocol_x(batch[te]) * ~identical[te]
            g = g + np.array([off.get(x, 0.0) for x in gk[te]])
            w = np.array([wait.get(x, 0.0) for x in wk[te]])
            held_gpu[te] = g
            held[te] = busy[te] * np.clip(g, 0.0, 1.0) + (1.0 - busy[te]) * w
        self.held_out_ = held  # the measured quantity (busy and waiting), held out
        self.held_out_gpu_ = held_gpu  # the GPU-busy dynamic fraction, held out (unclipped)
        self.range_ = {
            "u": (float(np.min(u)), float(np.max(u))),
            "batch": (float(np.min(batch)), float(np.max(batch))),
            "tp": (float(np.min(tp)), float(np.max(tp))),
        }
        self.band_log_ = np.zeros(2)
        return self

    def _fit_once(
        self, data: tuple[np.ndarray, ...], tr: np.ndarray, protocol: float | None
    ) -> tuple[float, np.ndarray, dict[str, float], dict[str, float]]:
        X, y, identical, keys, batch, busy, wk, gk, groups, w = (a[tr] for a in data)
        u = X[:, 1]
        if protocol is None:
            c = fit_protocol(y - u, batch, identical, keys, groups, MIN_ENGINE_MODELS)
        else:
            c = protocol
        y_neutral = y - c * protocol_x(batch) * ~identical * busy
        waits = sorted({str(w) for w in wk[busy < 1.0]})
        # waiting rows: busy share x the calibration, (1 - busy) x their wait draw (unshrunk)
        W = np.stack([(wk == w) * (1.0 - busy) for w in waits], axis=-1) if waits else None
        gpus = sorted({str(x) for x in gk if x})
        G = [(gk == x) * busy for x in gpus]
        A = np.hstack([busy[:, None] * X, *(v[:, None] for v in G)])
        A = A if W is None else np.hstack([A, W])
        nw = N_COEF + len(gpus)
        sw = np.sqrt(w / w.mean())[:, None]  # weighted least squares
        k = _ridge(A * sw, y_neutral * sw[:, 0], self.ridge, free=[0, *range(nw, A.shape[1])])
        wait = {w: float(v) for w, v in zip(waits, k[nw:], strict=True)}
        off = {x: float(v) for x, v in zip(gpus, k[N_COEF:nw], strict=True)}
        if k[1] <= 0:  # not a calibration (`_physical`): no offsets either
            off = {}
        return c, _physical(k[:N_COEF]), wait, off

    def _fraction(
        self,
        u: np.ndarray,
        batch: np.ndarray,
        tp: np.ndarray | float = 1.0,
        kv: np.ndarray | float = 0.0,
    ) -> np.ndarray:
        # elementwise, not `_phi(...) @ coef`: a BLAS matrix-vector product rounds a row
        # differently with the batch's length, and a batch of one must equal its row in a sweep
        k0, k1, k2, k3, k4 = (float(v) for v in _coef(self.coef_))
        y = k0 + k1 * u + k2 * _batch_x(batch)
        if k3:
            y = y + k3 * _tp_x(np.asarray(tp, float))
        if k4:
            y = y + k4 * np.asarray(kv, float)
        return y

    def power_w(
        self,
        p_model_w: np.ndarray,
        batch: np.ndarray,
        gpu: GPU,
        identical: np.ndarray | bool = False,
        tp: np.ndarray | float = 1.0,
        kv: np.ndarray | float = 0.0,
    ) -> np.ndarray:
        """Calibrated power per GPU, in [idle, board] (W); copies of one sequence where
        `identical` (only an older artifact's protocol term reads it)."""
        span = gpu.board_power_w - gpu.idle_power_w
        u = (p_model_w - gpu.idle_power_w) / span
        y = self._fraction(u, batch, tp, kv) + self.offsets_.get(gpu.name, 0.0)
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
        one sequence: an older artifact's protocol term taken out (`power_w` itself without one).

        `power_w` is clipped to the idle..board span after the term was added, so below the
        board power the term comes out exactly, but at the board-power clip the unclipped value
        is lost and this is a lower bound. Given `p_model_w`, the uncalibrated power `power_w`
        was calibrated from, the term is left out before the clip: exact."""
        if not self.protocol_:
            return np.asarray(power_w, dtype=float)
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
        p = self.power_w(p_model, g.value("batch"), gpu, tp=g.value("tp"), kv=kv_share(g))
        n = len(p)
        band = np.broadcast_to(self.band_log_[:, None], (2, n))
        return p / np.maximum(p_model, 1e-9), np.abs(band)

    def range_misses_of(self, g: GlobalInputs) -> dict[str, RangeMiss]:
        """Batch and tensor parallelism outside the fitted range (the modelled power `u` is an
        output of the models below, not a workload input: not flagged)."""
        rng = {k: v for k, v in self.range_.items() if k in ("batch", "tp")}
        return range_misses(rng, {"batch": g.value("batch"), "tp": g.value("tp")})

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        """power_w of `p_model_w` (W) at `batch` (and `tp`, `kv_share`: 1 and 0 if not given) on
        `gpu`: the spec of the GPU predicted (the caller resolves its name,
        `dse.spec.hardware.get_gpu`; this model never looks one up)."""
        gpu = arrays["gpu"]
        if not isinstance(gpu, GPU):
            raise ConfigError(
                f"Power3.predict: gpu must be a GPU spec (dse.spec.hardware.get_gpu(name)), "
                f"got {gpu!r}"
            )
        return {
            "power_w": self.power_w(
                np.asarray(arrays["p_model_w"], dtype=float),
                np.asarray(arrays["batch"], dtype=float),
                gpu,
                tp=np.asarray(arrays.get("tp", 1.0), dtype=float),
                kv=np.asarray(arrays.get("kv_share", 0.0), dtype=float),
            )
        }

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "coef": self.coef_,
            "protocol": np.array([self.protocol_]),
            "band_log": self.band_log_,
            "range_names": np.array(list(self.range_)),
            "range": np.array(list(self.range_.values()), dtype=float),
            "offset_gpus": np.array(list(self.offsets_), dtype=str),
            "offsets": np.array(list(self.offsets_.values()), dtype=float),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        self = cls()
        self.coef_ = _coef(state["coef"])
        self.band_log_ = np.asarray(state["band_log"], dtype=float)
        # Artifacts saved before the protocol term have none (they predict as before).
        self.protocol_ = float(np.asarray(state["protocol"])[0]) if "protocol" in state else 0.0
        self.range_ = {
            str(k): (float(a), float(b))
            for k, (a, b) in zip(state["range_names"], state["range"], strict=True)
        }
        names, values = state.get("offset_gpus", ()), state.get("offsets", ())
        self.offsets_ = {str(k): float(v) for k, v in zip(names, values, strict=True)}
        return self


def _physical(k: np.ndarray) -> np.ndarray:
    """`k`, or IDENTITY when the calibrated power would fall as the modelled power rises."""
    return k if k[1] > 0 else IDENTITY.copy()


def _ridge(X: np.ndarray, y: np.ndarray, lam: float, free: list[int] | None = None) -> np.ndarray:
    reg = lam * np.eye(X.shape[1])
    for i in free or [0]:  # the intercept (and the wait draws) are not shrunk
        reg[i, i] = 0.0
    return np.linalg.solve(X.T @ X + reg, X.T @ y)
