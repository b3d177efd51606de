"""Chosen configurations of a sweep -> files other tools read: YAML / JSON for `dse predict`,
Hugging Face `config.json` folders for transformers.

    from dse.report.export import write_export
    write_export("results/dense-8b", fmt="yaml", top=5, by="knee")

The YAML / JSON shape is the one `dse predict --config FILE [--entry N]` reads:

    configs:
      - architecture: {d_model: 4096, n_layers: 32, ...}   # every Architecture field
        workload: {batch_size: 8, prompt_tokens: 2048, ...} # every Workload field
        gpu: h100_sxm
        predictions: {trial: 12, selected_by: ..., objectives: {...}, hymell: {...}, ...}

`predictions` is what the sweep predicted, kept for reference; `dse predict` ignores it.
Selection (`select`) and entry building (`config_entries`) are pure; `write_export` does the I/O.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import yaml

from dse import __version__
from dse.errors import ConfigError, DSEError
from dse.pareto import Normalisation, knee_index
from dse.report._files import write_text_atomic
from dse.report._results import (
    ObjectiveColumn,
    Results,
    ResultsError,
    fmt_quantity,
    load_results,
    objective_matrix,
    plain,
)
from dse.spec import columns as C
from dse.spec.arch import Architecture

FORMATS = ("yaml", "json", "hf")
# --by: nearness to the knee, or an objective of the study by its name or first word
# (energy, latency, loss, throughput, ...), best first in its direction.
KNEE = "knee"
SIZE_COLUMNS = ("total_params", "active_params", "kv_bytes_per_token", "memory_bytes")


class Selection(NamedTuple):
    rows: pd.DataFrame  # the chosen trials, in export order
    why: str  # one sentence: how they were chosen


# ---------------------------------------------------------------------- selection
def rankings(res: Results) -> list[str]:
    """What --by accepts for this study: knee, each objective's first word where no other
    objective shares it (energy, latency, loss, ...), and each objective's full name."""
    words = [o.name.split("_", 1)[0] for o in res.objectives]
    short = [w for w in dict.fromkeys(words) if words.count(w) == 1]
    full = [o.name for o in res.objectives if o.name not in short]
    return [KNEE, *short, *full]


def ranking_objective(res: Results, by: str) -> tuple[ObjectiveColumn, bool]:
    """(objective, maximised) that --by names: its full name, or its first word when a single
    objective of the study starts with it (`loss` -> loss_chinchilla)."""
    match = [o for o in res.objectives if o.name == by] or [
        o for o in res.objectives if o.name.split("_", 1)[0] == by
    ]
    if len(match) != 1:
        short = [r for r in rankings(res)[1:] if r not in [o.name for o in res.objectives]]
        raise ConfigError(
            f"--by: must be knee or an objective of the study, by its first word or full name "
            f"({', '.join([*short, *(o.name for o in res.objectives)])}), got {by!r}"
        )
    o = match[0]
    dirs = res.directions
    return o, bool(dirs and dirs[res.objectives.index(o)] == "maximize")


def knee_order(res: Results) -> tuple[pd.DataFrame, int]:
    """Feasible configurations (one trial each) sorted by distance to the knee (objectives
    normalised over the front).

    The knee is `dse.pareto.knee_index` of the study's front, so `--top 1 --by knee` exports the
    point the report labels "knee". Returns the sorted rows and the knee's trial number.
    """
    feas = res.distinct  # a repeated configuration is exported once
    front = res.front
    F = objective_matrix(front, res.objectives)
    k = knee_index(F, res.directions)
    norm = Normalisation(F.min(axis=0), F.max(axis=0))
    z = norm.apply(objective_matrix(feas, res.objectives))
    dist = np.sqrt(((z - norm.apply(F[k : k + 1])) ** 2).sum(axis=1))
    order = np.lexsort((feas["number"].to_numpy(), dist))
    return feas.iloc[order], int(front["number"].iloc[k])


def select(
    res: Results, *, front: bool = False, top: int | None = None, by: str | None = None
) -> Selection:
    """The trials to export: the front (default), or the `top` feasible trials by a ranking
    (`rankings`; default: energy when the study has one energy objective, else its first)."""
    if front and top is not None:
        raise ConfigError("give either --front or --top K, not both")
    if res.feasible.empty:
        raise ResultsError(
            f"{res.path}: no feasible trial to export: every configuration the sweep evaluated "
            "breaks a constraint (see report.html); relax the constraints and sweep again"
        )
    if top is None:
        rows = res.front
        return Selection(
            rows,
            f"the {len(rows)} configurations on the Pareto front "
            f"({', '.join(o.label for o in res.objectives)})",
        )
    if top < 1:
        raise ConfigError(f"--top: must be an integer >= 1, got {top}")
    feas = res.distinct  # one row per configuration: --top K gives K distinct ones
    if by is None:
        by = "energy" if "energy" in rankings(res) else res.objectives[0].name
    if by == KNEE:
        ranked, knee = knee_order(res)
        why = (
            f"the {min(top, len(ranked))} feasible configurations nearest the knee of the front "
            f"(trial {knee}; objectives normalised over the front)"
        )
    else:
        o, maximised = ranking_objective(res, by)
        ranked = feas.sort_values([o.column, "number"], ascending=[not maximised, True])
        best = "highest" if maximised else "lowest"
        why = f"the {min(top, len(ranked))} feasible configurations with the {best} {o.label}"
    return Selection(ranked.head(top), why)


# ---------------------------------------------------------------------- entries
def _finite(v: Any) -> bool:
    return not (isinstance(v, float) and not math.isfinite(v))


# Architecture fields whose default is a bool: a table may hold them as 0/1.
_BOOL_FIELDS = {f.name for f in fields(Architecture) if isinstance(f.default, bool)}


def config_entry(row: pd.Series, res: Results, why: str) -> dict[str, Any]:
    """One `configs:` entry: architecture, workload, gpu, and the sweep's predictions."""
    arch = {
        f: bool(plain(row[f])) if f in _BOOL_FIELDS else plain(row[f])
        for f in C.ARCH_FIELDS
        if f in row.index and _finite(plain(row[f]))
    }
    workload = {
        f: plain(row[f]) for f in C.WORKLOAD_FIELDS if f in row.index and _finite(plain(row[f]))
    }
    preds: dict[str, Any] = {"trial": int(row["number"]), "selected_by": why}
    if "trials" in row.index:  # trials of the study that hit this configuration
        preds["trials"] = int(row["trials"])
    if "indistinguishable" in row.index and bool(row["indistinguishable"]):
        preds["indistinguishable"] = True  # a front neighbour lies inside the predictor's band
    preds["objectives"] = {o.name: float(row[o.column]) for o in res.objectives}
    hymell = {
        c[5:]: plain(row[c]) for c in row.index if c.startswith("pred.") and _finite(plain(row[c]))
    }
    if hymell:
        preds["hymell"] = hymell
    t2wh = {
        c[5:]: plain(row[c]) for c in row.index if c.startswith("t2wh.") and _finite(plain(row[c]))
    }
    if t2wh:
        preds["tokens2wh"] = t2wh
    preds["sizes"] = {c: plain(row[c]) for c in SIZE_COLUMNS if c in row.index}
    return {
        "architecture": arch,
        "workload": workload,
        "gpu": str(row["gpu"]),
        "predictions": preds,
    }


def config_entries(sel: Selection, res: Results) -> list[dict[str, Any]]:
    return [config_entry(r, res, sel.why) for _, r in sel.rows.iterrows()]


def entry_columns(entries: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The configuration columns of entries, as `dse.spec.columns.as_columns` / `predict` take them."""
    keys = list(dict.fromkeys(k for e in entries for k in (*e["architecture"], *e["workload"])))
    cols: dict[str, list[Any]] = {k: [] for k in keys}
    cols["gpu"] = []
    for e in entries:
        for k in keys:
            cols[k].append(e["architecture"].get(k, e["workload"].get(k, C.DEFAULTS.get(k))))
        cols["gpu"].append(e["gpu"])
    return cols


def entry_architecture(entry: dict[str, Any]) -> Architecture:
    """The scalar Architecture of one entry."""
    return Architecture.from_mapping(entry["architecture"])


# ---------------------------------------------------------------------- writing
def write_export(
    results_dir: str | Path,
    *,
    fmt: str = "yaml",
    out: str | Path | None = None,
    front: bool = False,
    top: int | None = None,
    by: str | None = None,
) -> Path:
    """Write the chosen configurations of a results folder in `fmt`; returns the folder.

    yaml / json: `configs.yaml` / `configs.json` (read back by `dse predict --config`);
    hf: one folder per configuration with a Hugging Face config.json. A README.md beside them
    lists what was exported and why.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format: must be one of {', '.join(FORMATS)}, got {fmt!r}")
    res = load_results(results_dir)
    sel = select(res, front=front, top=top, by=by)
    entries = config_entries(sel, res)
    dest = Path(out) if out is not None else res.path / "export"
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DSEError(f"{dest}: cannot create the export folder ({exc.strerror or exc})") from None
    files: list[str] = []
    if fmt == "yaml":
        write_text_atomic(dest / "configs.yaml", _yaml_text(entries, res, sel))
        files = ["configs.yaml"] * len(entries)
    elif fmt == "json":
        write_text_atomic(dest / "configs.json", json.dumps({"configs": entries}, indent=2) + "\n")
        files = ["configs.json"] * len(entries)
    else:
        from dse.spec.hf import to_hf_config

        for e in entries:
            name = f"trial-{e['predictions']['trial']}"
            try:
                cfg = to_hf_config(entry_architecture(e))
            except ConfigError as exc:
                raise ConfigError(
                    f"trial {e['predictions']['trial']}: cannot be exported as a Hugging Face "
                    f"config: {exc}"
                ) from None
            cfg["max_position_embeddings"] = context_tokens(e["workload"])
            (dest / name).mkdir(exist_ok=True)
            write_text_atomic(dest / name / "config.json", json.dumps(cfg, indent=2) + "\n")
            files.append(f"{name}/config.json")
    write_text_atomic(dest / "README.md", readme_text(res, sel, entries, fmt, files))
    return dest


def context_tokens(workload: dict[str, Any]) -> int:
    """max_position_embeddings of an exported config: the smallest power of two that holds
    the study's prompt + output tokens (8192 + 256 -> 16384). Without it transformers takes
    its class default (Llama: 2048), and vLLM or TensorRT-LLM would refuse the very requests
    the study predicted; the power of two is the convention of published configs."""
    need = int(workload.get("prompt_tokens", 0)) + int(workload.get("output_tokens", 0))
    return 1 << max(need - 1, 1).bit_length()


def _yaml_text(entries: list[dict[str, Any]], res: Results, sel: Selection) -> str:
    head = (
        f"# Exported by dse {__version__} from {res.path} "
        f"(study {res.summary.get('study', '?')}, sampler {res.summary.get('sampler', '?')}, "
        f"seed {res.summary.get('seed', '?')}).\n"
        f"# Selection: {sel.why}.\n"
        "# Predict one entry again with: dse predict --config configs.yaml --entry N (N from 0)\n"
    )
    return head + yaml.safe_dump({"configs": entries}, sort_keys=False, width=100)


def readme_text(
    res: Results, sel: Selection, entries: list[dict[str, Any]], fmt: str, files: list[str]
) -> str:
    """The README.md written beside an export: what, why, from where, and how to use it."""
    s = res.summary
    params = res.searched
    lines = [
        "# Exported configurations",
        "",
        f"{len(entries)} configurations: {sel.why}.",
        "",
        f"- results: `{res.path}` (study `{s.get('study', '?')}`, space "
        f"`{s.get('space_file', '?')}`, sampler {s.get('sampler', '?')}, seed "
        f"{s.get('seed', '?')})",
        f"- predictor artifacts: {', '.join(f'{k}: {v}' for k, v in (s.get('artifacts') or {}).items()) or 'not recorded'}",
        f"- exported {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} by dse {__version__}, "
        f"format `{fmt}`",
        "",
    ]
    if fmt == "hf":
        lines += [
            "Each folder holds a Hugging Face `config.json` (Llama for dense models, Mixtral or "
            "Qwen2-MoE for mixtures of experts, `num_key_value_heads` for GQA). Load one with "
            "`transformers.AutoConfig.from_pretrained(folder)`; the weights are not trained.",
        ]
    else:
        lines += [
            f"`{files[0] if files else 'configs.' + fmt}` lists the configurations under "
            "`configs:`, each with its `architecture`, `workload`, `gpu` and the sweep's "
            "`predictions`. Predict one again with "
            f"`dse predict --config {files[0] if files else 'configs.' + fmt} --entry N` "
            "(N counts from 0).",
        ]
    lines += [
        "",
        "| entry | trial | file | "
        + " | ".join(params)
        + " | "
        + " | ".join(o.label for o in res.objectives)
        + " | total params |",
    ]
    lines.append("|" + "---|" * (4 + len(params) + len(res.objectives)))
    for i, (e, f) in enumerate(zip(entries, files, strict=True)):
        p = e["predictions"]
        flat = {**e["architecture"], **e["workload"], "gpu": e["gpu"]}
        lines.append(
            f"| {i} | {p['trial']} | `{f}` | "
            + " | ".join(str(flat.get(k, "")) for k in params)
            + (" | " if params else "")
            + " | ".join(fmt_quantity(p["objectives"][o.name], o.unit) for o in res.objectives)
            + f" | {fmt_quantity(p['sizes'].get('total_params', math.nan), 'parameters')} |"
        )
    return "\n".join(lines) + "\n"
