"""The rows the Level-3 power calibration (`dse.models.level3_power.Power3`) is fitted on: per-GPU
power of every source that measured it, each row's modelled power read off `dse.predict` itself.

    rows = calibration_rows(data, artifact)          # argonne + ml-energy v2 + ml-energy v3
    pw, info = fit_calibration(rows)                  # held out by whole model (architecture)

Sources (docs/accuracy.md "Energy and power"):
- argonne static batches, GPU-0 power (H100, A100 40GB, GH200; 2 models, batch 1-64, TP 1);
- ml-energy v2 serving runs, vLLM 0.4.2 (H100 and A100 40GB; 22-23 models, TP 1-8), whose
  wall time is mostly host time: a row reads y = busy y_gpu + (1 - busy) w, with `busy` the
  static prediction's time over the measured wall time and w a waiting draw per GPU fitted with
  the calibration (a nuisance: the shipped waiting draw is `dse.fitting.serving`'s);
- ml-energy v3 serving runs, vLLM 0.11.1 (H100; 14 models, TP 1-8), host time hidden behind
  the GPU (busy = 1).

The modelled power `u` and the covariates of a row are what `dse.predict.predict` hands the
calibration for that configuration (`_Probe` records them in place of the calibration), so the
fit sees exactly the inputs a prediction gives it. Every row is priced by one artifact moved to
the row's GPU (as Level 3 prices its rows), so an artifact's fit needs no other artifact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import ArtifactError, DataError
from dse.fitting.e2e_rows import e2e_configs, identical_batch
from dse.models.artifact import Artifact
from dse.models.level3 import GlobalInputs
from dse.models.level3_power import BAND_QUANTILES, Power3, kv_share
from dse.spec.hardware import GPU, get_gpu
from dse.spec.stand_ins import lenders

CALIBRATION = "level3.power"
MODELLED = ("p_model_w", "u", "batch", "tp", "kv_share", "latency_s", "energy_j")
SHAPE_FIELDS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "n_experts")


class _Probe(Power3):
    """Stands in for the calibration inside `dse.predict`: records what it is handed (the
    Level-3 inputs, the modelled power per GPU) and leaves the energy as modelled."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[GlobalInputs, np.ndarray]] = []
        self.range_ = {}

    def scale(
        self, g: GlobalInputs, energy_j: np.ndarray, time_s: np.ndarray, gpu: GPU
    ) -> tuple[np.ndarray, np.ndarray]:
        p_model = np.asarray(energy_j, float) / np.maximum(np.asarray(time_s, float), 1e-12)
        self.seen.append((g, p_model))
        return np.ones(len(p_model)), np.zeros((2, len(p_model)))


def _probed(artifact: Artifact) -> tuple[Artifact, _Probe]:
    """`artifact` with its calibration replaced by a fresh probe (its other models shared)."""
    probe = _Probe()
    models = {k: v for k, v in artifact.models.items() if k != CALIBRATION}
    entries = dict(artifact.manifest["models"])
    entries[CALIBRATION] = {"kind": Power3.kind}
    art = Artifact(manifest={**artifact.manifest, "models": entries}, models={**models})
    art.models[CALIBRATION] = {}
    art._instances.update({k: v for k, v in artifact._instances.items() if k != CALIBRATION})
    art._instances[CALIBRATION] = probe
    return art, probe


def modelled(cfg: pd.DataFrame, artifact: Artifact) -> pd.DataFrame:
    """Per configuration (rows of one GPU or several), what `dse.predict` hands the calibration:
    modelled power per GPU (W) and dynamic fraction `u`, batch, tp, `kv_share`; and the
    uncalibrated prediction's latency_s and energy_j (all GPUs)."""
    from dse.predict import predict

    parts = []
    dtype = cfg["weight_dtype"] if "weight_dtype" in cfg else pd.Series("", index=cfg.index)
    keys = cfg["gpu"].astype(str) + "|" + dtype.astype(str)
    for key, at in keys.groupby(keys, sort=False).groups.items():
        gpu_name = str(key).split("|")[0]
        art, probe = _probed(artifact)
        sub = cfg.loc[at]
        try:
            p = predict(sub.reset_index(drop=True), artifacts={gpu_name: art}, texts=False)
        except ArtifactError:  # e.g. an fp8 run priced by an artifact without fp8 GEMMs
            continue
        g = _concat(probe.seen)
        p_model = np.concatenate([s[1] for s in probe.seen])
        if len(p_model) != len(sub):
            raise DataError(
                f"power calibration rows: {len(sub)} configurations, probe saw {len(p_model)}"
            )
        gpu = get_gpu(gpu_name)
        tp = sub["tensor_parallel"].to_numpy(float)
        # the probe's power is the energy the prediction sums: a check that rows line up
        e = np.asarray(p["energy_j"], float) / tp
        t = np.asarray(p["latency_s"], float)
        if not np.allclose(p_model * t, e, rtol=1e-6, atol=1e-9):
            raise DataError("power calibration rows: probed power does not match the energy")
        parts.append(
            pd.DataFrame(
                {
                    "p_model_w": p_model,
                    "u": (p_model - gpu.idle_power_w) / (gpu.board_power_w - gpu.idle_power_w),
                    "batch": g.value("batch"),
                    "tp": g.value("tp"),
                    "kv_share": kv_share(g),
                    "latency_s": t,
                    "energy_j": np.asarray(p["energy_j"], float),
                },
                index=at,
            )
        )
    if not parts:
        return pd.DataFrame(index=cfg.index, columns=list(MODELLED), dtype=float)
    # rows this artifact cannot price stay NaN (dropped by the callers)
    return pd.concat(parts).reindex(cfg.index)


def _concat(seen: list[tuple[GlobalInputs, np.ndarray]]) -> GlobalInputs:
    if len(seen) == 1:
        return seen[0][0]
    keys = vars(seen[0][0]).keys()
    return GlobalInputs(**{k: np.concatenate([vars(s[0])[k] for s in seen]) for k in keys})


def shape_key(cfg: pd.DataFrame) -> np.ndarray:
    """The architecture of each row: post-trained variants of one base share a key (held out
    together)."""
    return cfg[list(SHAPE_FIELDS)].astype(str).agg("-".join, axis=1).to_numpy()


def _frame(source: str, kept: pd.DataFrame, cfg: pd.DataFrame, m: pd.DataFrame, **cols: Any):
    gpus = cfg["gpu"].astype(str).to_numpy()
    idle = np.array([get_gpu(x).idle_power_w for x in gpus])
    board = np.array([get_gpu(x).board_power_w for x in gpus])
    measured = np.asarray(cols.pop("power_w"), float)
    out = pd.DataFrame(
        {
            "source": source,
            "gpu": gpus,
            "model": kept["model"].astype(str).to_numpy(),
            "file": kept["file"].astype(str).to_numpy(),
            "row": kept.index.to_numpy(),
            "engine": cfg["engine"].astype(str).to_numpy(),
            "shape": shape_key(cfg),
            "power_w": measured,
            "y": (measured - idle) / (board - idle),
            **{k: m[k].to_numpy() for k in m.columns},
            **cols,
        }
    )
    return out[np.isfinite(out["u"].to_numpy(float))].reset_index(drop=True)


def argonne_rows(energy: pd.DataFrame, artifact: Artifact, lookup: Any = None) -> pd.DataFrame:
    """argonne's GPU-0 power rows (every GPU), priced by `artifact`."""
    cfg, kept = e2e_configs(energy, lookup)
    if not len(cfg):
        return pd.DataFrame()
    m = modelled(cfg, artifact)
    return _frame(
        "argonne",
        kept,
        cfg,
        m,
        power_w=kept["power_w"].to_numpy(float),
        busy=1.0,
        identical=identical_batch(kept),
        measured_latency_s=kept["latency_s"].to_numpy(float),
    )


def serving_v2_rows(
    data: Path, artifact: Artifact, gpus: tuple[str, ...] | None = None
) -> pd.DataFrame:
    """ml-energy v2 (vLLM 0.4.2) runs on `gpus` (None: all), priced as static batches by
    `artifact`: busy = the static prediction's time over the measured wall time (of the same B
    requests)."""
    from dse.fitting import serving as S

    cfg, rows = _on(*S.v2_configs(data), gpus)
    return _serving_frame("ml-energy-v2", cfg, rows, artifact, busy_from_time=True)


def serving_v3_rows(
    data: Path,
    artifact: Artifact,
    prompt_tokens: dict[str, int] | None = None,
    gpus: tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """ml-energy v3 (vLLM 0.11.1) runs on `gpus` (None: all): the host step hides behind the
    GPU (busy = 1). Prompt lengths per task as `dse.fitting.serving.V3_PROMPT_TOKENS` unless
    given."""
    from dse.fitting import serving as S

    cfg, rows = _on(*S.v3_configs(data, prompt_tokens), gpus)
    return _serving_frame("ml-energy-v3", cfg, rows, artifact, busy_from_time=False)


def _on(
    cfg: pd.DataFrame, rows: pd.DataFrame, gpus: tuple[str, ...] | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    if gpus is None:
        return cfg, rows
    keep = cfg["gpu"].astype(str).isin(gpus).to_numpy()
    return cfg[keep], rows[keep]


def _serving_frame(
    source: str, cfg: pd.DataFrame, rows: pd.DataFrame, artifact: Artifact, busy_from_time: bool
) -> pd.DataFrame:
    if cfg.empty:
        return pd.DataFrame()
    m = modelled(cfg, artifact)
    b = rows["batch_size"].to_numpy(float)
    scale = cfg["batch_size"].to_numpy(float) / b  # measured batch of b requests -> of B
    tp = cfg["tensor_parallel"].to_numpy(float)
    wall = rows["time_s"].to_numpy(float) * scale
    power = rows["measured_j"].to_numpy(float) * scale / tp / wall
    busy = np.minimum(m["latency_s"].to_numpy() / wall, 1.0) if busy_from_time else 1.0
    return _frame(
        source,
        rows,
        cfg,
        m,
        power_w=power,
        busy=busy,
        identical=False,
        measured_latency_s=wall,
    )


def power_gpus(gpu: str) -> tuple[str, ...]:
    """The GPUs whose measured per-GPU power calibrates artifact `gpu`: its
    "level3_power_rows" lenders, else those of its Level 3 (`dse.spec.stand_ins`)."""
    return lenders("level3_power_rows", gpu) or lenders("level3_rows", gpu)


def calibration_rows(
    data: str | Path,
    artifact: Artifact,
    tables: dict[str, pd.DataFrame] | None = None,
    lookup: Any = None,
    prompt_tokens: dict[str, int] | None = None,
    gpus: tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """Every source's rows (`argonne_rows`, `serving_v2_rows`, `serving_v3_rows`; a source whose
    files are missing is left out) measured on `gpus` (None: every GPU)."""
    data = Path(data)
    energy = (tables or {}).get("e2e_energy")
    if energy is None:
        from dse.data import load

        energy = load(data, ["e2e_energy"]).get("e2e_energy")
    parts = []
    if energy is not None and gpus is not None:
        energy = energy[energy["gpu"].isin(gpus)]
    if energy is not None and not energy.empty:
        parts.append(argonne_rows(energy, artifact, lookup))
    for source in ("v2", "v3"):
        try:
            if source == "v2":
                parts.append(serving_v2_rows(data, artifact, gpus))
            else:
                parts.append(serving_v3_rows(data, artifact, prompt_tokens, gpus))
        except DataError:
            continue
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame()
    return pd.concat(parts, ignore_index=True)


def calibration(rows: pd.DataFrame, **terms: bool) -> Power3:
    """Power3 fitted on `rows` with its held-out predictions (by architecture); `terms` turns
    the covariates off (`tp=False`, `kv=False`) for comparisons."""
    wait_key = np.where(rows["busy"].to_numpy(float) < 1.0, rows["gpu"].astype(str), "")
    return Power3().fit(
        rows["u"].to_numpy(float),
        rows["batch"].to_numpy(float),
        rows["y"].to_numpy(float),
        rows["shape"].to_numpy(),
        protocol=0.0,
        tp=rows["tp"].to_numpy(float) if terms.get("tp", True) else None,
        kv=rows["kv_share"].to_numpy(float) if terms.get("kv", True) else None,
        busy=rows["busy"].to_numpy(float),
        wait_key=wait_key,
        weight=source_weights(rows) if terms.get("balanced", BALANCED) else None,
    )


BALANCED = False  # each source the same total weight (True) or each row (False)


def source_weights(rows: pd.DataFrame) -> np.ndarray:
    """Weights that give each source the same total weight (argonne's 32 rows against the
    serving sources' hundreds)."""
    n = rows.groupby("source")["source"].transform("size").to_numpy(float)
    return len(rows) / (rows["source"].nunique() * n)


def fit_calibration(rows: pd.DataFrame) -> tuple[Power3, dict[str, Any]]:
    """Power3 on `rows` (`calibration_rows`), no engine-only term, held out by whole
    architecture; the band from the held-out log residuals of the rows the GPU is busy on
    (busy >= 0.5); CV per source."""
    pw = calibration(rows)
    held_w = held_out_power_w(pw, rows)
    measured = rows["power_w"].to_numpy(float)
    ok = np.isfinite(held_w)
    busy = rows["busy"].to_numpy(float) >= 0.5
    logres = np.log(measured[ok & busy] / held_w[ok & busy])
    pw.band_log_ = np.quantile(logres, BAND_QUANTILES) if len(logres) else np.zeros(2)
    cv: dict[str, Any] = {"scheme": "leave-one-architecture-out", "rows": int(ok.sum())}
    for src, at in rows.groupby("source").groups.items():
        sel = rows.index.isin(at) & ok
        cv[f"{src}.power_mape_pct"] = float(np.mean(np.abs(held_w[sel] / measured[sel] - 1)) * 100)
        cv[f"{src}.uncalibrated_power_mape_pct"] = float(
            np.mean(np.abs(uncalibrated_power_w(rows)[sel] / measured[sel] - 1)) * 100
        )
    info = {
        "cv": cv,
        "rows_used": len(rows),
        "files": sorted(rows["file"].unique().tolist()),
        "rows_by_source": {str(k): int(v) for k, v in rows["source"].value_counts().items()},
        "models": int(rows["model"].nunique()),
        "architectures": int(rows["shape"].nunique()),
        "rows_from_gpus": sorted(rows["gpu"].astype(str).unique().tolist()),
        "terms": ["1", "u", "log2(batch)/8", "log2(tp)/3", "kv_share"],
        "coefficients": [float(v) for v in pw.coef_],
        "waiting_fraction": {k: float(v) for k, v in pw.wait_.items()},
        # no engine-only term: argonne's protocol pairs are of 1-2 models (MIN_ENGINE_MODELS)
        "protocol_c": 0.0,
        "calibrated": bool(pw.calibrated_),
    }
    return pw, info


def _spans(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    gpus = rows["gpu"].astype(str).to_numpy()
    idle = np.array([get_gpu(x).idle_power_w for x in gpus])
    board = np.array([get_gpu(x).board_power_w for x in gpus])
    return idle, board - idle


def held_out_power_w(pw: Power3, rows: pd.DataFrame) -> np.ndarray:
    """The measured quantity of each row (its GPU-busy power, and waiting where busy < 1) held
    out, in W per GPU."""
    idle, span = _spans(rows)
    return idle + np.clip(pw.held_out_, 0.0, 1.0) * span


def held_out_gpu_power_w(pw: Power3, rows: pd.DataFrame) -> np.ndarray:
    """The calibrated GPU-busy power of each row, held out (W per GPU, in [idle, board])."""
    idle, span = _spans(rows)
    return idle + np.clip(pw.held_out_gpu_, 0.0, 1.0) * span


def uncalibrated_power_w(rows: pd.DataFrame) -> np.ndarray:
    """The modelled power with the waiting share at idle (what no calibration predicts)."""
    idle, _ = _spans(rows)
    busy = rows["busy"].to_numpy(float)
    return busy * rows["p_model_w"].to_numpy(float) + (1.0 - busy) * idle


STATIC_ENERGY_KEYS = (
    "prefill_energy_j",
    "decode_energy_j",
    "energy_j",
    "energy_per_output_token_j",
    "avg_power_w",
    "energy_lo_j",
    "energy_hi_j",
)


def held_out_static(
    static: pd.DataFrame,
    data: str | Path,
    source: str,
    prompt_tokens: dict[str, int] | None = None,
) -> pd.DataFrame:
    """Serving rows with their static prediction (`dse.fitting.serving.serving_rows` /
    `serving_rows_v3`, columns `static.<key>`, `row`) whose energies are re-priced by the
    calibration fitted without the row's architecture (on every source), so a score on them is
    held out: the shipped artifact's calibration has seen every row. `source`: "ml-energy-v2"
    or "ml-energy-v3". Rows the calibration rows lack keep the shipped energies."""
    from dse.fitting.serving import STATIC
    from dse.predict import load_artifact

    out = static.copy()
    for gpu in out["gpu"].astype(str).unique():
        art, _ = load_artifact(gpu)
        if art is None:
            continue
        pool = calibration_rows(data, art, prompt_tokens=prompt_tokens, gpus=power_gpus(art.gpu))
        held = held_out_gpu_power_w(calibration(pool), pool)
        mine = ((pool["source"] == source) & (pool["gpu"] == gpu)).to_numpy()
        by_row = pd.Series(held[mine], index=pool.loc[mine, "row"].to_numpy())
        at = (out["gpu"].astype(str) == gpu).to_numpy()
        p_held = by_row.reindex(out.loc[at, "row"].to_numpy()).to_numpy()
        tp = out.loc[at, "tensor_parallel"].to_numpy(float)
        e = out.loc[at, STATIC + "energy_j"].to_numpy(float)
        ratio = p_held * tp * out.loc[at, STATIC + "latency_s"].to_numpy(float) / e
        ratio = np.where(np.isfinite(ratio), ratio, 1.0)
        for k in STATIC_ENERGY_KEYS:
            out.loc[at, STATIC + k] = out.loc[at, STATIC + k].to_numpy(float) * ratio
    return out
