"""`dse predict`: latency and energy of one configuration (table or JSON) or of a CSV of many.

One file (~750 lines) on purpose: the command's three inputs (flags, --model, --batch CSV) and
three outputs (table, JSON, CSV) share one argument parser and one set of row checks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from dse.commands import _flags
from dse.commands._flags import ARCH_FLAGS
from dse.errors import ConfigError
from dse.spec import columns as C
from dse.spec import fields as F
from dse.spec.choices import DEFAULT_ENGINE_VERSION
from dse.spec.hardware import get_gpu

WORKLOAD_FLAGS: tuple[str, ...] = (
    *_flags.WORKLOAD_FLAGS,
    "engine",
    "batching",
    "engine_version",
    "routing",
)
# Where a configuration comes from: at most one of these.
SOURCES: tuple[tuple[str, str], ...] = (
    ("model", "--model"),
    ("hf_config", "--hf-config"),
    ("config", "--config"),
    ("batch", "--batch"),
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="predict latency and energy of one or many configurations",
        description="Predict time to first token, time per output token, request latency and "
        "energy of a configuration (architecture + workload + GPU) with the frozen predictor.\n\n"
        "examples:\n"
        "  dse predict --model llama-3-8b --gpu h100_sxm --batch-size 8 --prompt-tokens 1024 --output-tokens 256\n"
        "  dse predict --d-model 4096 --n-layers 32 --n-heads 32 --n-kv-heads 8 --d-ff 14336 --json\n"
        "  dse predict --hf-config path/to/config.json --gpu h200_sxm\n"
        "  dse predict --config exported.yaml --entry 0\n"
        "  dse predict --batch configs.csv --out predictions.csv\n\n"
        "--batch: one configuration per row, a column per field (d_model, n_layers, n_heads and "
        "d_ff required; an empty cell of another column takes its default). A cell that is not a "
        "value of its column refuses the file with every such cell named as FILE: row N: column; "
        "rows are numbered as a spreadsheet shows them (the header is row 1, the first "
        "configuration row 2). A configuration that breaks an architecture rule or does not fit "
        "in memory gets a message in the `error` column instead of a prediction. Rows are "
        f"predicted {BATCH_CHUNK_ROWS:,} at a time (a progress bar on a terminal's stderr, off "
        "with -q), which bounds memory and does not change the predictions.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("where the architecture comes from (at most one)")
    src.add_argument("--model", help="a published model from the catalogue (see `dse arch --list`)")
    src.add_argument("--hf-config", help="a Hugging Face config.json")
    src.add_argument(
        "--config", help="a YAML/JSON file with a `configs:` list (as written by `dse export`)"
    )
    _flags.add_field_flags(src, ("entry",), helps={"entry": "which entry of --config"})
    src.add_argument(
        "--batch", help="CSV with one configuration per row (architecture, workload, gpu columns)"
    )
    arch = p.add_argument_group("architecture flags (override --model / --hf-config / --config)")
    _flags.add_field_flags(arch, ARCH_FLAGS)
    wl = p.add_argument_group("workload and GPU (defaults: batch 1, 1024 + 256 tokens, h100_sxm)")
    _flags.add_field_flags(wl, WORKLOAD_FLAGS, aliases={"tensor_parallel": ("--tp",)})
    _flags.add_field_flags(wl, ("gpu",), helps={"gpu": "GPU registry name (see `dse gpus`)"})
    p.add_argument(
        "--out", help="with --batch: output CSV (default: stdout); not the input CSV itself"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="with --batch: no progress bar (it shows on stderr only when stderr is a terminal)",
    )
    p.set_defaults(command="predict")


def _check_sources(args: argparse.Namespace) -> None:
    """At most one configuration source; --batch takes nothing a row sets; --out, --entry only
    with what they belong to."""
    if args.batch and args.batch.isdigit() and not Path(args.batch).exists():
        _read_csv(Path(args.batch), args.batch)  # --batch 8 meant --batch-size 8: say so first
    given = [(flag, getattr(args, dest)) for dest, flag in SOURCES if getattr(args, dest)]
    if len(given) > 1:
        raise _flags.conflict(
            given[0][0],
            given[1][0],
            given[1][1],
            "give one of --model, --hf-config, --config, --batch",
        )
    if args.batch:
        for name in (*ARCH_FLAGS, *WORKLOAD_FLAGS, "gpu"):
            v = getattr(args, name, None)
            if v is not None:
                raise _flags.conflict(
                    "--batch", _flags.flag_of(args, name), v, f"the CSV's {name} column sets it"
                )
    elif args.out:
        raise ConfigError(f"--out: only with --batch (a CSV of configurations), got {args.out!r}")
    if args.entry is not None and not args.config:
        raise ConfigError(
            f"--entry: only with --config, got {F.show(F.number_or_text(args.entry))}"
        )


def _single(args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {}
    if args.config:
        entry = _flags.read_flag(args, "entry")
        row.update(_from_config_file(Path(args.config), 0 if entry is None else entry))
    if args.model:
        from dse.spec.catalogue import lookup_model

        row.update(lookup_model(args.model).to_dict())
    if args.hf_config:
        from dse.spec.hf import import_hf_config

        imp = import_hf_config(args.hf_config)
        if not imp.exact:  # priced as `dse arch` counts it, and said so (as --model does)
            left_out = (
                f"{imp.unmodelled_params:,} parameters are not modelled"
                if imp.unmodelled_params
                else "every parameter is modelled"
            )
            print(
                f"note: {args.hf_config}: model_type {imp.model_type!r} is approximate: "
                f"{left_out} ({'; '.join(imp.notes)})",
                file=sys.stderr,
            )
        imported = imp.arch.to_dict()
        for key, v in imported.items():  # a config beyond the limits names its file
            if v is not None and key in F.FIELDS:
                F.check(key, v, f"{args.hf_config}: {key}")
        row.update(imported)
    flags = _flags.read_flags(args, (*ARCH_FLAGS, *WORKLOAD_FLAGS, "gpu"))
    if row and "head_dim" not in flags and ("d_model" in flags or "n_heads" in flags):
        row.pop("head_dim", None)  # re-derive d_model // n_heads from the new shape
    row.update(flags)
    missing = [n for n in C.REQUIRED if row.get(n) is None]
    if missing:
        raise ConfigError(
            f"{_flags.flag_name(missing[0])}: required unless --model, --hf-config or --config "
            f"gives the architecture; missing {', '.join(_flags.flag_name(m) for m in missing)}"
        )
    return {k: v for k, v in row.items() if v is not None}


def _from_config_file(path: Path, entry: int) -> dict[str, Any]:
    from dse.yamlio import load_located

    doc = load_located(path)
    entries = doc.data.get("configs") if isinstance(doc.data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise doc.error(("configs",), "must be a non-empty list of configurations")
    if not 0 <= entry < len(entries):
        raise ConfigError(f"--entry: must be an integer in [0, {len(entries) - 1}], got {entry}")
    e = entries[entry]
    at: tuple[str, ...] = ("configs", str(entry))
    if not isinstance(e, dict):
        raise doc.error(at, f"must be a mapping, got {F.show(e)}")
    row: dict[str, Any] = {}
    for section, valid in (("architecture", C.ARCH_FIELDS), ("workload", C.WORKLOAD_FIELDS)):
        part = e.get(section) or {}
        if not isinstance(part, dict):
            raise doc.error((*at, section), f"must be a mapping, got {F.show(part)}")
        for key, v in part.items():
            keys = (*at, section, str(key))
            if key not in valid:
                raise doc.error(keys, f"unknown key; valid keys: {', '.join(valid)}")
            if v is None:
                continue
            row[key] = F.check(key, v, lambda _i, msg, keys=keys: doc.error(keys, msg))
    if "gpu" in e:
        keys = (*at, "gpu")
        row["gpu"] = F.check("gpu", e["gpu"], lambda _i, msg: doc.error(keys, msg))
    return row


def check_rows_and_warnings(
    cols: Mapping[str, np.ndarray], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(error, warning) per row, '' where there is none. Errors: an unknown GPU, a broken
    architecture rule, a configuration that cannot run because one sequence does not fit
    (`dse.spec.arch.memory_messages`); warnings: memory near the limit or a batch that queues."""
    err = np.full(n, "", dtype=object)
    warn = np.full(n, "", dtype=object)
    for name in np.unique(cols["gpu"]):
        try:
            get_gpu(str(name))
        except ConfigError as exc:
            err[cols["gpu"] == name] = str(exc)
    ok = err == ""
    if ok.any():
        sub = {k: v[ok] for k, v in cols.items()}
        d = C.derived(sub, int(ok.sum()), messages=True)
        msg = d["invalid"].copy()
        valid = msg == ""
        msg[valid] = d["memory_refusal"][valid]
        err[ok] = msg
        warn[ok] = np.where(msg == "", d["memory_warning"], "")
    return err, warn


def run(args: argparse.Namespace) -> int:
    _check_sources(args)
    if args.batch:
        return _run_batch(args.batch, args.out, quiet=args.quiet)
    row = _single(args)
    cols, n = C.as_columns({k: [v] for k, v in row.items()})
    err, warn = check_rows_and_warnings(cols, n)
    if err[0]:
        raise ConfigError(err[0])
    from dse.predict import predict

    pred = predict(cols, models=True)
    config = {k: _plain(cols[k][0]) for k in C.CONFIG_FIELDS}
    result = {k: _plain(v[0]) for k, v in pred.items()}
    if warn[0]:
        result["memory_warning"] = warn[0]
    if args.model:
        from dse.spec.catalogue import context_tokens

        ctx = context_tokens(args.model)
        if ctx is not None and config["prompt_tokens"] + config["output_tokens"] > ctx:
            # an engine serves at most the model's context: it would stop (or refuse) early
            result["context_tokens"] = ctx
            result["beyond_context"] = True
    if args.json:
        json.dump({"config": config, "prediction": result}, sys.stdout, indent=2)
        print()
        return 0
    _print_table(config, result)
    return 0


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.3f} s"


def _fmt_energy(j: float) -> str:
    return f"{j * 1e3:.3f} mJ" if j < 1 else f"{j:.3f} J"


# The architecture line of the table (a subset of ARCH_FLAGS: the sizes, not the dtypes).
TABLE_ARCH_FIELDS = (
    "d_model",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "head_dim",
    "d_ff",
    "n_experts",
    "top_k",
    "vocab_size",
)
PHASES = ("prefill", "decode")


class Total(NamedTuple):
    """One headline row: its label, the value and the band around it (None without one);
    `unit` says how it prints: "s" (time), "J" (energy) or "W"."""

    label: str
    value: float
    unit: str
    lo: float | None = None
    hi: float | None = None


class Provenance(NamedTuple):
    """Where a prediction came from (predict's provenance columns) and what it warns about."""

    source: Any
    artifact_id: Any
    fitted_for: str | None  # the artifact's GPU when it is not the configuration's
    out_of_range: bool
    energy_source: str | None
    roofline_ops: tuple[str, ...]
    borrowed_ops: tuple[str, ...]
    borrowed_artifacts: Any
    banded: bool  # the totals carry a band
    out_of_range_inputs: str | None  # the text of predict's column, when out of range
    # models of the artifact fitted on another GPU's rows: "<gpu>: <model>, <model>" per GPU
    stand_ins: tuple[str, ...] = ()
    # the fitted models that priced the operators (predict's `kernel_models`), e.g. an SGLang
    # configuration's `gemm.sglang.bfloat16`, its attention with the backend SGLang runs,
    # `context_attention.sglang[trtllm_mha]` (dse.models.attention_backend)
    kernel_models: tuple[str, ...] = ()


class PredictionInfo(NamedTuple):
    """What `dse predict` shows of one configuration, as data (`render_table` prints it)."""

    architecture: str
    workload: str
    totals: list[Total]
    # phase -> (block, % of the phase's time), largest first, blocks with time only
    blocks: dict[str, list[tuple[str, float]]]
    # phase -> (operator, seconds, % of the phase's time), largest first, operators with time
    breakdown: dict[str, list[tuple[str, float, float]]]
    provenance: Provenance
    warnings: list[str]


def prediction_info(config: dict[str, Any], r: dict[str, Any]) -> PredictionInfo:
    """The table's content for one configuration (`config`: its fields, `r`: its prediction,
    plain values, with `memory_warning` / `beyond_context` when `run` added them)."""
    arch = " ".join(f"{k}={config[k]}" for k in TABLE_ARCH_FIELDS)
    workload = (
        f"batch_size={config['batch_size']} prompt_tokens={config['prompt_tokens']} "
        f"output_tokens={config['output_tokens']} tensor_parallel={config['tensor_parallel']} "
        f"engine={config['engine']} gpu={config['gpu']}"
    )
    if config.get("batching", "static") != "static":  # the static line as it always was
        workload += f" batching={config['batching']}"
        workload += f" engine_version={config.get('engine_version', DEFAULT_ENGINE_VERSION)}"
    if config.get("routing", "uniform") != "uniform":
        workload += f" routing={config['routing']}"
    blocks: dict[str, list[tuple[str, float]]] = {}
    breakdown: dict[str, list[tuple[str, float, float]]] = {}
    for phase in PHASES:
        items = _phase_items(r, f"breakdown.{phase}.")
        total = sum(items.values()) or 1.0
        phase_blocks = _phase_items(r, f"blocks.{phase}.")
        if phase_blocks:
            blocks[phase] = [
                (k, 100 * v / total)
                for k, v in sorted(phase_blocks.items(), key=lambda kv: -kv[1])
                if v > 0
            ]
        breakdown[phase] = [
            (k, v, 100 * v / total)
            for k, v in sorted(items.items(), key=lambda kv: -kv[1])
            if v > 0
        ]
    return PredictionInfo(
        f"architecture: {arch}",
        f"workload:     {workload}",
        _totals(r),
        blocks,
        breakdown,
        _provenance(config, r),
        _warnings(r),
    )


def _phase_items(r: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The `<prefix><name>_s` columns of a prediction by name."""
    return {k.split(".", 2)[2][:-2]: v for k, v in r.items() if k.startswith(prefix)}


def _totals(r: dict[str, Any]) -> list[Total]:
    def timed(label: str, key: str) -> Total:
        if f"{key}_lo_s" in r:
            return Total(label, r[f"{key}_s"], "s", r[f"{key}_lo_s"], r[f"{key}_hi_s"])
        return Total(label, r[f"{key}_s"], "s")

    energy = Total("energy", r["energy_j"], "J")
    if "energy_lo_j" in r:
        energy = energy._replace(lo=r["energy_lo_j"], hi=r["energy_hi_j"])
    return [
        timed("time to first token", "ttft"),
        timed("time per output token", "tpot"),
        timed("request latency", "latency"),
        Total("prefill energy", r["prefill_energy_j"], "J"),
        Total("decode energy", r["decode_energy_j"], "J"),
        energy,
        Total("energy per output token", r["energy_per_output_token_j"], "J"),
        Total("average power per GPU", r["avg_power_w"], "W"),
    ]


def _provenance(config: dict[str, Any], r: dict[str, Any]) -> Provenance:
    fitted_for = r.get("artifact_gpu")
    names = lambda key: tuple(r[key].split(",")) if r.get(key) else ()  # noqa: E731
    return Provenance(
        source=r.get("source"),
        artifact_id=r.get("artifact_id"),
        fitted_for=fitted_for if fitted_for and fitted_for != config["gpu"] else None,
        out_of_range=bool(r.get("out_of_range")),
        energy_source=r.get("energy_source") or None,
        roofline_ops=names("roofline_ops"),
        borrowed_ops=names("borrowed_ops"),
        borrowed_artifacts=r.get("borrowed_artifacts"),
        banded="latency_lo_s" in r,
        out_of_range_inputs=(r.get("out_of_range_inputs") or None)
        if r.get("out_of_range")
        else None,
        stand_ins=_stand_ins(config["gpu"], r.get("artifact_id")),
        kernel_models=names("kernel_models"),
    )


def _stand_ins(gpu: str, artifact_id: Any) -> tuple[str, ...]:
    """ "<gpu>: <model>, ..." per GPU whose rows fitted models of the artifact that priced `gpu`
    (`artifact_id`, as predict reported it; () for the roofline or another artifact)."""
    from dse.predict.artifacts import fitted_elsewhere, load_artifact

    art, _ = load_artifact(gpu)
    if art is None or art.artifact_id != artifact_id:
        return ()
    return tuple(f"{g}: {', '.join(names)}" for g, names in fitted_elsewhere(art).items())


def _warnings(r: dict[str, Any]) -> list[str]:
    out = []
    if r.get("memory_warning"):
        out.append(r["memory_warning"])
    if r.get("beyond_context"):
        out.append(
            f"prompt + output exceed the model's context of {r['context_tokens']} "
            "tokens; an engine would stop or refuse before the requested output"
        )
    if r.get("out_of_range"):
        out.append(
            "an input lies outside the range the artifact was fitted on; trust the band less"
        )
    return out


def render_table(info: PredictionInfo) -> str:
    """The text `dse predict` prints for one configuration (no trailing newline)."""
    lines = [info.architecture, info.workload]
    lines += [f"  {t.label:<26}{_fmt_total(t)}" for t in info.totals]
    for phase in PHASES:
        if phase in info.blocks:
            shares = ", ".join(f"{k} {share:.0f}%" for k, share in info.blocks[phase])
            lines.append(f"  blocks, {phase}: {shares}")
        lines.append(f"  breakdown, {phase}:")
        lines += [
            f"    {k:<24}{_fmt_time(v):>12}  {share:5.1f}%" for k, v, share in info.breakdown[phase]
        ]
    p = info.provenance
    lines.append(
        f"provenance: source={p.source} artifact={p.artifact_id}"
        + (f" (fitted for {p.fitted_for})" if p.fitted_for else "")
        + f" out_of_range={'yes' if p.out_of_range else 'no'}"
    )
    if p.energy_source:
        lines.append(f"  energy: {p.energy_source}")
    if p.kernel_models:
        lines.append(f"  kernel models: {', '.join(p.kernel_models)}")
    if p.roofline_ops:
        lines.append(f"  priced by the roofline (no fitted model): {', '.join(p.roofline_ops)}")
    if p.borrowed_ops:
        lines.append(
            f"  priced with a sibling chip's table ({p.borrowed_artifacts}): "
            + ", ".join(p.borrowed_ops)
        )
    for text in p.stand_ins:
        lines.append(f"  fitted on another GPU's rows (a stand-in, unmeasured here): {text}")
    if p.banded:
        lines.append("  band: held-out residual quantiles (5%..95%) of the whole stack")
    lines += [f"  warning: {w}" for w in info.warnings]
    if p.out_of_range_inputs:
        # every comma gets a space, as the table always printed it
        lines.append(f"  outside the fitted range: {p.out_of_range_inputs}")
    return "\n".join(lines)


def _fmt_total(t: Total) -> str:
    fmt = {"s": _fmt_time, "J": _fmt_energy, "W": lambda w: f"{w:.0f} W"}[t.unit]
    band = f"  [{fmt(t.lo)} .. {fmt(t.hi)}]" if t.lo is not None else ""
    return fmt(t.value) + band


def _print_table(config: dict[str, Any], r: dict[str, Any]) -> None:
    print(render_table(prediction_info(config, r)))


# ---------------------------------------------------------------------- --batch CSV
MAX_SHOWN = 20  # bad cells listed in one message (then a count of the rest)
# Rows predicted (and turned into output text) at a time: the predictor's intermediates and the
# output's Python values grow with the rows of a call. 100,000 rows: 805 MB peak in one call,
# 485 MB in chunks of 20,000 (of which 55 MB is the interpreter and one artifact).
BATCH_CHUNK_ROWS = 20_000
_DERIVED_DEFAULT = C.DERIVED_FROM  # an empty cell takes this column's value


def _read_csv(path: Path, given: str) -> list[list[str]]:
    """Every record of a CSV file (the header first), blank lines as empty records so that
    record i is spreadsheet row i + 1. Unreadable files are one clear error."""
    import csv
    import io

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        # --batch 8 is an easy slip for the batch size (--batch-size)
        hint = " (--batch takes a CSV of configurations; the batch size is --batch-size)"
        raise ConfigError(f"{path}: file not found{hint if given.isdigit() else ''}") from None
    except IsADirectoryError:
        raise ConfigError(
            f"{path}: is a directory, expected a CSV file of configurations"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        row = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: row {row}: must be UTF-8 text, got byte 0x{data[exc.start]:02x} "
            f"at offset {exc.start}"
        ) from None
    if "\x00" in text:
        at = text.index("\x00")
        raise ConfigError(
            f"{path}: row {text.count(chr(10), 0, at) + 1}: must be text, got a NUL byte "
            f"at offset {len(text[:at].encode())}"
        )
    records: list[list[str]] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for rec in reader:
            records.append(rec)
    except csv.Error as exc:
        raise ConfigError(
            f"{path}: row {len(records) + 1}: not a readable CSV record ({exc})"
        ) from None
    return records


def _batch_columns(
    path: Path, records: list[list[str]]
) -> tuple[list[str], list[int], dict[str, Any]]:
    """(header, spreadsheet row number of each configuration, typed columns) of a CSV's records;
    every bad cell of the file is named in one ConfigError."""
    required = ", ".join(C.REQUIRED)
    if not records or not any(c.strip() for rec in records for c in rec):
        raise ConfigError(
            f"{path}: empty file, expected a header row naming the columns (required: {required})"
        )
    header = [c.strip() for c in records[0]]
    for j, name in enumerate(header):
        if not name:
            raise ConfigError(f"{path}: row 1: column {j + 1}: must have a name, got ''")
        if header.index(name) != j:
            raise ConfigError(
                f"{path}: row 1: {name}: must appear once in the header, got it twice"
            )
    missing = [c for c in C.REQUIRED if c not in header]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}; required: {required}")
    unknown = [c for c in header if c not in C.CONFIG_FIELDS]
    if unknown:
        import difflib

        # a field the name abbreviates first ("batch": batch_size, not the closer batching)
        close = [f for f in C.CONFIG_FIELDS if f.startswith(unknown[0] + "_")][:1]
        close = close or difflib.get_close_matches(unknown[0], C.CONFIG_FIELDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"{path}: unknown column(s) {', '.join(unknown)}{hint}; "
            f"valid: {', '.join(C.CONFIG_FIELDS)}"
        )
    problems: list[tuple[int, int, str]] = []  # (row, column index, message)
    rows: list[int] = []
    cells: list[list[str]] = []
    for i, rec in enumerate(records[1:], start=2):
        if not any(c.strip() for c in rec):
            continue  # a blank line is no configuration
        if len(rec) != len(header):
            problems.append(
                (i, -1, f"{path}: row {i}: must have {len(header)} cells as the header has, "
                 f"got {len(rec)}")
            )  # fmt: skip
            continue
        rows.append(i)
        cells.append([c.strip() for c in rec])
    if not rows and not problems:
        raise ConfigError(f"{path}: no configuration rows after the header (row 1)")
    cols: dict[str, Any] = {}
    empty: dict[str, np.ndarray] = {}
    for j, name in enumerate(header):
        raw = np.array([r[j] for r in cells], dtype=str) if cells else np.array([], dtype=str)
        blank = raw == ""
        if blank.any() and name in C.REQUIRED:
            for k in np.nonzero(blank)[0]:
                problems.append(
                    (rows[k], j, f"{path}: row {rows[k]}: {name}: must not be empty "
                     "(a required column), got ''")
                )  # fmt: skip
        default = C.DEFAULTS.get(name)
        if name not in C.REQUIRED and default is not None:
            raw = np.where(blank, str(default), raw)
        elif name not in C.REQUIRED:
            raw = np.where(blank, str(F.field(name)._placeholder()), raw)  # filled in below
        typed, bad = F.violations(name, raw)
        for k, msg in bad:
            if not blank[k]:
                problems.append((rows[k], j, f"{path}: row {rows[k]}: {name}: {msg}"))
        cols[name] = typed
        empty[name] = blank
    if problems:
        problems.sort()
        lines = [msg for _, _, msg in problems[:MAX_SHOWN]]
        if len(problems) > MAX_SHOWN:
            lines.append(f"... and {len(problems) - MAX_SHOWN} more bad cells")
        lines.append("(rows are numbered as a spreadsheet shows them: the header is row 1)")
        raise ConfigError("\n".join(lines))
    for name, source in _DERIVED_DEFAULT.items():
        if name in cols and empty[name].any():
            cols[name] = np.where(empty[name], cols[source], cols[name])
    if "head_dim" in cols and empty["head_dim"].any():
        cols["head_dim"] = np.where(empty["head_dim"], np.nan, cols["head_dim"].astype(float))
    return header, rows, cols


def _run_batch(
    given: str, out_path: str | None, quiet: bool = False, chunk_rows: int = BATCH_CHUNK_ROWS
) -> int:
    path = Path(given)
    if out_path:  # refuse an unwritable --out before the predictions, not after
        out = Path(out_path)
        if out.is_dir():
            raise ConfigError(f"--out: must be a file path, got the directory {out_path!r}")
        if not out.parent.is_dir():
            raise ConfigError(f"--out: its folder must exist, got {out_path!r}")
        if path.exists() and out.exists() and out.resolve() == path.resolve():
            # writing would truncate the CSV being read: the configurations would be lost
            raise ConfigError(
                f"--out: must not be the --batch input {given!r} (it would be overwritten), "
                f"got {out_path!r}"
            )
    records = _read_csv(path, given)
    header, rows, typed = _batch_columns(path, records)
    n = len(rows)
    cols, _ = C.as_columns(typed)
    errors, warnings, pred = _predict_in_chunks(cols, n, quiet, chunk_rows)
    ok = errors == ""
    records_out = [r for r in records[1:] if any(c.strip() for c in r)]
    _write_csv(
        out_path,
        [*header, *pred, "warning", "error"],
        _output_rows(records_out, pred, ok, warnings, errors, chunk_rows),
    )
    if out_path:
        print(
            f"wrote {n} rows ({int(ok.sum())} predicted, {int((~ok).sum())} with errors) "
            f"to {out_path}",
            file=sys.stderr,
        )
    return 0


def _output_rows(
    records: list[list[str]],
    pred: dict[str, np.ndarray],
    ok: np.ndarray,
    warnings: np.ndarray,
    errors: np.ndarray,
    block: int,
) -> Any:
    """The output CSV's rows: the input cells as written, the predictions ('' at an error row
    and for NaN), warning, error. Values become Python's (`tolist`) `block` rows at a time, so
    the numbers print as Python prints them and only one block of them is held at once."""
    n = len(records)
    for start in range(0, n, block):
        stop = min(start + block, n)
        good = ok[start:stop].tolist()
        cols = []
        for v in pred.values():
            part = v[start:stop].tolist()
            cols.append(
                [
                    "" if not g or (isinstance(x, float) and x != x) else x
                    for x, g in zip(part, good, strict=True)
                ]
            )
        for i in range(stop - start):
            yield [
                *records[start + i],
                *(c[i] for c in cols),
                warnings[start + i],
                errors[start + i],
            ]


def _predict_in_chunks(
    cols: C.Configs, n: int, quiet: bool, chunk_rows: int
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(error, warning, predictions) of every row, predicted `chunk_rows` rows at a time with
    a progress bar on stderr (not with `quiet`, nor when stderr is no terminal).

    The same columns in the same order as one `dse.predict.predict` call on every row: rows
    are taken GPU by GPU as it takes them, a column only some chunks of a GPU have (an
    operator only some rows use) comes where that GPU's chunk puts it, one only a later GPU
    has after the earlier GPUs' columns, and it is 0 (numbers) or '' (text) where a chunk
    lacks it, as `predict` fills it. Prediction columns are n long; their values at error rows
    are not to be used."""
    from tqdm import tqdm

    from dse.predict import predict

    errors = np.full(n, "", dtype=object)
    warnings = np.full(n, "", dtype=object)
    merged: dict[str, np.ndarray] = {}
    order: list[str] = []
    with tqdm(
        total=n,
        desc="predict",
        unit="row",
        unit_scale=True,
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=0.5,
        disable=True if quiet else None,  # None: off when stderr is not a terminal
    ) as bar:
        for start in range(0, n, chunk_rows):  # row rules and memory: row by row
            stop = min(start + chunk_rows, n)
            part = {k: v[start:stop] for k, v in cols.items()}
            err, warnings[start:stop] = check_rows_and_warnings(part, stop - start)
            errors[start:stop] = err
            bar.update(int((err != "").sum()))  # rows with an error are done
        ok_rows = np.flatnonzero(errors == "")
        gpus = cols["gpu"][ok_rows]
        for name in np.unique(gpus):  # `predict`'s order of GPUs
            rows = ok_rows[gpus == name]
            gpu_order: list[str] = []
            for start in range(0, len(rows), chunk_rows):
                sub = rows[start : start + chunk_rows]
                pred = predict(cols.take(sub))  # checked rows: not checked again
                keys = list(pred)
                for k, v in pred.items():
                    v = np.asarray(v)
                    if k not in merged:
                        merged[k] = (
                            np.full(n, "", dtype=object)
                            if v.dtype.kind in "OUS"  # text: object, so no width truncates
                            else np.zeros(n, dtype=v.dtype)
                        )
                    if k not in gpu_order:
                        _insert_key(gpu_order, k, keys)
                    merged[k][sub] = v
                bar.update(len(sub))
            order += [k for k in gpu_order if k not in order]
    return errors, warnings, {k: merged[k] for k in order}


def _insert_key(order: list[str], key: str, keys: list[str]) -> None:
    """Place `key` in `order` after the nearest key before it in `keys` (a chunk's column
    order) that `order` already holds: one GPU's columns keep the predictor's order."""
    i = keys.index(key)
    before = next((k for k in reversed(keys[:i]) if k in order), None)
    order.insert(0 if before is None else order.index(before) + 1, key)


def _write_csv(out_path: str | None, header: list[str], rows: Any) -> None:
    import csv

    if not out_path:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        return
    try:
        with open(out_path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(header)
            w.writerows(rows)
    except IsADirectoryError:
        raise ConfigError(f"--out: must be a file path, got the directory {out_path!r}") from None
    except OSError as exc:
        raise ConfigError(f"--out: cannot write {out_path!r} ({exc.strerror or exc})") from None
