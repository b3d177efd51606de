"""Held-out accuracy of HYMELL Levels 2-3 end to end: latency, energy, TTFT, serving energy.

    PYTHONPATH=. python benchmarks/e2e_accuracy.py [--data ../shared/data] [--no-write]

Every number is out of sample:
- latency: argonne static batches (vLLM and TensorRT-LLM), Level 3 refitted with each MODEL
  held out (leave-one-model-out) and, separately, with each (batch, length) SHAPE held out;
  Levels 1-2 are the shipped artifact's (fitted on kernel tables, never on these rows);
- energy: argonne GPU-0 power rows, energy = held-out latency x held-out power (the power
  calibration refitted without the row's model, or without its batch size where one model is
  all there is, and the Level-3 that feeds it refitted without the row's model);
- TTFT: argonne's Fig. 22 rows (kind e2e_ttft), in the Level-3 fit and held out with their model;
- serving energy per output token: ml-energy-v2 H100 (never fitted on), vLLM 0.4.2 with
  continuous batching, predicted as a static batch of the measured average batch size and
  output length with an assumed prompt length.
Writes the section "HYMELL end to end (Levels 2-3)" of docs/dev/accuracy-journal.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _docsection import replace_section  # noqa: E402  (benchmarks/, the script's folder)

from dse.data import load  # noqa: E402
from dse.fitting.e2e_rows import e2e_configs, identical_batch, price_rows, ttft_of_runs  # noqa: E402
from dse.fitting.level3 import (  # noqa: E402
    dynamic_fraction,
    from_fraction,
    model_power_w,
    pair_keys,
    power_groups,
)
from dse.metrics import mape_pct  # noqa: E402
from dse.models.artifact import Artifact  # noqa: E402
from dse.models.level3 import Level3  # noqa: E402
from dse.models.level3_power import Power3, fit_protocol  # noqa: E402
from dse.predict import load_artifact, predict  # noqa: E402
from dse.spec.stand_ins import STAND_INS  # noqa: E402

SECTION = "## HYMELL end to end (Levels 2-3)"
COMMAND = "PYTHONPATH=. python benchmarks/e2e_accuracy.py"
GPUS = ("h100_sxm", "a100_sxm")
TARGETS = {
    ("h100_sxm", "vllm"): "<= 5%",
    ("a100_sxm", "vllm"): "<= 8%",
    ("a100_sxm", "trtllm"): "<= 8%",
}
MISSES_TEXT = [
    "What moved the errors, and where the rest comes from (the regime tables below split each",
    "engine's held-out error). Leave-one-model-out asks Level 3 to extrapolate to a model unlike",
    "the others of its engine, and each engine has only 4-5 models. (1) argonne's TensorRT-LLM",
    "scripts (run_precision_bench.py / run_power.py, `generate_input`) batch copies of one prompt",
    '("France" repeated) decoded greedily, so every sequence routes to the same MoE experts: its',
    "Mixtral runs read top_k experts per step, not all (batch 16 on 4 x A100-40GB: 11 ms per",
    "step where reading all bf16 experts takes 14.5 ms). `e2e_rows.e2e_configs` gives those",
    "rows `routing: identical` (IDENTICAL_SEQUENCE_ENGINES), priced through the MoE operator,",
    "and `dse validate` predicts them so; vLLM's scripts draw random prompts and sample, so its",
    "rows keep `uniform`, a user's default (docs/fields.md `routing`). (2) Llama-2-7B is",
    "TensorRT-LLM's only multi-head model: held out, the structured stage kept decode attention at",
    "the kernel model (the GQA models cannot tell) and under-predicted it; attention now leans to",
    "the roofline when the data cannot tell. (3) On the A100 40GB the 70B models (TP 4) leave",
    "1-2 GB per GPU for the KV cache, so the KV fill and wave count swing with memory the engine",
    "keeps back (not recorded); the measured / kernel ratio of TensorRT-LLM Llama-2-70B goes 0.99,",
    "0.96, 1.24-1.37, 0.74-0.80 as the predicted fill goes 0.7, 1.3, 2.7, 5.3 (1, 2, 3, 6",
    "waves), and Llama-3-70B batch 16 x 512 ran in one wave at a predicted fill of 1.09 where",
    "Llama-2-70B batch 64 x 256 needed two at 1.33: no wave count that grows with the fill fits",
    "every row, so the overflow rows stay the largest error, and the residual MLP (which made",
    "them worse held out: 22% -> 16% without it) is not applied to them. Held out by shape",
    "instead (loso), every engine is within 4.1%. (4) Energy: the H100 power file holds one model",
    "(Llama-2-7B) at one length, so its power is held out by batch size, and vLLM's power",
    "rises with batch (367 -> 595 W) where TensorRT-LLM's stays flat (413 -> 449 W) at the same",
    "latency (32.6 s at batch 64 on both); the operator power model is within 2% of",
    "TensorRT-LLM's and 22-34% under vLLM's at batch 16-64. The A100 file shows the same sign",
    "and trend, smaller: measured / modelled power of vLLM over that of TensorRT-LLM at the same",
    "model and batch is 0.96-1.02 at batch 1 on both GPUs, and at batch 16, 32, 64 1.03, 1.06,",
    "1.06 (A100 Llama-2-7B), 1.09, 1.09, 1.15 (A100 Llama-3-8B), 1.25, 1.37, 1.49 (H100). The",
    "engines' scripts differ in what they feed (TensorRT-LLM: copies of one prompt, greedy; vLLM:",
    "random tokens, sampled), so the independent-sequence term (c log2(batch)/6 of the dynamic",
    "span, c fitted on those pairs) carries it; its size is per chip (c = 0.075 on A100, 0.28 on",
    "H100): fitted on the other GPU's rows it helps H100 (9.8 -> 6.9%) and hurts A100 (7.6 ->",
    "14.9%), see the table under the energy section. Without the term the calibration had k1 < 0",
    "(it modelled power from batch size alone) and was not applied.",
]
METHOD_TEXT = [
    "How a prediction is made (`dse.predict.predict`): every operator of `dse.predict.ops.forward_ops`",
    "is priced by the Level-1 model of the GPU's artifact that covers it (roofline with a launch",
    "floor where none does; `roofline_ops` names those), with power from the Level-1 power model",
    "(at each call's duration); Level 2 scales the attention projections and the dense FFN by block residual",
    "MLPs fitted on vidur's block sums; decode is integrated over the KV length with composite",
    "Simpson (5 nodes; exact where the step cost is piecewise linear between nodes, error vs the",
    "step-by-step sum < 0.2% in tests/predict/test_predictor.py); a batch whose KV cache does not fit runs",
    "in waves. Level 3 then corrects the whole request per engine: a structured stage with named",
    "coefficients (each kernel group -- prefill, decode GEMMs and elementwise, decode attention,",
    "all-reduce -- as a blend of its Levels 1-2 time and its roofline time with a prior summing",
    "to 1; decode attention x (query heads per KV head - 1), because argonne's engines predate",
    "GQA-aware decode kernels (they read each KV head once per query head, partly from L2);",
    "per-step host overheads per sequence, per layer and per TP doubling; a bounded KV-overflow",
    "penalty; non-negative least squares on relative error of the batch latency and of the",
    "measured time to first token where argonne has one (Fig. 22)), then an",
    "ensemble of five small tanh MLPs on the log residual (13 global features, clipped to",
    "+-0.35), fitted on and applied to configurations whose KV cache fits (MLP_MAX_FILL; past",
    "it the structured stage alone). Each kernel group's blend leans to the fitted kernel model",
    "when the data cannot tell, except decode attention, which leans to the roofline",
    "(argonne's engines predate the attention tables; TIE_TO_ROOF). argonne's TensorRT-LLM",
    "rows decode copies of one prompt, so their MoE decode is priced as one sequence's (see",
    "below). The error band is the 5-95% quantile of the leave-one-model-out log residuals of",
    "the whole stack, doubled outside the fitted range. Energy: kernels at their modelled power",
    "for their corrected time, host gaps at idle power, then two Level-3 terms fitted on argonne's",
    "GPU-0 power rows: the extra dynamic power of independent sequences, c log2(batch)/6 of the",
    "board's dynamic span (argonne's TensorRT-LLM rows decode copies of one prompt, its vLLM rows",
    "independent ones; c from the pairs of rows measured both ways, so the power model's own",
    "error cancels; user predictions are independent sequences), and a linear calibration of the",
    "dynamic power fraction fitted with that term taken out, kept only where physical (calibrated",
    "power rising with the modelled power, k1 > 0; else the operator power model as is).",
    "",
]
HISTORY_TEXT = [
    "Session 3 (2026-11-30), on the same shipped Levels 1-2 (held out, lomo; energy; TTFT):",
    "",
    "| step | h100 trtllm | h100 vllm | a100 trtllm | a100 vllm | energy a100 | energy h100 | TTFT |",
    "|---|---|---|---|---|---|---|---|",
    "| session start (commit df39047) | 9.2% | 4.5% | 14.7% | 7.2% | 11.7% | 9.1% | 8.8% |",
    "| + TensorRT-LLM MoE as one sequence (1) | 5.8% | 4.5% | 8.5% | 7.2% | 10.7% | 16.2% | |",
    "| + decode-attention tie-break to the roofline (2) | 3.8% | 4.1% | 7.1% | 6.2% | 11.3% | 11.6% | |",
    "| + power calibration only where physical | 3.8% | 4.1% | 7.1% | 6.2% | 8.4% | 9.7% | |",
    "| + MLP only where the KV cache fits (3) | 3.7% | 4.0% | 6.2% | 5.9% | 7.6% | 9.8% | 6.9% |",
    "| + power of independent sequences (4) | 3.7% | 4.0% | 6.2% | 5.9% | 5.2% | 6.6% | 6.9% |",
    "",
    "Seed to seed (seeds 1, 2): latency 3.7%, 4.1-4.2%, 6.2%, 5.9% (rows (3) and (4) alike); energy",
    "7.6%, 9.7-9.8% at row (3), 5.2%, 6.6-6.7% at row (4) (the protocol-term section below).",
    "Tried with (1) and not kept: MLP alpha 10 and 30 (6.2-6.7%, 4.4-4.8%, 9.2-9.7%, 7.7-8.3%),",
    "GQA prior 0 and 3 (h100 TensorRT-LLM 5.2% / 9.3%, a100 vLLM 10.1% / 7.9%); with (2): vLLM's",
    "KV overflow as fractional waves (fill waves of batch / fill sequences, for preemption by",
    "recompute): h100 vLLM 4.1 -> 3.8% (its overflow rows 17% -> 2%) but a100 vLLM 6.2 -> 7.1%",
    "(the 70B rows on A100-40GB run 1.5-1.8x slower than whole waves, not faster) and energy",
    "a100 8.4 -> 9.2%, h100 9.7 -> 11.3%; the MLP cut-off at fill 1.5 instead of 1.0: 3.8%, 4.1%,",
    "6.9%, 5.7%, energy 7.9%, 9.7%. Power calibrations on the latency of (2) (21 variants of",
    "the section below plus these): shipped 11.3% / 11.6%; k1, k2 >= 0 11.7% / 9.6% (k1 = 0:",
    "batch only); per-engine intercept 11.6% / 11.3%, per-engine batch slope 12.5% / 6.5%, both",
    "12.5% / 7.9%; the run plus the scripts' 1 s idle tail inside the power window (both engines",
    "sleep 1 s before stopping the probe), 0.5-2 s: 11.5-11.9% / 10.8-11.3%.",
    "",
    "Session 2: before this Level 3 (the same benchmark on the artifacts of commit 29d24b7, whose",
    "Level 3 had no GQA term and no TTFT rows): latency lomo h100 TensorRT-LLM 13.2%, vLLM 4.7%,",
    "a100 TensorRT-LLM 16.2%, vLLM 12.5%; energy a100 4.3%, h100 19.9%; TTFT 14.2% (not held",
    "out); serving energy per token 28.6%. Tried and not kept (held-out error not better): an L1",
    "(IRLS) structured fit, per-step TP overheads without the layer factor, a separate MoE kernel",
    "factor, dropping architecture features from the MLP, clipping MLP inputs to the fitted",
    "range, choosing the MLP per engine by nested leave-one-model-out, per-engine power",
    "calibration.",
    "",
]
ML_ENERGY_PROMPT_TOKENS = 256  # not recorded by ml-energy-v2; ShareGPT prompts are a few hundred


def level12(gpu: str) -> Artifact | None:
    """The shipped artifact without its Level-3 models (what Level 3 is fitted on top of)."""
    art, _ = load_artifact(gpu)
    if art is None:
        return None
    keep = [n for n in art.models if not n.startswith("level3.")]
    return Artifact(
        manifest={**art.manifest, "models": {n: art.manifest["models"][n] for n in keep}},
        models={n: art.models[n] for n in keep},
    )


def latency_cv(
    gpu: str, e2e: pd.DataFrame, base: Artifact | None, ttft_rows: pd.DataFrame | None
) -> dict[str, Any]:
    rows = e2e[e2e["gpu"].isin(STAND_INS["level3_rows"][gpu])]
    cfg, kept = e2e_configs(rows)
    g, extra = price_rows(cfg, base, gpu)
    y = kept["latency_s"].to_numpy(float)
    # The measured TTFT of some runs (argonne Fig. 22) enters the fit as hymell_fit does; it is
    # held out with its model (lomo) or its shape (loso) like the latency of the same row.
    ttft = ttft_of_runs(kept, ttft_rows)
    models = kept["model"].to_numpy()
    by_model = Level3(seed=0).fit(g, y, models, ttft)
    structured = Level3(seed=0, use_mlp=False).fit(g, y, models, ttft)
    shape = (kept["batch_size"].astype(str) + "x" + kept["input_tokens"].astype(str)).to_numpy()
    by_shape = Level3(seed=0).fit(g, y, shape, ttft)
    kept = kept.copy()
    kept["l12_s"] = g.t_pre_s + g.t_dec_s
    kept["l12_ttft_s"] = g.t_pre_s
    kept["regime"] = np.where(
        g.value("n_experts") > 1, "MoE", np.where(g.kv_fill > 1, "dense, KV overflow", "dense")
    )
    kept["ttft_s"] = ttft
    for name, model in (("lomo", by_model), ("lomo_s", structured), ("loso", by_shape)):
        kept[name] = np.nan
        kept[name + "_ttft"] = np.nan
        for e, cv in model.cv_.items():
            sel = (kept["engine"] == e).to_numpy()
            kept.loc[sel, name] = cv["held_out_pred_s"]
            kept.loc[sel, name + "_ttft"] = cv["held_out_ttft_s"]
    kept["band_lo"] = np.nan
    kept["band_hi"] = np.nan
    for e, fit in by_model.engines_.items():
        sel = (kept["engine"] == e).to_numpy()
        kept.loc[sel, "band_lo"] = fit.band_log[0]
        kept.loc[sel, "band_hi"] = fit.band_log[1]
    from dse.spec.choices import ENGINES

    dropped = rows
    other_engines = sorted(set(dropped["engine"]) - set(ENGINES))
    modelled = dropped[dropped["engine"].isin(ENGINES)]
    missing_models = sorted(set(modelled["model"]) - set(kept["model"]))
    why = (
        f"{len(rows) - len(kept)} of {len(rows)}: engines not modelled "
        f"({', '.join(other_engines) or 'none'}), models not in the catalogue "
        f"({', '.join(missing_models) or 'none'})"
    )
    return {"rows": kept, "g": g, "extra": extra, "cfg": cfg, "skipped": why, "ttft": ttft}


def energy_cv(
    gpu: str, tables: dict[str, pd.DataFrame], lat: dict[str, Any], base: Artifact | None
) -> pd.DataFrame:
    """Held-out energy of the argonne power rows of the GPU's chip."""
    rows = tables["e2e_energy"]
    rows = rows[rows["gpu"].isin(STAND_INS["level3_rows"][gpu])]
    cfg, kept = e2e_configs(rows)
    if kept.empty:
        return kept
    g, extra = price_rows(cfg, base, gpu)
    e2e_rows, e2e_g = lat["rows"], lat["g"]
    gpus = cfg["gpu"].to_numpy()
    p_model = np.full(len(kept), np.nan)
    t_held = np.full(len(kept), np.nan)
    for m in kept["model"].unique():
        # Level 3 refitted without this model: its latency and its power inputs are held out.
        train = (e2e_rows["model"] != m).to_numpy()
        lvl3 = Level3(seed=0).fit(
            e2e_g.take(np.nonzero(train)[0]),
            e2e_rows["latency_s"].to_numpy(float)[train],
            e2e_rows["model"].to_numpy()[train],
            lat["ttft"][train],
        )
        sel = (kept["model"] == m).to_numpy()
        idx = np.nonzero(sel)[0]
        parts = lvl3.correct(g.take(idx))
        t_held[sel] = parts["ttft_s"] + parts["decode_s"]
        p_model[sel] = model_power_w(parts, {k: v[idx] for k, v in extra.items()}, gpus[idx])
    measured = kept["power_w"].to_numpy(float)
    groups, scheme = power_groups(kept)
    identical = identical_batch(kept)
    pw = Power3().fit(
        dynamic_fraction(p_model, gpus),
        g.value("batch"),
        dynamic_fraction(measured, gpus),
        groups,
        identical=identical,
        pair_keys=pair_keys(kept),
    )
    out = kept.copy()
    out["identical"] = identical
    out["protocol_c"] = pw.protocol_
    out["scheme"] = scheme
    out["latency_held_s"] = t_held
    out["power_model_w"] = p_model
    out["power_held_w"] = from_fraction(pw.held_out_, gpus)
    out["energy_held_j"] = out["latency_held_s"] * out["power_held_w"]
    return out


def _energy_with_protocol(x: pd.DataFrame, c: float | None) -> np.ndarray:
    """Held-out energy of one GPU's power rows with the independent-sequence term c given (None:
    fitted on the GPU's own rows in each held-out fold, as shipped)."""
    gpus = x["gpu"].to_numpy()
    groups, _ = power_groups(x)
    pw = Power3().fit(
        dynamic_fraction(x["power_model_w"].to_numpy(float), gpus),
        x["batch_size"].to_numpy(float),
        dynamic_fraction(x["power_w"].to_numpy(float), gpus),
        groups,
        identical=x["identical"].to_numpy(bool),
        pair_keys=pair_keys(x),
        protocol=c,
    )
    return x["latency_held_s"].to_numpy(float) * from_fraction(pw.held_out_, gpus)


def _protocol_c(x: pd.DataFrame) -> float:
    gpus = x["gpu"].to_numpy()
    resid = dynamic_fraction(x["power_w"].to_numpy(float), gpus) - dynamic_fraction(
        x["power_model_w"].to_numpy(float), gpus
    )
    return fit_protocol(
        resid, x["batch_size"].to_numpy(float), x["identical"].to_numpy(bool), pair_keys(x)
    )


def protocol_check(en: pd.DataFrame) -> list[str]:
    """Energy MAPE per GPU with the independent-sequence power term fitted in other ways than
    on the GPU's own rows: none, on the other GPU's rows, and leave-one-model-out over every
    GPU's rows (the model held out on all GPUs)."""
    lines = [
        "| artifact | no protocol term | c from the GPU's own rows (shipped) | c from the other GPU's rows | c leave-one-model-out, all GPUs |",
        "|---|---|---|---|---|",
    ]
    for a, x in en.groupby("artifact"):
        meas = x["energy_j"].to_numpy(float)
        other = _protocol_c(en[en["artifact"] != a])
        lomo = np.full(len(x), np.nan)
        cs = []
        for m in x["model"].unique():
            c = _protocol_c(en[en["model"] != m])
            cs.append(c)
            sel = (x["model"] == m).to_numpy()
            lomo[sel] = _energy_with_protocol(x, c)[sel]
        own = x["protocol_c"].iloc[0]
        lines.append(
            f"| {a} | {mape_pct(_energy_with_protocol(x, 0.0), meas):.1f}% "
            f"| {mape_pct(x['energy_held_j'].to_numpy(), meas):.1f}% (c = {own:.3f}) "
            f"| {mape_pct(_energy_with_protocol(x, other), meas):.1f}% (c = {other:.3f}) "
            f"| {mape_pct(lomo, meas):.1f}% (c = {', '.join(f'{c:.3f}' for c in cs)}) |"
        )
    return lines


def ttft_rows(lat_rows: list[pd.DataFrame]) -> pd.DataFrame:
    """The argonne runs with a measured TTFT (Fig. 22), one row per configuration, with their
    held-out (leave-one-model-out) TTFT."""
    keys = ["gpu", "engine", "model", "batch_size", "input_tokens", "n_gpus"]
    tt = pd.concat([r[np.isfinite(r["ttft_s"].to_numpy(float))] for r in lat_rows])
    return tt.drop_duplicates(subset=keys).reset_index(drop=True)


def serving_check() -> pd.DataFrame:
    tables = load(ARGS.data, ["serving_energy"])
    s = tables.get("serving_energy")
    if s is None or s.empty:
        return pd.DataFrame()
    s = s[s["gpu"] == "h100_sxm"].copy()
    rows = pd.DataFrame(
        {
            "model": s["model"],
            "gpu": "h100_sxm",
            "engine": "vllm",
            "batch_size": np.maximum(np.rint(s["avg_batch_size"]), 1).astype(int),
            "input_tokens": ML_ENERGY_PROMPT_TOKENS,
            "output_tokens": np.maximum(np.rint(s["avg_output_tokens"]), 2).astype(int),
            "n_gpus": s["tensor_parallel"].astype(int),
        }
    )
    rows["measured_j_per_token"] = s["energy_per_output_token_j"].to_numpy()
    rows["measured_tpot_s"] = s["latency_s"].to_numpy()
    cfg, kept = e2e_configs(rows)
    from dse.spec import columns as C

    d = C.derived(*C.as_columns(cfg))
    ok = d["fits_memory"]
    cfg, kept = cfg[ok].reset_index(drop=True), kept[ok].reset_index(drop=True)
    pred = predict(cfg)
    kept = kept.copy()
    kept["pred_j_per_token"] = pred["energy_per_output_token_j"]
    kept["pred_tpot_s"] = pred["tpot_s"]
    kept["source"] = pred["source"]
    return kept


def report() -> str:
    data = Path(ARGS.data)
    tables = load(data, ["e2e", "e2e_energy", "e2e_ttft"])
    cmd = COMMAND + (f" --surrogates DIR --label '{ARGS.label}'" if ARGS.surrogates else "")
    lines = [SECTION, "", f"Command: `{cmd}` ({time.strftime('%Y-%m-%d')}).", ""]
    if ARGS.surrogates:
        lines += [
            "The same benchmark on another artifacts folder (see the section above for the method).",
            "",
        ]
    else:
        lines += METHOD_TEXT
    lines += [
        "Level 3 is refitted inside this benchmark exactly as `dse.fitting.level3` fits the",
        "shipped artifact, on top of the shipped Levels 1-2, so that every row is predicted by a",
        "model that never saw it. `lomo`: leave-one-model-out (the model's every row held out);",
        "`loso`: leave-one-shape-out ((batch, length) held out for every model). Levels 1-2 alone",
        "(`L1-2`) are shown for reference: they are kernel sums without any serving overhead.",
        "",
    ]
    summary_at = len(lines)
    summary: list[tuple[str, str, str]] = []
    energy_parts = []
    lat_parts: list[pd.DataFrame] = []
    for gpu in GPUS:
        base = level12(gpu)
        l1 = (
            "roofline stand-in"
            if base is None or not base.models
            else f"artifact {base.artifact_id}"
        )
        lat = latency_cv(gpu, tables["e2e"], base, tables.get("e2e_ttft"))
        r = lat["rows"]
        lat_parts.append(r)
        lines += [
            f"### {gpu} latency (argonne rows of {', '.join(STAND_INS['level3_rows'][gpu])}; Levels 1-2: {l1})",
            "",
        ]
        lines += [
            "| engine | rows | models | L1-2 MAPE | lomo, structured stage | lomo MAPE | lomo, models with >= 4 rows | loso MAPE | 90% band holds |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for e, x in r.groupby("engine"):
            big = x.groupby("model")["model"].transform("size") >= 4
            meas = x["latency_s"].to_numpy()
            target = TARGETS.get((gpu, e), "")
            summary.append(
                (
                    f"end-to-end latency, {gpu}, {e} (argonne, leave-one-model-out; held-out shapes)",
                    f"{mape_pct(x['lomo'].to_numpy(), meas):.1f}%; {mape_pct(x['loso'].to_numpy(), meas):.1f}%",
                    target,
                )
            )
            lr = np.log(meas / x["lomo"].to_numpy())
            inside = np.mean((lr >= x["band_lo"].to_numpy()) & (lr <= x["band_hi"].to_numpy()))
            lines.append(
                f"| {e} | {len(x)} | {x['model'].nunique()} | {mape_pct(x['l12_s'].to_numpy(), meas):.1f}% "
                f"| {mape_pct(x['lomo_s'].to_numpy(), meas):.2f}% "
                f"| {mape_pct(x['lomo'].to_numpy(), meas):.2f}% "
                f"| {mape_pct(x['lomo'][big].to_numpy(), meas[big.to_numpy()]):.2f}% "
                f"| {mape_pct(x['loso'].to_numpy(), meas):.2f}% | {100 * inside:.0f}% |"
            )
        lines += [
            "",
            "Where the held-out (lomo) error comes from: rows per regime, their MAPE, and their",
            "share of the engine's MAPE (sum of their absolute errors / all the engine's rows):",
            "",
            "| engine | regime | rows | lomo MAPE | share of the engine's MAPE |",
            "|---|---|---|---|---|",
        ]
        for e, x in r.groupby("engine"):
            err = np.abs(x["lomo"].to_numpy() / x["latency_s"].to_numpy() - 1) * 100
            for reg in ("dense", "dense, KV overflow", "MoE"):
                sel = (x["regime"] == reg).to_numpy()
                if sel.any():
                    lines.append(
                        f"| {e} | {reg} | {int(sel.sum())} | {np.nanmean(err[sel]):.1f}% "
                        f"| {np.nansum(err[sel]) / len(x):.1f} points |"
                    )
        lines += ["", "Per model (lomo MAPE, rows):", ""]
        lines += ["| engine | model | TP | rows | lomo MAPE |", "|---|---|---|---|---|"]
        for (e, m, tp), x in r.groupby(["engine", "model", "n_gpus"]):
            lines.append(
                f"| {e} | {m} | {tp} | {len(x)} | {mape_pct(x['lomo'].to_numpy(), x['latency_s'].to_numpy()):.1f}% |"
            )
        lines += [
            "",
            f"Rows not predictable: {lat['skipped']}.",
            "",
        ]
        l2 = {
            n: e
            for n, e in (base.manifest["models"].items() if base else [])
            if n.startswith("level2.")
        }
        if l2:
            lines += [
                "Level 2 (block residuals over Level 1, vidur block sums, leave-one-model-out):",
                "",
                "| block | rows | models | Level 1 MAPE | Level 1 + 2 MAPE |",
                "|---|---|---|---|---|",
            ]
            for n, entry in l2.items():
                cv = entry.get("cv", {})
                lines.append(
                    f"| {n} | {cv.get('rows')} | {cv.get('models')} | {cv.get('level1_mape_pct', float('nan')):.1f}% "
                    f"| {cv.get('level2_mape_pct', float('nan')):.1f}% |"
                )
            lines.append("")
        en = energy_cv(gpu, tables, lat, base)
        if not en.empty:
            en["artifact"] = gpu
            energy_parts.append(en)
    if energy_parts:
        en = pd.concat(energy_parts)
        lines += ["### Energy of a whole batch on one GPU (argonne power rows)", ""]
        lines += [
            "Energy = held-out latency x held-out average power (GPU 0, TP 1, 1024 in / 1024 out,",
            "batch 1-64). The argonne power file holds one model on H100 (Llama-2-7B) and two on",
            "the A100 40GB, so the power calibration is held out by batch size on H100 and by",
            "model on A100; the latency that multiplies it is always leave-one-model-out.",
            "",
            "| artifact | engine | rows | scheme | power, uncalibrated MAPE | power MAPE | latency MAPE | energy MAPE |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for (a, e), x in en.groupby(["artifact", "engine"]):
            lines.append(
                f"| {a} | {e} | {len(x)} | {x['scheme'].iloc[0]} "
                f"| {mape_pct(x['power_model_w'].to_numpy(), x['power_w'].to_numpy()):.1f}% "
                f"| {mape_pct(x['power_held_w'].to_numpy(), x['power_w'].to_numpy()):.1f}% "
                f"| {mape_pct(x['latency_held_s'].to_numpy(), x['latency_s'].to_numpy()):.1f}% "
                f"| {mape_pct(x['energy_held_j'].to_numpy(), x['energy_j'].to_numpy()):.1f}% |"
            )
        for a, x in en.groupby("artifact"):
            summary.append(
                (
                    f"energy of a batch on one GPU, {a} (argonne power rows, {len(x)})",
                    f"{mape_pct(x['energy_held_j'].to_numpy(), x['energy_j'].to_numpy()):.1f}%",
                    "<= 8%",
                )
            )
            lines.append(
                f"| {a} | all | {len(x)} | | {mape_pct(x['power_model_w'].to_numpy(), x['power_w'].to_numpy()):.1f}% "
                f"| {mape_pct(x['power_held_w'].to_numpy(), x['power_w'].to_numpy()):.1f}% "
                f"| {mape_pct(x['latency_held_s'].to_numpy(), x['latency_s'].to_numpy()):.1f}% "
                f"| {mape_pct(x['energy_held_j'].to_numpy(), x['energy_j'].to_numpy()):.1f}% |"
            )
        lines += [
            "",
            "Power of independent sequences (`dse.fitting.level3`): argonne's TensorRT-LLM rows",
            "decode copies of one prompt, its vLLM rows independent ones; the term c log2(batch)/6",
            "added to the dynamic fraction of independent sequences is fitted on the pairs of rows",
            "measured both ways (same model and batch). Energy MAPE with c fitted otherwise (the",
            "calibration k refitted in the same held-out folds in every column):",
            "",
            *protocol_check(en),
        ]
        lines.append("")
    tt = ttft_rows(lat_parts)
    if not tt.empty:
        meas = tt["ttft_s"].to_numpy(float)
        lines += [
            "### Time to first token (argonne Fig. 22, leave-one-model-out)",
            "",
            "Fig. 22 measured the TTFT of one configuration per model and engine (batch 16, 1024",
            "tokens, TP 1). These rows enter the Level-3 fit (kind e2e_ttft, next to the run's total",
            "latency); each is predicted here by the Level 3 fitted without its model.",
            "",
            "| gpu | engine | model | batch | prompt | measured | L1-2 prefill | held out | error |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in tt.itertuples():
            lines.append(
                f"| {r.gpu} | {r.engine} | {r.model} | {r.batch_size} | {r.input_tokens} "
                f"| {r.ttft_s:.3f} s | {r.l12_ttft_s:.3f} s | {r.lomo_ttft:.3f} s "
                f"| {100 * (r.lomo_ttft / r.ttft_s - 1):+.0f}% |"
            )
        summary.append(
            (
                f"time to first token (argonne Fig. 22, leave-one-model-out, {len(tt)} rows)",
                f"{mape_pct(tt['lomo_ttft'].to_numpy(), meas):.1f}%",
                "",
            )
        )
        lines += [
            "",
            f"TTFT MAPE: held out {mape_pct(tt['lomo_ttft'].to_numpy(), meas):.1f}%, "
            f"held-out shapes {mape_pct(tt['loso_ttft'].to_numpy(), meas):.1f}% "
            f"(every row of that (batch, length) held out), "
            f"Levels 1-2 prefill alone {mape_pct(tt['l12_ttft_s'].to_numpy(), meas):.1f}%.",
            "",
        ]
    sv = serving_check()
    if not sv.empty:
        err = sv["pred_j_per_token"] / sv["measured_j_per_token"] - 1
        summary.append(
            (
                f"serving energy per output token, h100 (ml-energy-v2, {len(sv)} rows)",
                f"{100 * np.mean(np.abs(err)):.1f}% (median {100 * np.median(err):+.0f}%)",
                "report only",
            )
        )
        lines += [
            "### Serving energy per output token (ml-energy-v2, H100, never fitted on)",
            "",
            f"{len(sv)} configurations (models in the catalogue that fit in memory), vLLM 0.4.2 with",
            "continuous batching, energy summed over all GPUs per request / average output tokens.",
            "Predicted as a static batch of the measured average batch size, the measured average",
            f"output length and {ML_ENERGY_PROMPT_TOKENS} prompt tokens (not recorded). The static",
            "model has no idea of requests arriving and leaving mid-batch, of the prefills that",
            "interrupt decoding, or of the ShareGPT length spread, so this is a transfer test of",
            "the predictor to a regime it was not built for, not a validation of it.",
            "",
            f"- energy per output token: MAPE {100 * np.mean(np.abs(err)):.1f}%, median signed error "
            f"{100 * np.median(err):+.1f}%, within +-25%: {100 * np.mean(np.abs(err) <= 0.25):.0f}% of rows",
            f"- time per output token: MAPE {mape_pct(sv['pred_tpot_s'].to_numpy(), sv['measured_tpot_s'].to_numpy()):.1f}%",
            "",
            "| model | TP | rows | MAPE J/token | median signed |",
            "|---|---|---|---|---|",
        ]
        sv["err"] = err
        for (m, tp), x in sv.groupby(["model", "n_gpus"]):
            lines.append(
                f"| {m} | {tp} | {len(x)} | {100 * np.mean(np.abs(x['err'])):.1f}% | {100 * np.median(x['err']):+.1f}% |"
            )
        lines.append("")
    table = ["### Summary (every number held out)", "", "| item | MAPE | target |", "|---|---|---|"]
    table += [f"| {a} | {b} | {c} |" for a, b, c in summary]
    if not ARGS.surrogates:
        table += ["", *MISSES_TEXT, "", *HISTORY_TEXT]
    lines[summary_at:summary_at] = [*table, ""]
    return "\n".join(lines)


def write_section(text: str) -> None:
    replace_section(REPO / "docs" / "dev" / "accuracy-journal.md", SECTION, text, "Accuracy")


ARGS: argparse.Namespace


def main() -> None:
    global ARGS
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument(
        "--surrogates",
        help="artifacts folder to score instead of the shipped one (its own docs section)",
    )
    p.add_argument("--label", help="section label for --surrogates (e.g. 'all Level-1 models')")
    ARGS = p.parse_args()
    if ARGS.surrogates:
        import os

        os.environ["DSE_SURROGATES"] = ARGS.surrogates
        global SECTION
        SECTION = f"{SECTION}, {ARGS.label or ARGS.surrogates}"
    text = report()
    print(text)
    if not ARGS.no_write:
        write_section(text)


if __name__ == "__main__":
    main()
