"""The objective of a sweep on arrays: configurations in, objectives, constraints and predictions out.

Pure core: `evaluate(space, cols)` takes complete configuration columns (`dse.spec.columns`: a
checked `Configs` from `SearchSpace.columns_from`, whose valid rows go to the predictor still
checked, so not checked again) and returns an `Evaluation` of arrays. Invalid configurations (an architecture that cannot exist)
are decided first by `dse.spec.columns.derived` and never reach the predictor: their objectives and
predictions are NaN. One predictor call per batch, one tokens-to-Wh call per GPU in it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from dse.errors import ConfigError
from dse.spec import columns as C
from dse.spec import rules as R
from dse.spec.space import SearchSpace

SIZE_KEYS = ("total_params", "active_params", "kv_bytes_per_token", "memory_bytes")
WORKLOAD_KEYS = ("batch_size", "prompt_tokens", "output_tokens", "tensor_parallel")
# Predicted metric -> the predictor key it is; the derived ones (throughput, user speed) are
# computed in `serving_metrics`.
PREDICTED_KEYS = {
    "latency": "latency_s",
    "ttft": "ttft_s",
    "tpot": "tpot_s",
    "energy": "energy_j",
    "energy_per_output_token": "energy_per_output_token_j",
}
# Per-output-token energy of tokens-to-Wh is computed like HYMELL's (whole-request energy over
# batch_size * output_tokens) so the two sources rank configurations on the same footing.
ENERGY_KEYS = {
    ("hymell", "request"): ("pred", "energy_j"),
    ("hymell", "per_output_token"): ("pred", "energy_per_output_token_j"),
    ("tokens2wh", "request"): ("t2wh", "energy_j"),
    ("tokens2wh", "per_output_token"): ("t2wh", "energy_per_output_token_j"),
}
_METRIC_KEYS = tuple(PREDICTED_KEYS.values())
LATENCY_KEYS = {"request": "latency_s", "ttft": "ttft_s", "tpot": "tpot_s"}
# Quality columns of the trials table <- keys of `predict_loss`'s result.
QUALITY_COLUMNS = {
    "loss": "loss",
    "loss_params_counted": "params_counted",
    "loss_out_of_range": "out_of_range",
    "loss_out_of_range_inputs": "out_of_range_inputs",
    "loss_law": "law",  # which law priced the row (`loss: {source: auto}` picks one per row)
}
# The text columns among them ('' where invalid or not priced).
QUALITY_TEXT = ("out_of_range_inputs", "law")

Predictor = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass
class Evaluation:
    """Arrays of length n (or (n, m) for `objectives`), one row per configuration."""

    n: int
    objectives: np.ndarray  # (n, m), NaN where invalid
    constraints: dict[str, np.ndarray]  # name -> value, <= 0 feasible
    valid: np.ndarray  # bool: the architecture exists (reached the predictor)
    feasible: np.ndarray  # bool: valid and every constraint <= 0
    # str, '' when valid; with `evaluate(texts=False)` the broken rule's template ('{}' for
    # the values: `dse.spec.rules.reasons`), not its message
    invalid_reason: np.ndarray
    sizes: dict[str, np.ndarray]
    pred: dict[str, np.ndarray]  # every key of predictor output, NaN/None where invalid
    t2wh: dict[str, np.ndarray] = field(default_factory=dict)
    # The scaling law's prediction (`dse.estimators.quality.predict_loss`) when a loss objective
    # or constraint asks for one: loss, params_counted, out_of_range, out_of_range_inputs.
    quality: dict[str, np.ndarray] = field(default_factory=dict)
    # Metrics the predicted constraints read: latency, ttft, tpot, energy,
    # energy_per_output_token, throughput, user_speed, loss (NaN where invalid).
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    # int16: 0 when valid, else the first broken rule (`dse.spec.rules.check_codes`)
    invalid_code: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))


def tokens2wh_module() -> ModuleType | None:
    """The tokens-to-Wh estimator when it is importable (it is optional for HYMELL sweeps)."""
    try:
        return importlib.import_module("dse.estimators.tokens2wh")
    except ImportError:
        return None


_CALIBRATION: dict[int, Any] = {}


def _calibration(t2wh: ModuleType) -> Any:
    """The estimator's calibration, read once per process (not once per batch)."""
    key = id(t2wh)
    if key not in _CALIBRATION:
        load = getattr(t2wh, "load_calibration", None)
        _CALIBRATION[key] = load() if load is not None else None
    return _CALIBRATION[key]


def default_predictor(texts: bool = True, metrics_only: bool = False) -> Predictor:
    """`dse.predict.predict`; without `out_of_range_inputs` where `texts` is False (a scan that
    keeps only its front, which it evaluates again with texts); with the predicted metrics
    alone (`predict(metrics_only=True)`) where `metrics_only` is True."""
    from dse.predict import predict

    if metrics_only:
        return functools.partial(predict, texts=False, metrics_only=True)
    return predict if texts else functools.partial(predict, texts=False)


def _scatter(values: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Put the values of the valid rows back into an n-long array; missing rows NaN/None."""
    v = np.asarray(values)
    if v.ndim == 0:
        v = np.full(len(rows), v.item())
    out = np.full(n, np.nan) if v.dtype.kind in "fiu" else np.full(n, None, dtype=object)
    out[rows] = v
    return out


def _tokens2wh(
    t2wh: ModuleType,
    cols: Mapping[str, np.ndarray],
    pred: Mapping[str, np.ndarray],
    preset: str = "corrected",
) -> dict[str, np.ndarray]:
    """The tokens-to-Wh estimate of valid rows (corrected preset: static term timed by the predictor)."""
    n = len(cols["gpu"])
    out: dict[str, np.ndarray] = {}
    for gpu in np.unique(cols["gpu"]):
        idx = np.nonzero(cols["gpu"] == gpu)[0]
        part = {k: v[idx] for k, v in cols.items()}
        ttft = np.asarray(pred["ttft_s"], dtype=float)[idx]
        total = np.asarray(pred["latency_s"], dtype=float)[idx]
        est = t2wh.estimate(
            C.architecture(part),
            {k: part[k] for k in WORKLOAD_KEYS},
            str(gpu),
            preset=preset,
            time_s={"prefill": ttft, "decode": np.maximum(total - ttft, 0.0)}
            if preset == "corrected"
            else None,
            calibration=_calibration(t2wh),
        )
        for k, v in est.items():
            arr = np.broadcast_to(np.asarray(v), (len(idx),))
            if k not in out:
                out[k] = (
                    np.full(n, np.nan)
                    if arr.dtype.kind in "fiu"
                    else np.full(n, None, dtype=object)
                )
            out[k][idx] = arr
    return out


def serving_metrics(
    cols: Mapping[str, np.ndarray], pred: Mapping[str, np.ndarray], n: int
) -> dict[str, np.ndarray]:
    """The metrics a serving limit may bound, per configuration (NaN where not predicted).

    throughput: output tokens per second per GPU = batch_size * output_tokens / request
    latency (s) / tensor_parallel; user_speed: tokens per second a user sees while decoding,
    1 / TPOT (s).
    """
    out = {k: np.full(n, np.nan) for k in (*PREDICTED_KEYS, "throughput", "user_speed")}
    if not pred:
        return out
    for name, key in PREDICTED_KEYS.items():
        if key in pred:
            out[name] = np.asarray(pred[key], dtype=float)
    tokens = cols["batch_size"].astype(float) * cols["output_tokens"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["throughput"] = tokens / out["latency"] / cols["tensor_parallel"].astype(float)
        out["user_speed"] = 1.0 / out["tpot"]
    return out


def _quality(
    space: SearchSpace, cols: Mapping[str, np.ndarray], rows: np.ndarray, n: int, law: str
) -> dict[str, np.ndarray]:
    """The scaling law's loss of the valid rows (NaN / None elsewhere)."""
    from dse.estimators.quality import predict_loss

    out: dict[str, np.ndarray] = {
        "loss": np.full(n, np.nan),
        "params_counted": np.full(n, np.nan),
        "out_of_range": np.zeros(n, dtype=bool),
        "out_of_range_inputs": np.full(n, "", dtype=object),
        "law": np.full(n, "", dtype=object),
    }
    if not len(rows):
        return out
    part = {k: np.asarray(v)[rows] for k, v in cols.items()}
    # `auto` prices a space holding MoE configurations with one law throughout (krajewski2024
    # when it routes a token to several experts, else joint_moe) ...
    most = {p.name: max(p.values) for p in space.params if p.name in ("n_experts", "top_k")}
    moe_space = most.get("n_experts", 1) > 1
    granular = moe_space and most.get("top_k", 1) > 1
    # ... and a dense space with linear-attention layers with shen2024 throughout.
    patterns = [p.values for p in space.params if p.name == "attention_pattern"]
    linear_space = any("linear" in str(v) for v in (patterns[0] if patterns else ()))
    got = predict_loss(
        part,
        part["training_tokens"].astype(float),
        law,
        moe_space=moe_space,
        granular_space=granular,
        linear_space=linear_space,
    )
    for k in out:
        out[k][rows] = np.broadcast_to(np.asarray(got[k]), (len(rows),))
    return out


def lifetime_energy_j(
    o: Any,
    cols: Mapping[str, np.ndarray],
    sizes: Mapping[str, np.ndarray],
    pred: Mapping[str, np.ndarray],
    n: int,
) -> np.ndarray:
    """Training energy, J: 6 N D training FLOPs (N active parameters, D training tokens;
    Kaplan et al. / Hoffmann et al.'s C = 6ND, attention over the context left out) x J/FLOP;
    `lifetime_energy` adds the predicted energy per output token x workload.lifetime_tokens."""
    flops = 6.0 * sizes["active_params"] * np.asarray(cols["training_tokens"], dtype=float)
    out = flops * float(o.j_per_flop)
    if o.kind == "lifetime_energy":
        per_token = pred.get("energy_per_output_token_j")
        per_token = np.full(n, np.nan) if per_token is None else np.asarray(per_token, float)
        out = out + per_token * np.asarray(cols["lifetime_tokens"], dtype=float)
    return out


def evaluate(
    space: SearchSpace,
    cols: Mapping[str, np.ndarray],
    *,
    predictor: Predictor | None = None,
    with_tokens2wh: bool = True,
    texts: bool = True,
    feasible_only: bool = False,
    derived: Mapping[str, np.ndarray] | None = None,
    constant: Collection[str] = (),
    kv_sizes: Mapping[str, np.ndarray] | None = None,
) -> Evaluation:
    """Sizes, constraints, predictions and objectives of a batch of complete configurations.

    Static constraints (sizes, memory) come from the configuration alone; limits on predicted
    metrics (TTFT, TPOT, throughput, loss...) from the predictions of the same batch, so every
    constraint is told with the trial and every sampler sees it.

    `texts=False`: no `out_of_range_inputs` text in `pred` (with the default predictor) and no
    message per invalid row (`invalid_reason` holds its rule's template), for the scans that
    keep only a front (`dse.sweep._enumerate`, `dse.sweep._screened`) and evaluate it again
    with texts.

    `feasible_only=True`: predict only the valid rows inside the constraints told without a
    prediction (`static_feasible`: sizes, memory), for the scans that keep only the feasible
    front and the counts (`dse.sweep._enumerate`): a row outside them is infeasible whatever
    it predicts, and its predictions, metrics and predicted objectives stay NaN; `pred` then
    holds the predicted metrics alone (`PREDICTED_KEYS`' columns).

    `derived`: `dse.spec.columns.derived(cols, n, texts=texts)` when the caller has it already
    (the exact scan's chunks, `dse.sweep._grid_derived`).

    `constant`: columns of `cols` (a `Configs`) that hold one value in every row
    (`dse.sweep.space_index.constant_columns`): the predicted rows share them, not gathered.

    `kv_sizes`: `dse.predict.request.KV_SIZE_COLUMNS` of every row of `cols` (a `Configs`), when
    the caller has them (the exact scan's grid): the default predictor takes them as columns
    of its batch (`Configs.with_columns`) rather than computing them again.
    """
    n = len(cols["d_model"])
    d = C.derived(cols, n, texts=texts) if derived is None else derived
    code = np.asarray(d["invalid_code"])
    valid = code == 0
    reason = np.asarray(d["invalid"]).astype(str) if texts else _templates()[code]
    sizes = {k: np.asarray(d[k], dtype=float) for k in SIZE_KEYS}
    rows = np.nonzero(valid)[0]
    # the rows predicted: every valid one, or only those a prediction could make feasible
    predicted = (
        np.nonzero(valid & static_feasible(d, space.constraints))[0] if feasible_only else rows
    )
    pred: dict[str, np.ndarray] = {}
    t2wh_out: dict[str, np.ndarray] = {}
    objectives = space.objectives
    need_t2wh = objectives.energy_source == "tokens2wh"
    if len(predicted):
        # a checked batch (`SearchSpace.columns_from`) stays checked: the predictor takes it as is
        part = (
            cols.take(predicted, same=constant)
            if isinstance(cols, C.Configs)
            else {k: np.asarray(v)[predicted] for k, v in cols.items()}
        )
        if kv_sizes and predictor is None and isinstance(part, C.Configs):
            part = part.with_columns({k: v.take(predicted) for k, v in kv_sizes.items()})
        # a scan keeps only objectives and verdicts: of ~80 predicted columns it spreads the
        # metrics (`PREDICTED_KEYS`) alone (~30 ms of a 0.5 s chunk of 131,072 rows), and the
        # default predictor makes only those (and the tokens-to-Wh's ttft_s and latency_s)
        raw = (predictor or default_predictor(texts, metrics_only=feasible_only))(part)
        kept = raw if not feasible_only else {k: raw[k] for k in _METRIC_KEYS if k in raw}
        pred = {k: _scatter(v, predicted, n) for k, v in kept.items()}
        module = tokens2wh_module() if (with_tokens2wh or need_t2wh) else None
        if module is None and need_t2wh:
            raise ConfigError(
                f"{space.source}: objectives.energy.source: tokens2wh needs "
                "dse.estimators.tokens2wh, which cannot be imported"
            )
        if module is not None:
            est = _tokens2wh(module, part, raw, objectives.energy_preset)
            t2wh_out = {k: _scatter(v, predicted, n) for k, v in est.items()}
    metrics = serving_metrics(cols, pred, n)
    losses = {law: _quality(space, cols, rows, n, law) for law in space.loss_laws}
    if "loss" in space.constraints:
        metrics["loss"] = losses[space.constraints["loss"]["source"]]["loss"]
    cv = C.constraint_values({**d, **metrics}, space.constraints)
    feasible = C.feasible(cv) & valid
    obj = np.full((n, len(objectives.items)), np.nan)
    for j, o in enumerate(objectives.items):
        if o.kind == "size":
            obj[:, j] = sizes[o.metric]
        elif o.kind == "loss":
            obj[:, j] = losses[str(o.source)]["loss"]
        elif o.kind in ("throughput", "user_speed"):
            obj[:, j] = metrics[o.kind]
        elif o.kind in ("training_energy", "lifetime_energy"):
            obj[:, j] = lifetime_energy_j(o, cols, sizes, pred, n)
        elif not len(predicted):
            continue
        elif o.kind == "latency":
            obj[:, j] = np.asarray(pred[LATENCY_KEYS[o.metric]], dtype=float)
        else:
            table, key = ENERGY_KEYS[(str(o.source), o.metric)]
            obj[:, j] = np.asarray((pred if table == "pred" else t2wh_out)[key], dtype=float)
    obj[~valid] = np.nan
    return Evaluation(
        n=n,
        objectives=obj,
        constraints={k: np.asarray(v, dtype=float) for k, v in cv.items()},
        valid=valid,
        feasible=feasible,
        invalid_reason=reason,
        sizes=sizes,
        pred=pred,
        t2wh=t2wh_out,
        quality=losses[space.loss_laws[0]] if space.loss_laws else {},
        metrics=metrics,
        invalid_code=code,
    )


def static_feasible(d: Mapping[str, np.ndarray], constraints: Mapping[str, Any]) -> np.ndarray:
    """Per configuration, inside every constraint told by `dse.spec.columns.derived`'s sizes
    alone (`fits_memory`, bounds on SIZE_KEYS): where False, the configuration is infeasible
    whatever it predicts (`C.feasible` of all constraints is False too)."""
    static = {k: v for k, v in constraints.items() if k == "fits_memory" or k in SIZE_KEYS}
    values = C.constraint_values(d, static)
    return C.feasible(values)


@functools.cache
def _templates() -> np.ndarray:
    """'' then every rule's message template, indexed by `check_codes`' code."""
    return np.array(("", *R.reasons()), dtype=object)


def check_predictor(space: SearchSpace, predictor: Predictor | None = None) -> dict[str, str]:
    """Predict one valid configuration per GPU of the space before anything is written, so a
    missing artifact or an unusable objective fails cleanly. Returns {gpu: artifact id}."""
    examples = space.examples(256, seed=space.study.seed)
    cols = space.complete({k: np.asarray([e[k] for e in examples]) for k in examples[0]})
    n = len(cols["d_model"])
    valid = C.derived(cols, n, texts=False)["invalid_code"] == 0
    pick: list[int] = []
    for gpu in dict.fromkeys(cols["gpu"].tolist()):
        idx = np.nonzero(valid & (cols["gpu"] == gpu))[0]
        if len(idx):
            pick.append(int(idx[0]))
    if not pick:
        return {}
    part = cols.take(np.asarray(pick))
    ev = evaluate(space, part, predictor=predictor)
    ids = ev.pred.get("artifact_id")
    return {str(g): (str(ids[i]) if ids is not None else "") for i, g in enumerate(part["gpu"])}
