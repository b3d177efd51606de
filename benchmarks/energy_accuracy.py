"""Accuracy of the tokens-to-watt-hours presets against measured energy, out of sample.

    PYTHONPATH=. python benchmarks/energy_accuracy.py [--data ../shared/data] [--no-write]

Scores the paper preset (no fitted constants) and the corrected preset (refitted with each
model shape held out: leave-one-shape-out) on
- argonne: static batches, energy of GPU 0 = latency x mean power (H100, A100, GH200);
- ml-energy-v2: serving, energy per request summed over GPUs (H100, A100 40GB). Energy per
  output token is energy per request / average output tokens, so its relative error is the
  same number.
Also: the optional `dse.predict` (HYMELL or its roofline stand-in) on the same rows, the
paper's published per-request table recomputed from its printed equations, the sensitivity to
the assumed ml-energy prompt length, and H200 kernel-level factors applied end to end.
Writes the section "Energy estimators" of docs/dev/accuracy-journal.md (replacing it if present).
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

from dse.estimators import _paper, calibrate  # noqa: E402
from dse.estimators import measured as M  # noqa: E402
from dse.estimators.tokens2wh import load_calibration  # noqa: E402
from dse.spec.arch import Architecture, total_params  # noqa: E402

SECTION = "## Energy estimators"
COMMAND = "PYTHONPATH=. python benchmarks/energy_accuracy.py"

# Published comparison table of the paper (500 prompt / 500 output tokens, Wh per request).
PUBLISHED_TABLE = [
    # size, nominal N, architecture used for n_layers / d_model, estimate Wh, measured Wh
    ("8B", 8e9, "Llama-3.1-8B", 0.011795, 0.009270),
    ("24B", 24e9, "Mistral-Small-24B", 0.032427, 0.026280),
    ("70B", 70e9, "Llama-3.3-70B", 0.170747, 0.179230),
    ("72B", 72e9, "Qwen2.5-72B", 0.170747, 0.233260),
]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def predictor_column(cv: pd.DataFrame) -> tuple[np.ndarray | None, str]:
    """`dse.predict.predict` energy in each row's scope, or None with the reason."""
    try:
        from dse.fitting.level3 import as_measured_energy
        from dse.predict import load_artifact, predict
    except Exception as exc:  # the predictor is another module's work in progress
        return None, f"dse.predict not importable ({type(exc).__name__})"
    out = np.full(len(cv), np.nan)
    sources = set()
    try:
        for gpu, idx in cv.groupby("gpu").groups.items():
            rows = cv.loc[idx]
            cols = M.architecture_columns(rows["model"])
            cfg = pd.DataFrame({k: v for k, v in cols.items() if k in Architecture.field_names()})
            for k in ("prompt_tokens", "output_tokens", "tensor_parallel"):
                cfg[k] = np.rint(rows[k].to_numpy()).astype(int)
            cfg["batch_size"] = np.maximum(np.rint(rows["batch_size"].to_numpy()), 1).astype(int)
            cfg["gpu"] = gpu
            cfg["engine"] = np.where(rows["engine"] == "trtllm", "trtllm", "vllm")
            pred = predict(cfg)
            e = np.asarray(pred["energy_j"], dtype=float)
            art, _ = load_artifact(str(gpu))
            if art is not None:
                # argonne's TensorRT-LLM rows decode copies of one prompt: their power as
                # measured (no independent-sequence term), as `dse validate` predicts them.
                tp = cfg["tensor_parallel"].to_numpy()
                e = as_measured_energy(cfg, e / tp, pred["latency_s"], art) * tp
            # Rounded batch sizes: scale back to the row's (fractional) batch.
            e = e * rows["batch_size"].to_numpy() / cfg["batch_size"].to_numpy()
            gpu0 = rows["scope"].to_numpy() == "gpu0"
            out[np.asarray([cv.index.get_loc(i) for i in idx])] = np.where(
                gpu0, e / rows["tensor_parallel"].to_numpy(), e
            )
            sources |= set(np.asarray(pred.get("source", ["?"])).tolist())
            sources |= set(np.asarray(pred.get("artifact_id", ["?"])).tolist())
    except Exception as exc:
        return None, f"dse.predict failed on these rows ({type(exc).__name__}: {exc})"
    return out, ", ".join(sorted(sources))


def published_table() -> list[dict[str, Any]]:
    """The paper's 500/500 estimates next to its printed equations evaluated by us."""
    from dse.spec.catalogue import lookup_model

    rows = []
    for size, n_nominal, model, est_wh, meas_wh in PUBLISHED_TABLE:
        a = lookup_model(model).resolved()
        ours = {}
        for label, n in (("nominal N", n_nominal), ("counted N", float(total_params(a)))):
            items = _paper.paper_items(n, a.n_layers, a.d_model, 500, 500, 0.52, 11.68)
            ours[label] = sum(float(v) for v in items.values()) / 3600.0
        rows.append(
            {
                "size": size,
                "model": model,
                "published_wh": est_wh,
                "measured_wh": meas_wh,
                "ours_nominal_wh": ours["nominal N"],
                "ours_counted_wh": ours["counted N"],
            }
        )
    return rows


def prompt_sensitivity(tables: dict[str, Any], prompts: tuple[int, ...]) -> list[dict[str, Any]]:
    """Held-out ml-energy error of both presets when the assumed prompt length changes."""
    out = []
    for s in prompts:
        t = dict(tables)
        t["energy"] = tables["energy"].copy()
        t["time"] = tables["time"].copy()
        for key in ("energy", "time"):
            m = t[key]["source"] == "ml-energy"
            t[key].loc[m, "prompt_tokens"] = float(s)
        cv = calibrate.cross_validate(t)
        me = cv[cv["source"] == "ml-energy"]
        row = {"prompt_tokens": s}
        for col in ("paper", "corrected", "corrected_time"):
            row[col] = float(np.mean(np.abs(me[col] / me["measured_j"] - 1.0)))
        out.append(row)
    return out


def kernel_factors_end_to_end(tables: dict[str, Any]) -> dict[str, float]:
    """H200 kernel-level energy factors used for H100 end-to-end rows (measured time)."""
    cal = load_calibration()
    k = cal["kernel_fits"]["h200_sxm"]
    swapped = {**cal, "gpus": {**cal["gpus"]}}
    swapped["gpus"]["h100_sxm"] = {
        **cal["gpus"]["h100_sxm"],
        **{key: k[key] for key in ("e_flop_pj", "e_bit_pj", "p_static_w")},
    }
    e = tables["energy"]
    rows = e[e["gpu"] == "h100_sxm"].reset_index(drop=True)
    pred = calibrate.predict(rows, "h100_sxm", "corrected", swapped, rows["time_s"].to_numpy())
    ratio = pred / rows["measured_j"].to_numpy()
    return {"median_ratio": float(np.median(ratio)), "mape": float(np.mean(np.abs(ratio - 1)))}


def render(
    tab: pd.DataFrame,
    pred_note: str,
    has_pred: bool,
    published: list[dict[str, Any]],
    sens: list[dict[str, Any]],
    kernel: dict[str, float],
    cal: dict[str, Any],
    seconds: float,
) -> str:
    lines = [
        SECTION,
        "",
        f"Command: `{COMMAND}` (about {seconds:.0f} s on 2 cores). Calibration: "
        "`python -m dse.estimators.calibrate` writes `dse/estimators/tokens2wh_calibration.json` "
        "(constants, the sha256 of every data file used, and the scores below).",
        "",
        "Method: the paper preset has no fitted constants. The corrected preset is refitted "
        "once per model shape with that shape held out (leave-one-shape-out: same layers, any "
        "vocabulary, e.g. Llama-3-8B and Mistral-7B-v0.3 form one group), time factors and energy "
        "factors alike, and predicts the held-out rows only. `corrected` uses its own roofline "
        "time (no measurement at prediction time); `corrected + time` is given the measured "
        "batch time for its static term, the best a latency predictor (HYMELL) could supply. "
        "Errors are mean absolute percentage error (MAPE), median absolute percentage error, "
        "and the median predicted/measured ratio (below 1: underestimate).",
        "",
        "| source | GPU | rows | shapes | paper MAPE | corrected MAPE | corrected + time MAPE"
        + (" | predictor MAPE" if has_pred else "")
        + " | paper median | corrected median | corrected + time median | paper ratio | corrected ratio |",
        "|---|---|---|---|---|---|---" + ("|---" if has_pred else "") + "|---|---|---|---|---|",
    ]
    for _, r in tab.iterrows():
        cells = [
            r["source"], r["gpu"], str(r["rows"]), str(r["shapes"]),
            _pct(r["paper_mape"]), _pct(r["corrected_mape"]), _pct(r["corrected_time_mape"]),
        ]  # fmt: skip
        if has_pred:
            cells.append(_pct(r["predictor_mape"]))
        cells += [
            _pct(r["paper_median_ape"]), _pct(r["corrected_median_ape"]),
            _pct(r["corrected_time_median_ape"]), f"{r['paper_median_ratio']:.2f}",
            f"{r['corrected_median_ratio']:.2f}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    beats = all(tab["corrected_mape"] < tab["paper_mape"])
    lines += [
        "",
        "Corrected beats paper on every source out of sample (MAPE): "
        + ("**yes**." if beats else "**no** (see the rows above)."),
        f"Predictor column: {pred_note}"
        + (
            "; it is not guaranteed out of sample (its artifact may have been fitted on these "
            "rows) and is shown for orientation only."
            if has_pred
            else "."
        ),
        "",
        "Calibrated constants (fitted on all rows; `dse/estimators/tokens2wh_calibration.json`):",
        "",
        "| GPU | pJ/FLOP | pJ/bit | static W | u_compute | u_memory | pass overhead ms | per-sequence ms | rows (time / energy) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for gpu, e in cal["gpus"].items():
        rows = e.get("rows", {})
        lines.append(
            f"| {gpu} | {e['e_flop_pj']:.3f} | {e['e_bit_pj']:.2f} | {e['p_static_w']:.0f} | "
            f"{e['u_compute']:.3f} | {e['u_memory']:.3f} | {1e3 * e['pass_overhead_s']:.3f} | "
            f"{1e3 * e['seq_overhead_s']:.3f} | {rows.get('time', '-')} / {rows.get('energy', '-')} |"
        )
    k = cal.get("kernel_fits", {}).get("h200_sxm")
    h100 = tab[(tab["source"] == "ml-energy") & (tab["gpu"] == "h100_sxm")]
    tab_h100_time_mape = float(h100["corrected_time_mape"].iloc[0]) if len(h100) else float("nan")
    if k:
        kv = cal["validation"]["h200_kernels_grouped_5fold"]
        lines += [
            "",
            f"H200 (aiconfigurator kernel power, {k['rows']} GEMM and decode-attention kernels): "
            f"{k['e_flop_pj']:.3f} pJ/FLOP, {k['e_bit_pj']:.2f} pJ/bit, {k['p_static_w']:.0f} W "
            f"static; grouped 5-fold kernel energy MAPE {_pct(kv['mape'])}. These kernel-level "
            "factors are NOT used end to end: applied to the H100 rows (same die, measured time) "
            f"they give a median ratio of {kernel['median_ratio']:.2f} (MAPE "
            f"{_pct(kernel['mape'])}) against {_pct(tab_h100_time_mape)} for the end-to-end "
            "calibration scored out of sample, since kernels alone leave out norms, activations, "
            "sampling, launch gaps and host time. h200_sxm therefore uses the factors of "
            "h100_sxm (same die and board power) and is marked uncalibrated.",
        ]
    lines += [
        "",
        "Sensitivity to the assumed ml-energy prompt length (input lengths were not recorded; "
        f"the calibration assumes {M.ML_ENERGY_PROMPT_TOKENS}), held-out ml-energy MAPE:",
        "",
        "| assumed prompt tokens | paper | corrected | corrected + time |",
        "|---|---|---|---|",
    ]
    for r in sens:
        lines.append(
            f"| {r['prompt_tokens']} | {_pct(r['paper'])} | {_pct(r['corrected'])} | "
            f"{_pct(r['corrected_time'])} |"
        )
    lines += [
        "",
        "The paper's own comparison (500 in / 500 out, Wh per request, H100) recomputed from "
        "its printed equations (K = 6, gamma / s_attn / eta with the printed exponents), with "
        "the nominal N and with the N counted from the architecture:",
        "",
        "| size | architecture (n_l, d_model) | published estimate | ours, nominal N | ours, counted N | published measured |",
        "|---|---|---|---|---|---|",
    ]
    for r in published:
        lines.append(
            f"| {r['size']} | {r['model']} | {r['published_wh']:.6f} | {r['ours_nominal_wh']:.6f} | "
            f"{r['ours_counted_wh']:.6f} | {r['measured_wh']:.6f} |"
        )
    lines += [
        "",
        "The printed equations do not reproduce the published per-request column (the paper "
        "gives the same estimate for 70B and 72B); the per-token table (218.4 mJ per output "
        "token for 70B, etc.) is reproduced exactly by the parameters-only estimator "
        "(`tests/estimators/test_tokens2wh.py`).",
        "",
        "Known limits: argonne power rows cover only Llama-2-7B and Llama-3-8B at 1024/1024 "
        "(H100: Llama-2-7B only, so its held-out score relies on ml-energy and the other "
        "shape); ml-energy is continuous-batching serving read as a static batch of the average "
        "batch size; its prompt length is assumed; the roofline time is the weakest part "
        "(serving overheads), which is why `corrected + time` is much better on ml-energy.",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    """Replace the section in `path` (up to the next '## ' heading) or append it."""
    replace_section(path, SECTION, text, "Accuracy")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument(
        "--no-write", action="store_true", help="print, do not touch docs/dev/accuracy-journal.md"
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    tables = calibrate.load_tables(args.data)
    cv = calibrate.cross_validate(tables)
    pred, pred_note = predictor_column(cv)
    columns: tuple[str, ...] = ("paper", "corrected", "corrected_time")
    if pred is not None and np.all(np.isfinite(pred)):
        cv["predictor"] = pred
        columns = (*columns, "predictor")
    tab = calibrate.error_table(cv, columns)
    sens = prompt_sensitivity(tables, (128, 512))
    base = cv[cv["source"] == "ml-energy"]
    sens.insert(1, {"prompt_tokens": M.ML_ENERGY_PROMPT_TOKENS,
                    **{c: float(np.mean(np.abs(base[c] / base["measured_j"] - 1.0)))
                       for c in ("paper", "corrected", "corrected_time")}})  # fmt: skip
    text = render(
        tab,
        pred_note,
        "predictor" in columns,
        published_table(),
        sens,
        kernel_factors_end_to_end(tables),
        load_calibration(),
        time.perf_counter() - t0,
    )
    print(text)
    if not args.no_write:
        write_section(REPO / "docs" / "dev" / "accuracy-journal.md", text)
        print(f"wrote section {SECTION!r} of docs/dev/accuracy-journal.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
