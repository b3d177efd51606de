"""The analytical-base + residual-MLP pattern shared by the attention and MoE models.

    base:     t0 = launch + n_items t_item + (t_c^P + t_m^P)^(1/P),
              t_c = FLOPs / (peak * e_c),  t_m = bytes / (bw * e_m)
    residual: log(t / t0) = MLP(log shape features, log t0)      (small, numpy forward pass;
              or the mean of several seeded MLPs, `fit_residual_ensemble`)
    power:    P_board = MLP(same features, log t)                 (only where power was measured;
              attention and MoE: `LogPowerHead`, log P from trees' smoothed targets, within
              [idle, board]; attention's also reads the sliding window, `attention.POWER_INPUTS`)

The base is a roofline with four fitted constants (launch floor, a per-work-item overhead for
the model's natural work item: thread blocks, query heads, routed slots; compute and memory
efficiencies) and a smooth maximum (P = 4), so its parts stay physical and it extrapolates
sanely; the MLP learns the kernel-specific shape effects no formula names (tiling, wave
quantisation, split-KV, GQA packing). Fitting is seeded and deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dse.errors import ArtifactError
from dse.models import base as _base
from dse.models._nn import MLP, MeanMLP, fit_mlp, mlp_from_state

SMOOTH_MAX_P = 4.0  # exponent of the smooth maximum between compute and memory time
# Strata of a stratified ensemble evaluation (`apply_residual`): the decode quadrature splits its
# nodes into this many groups of equal weight (`dse.predict.request.node_strata`), and a residual
# ensemble of exactly this many members evaluates one member per node instead of all of them.
STRATA = 3
# The power MLP stays small: measured board power is noisy (the same decode shape varies by
# ~18% over kv lengths of identical latency); on H200 vLLM prefill / decode attention a
# 64 x 64 x 64 power MLP scored 16.4 / 29.2% held-out power MAPE against 14.6 / 27.4% for this
# one (3 group folds, docs/accuracy.md), at several times the fitting time.
POWER_HIDDEN = (32, 32)
POWER_MAX_ITER = 150
POWER_MAX_ROWS = 15000
# The log-power head (`fit_log_power_head`): gradient-boosted trees, absolute loss on log power,
# fitted on every power row (the median follows a shape's typical power, not the rows a
# preceding kernel's heat or an averaging lag pushed off: issue 33), then the MLP above fitted
# to the trees' in-sample predictions, so prediction stays an MLP forward pass. On H200 vLLM
# decode / prefill attention, `dse fit`'s CV (3 folds by head configuration) reads power 28.28 ->
# 22.77% / 15.29 -> 14.17% against the MLP on watts; the trees themselves read 22.57% but cost
# ~70x the MLP to evaluate (1.9 s against 0.027 s per 10^5 rows; experiments/attention_power_head.py).
POWER_TREE_ITER = 100
POWER_TREE_LEAVES = 31


@dataclass(frozen=True)
class Roofline:
    """Fitted base: launch floor (s) and efficiencies against the GPU's peak and bandwidth."""

    launch_s: float
    eff_compute: float
    eff_memory: float
    peak_flops_per_s: float
    bw_bytes_per_s: float
    item_s: float = 0.0

    def parts(
        self, flops: np.ndarray, bytes_: np.ndarray, items: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        t_c = flops / (self.peak_flops_per_s * self.eff_compute)
        t_m = bytes_ / (self.bw_bytes_per_s * self.eff_memory)
        t_i = np.zeros_like(t_c) if items is None else items * self.item_s
        p = SMOOTH_MAX_P
        core = (t_c**p + t_m**p) ** (1.0 / p)
        return {
            "t_compute_s": t_c,
            "t_memory_s": t_m,
            "launch_s": np.full_like(t_c, self.launch_s),
            "t_items_s": t_i,
            "base_s": self.launch_s + t_i + core,
            "regime": (t_c >= t_m).astype(np.int64),  # 1 compute-bound, 0 memory-bound
        }

    def to_state(self, prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}roofline": np.array(
                [
                    self.launch_s,
                    self.eff_compute,
                    self.eff_memory,
                    self.peak_flops_per_s,
                    self.bw_bytes_per_s,
                    self.item_s,
                ]
            )
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray], prefix: str) -> Roofline:
        try:
            v = np.asarray(state[f"{prefix}roofline"], dtype=np.float64).ravel()
        except KeyError:
            raise ArtifactError(f"state incomplete: array {prefix}roofline missing") from None
        return cls(*(float(x) for x in v))


def fit_roofline(
    flops: np.ndarray,
    bytes_: np.ndarray,
    y_s: np.ndarray,
    peak: float,
    bw: float,
    items: np.ndarray | None = None,
    max_eff: float | None = None,
) -> Roofline:
    """Least-squares fit (log space, robust) of the roofline constants to measured times.
    `max_eff`: the highest compute and memory efficiency allowed (1.0: never faster than the
    peak and the bandwidth; None: unbounded, as the attention and MoE models were fitted)."""
    from scipy.optimize import least_squares  # fitting only

    ly = np.log(y_s)
    p = SMOOTH_MAX_P
    it = np.zeros_like(y_s) if items is None else np.asarray(items, dtype=np.float64)

    def resid(th: np.ndarray) -> np.ndarray:
        t_c = flops / (peak * np.exp(th[1]))
        t_m = bytes_ / (bw * np.exp(th[2]))
        t_i = it * np.exp(th[3]) * 1e-9
        return np.log(np.exp(th[0]) * 1e-6 + t_i + (t_c**p + t_m**p) ** (1 / p)) - ly

    th0 = np.array(
        [np.log(max(np.quantile(y_s, 0.01) * 1e6, 1.0)), np.log(0.5), np.log(0.7), np.log(1.0)]
    )
    if max_eff is None:
        res = least_squares(resid, th0, loss="soft_l1", f_scale=0.1, max_nfev=300)
    else:
        top = np.log(max_eff)
        hi = np.array([np.inf, top, top, np.inf])
        th0 = np.minimum(th0, hi - 1e-3)
        res = least_squares(
            resid, th0, bounds=(-np.inf, hi), loss="soft_l1", f_scale=0.1, max_nfev=300
        )
    th = res.x
    item_s = float(np.exp(th[3]) * 1e-9) if items is not None else 0.0
    return Roofline(
        float(np.exp(th[0]) * 1e-6), float(np.exp(th[1])), float(np.exp(th[2])), peak, bw, item_s
    )


def fit_residual_mlp(
    X: np.ndarray,
    target: np.ndarray,
    *,
    hidden: tuple[int, ...],
    max_iter: int,
    max_rows: int,
    seed: int,
) -> MLP:
    """A seeded tanh MLP on at most `max_rows` rows (a seeded subsample keeps fits to seconds)."""
    rng = np.random.default_rng(seed)
    idx = np.arange(len(X)) if len(X) <= max_rows else np.sort(rng.choice(len(X), max_rows, False))
    return fit_mlp(
        X[idx],
        target[idx],
        hidden=hidden,
        activation="tanh",
        max_iter=max_iter,
        batch_size=min(512, len(idx)),
        learning_rate_init=3e-3,
        alpha=1e-5,
        seed=seed,
    )


def fit_residual_ensemble(
    X: np.ndarray,
    target: np.ndarray,
    *,
    members: int,
    hidden: tuple[int, ...],
    max_iter: int,
    max_rows: int,
    seed: int,
) -> MLP | MeanMLP:
    """`members` residual MLPs from seeds seed, seed + 1, ... (each its own row subsample and
    initial weights), averaged (`MeanMLP`); one member: that MLP alone."""
    nets = [
        fit_residual_mlp(X, target, hidden=hidden, max_iter=max_iter, max_rows=max_rows, seed=s)
        for s in range(seed, seed + max(int(members), 1))
    ]
    return nets[0] if len(nets) == 1 else MeanMLP(tuple(nets))


def fit_power_mlp(
    X: np.ndarray,
    latency_s: np.ndarray,
    power_w: np.ndarray,
    *,
    max_iter: int,
    max_rows: int,
    seed: int,
) -> MLP | None:
    """The power MLP on the rows with measured board power (W); None below 50 such rows."""
    ok = np.isfinite(power_w)
    if ok.sum() < 50:
        return None
    return fit_residual_mlp(
        np.column_stack([X[ok], np.log(latency_s[ok])]),
        power_w[ok],
        hidden=POWER_HIDDEN,
        max_iter=min(max_iter, POWER_MAX_ITER),
        max_rows=min(max_rows, POWER_MAX_ROWS),
        seed=seed,
    )


@dataclass(frozen=True)
class LogPowerHead:
    """Board power (W) = exp(MLP(features, extra inputs, log t)), clipped to the GPU's
    [idle, board] power. `inputs` names the extra columns the owning model appends to its
    residual features for power alone (e.g. attention's sliding-window inputs, `POWER_INPUTS`
    there); () for heads fitted before them."""

    mlp: MLP
    idle_w: float
    board_w: float
    inputs: tuple[str, ...] = ()

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.clip(np.exp(self.mlp.predict(X)), self.idle_w, self.board_w)

    def to_state(self, prefix: str) -> dict[str, np.ndarray]:
        bounds = np.array([self.idle_w, self.board_w], dtype=np.float64)
        state = {**self.mlp.to_state(prefix), f"{prefix}log_power_bounds_w": bounds}
        if self.inputs:
            state[f"{prefix}extra_inputs"] = np.array(self.inputs, dtype=str)
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray], prefix: str) -> LogPowerHead:
        idle, board = (float(v) for v in state[f"{prefix}log_power_bounds_w"])
        if not 0.0 < idle < board:
            raise ArtifactError(f"log power head: need 0 < idle < board W, got {idle}, {board}")
        names = np.asarray(state.get(f"{prefix}extra_inputs", np.array([], dtype=str)))
        inputs = tuple(str(n) for n in names.ravel())
        return cls(MLP.from_state(dict(state), prefix), idle, board, inputs)


def fit_log_power_head(
    X: np.ndarray,
    latency_s: np.ndarray,
    power_w: np.ndarray,
    bounds_w: tuple[float, float],
    *,
    max_iter: int,
    max_rows: int,
    seed: int,
    inputs: tuple[str, ...] = (),
) -> LogPowerHead | None:
    """The log-power head (see POWER_TREE_ITER) on the rows with measured board power (W);
    None below 50 such rows. `bounds_w`: the GPU's (idle, board) power, W; `X`: the features,
    its last len(`inputs`) columns the extra power inputs so named (`LogPowerHead.inputs`)."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    ok = np.isfinite(power_w) & (power_w > 0)
    if ok.sum() < 50:
        return None
    Xp = np.column_stack([X[ok], np.log(latency_s[ok])])
    y = np.log(power_w[ok])
    trees = HistGradientBoostingRegressor(
        loss="absolute_error",
        max_iter=POWER_TREE_ITER,
        max_leaf_nodes=POWER_TREE_LEAVES,
        early_stopping=False,
        random_state=seed,
    ).fit(Xp, y)
    mlp = fit_residual_mlp(
        Xp,
        trees.predict(Xp),
        hidden=POWER_HIDDEN,
        max_iter=min(max_iter, POWER_MAX_ITER),
        max_rows=min(max_rows, POWER_MAX_ROWS),
        seed=seed,
    )
    return LogPowerHead(mlp, float(bounds_w[0]), float(bounds_w[1]), tuple(inputs))


def fit_hybrid_heads(
    X: np.ndarray,
    latency_s: np.ndarray,
    base_s: np.ndarray,
    power_w: np.ndarray,
    *,
    members: int,
    hidden: tuple[int, ...],
    max_iter: int,
    max_rows: int,
    seed: int,
    power_bounds_w: tuple[float, float] | None = None,
    power_inputs: Mapping[str, np.ndarray] | None = None,
) -> tuple[MLP | MeanMLP, MLP | LogPowerHead | None]:
    """What a hybrid kernel model learns on top of its fitted roofline `base_s`: the latency
    residual ensemble on log(measured / base) and the power head (None without 50 rows of
    measured board power, W): with `power_bounds_w` (the GPU's idle and board power, W) the
    log-power head (`fit_log_power_head`; `power_inputs`: extra columns by name it reads after
    the features, `apply_residual` gets them again at predict time), else the MLP on watts
    (`fit_power_mlp`)."""
    mlp = fit_residual_ensemble(
        X,
        np.log(latency_s / base_s),
        members=members,
        hidden=hidden,
        max_iter=max_iter,
        max_rows=max_rows,
        seed=seed,
    )
    if power_bounds_w is not None:
        extra = dict(power_inputs or {})
        head = fit_log_power_head(
            np.column_stack([X, *extra.values()]) if extra else X,
            latency_s,
            power_w,
            power_bounds_w,
            max_iter=max_iter,
            max_rows=max_rows,
            seed=seed,
            inputs=tuple(extra),
        )
        return mlp, head
    power = fit_power_mlp(X, latency_s, power_w, max_iter=max_iter, max_rows=max_rows, seed=seed)
    return mlp, power


def apply_residual(
    out: dict[str, np.ndarray],
    X: np.ndarray,
    mlp: MLP | MeanMLP,
    power_mlp: MLP | LogPowerHead | None,
    stratum: np.ndarray | None = None,
    power_inputs: Mapping[str, np.ndarray] | None = None,
) -> None:
    """Latency = base x exp(residual MLP); power and energy where a power MLP was fitted.
    `power_inputs`: the extra power columns by name; a `LogPowerHead` reads those it names
    (`LogPowerHead.inputs`), in its order.

    `stratum` (0 .. STRATA - 1 per row, strata of equal total weight in a weighted sum the
    caller takes, e.g. the decode quadrature): an ensemble of STRATA members then gives row i
    the factor of member stratum[i] alone (`MeanMLP.predict_member`); any other residual
    ignores it and every row gets the full mean."""
    if stratum is not None and isinstance(mlp, MeanMLP) and len(mlp.members) == STRATA:
        log_factor = mlp.predict_member(X, stratum)
    else:
        log_factor = mlp.predict(X)
    factor = np.exp(log_factor)
    out["residual_factor"] = factor
    out["latency_s"] = out["base_s"] * factor
    if power_mlp is not None:
        out["power_w"] = power_mlp.predict(
            power_design(X, out["latency_s"], power_mlp, power_inputs)
        )
        out["energy_j"] = out["power_w"] * out["latency_s"]


def power_design(
    X: np.ndarray,
    latency_s: np.ndarray,
    head: MLP | LogPowerHead,
    power_inputs: Mapping[str, np.ndarray] | None = None,
) -> np.ndarray:
    """The power head's inputs: the features, the extra power inputs the head names (a
    `LogPowerHead`'s `inputs`, taken from `power_inputs`), the log latency (s)."""
    names = getattr(head, "inputs", ())
    if not names:
        return np.column_stack([X, np.log(latency_s)])
    got = power_inputs or {}
    missing = [n for n in names if n not in got]
    if missing:
        raise ArtifactError(f"power head: needs inputs {missing}, the model gave {sorted(got)}")
    return np.column_stack([X, *(got[n] for n in names), np.log(latency_s)])


def hybrid_state(model: Any) -> dict[str, np.ndarray]:
    """Roofline, residual MLP, fitted range and (if any) power MLP of a fitted hybrid model."""
    state = {
        **model.roof_.to_state(""),
        **model.mlp_.to_state("resid/"),
        **_base.range_to_state(model.range_),
    }
    if model.power_mlp_ is not None:
        state.update(model.power_mlp_.to_state("power/"))
    return state


def load_hybrid(model: Any, state: Mapping[str, np.ndarray]) -> None:
    """Set what `hybrid_state` saved on a freshly constructed model."""
    model.roof_ = Roofline.from_state(state, "")
    model.mlp_ = mlp_from_state(dict(state), "resid/")
    model.power_mlp_ = power_head_from_state(state, "power/")
    model.range_ = _base.range_from_state(state)


def power_head_from_state(
    state: Mapping[str, np.ndarray], prefix: str
) -> MLP | LogPowerHead | None:
    """The power head saved under `prefix`: a `LogPowerHead` (its bounds saved), the MLP on
    watts, or None where none was fitted."""
    if f"{prefix}log_power_bounds_w" in state:
        return LogPowerHead.from_state(state, prefix)
    return MLP.from_state(dict(state), prefix) if f"{prefix}W0" in state else None
