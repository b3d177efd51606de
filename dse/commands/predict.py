"""`dse predict`: latency and energy of one configuration (table or JSON) or of a CSV of many."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dse import configs as C
from dse.commands._flags import ARCH_FLAGS, add_arch_flags
from dse.errors import ConfigError
from dse.hardware import get_gpu

WORKLOAD_FLAGS: dict[str, type] = {
    "batch_size": int,
    "prompt_tokens": int,
    "output_tokens": int,
    "tensor_parallel": int,
    "engine": str,
}


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
        "  dse predict --batch configs.csv --out predictions.csv",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("where the architecture comes from (one of)")
    src.add_argument("--model", help="a published model from the catalogue (see `dse arch --list`)")
    src.add_argument("--hf-config", help="a Hugging Face config.json")
    src.add_argument(
        "--config", help="a YAML/JSON file with a `configs:` list (as written by `dse export`)"
    )
    src.add_argument("--entry", type=int, default=0, help="which entry of --config (default 0)")
    src.add_argument(
        "--batch", help="CSV with one configuration per row (architecture, workload, gpu columns)"
    )
    arch = p.add_argument_group("architecture flags (override --model / --hf-config)")
    add_arch_flags(arch)
    wl = p.add_argument_group("workload and GPU")
    for name, typ in WORKLOAD_FLAGS.items():
        flag = "--tp" if name == "tensor_parallel" else f"--{name.replace('_', '-')}"
        wl.add_argument(flag, dest=name, type=typ)
    wl.add_argument("--gpu", help="GPU registry name (see `dse gpus`); default h100_sxm")
    p.add_argument("--out", help="with --batch: output CSV (default: stdout)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(command="predict")


def _single(args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {}
    if args.config:
        row.update(_from_config_file(Path(args.config), args.entry))
    if args.model:
        from dse.models import lookup_model

        row.update(lookup_model(args.model).to_dict())
    if args.hf_config:
        from dse.hf import from_hf_config

        row.update(from_hf_config(args.hf_config).to_dict())
    for name in (*ARCH_FLAGS, *WORKLOAD_FLAGS):
        v = getattr(args, name, None)
        if v is not None:
            row[name] = v
    if args.gpu:
        row["gpu"] = args.gpu
    return {k: v for k, v in row.items() if v is not None}


def _from_config_file(path: Path, entry: int) -> dict[str, Any]:
    from dse.yamlio import load_located

    doc = load_located(path)
    entries = doc.data.get("configs")
    if not isinstance(entries, list) or not entries:
        raise doc.error(("configs",), "must be a non-empty list of configurations")
    if not 0 <= entry < len(entries):
        raise ConfigError(f"{path}: --entry must be in [0, {len(entries) - 1}], got {entry}")
    e = entries[entry]
    if not isinstance(e, dict):
        raise doc.error(("configs", str(entry)), "must be a mapping")
    row: dict[str, Any] = {}
    row.update(e.get("architecture") or {})
    row.update(e.get("workload") or {})
    if "gpu" in e:
        row["gpu"] = e["gpu"]
    return row


def check_rows(cols: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Per-row error messages ('' when predictable): GPU, architecture rules, memory fit."""
    err = np.full(n, "", dtype=object)
    for name in np.unique(cols["gpu"]):
        try:
            get_gpu(str(name))
        except ConfigError as exc:
            err[cols["gpu"] == name] = str(exc)
    ok = err == ""
    if ok.any():
        sub = {k: v[ok] for k, v in cols.items()}
        d = C.derived(sub, int(ok.sum()))
        msg = d["invalid"].copy()
        nofit = (msg == "") & ~d["fits_memory"]
        for i in np.nonzero(nofit)[0]:
            msg[i] = (
                f"does not fit in memory: needs {d['memory_bytes'][i] / 2**30:.1f} GiB per GPU, "
                f"{sub['gpu'][i]} has {d['memory_capacity_bytes'][i] / 2**30:.1f} GiB "
                f"(90% usable); raise tensor_parallel or lower batch/lengths"
            )
        err[ok] = msg
    return err


def run(args: argparse.Namespace) -> int:
    from dse.predictor import predict

    if args.batch:
        return _run_batch(args, predict)
    row = _single(args)
    cols, n = C.as_columns({k: [v] for k, v in row.items()})
    err = check_rows(cols, n)
    if err[0]:
        raise ConfigError(err[0])
    pred = predict(cols)
    config = {k: _plain(cols[k][0]) for k in C.CONFIG_FIELDS}
    result = {k: _plain(v[0]) for k, v in pred.items()}
    if args.model:
        from dse.models import context_tokens

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


def _print_table(config: dict[str, Any], r: dict[str, Any]) -> None:
    arch = " ".join(
        f"{k}={config[k]}"
        for k in (
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
    )
    print(f"architecture: {arch}")
    print(
        f"workload:     batch_size={config['batch_size']} prompt_tokens={config['prompt_tokens']} "
        f"output_tokens={config['output_tokens']} tensor_parallel={config['tensor_parallel']} "
        f"engine={config['engine']} gpu={config['gpu']}"
    )
    band = lambda key: (  # noqa: E731
        f"  [{_fmt_time(r[key + '_lo_s'])} .. {_fmt_time(r[key + '_hi_s'])}]"
        if f"{key}_lo_s" in r
        else ""
    )
    rows = [
        ("time to first token", _fmt_time(r["ttft_s"]) + band("ttft")),
        ("time per output token", _fmt_time(r["tpot_s"]) + band("tpot")),
        ("request latency", _fmt_time(r["latency_s"]) + band("latency")),
        ("prefill energy", _fmt_energy(r["prefill_energy_j"])),
        ("decode energy", _fmt_energy(r["decode_energy_j"])),
        (
            "energy",
            _fmt_energy(r["energy_j"])
            + (
                f"  [{_fmt_energy(r['energy_lo_j'])} .. {_fmt_energy(r['energy_hi_j'])}]"
                if "energy_lo_j" in r
                else ""
            ),
        ),
        ("energy per output token", _fmt_energy(r["energy_per_output_token_j"])),
        ("average power per GPU", f"{r['avg_power_w']:.0f} W"),
    ]
    for name, value in rows:
        print(f"  {name:<26}{value}")
    for phase in ("prefill", "decode"):
        items = {
            k.split(".", 2)[2][:-2]: v for k, v in r.items() if k.startswith(f"breakdown.{phase}.")
        }
        total = sum(items.values()) or 1.0
        blocks = {
            k.split(".", 2)[2][:-2]: v for k, v in r.items() if k.startswith(f"blocks.{phase}.")
        }
        if blocks:
            shares = ", ".join(
                f"{k} {100 * v / total:.0f}%"
                for k, v in sorted(blocks.items(), key=lambda kv: -kv[1])
                if v > 0
            )
            print(f"  blocks, {phase}: {shares}")
        print(f"  breakdown, {phase}:")
        for k, v in sorted(items.items(), key=lambda kv: -kv[1]):
            if v > 0:
                print(f"    {k:<24}{_fmt_time(v):>12}  {100 * v / total:5.1f}%")
    fitted_for = r.get("artifact_gpu")
    print(
        f"provenance: source={r.get('source')} artifact={r.get('artifact_id')}"
        + (f" (fitted for {fitted_for})" if fitted_for and fitted_for != config["gpu"] else "")
        + f" out_of_range={'yes' if r.get('out_of_range') else 'no'}"
    )
    if r.get("energy_source"):
        print(f"  energy: {r['energy_source']}")
    if r.get("roofline_ops"):
        print(f"  priced by the roofline (no fitted model): {r['roofline_ops'].replace(',', ', ')}")
    if r.get("borrowed_ops"):
        print(
            f"  priced with a sibling chip's table ({r.get('borrowed_artifacts')}): "
            + r["borrowed_ops"].replace(",", ", ")
        )
    if "latency_lo_s" in r:
        print("  band: held-out residual quantiles (5%..95%) of the whole stack")
    if r.get("beyond_context"):
        print(
            f"  warning: prompt + output exceed the model's context of {r['context_tokens']} "
            "tokens; an engine would stop or refuse before the requested output"
        )
    if r.get("out_of_range"):
        print(
            "  warning: an input lies outside the range the artifact was fitted on; trust the band less"
        )
        if r.get("out_of_range_inputs"):
            print(f"  outside the fitted range: {r['out_of_range_inputs'].replace(',', ', ')}")


def _run_batch(args: argparse.Namespace, predict: Any) -> int:
    import pandas as pd

    path = Path(args.batch)
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        # --batch 8 is an easy slip for the batch size (--batch-size)
        hint = " (--batch takes a CSV of configurations; the batch size is --batch-size)"
        raise ConfigError(f"{path}: file not found{hint if args.batch.isdigit() else ''}") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable CSV ({exc})") from None
    missing = [c for c in C.REQUIRED if c not in df.columns]
    if missing:
        raise ConfigError(
            f"{path}: missing column(s) {', '.join(missing)}; required: {', '.join(C.REQUIRED)}"
        )
    unknown = [c for c in df.columns if c not in C.CONFIG_FIELDS]
    if unknown:
        raise ConfigError(
            f"{path}: unknown column(s) {', '.join(unknown)}; valid: {', '.join(C.CONFIG_FIELDS)}"
        )
    n = len(df)
    errors = np.full(n, "", dtype=object)
    # Rows with unparsable values get an error of their own instead of failing the file.
    good = np.ones(n, dtype=bool)
    for c in df.columns:
        if c in ("gpu", "engine", "norm", "weight_dtype", "kv_dtype"):
            continue
        if c in ("gated_mlp", "tied_embeddings", "qkv_bias", "shared_expert_gate", "qk_norm"):
            continue
        vals = pd.to_numeric(df[c], errors="coerce")
        bad = (vals.isna() & df[c].notna()) | (vals.notna() & (vals != vals.round()))
        for i in np.nonzero(bad.to_numpy())[0]:
            if good[i]:
                errors[i] = f"{c}: must be an integer, got {df[c].iloc[i]!r}"
            good[i] = False
    idx = np.nonzero(good)[0]
    out = df.copy()
    if len(idx):
        sub = df.iloc[idx]
        cols, m = C.as_columns(sub)
        err = check_rows(cols, m)
        errors[idx] = err
        ok = idx[err == ""]
        if len(ok):
            cols_ok = {k: v[err == ""] for k, v in cols.items()}
            pred = predict(cols_ok)
            for k, v in pred.items():
                col = np.full(n, np.nan, dtype=object if v.dtype == object else float)
                col[ok] = v
                out[k] = col
    out["error"] = errors
    if args.out:
        out.to_csv(args.out, index=False)
        print(
            f"wrote {n} rows ({int((errors == '').sum())} predicted, {int((errors != '').sum())} with errors) to {args.out}",
            file=sys.stderr,
        )
    else:
        out.to_csv(sys.stdout, index=False)
    return 0
