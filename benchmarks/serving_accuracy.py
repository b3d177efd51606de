"""Serving energy per output token of continuous batching (`workload.batching: continuous`),
whole models held out, per engine version (docs/accuracy.md "Continuous batching").

    PYTHONPATH=. python benchmarks/serving_accuracy.py [--data ../shared/data] [--write-constants]
        [--versions 0.11.1]

vLLM 0.4.2, the ml-energy v2 runs (H100 and A100 40GB): every row priced by
`dse.models.serving` with host constants fitted on the other models of its GPU
(leave-one-model-out, `dse.fitting.serving`), and A100 also with constants fitted on H100's
rows alone (the transfer check).

vLLM 0.11.1, the ml-energy v3 runs, per GPU (H100, B200; each GPU's terms fitted on its own
rows, the model priced held out; only H100's are written to the constants file): the static
prediction, the 0.4.2 constants (what `batching: continuous` priced before the version was a
field), and each candidate set of fitted terms held out by whole model and by whole shape
(every post-trained variant of one base held out together); then the shipped terms at several
assumed prompt lengths (v3 did not record them).

Energy per output token has the relative error of energy per request (the same output tokens
divide both). `--write-constants` also writes `dse/predict/serving_constants.json`: per version,
constants fitted on every row of each GPU, with the rows' files and hash, the fitted ranges,
the held-out scores printed here and the band (the 5-95% quantiles of the held-out log
residuals; its coverage measured nested). It rewrites only the versions named by `--versions`
(default: the newest, 0.11.1); every other entry of the file is kept as it is. vLLM 0.4.2's
constants are held fixed (its predictions are pinned: tests/spec/test_engine_version.py), so
it cannot be named: refitted on today's static prediction they would move.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _provenance import short_commit  # noqa: E402  (benchmarks/, the script's folder)

from dse.fitting import serving as S  # noqa: E402
from dse.predict.serving import CONSTANTS_FILE, FORMAT_VERSION  # noqa: E402

COMMAND = "PYTHONPATH=. python benchmarks/serving_accuracy.py"
TRAIN_GPU = "h100_sxm"  # the transfer check's, and the constants of a GPU not measured
V2, V3 = S.ENGINE_VERSION, "0.11.1"
# candidate term sets for vLLM 0.11.1 (the shipped one is S.VERSIONS[V3].terms)
V3_CANDIDATES: dict[str, tuple[str, ...]] = {
    "host terms (as 0.4.2)": S.HOST_TERMS,
    "GPU-time scale": ("gpu_time_scale",),
    "GPU-time scale + step": ("gpu_time_scale", "step_s"),
    "GPU-time scale + host terms": S.TERMS,
}
PROMPTS = (128, 256, 512, 1024, 2048)  # every task at one assumed prompt length
# versions whose shipped constants `--write-constants` never rewrites: 0.4.2's predictions are
# pinned (tests/spec/test_engine_version.py::test_vllm_042_predictions_unchanged); refitted on
# today's static prediction its wait power would move 33.6 -> 52.6 W
HELD_FIXED = frozenset({V2})
WRITABLE = tuple(v for v in S.VERSIONS if v not in HELD_FIXED)


def measure(data: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """vLLM 0.4.2 on ml-energy v2: (rows, held-out scores per GPU with the band's nested
    coverage, A100 scores with H100's constants, the held-out predictions)."""
    rows = S.serving_rows(data)
    pred = S.leave_one_model_out(rows)
    own = S.scores(pred).merge(S.nested_band_coverage(rows).drop(columns="rows"), on="gpu")
    transfer = S.scores(S.leave_one_model_out(rows, train_gpu=TRAIN_GPU))
    transfer = transfer[transfer["gpu"] != TRAIN_GPU].reset_index(drop=True)
    return rows, own, transfer, pred


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(pred) / np.asarray(meas) - 1.0)))


def _line(label: str, t: np.ndarray, e: np.ndarray, rows: pd.DataFrame) -> dict[str, Any]:
    """Energy, time and per-GPU power MAPE and median energy ratio of predicted (t, e)."""
    mt, me = rows["time_s"].to_numpy(), rows["energy_j"].to_numpy()
    return {
        "variant": label,
        "rows": len(rows),
        "models": rows["model"].nunique(),
        "energy_mape": _mape(e, me),
        "time_mape": _mape(t, mt),
        "power_mape": _mape(np.asarray(e) / t, me / mt),
        "energy_median_ratio": float(np.median(np.asarray(e) / me)),
    }


def _held_out(rows: pd.DataFrame, terms: tuple[str, ...], label: str) -> dict[str, Any]:
    p = S.leave_one_model_out(rows, terms=terms)
    return _line(label, p["pred_time_s"].to_numpy(), p["pred_energy_j"].to_numpy(), rows)


def _by_shape(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with `model` = its catalogue shape: post-trained variants held out together."""
    return rows.assign(model=rows["model"].map(S.V3_MODELS))


def measure_v3(
    data: Path, gpu: str = TRAIN_GPU
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """vLLM 0.11.1 on ml-energy v3's rows of one GPU: (rows, variants table, prompt-sensitivity
    table, per-task table of the shipped terms, held-out predictions of the shipped terms).
    Every fitted term of `gpu` comes from its own rows, the model priced held out."""
    from dse.predict.serving import constants_for

    def of_gpu(r: pd.DataFrame) -> pd.DataFrame:
        return r[r["gpu"] == gpu].reset_index(drop=True)

    rows = of_gpu(S.serving_rows_v3(data))
    plain = of_gpu(S.serving_rows_v3(data, as_static=True))
    lines = [
        _line(
            "static prediction (batching: static)",
            plain[S.STATIC + "latency_s"],
            plain[S.STATIC + "energy_j"],
            plain,
        ),
        _line(
            "static prediction as 0.11.1 runs it (scale 1)",
            rows[S.STATIC + "latency_s"],
            rows[S.STATIC + "energy_j"],
            rows,
        ),
    ]
    before = S.price(plain, constants_for(TRAIN_GPU, V2))  # 0.4.2 is not GQA-aware
    lines.append(
        _line(f"vLLM {V2} constants (before)", before["latency_s"], before["energy_j"], plain)
    )
    if gpu != TRAIN_GPU:  # what `batching: continuous` prices it with: the shipped constants
        now = S.price(rows, constants_for(TRAIN_GPU, V3))
        lines.append(
            _line(
                f"vLLM {V3} constants of {TRAIN_GPU} (shipped)",
                now["latency_s"],
                now["energy_j"],
                rows,
            )
        )
    shipped = S.VERSIONS[V3].terms
    for label, terms in V3_CANDIDATES.items():
        mark = " (shipped)" if terms == shipped else ""
        lines.append(_held_out(rows, terms, f"{label}{mark}, model held out"))
        lines.append(_held_out(_by_shape(rows), terms, f"{label}{mark}, shape held out"))
    variants = pd.DataFrame(lines)
    sens = []
    for label, prompts in (
        (
            "per task (shipped: "
            + ", ".join(f"{k} {v}" for k, v in S.V3_PROMPT_TOKENS.items())
            + ")",
            None,
        ),
        *((f"{p} every task", dict.fromkeys(S.V3_PROMPT_TOKENS, p)) for p in PROMPTS),
    ):
        r = rows if prompts is None else of_gpu(S.serving_rows_v3(data, prompts))
        st = _line("static", r[S.STATIC + "latency_s"], r[S.STATIC + "energy_j"], r)
        ho = _held_out(r, shipped, "held out")
        c = S.fit_constants(r, shipped)
        sens.append(
            {
                "prompt tokens": label,
                "static energy": st["energy_mape"],
                "static time": st["time_mape"],
                "energy": ho["energy_mape"],
                "time": ho["time_mape"],
                "power": ho["power_mape"],
                "gpu_time_scale": c.get("gpu_time_scale", 1.0),
            }
        )
    pred = S.leave_one_model_out(rows, terms=shipped)
    pred["task"] = rows["task"].to_numpy()
    tasks = pd.DataFrame(
        [
            {
                "task": task,
                **_line(task, p["pred_time_s"].to_numpy(), p["pred_energy_j"].to_numpy(), p),
            }
            for task, p in pred.groupby("task", sort=True)
        ]
    )
    return rows, variants, pd.DataFrame(sens), tasks, pred


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render(own: pd.DataFrame, transfer: pd.DataFrame, seconds: float) -> str:
    lines = [
        f"Command: `{COMMAND}` ({seconds:.0f} s). vLLM {V2}: leave-one-model-out over the "
        "ml-energy v2 models of each GPU (A100 also with H100's constants: 'transfer').",
        "",
        "| GPU | constants from | rows | models | energy MAPE | time MAPE | power MAPE | "
        "energy median ratio | worst row | static energy MAPE | static time ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, tab in (("own GPU, model held out", own), (f"{TRAIN_GPU} (transfer)", transfer)):
        for _, r in tab.iterrows():
            lines.append(
                f"| {r['gpu']} | {label} | {r['rows']} | {r['models']} | "
                f"{_pct(r['energy_mape'])} | {_pct(r['time_mape'])} | {_pct(r['power_mape'])} | "
                f"{r['energy_median_ratio']:.2f} | {_pct(r['energy_max_ape'])} | "
                f"{_pct(r['static_energy_mape'])} | {r['static_time_ratio']:.2f} |"
            )
    lines += [
        "",
        "The band (the static prediction's, widened to the 5-95% quantiles of the host model's "
        "held-out log residuals): share of each GPU's rows inside it, nested (each model's band "
        "calibrated on the other models' residuals under fits that saw neither):",
        "",
        "| GPU | latency band coverage | energy band coverage |",
        "|---|---|---|",
    ]
    for _, r in own.iterrows():
        lines.append(
            f"| {r['gpu']} | {_pct(r['latency_coverage'])} | {_pct(r['energy_coverage'])} |"
        )
    return "\n".join(lines)


def render_v3(
    variants: pd.DataFrame, sens: pd.DataFrame, tasks: pd.DataFrame, gpu: str = TRAIN_GPU
) -> str:
    lines = [
        f"vLLM {V3} on ml-energy v3, {gpu} (leave-one-model-out unless said; prompt tokens per "
        "task as shipped):",
        "",
        "| variant | rows | models | energy MAPE | time MAPE | power MAPE | energy median ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in variants.iterrows():
        lines.append(
            f"| {r['variant']} | {r['rows']} | {r['models']} | {_pct(r['energy_mape'])} | "
            f"{_pct(r['time_mape'])} | {_pct(r['power_mape'])} | {r['energy_median_ratio']:.2f} |"
        )
    lines += [
        "",
        "Per task (shipped terms, model held out):",
        "",
        "| task | rows | models | energy MAPE | time MAPE | power MAPE | energy median ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in tasks.iterrows():
        lines.append(
            f"| {r['task']} | {r['rows']} | {r['models']} | {_pct(r['energy_mape'])} | "
            f"{_pct(r['time_mape'])} | {_pct(r['power_mape'])} | {r['energy_median_ratio']:.2f} |"
        )
    lines += [
        "",
        "Assumed prompt length (not recorded by v3): the static prediction and the shipped terms "
        "refitted and held out by model at each:",
        "",
        "| prompt tokens | static energy MAPE | static time MAPE | energy MAPE | time MAPE | "
        "power MAPE | fitted gpu_time_scale |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in sens.iterrows():
        lines.append(
            f"| {r['prompt tokens']} | {_pct(r['static energy'])} | {_pct(r['static time'])} | "
            f"{_pct(r['energy'])} | {_pct(r['time'])} | {_pct(r['power'])} | "
            f"{r['gpu_time_scale']:.3f} |"
        )
    return "\n".join(lines)


def _gpu_entries(
    rows: pd.DataFrame,
    data: Path,
    terms: tuple[str, ...],
    own: pd.DataFrame,
    pred: pd.DataFrame,
) -> dict[str, Any]:
    """Every GPU's constants fitted on all its rows, with provenance and held-out scores."""
    gpus: dict[str, Any] = {}
    for gpu, g in rows.groupby("gpu", sort=True):
        entry = S.constants_entry(g, data, terms)
        sc = own[own["gpu"] == gpu].iloc[0]
        entry["held_out"] = {
            "protocol": "leave-one-model-out",
            **{k: round(float(sc[k]), 4) for k in ("energy_mape", "time_mape", "power_mape")},
            "band_coverage_nested": {
                k: round(float(sc[f"{k}_coverage"]), 4) for k in ("latency", "energy")
            },
        }
        entry["band_log"] = {
            k: [round(x, 5) for x in v]
            for k, v in S.residual_band(pred[pred["gpu"] == gpu]).items()
        }
        gpus[str(gpu)] = entry
    return gpus


def constants_json(
    v2: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    v3: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    data: Path,
    versions: tuple[str, ...] = (V2, V3),
) -> dict[str, Any]:
    """The shipped JSON of `versions`: per version, (rows, held-out scores with nested band
    coverage, held-out predictions) -> every GPU's constants fitted on all its rows, with
    provenance."""
    fitted = {
        "command": COMMAND + " --write-constants",
        "date": time.strftime("%Y-%m-%d"),
        "commit": short_commit(REPO),
        "machine": platform.platform(),
    }
    entries = {}
    for version, (rows, own, pred) in ((V2, v2), (V3, v3)):
        if version not in versions:
            continue
        spec = S.VERSIONS[version]
        entries[version] = {
            "source": spec.source,
            "terms": list(spec.terms),
            "gqa_aware_attention": spec.gqa_aware_attention,
            "kv_at_mean_context": spec.kv_at_mean_context,
            **(
                {"prompt_tokens_assumed": S.V3_PROMPT_TOKENS}
                if version == V3
                else {"prompt_tokens_assumed": 256}
            ),
            "fitted": fitted,
            "default_gpu": TRAIN_GPU,
            "gpus": _gpu_entries(rows, data, spec.terms, own, pred),
        }
    return {
        "format_version": FORMAT_VERSION,
        "engine": S.ENGINE,
        "model": "host per decode step = step_s + per_sequence_s * batch + per_extra_gpu_s * "
        "(tp - 1); the static prediction's GPU time and energy x gpu_time_scale (1 when absent), "
        "its decode attention GQA-aware (gqa_aware_attention) and its running batch's KV at "
        "the mean context (kv_at_mean_context) where the version says so; "
        "waiting GPU draws idle_power_w + wait_above_idle_w (dse.models.serving)",
        "versions": entries,
    }


def merge_constants(
    shipped: dict[str, Any], fitted: dict[str, Any], versions: tuple[str, ...]
) -> dict[str, Any]:
    """The constants file with only `versions` taken from `fitted`; every other version's
    entry of `shipped` kept as it is (a version held fixed is never taken)."""
    fixed = sorted(set(versions) & HELD_FIXED)
    if fixed:
        raise ValueError(f"{CONSTANTS_FILE.name}: {fixed[0]}: held fixed, never rewritten")
    out = {k: v for k, v in fitted.items() if k != "versions"}
    out["versions"] = dict(shipped.get("versions", {}))
    for v in versions:
        out["versions"][v] = fitted["versions"][v]
    return out


def _versions(arg: str) -> tuple[str, ...]:
    """`--versions`: comma-separated, each one `--write-constants` may rewrite."""
    got = tuple(v.strip() for v in arg.split(",") if v.strip())
    for v in got:
        if v in HELD_FIXED:
            raise argparse.ArgumentTypeError(
                f"{v}: held fixed (its predictions are pinned), never rewritten; "
                f"writable: {', '.join(WRITABLE)}"
            )
        if v not in WRITABLE:
            raise argparse.ArgumentTypeError(
                f"{v}: unknown version; writable: {', '.join(WRITABLE)}"
            )
    if not got:
        raise argparse.ArgumentTypeError(f"no version named; writable: {', '.join(WRITABLE)}")
    return got


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--write-constants", action="store_true", help=f"write {CONSTANTS_FILE.name}")
    p.add_argument(
        "--versions",
        type=_versions,
        default=(V3,),
        help=f"with --write-constants: the versions rewritten, comma-separated (default {V3}); "
        f"the file's other entries are kept; {', '.join(sorted(HELD_FIXED))} is held fixed",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    t0 = time.perf_counter()
    data = Path(args.data)
    rows, own, transfer, pred = measure(data)
    shipped = S.VERSIONS[V3].terms
    print(render(own, transfer, time.perf_counter() - t0))
    # the H100 rows alone make the shipped constants; every other v3 GPU is scored held out by
    # model on its own rows (its constants are not written: `default_gpu` prices it)
    for gpu in sorted(set(S.V3_GPUS.values()), key=lambda g: g != TRAIN_GPU):
        got = measure_v3(data, gpu)
        if gpu == TRAIN_GPU:
            rows3, pred3 = got[0], got[4]
        print()
        print(render_v3(*got[1:4], gpu=gpu))
    own3 = S.scores(pred3).merge(
        S.nested_band_coverage(rows3, shipped).drop(columns="rows"), on="gpu"
    )
    print(f"\nMachine: {platform.platform()}; {time.perf_counter() - t0:.0f} s in all.")
    if args.write_constants:
        doc = constants_json((rows, own, pred), (rows3, own3, pred3), data, args.versions)
        doc = merge_constants(json.loads(CONSTANTS_FILE.read_text()), doc, args.versions)
        CONSTANTS_FILE.write_text(json.dumps(doc, indent=1) + "\n")
        print(
            f"wrote {CONSTANTS_FILE.relative_to(REPO)} (versions {', '.join(args.versions)})",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
