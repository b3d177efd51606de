"""`dse energy`: the tokens-to-watt-hours breakdown of one configuration and workload."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dse.commands import _flags
from dse.commands._flags import ARCH_FLAGS, WORKLOAD_FLAGS

REQUIRED = ("d_model", "n_layers", "n_heads", "d_ff")
TIMES = ("roofline", "predicted")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "energy",
        help="tokens-to-watt-hours energy breakdown of one configuration",
        description="Analytical accelerator energy of one static batch, itemised by component "
        "(compute, parameter access, KV write, attention read, activations, all-reduce, static) "
        "and by phase (prefill, decode), with energy per output token (the whole request's, as "
        "`dse predict` defines it) and the paper's per-phase figures (prefill energy per input "
        "token, decode energy per output token).\n"
        "Presets: 'paper' is Vartziotis et al. (2026) as published (plus its parameters-only "
        "per-token estimate); 'corrected' is ours, calibrated on measured energy.\n\n"
        "examples:\n"
        "  dse energy --d-model 4096 --n-layers 32 --n-heads 32 --n-kv-heads 8 --d-ff 14336 "
        "--vocab-size 128256 --batch-size 8 --prompt-tokens 1024 --output-tokens 256\n"
        "  dse energy --model llama-3-8b --gpu a100_sxm --preset corrected --json\n"
        "  dse energy --model llama-3-8b --batch-size 8 --times predicted   "
        "# static term over dse predict's TTFT and decode time",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model", help="a published model from the catalogue (dse.spec.catalogue), if present"
    )
    arch = p.add_argument_group("architecture flags (override --model)")
    _flags.add_field_flags(arch, ARCH_FLAGS)
    arch.add_argument("--tied-embeddings", action="store_true", default=None)
    arch.add_argument(
        "--no-gated-mlp", dest="gated_mlp", action="store_false", default=None,
        help="plain two-matrix MLP instead of SwiGLU",
    )  # fmt: skip
    wl = p.add_argument_group("workload and GPU")
    _flags.add_field_flags(
        wl,
        WORKLOAD_FLAGS,
        defaults={
            "batch_size": 1,
            "prompt_tokens": 1024,
            "output_tokens": 256,
            "tensor_parallel": 1,
        },
        aliases={"tensor_parallel": ("--tp",)},
    )
    _flags.add_field_flags(
        wl,
        ("gpu",),
        defaults={"gpu": "h100_sxm"},
        helps={"gpu": "GPU registry name (see `dse gpus`)"},
    )
    _flags.add_field_flags(
        p, ("preset",), defaults={"preset": "both"}, helps={"preset": "which estimator to print"}
    )
    _flags.add_field_flags(
        p,
        ("time_s",),
        helps={
            "time_s": "total batch time in seconds from a latency predictor, for the corrected "
            "preset's static energy (default: its own roofline)"
        },
    )
    p.add_argument(
        "--times",
        choices=TIMES,
        default="roofline",
        help="where the corrected preset's static energy takes its prefill and decode times: "
        "'roofline' (its own, the default; what it was calibrated with) or 'predicted' (`dse "
        "predict`'s TTFT and decode time of the same batch, vLLM, static batching; prints the "
        "predictor's energy beside it). Not with --time-s",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(command="energy")


def _architecture(args: argparse.Namespace, tensor_parallel: int) -> Any:
    from dse.errors import ConfigError
    from dse.spec.arch import Architecture
    from dse.spec.rules import check_architecture

    row: dict[str, Any] = {}
    if args.model:
        try:
            from dse.spec.catalogue import lookup_model
        except ImportError:
            raise ConfigError(
                "--model: no model catalogue (dse.spec.catalogue) in this build; give the architecture "
                "flags (--d-model, --n-layers, --n-heads, --d-ff, ...)"
            ) from None
        row.update(lookup_model(args.model).to_dict())
    flags = _flags.read_flags(args, ARCH_FLAGS)
    if row and "head_dim" not in flags and ("d_model" in flags or "n_heads" in flags):
        row.pop("head_dim", None)  # re-derive d_model // n_heads from the new shape
    row.update(flags)
    for name in ("tied_embeddings", "gated_mlp"):
        v = getattr(args, name, None)
        if v is not None:
            row[name] = v
    missing = [k for k in REQUIRED if row.get(k) is None]
    if missing:
        flag = "--" + missing[0].replace("_", "-")
        raise ConfigError(f"{flag}: required unless --model is given")
    # Check the row as given: once resolved, a derived head_dim hides n_heads not dividing d_model.
    errors = check_architecture(row, tensor_parallel)
    if errors:
        raise ConfigError(errors[0])
    return Architecture.from_mapping(row)


def _check_runs_on(a: Any, gpu: str) -> None:
    """Refuse weights the GPU has no kernels for (nvfp4 without FP4 tensor cores), as `dse
    predict` does: an energy of a configuration that cannot run is no estimate."""
    from dse.errors import ConfigError
    from dse.spec.hardware import fp4_gpu_names, get_gpu
    from dse.spec.rules import check_weight_dtype_on_gpu

    spec = get_gpu(gpu)
    has_fp4 = spec.peak_fp4_flops_per_s is not None
    why = check_weight_dtype_on_gpu(a.weight_dtype, gpu, has_fp4, fp4_gpu_names())[0]
    if why:
        raise ConfigError(why)


def _scalars(out: dict[str, Any]) -> dict[str, Any]:
    return {k: (bool(v) if k == "calibrated" else float(v)) for k, v in out.items()}


def run(args: argparse.Namespace) -> int:
    from dse.estimators import tokens2wh as T
    from dse.spec.arch import active_params, total_params
    from dse.spec.workload import Workload

    wl = Workload(**_flags.read_flags(args, WORKLOAD_FLAGS)).validate()
    gpu = _flags.read_flag(args, "gpu")
    preset = _flags.read_flag(args, "preset")
    time_s = _flags.read_flag(args, "time_s")
    a = _architecture(args, wl.tensor_parallel)
    _check_runs_on(a, gpu)
    presets = ("paper", "corrected") if preset == "both" else (preset,)
    results: dict[str, Any] = {}
    notes: dict[str, str] = {}
    predicted: dict[str, Any] | None = None
    if args.times == "predicted":
        if time_s is not None:
            from dse.errors import ConfigError

            raise ConfigError("--times predicted: the times come from dse predict; drop --time-s")
        predicted = _predicted_times(a, wl, gpu)
        time_s = {"prefill": predicted["ttft_s"], "decode": predicted["decode_s"]}
    for name in presets:
        t = time_s if name == "corrected" else None
        results[name] = _scalars(T.estimate(a, wl, gpu, name, time_s=t))
        if name == "paper":
            notes[name] = T.paper_constants(gpu).source
        else:
            notes[name] = T.corrected_coefficients(gpu).source
    if "paper" in presets:
        results["simplified"] = _scalars(T.estimate(a, wl, gpu, "simplified"))
    config = {
        "architecture": a.to_dict(),
        "total_params": int(total_params(a)),
        "active_params": int(active_params(a)),
        "workload": {
            "batch_size": wl.batch_size,
            "prompt_tokens": wl.prompt_tokens,
            "output_tokens": wl.output_tokens,
            "tensor_parallel": wl.tensor_parallel,
        },
        "gpu": gpu,
    }
    doc: dict[str, Any] = {"config": config, "estimates": results, "constants": notes}
    if predicted is not None:
        doc["predicted_times"] = predicted
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    _print(config, results, notes, predicted)
    return 0


def _predicted_times(a: Any, wl: Any, gpu: str) -> dict[str, Any]:
    """`dse predict`'s TTFT and decode time (s) of the same static batch, with its energy and
    provenance, so the corrected preset's static term runs over the predictor's times."""
    from dse.predict import predict

    row = dict(a.to_dict())
    row.update(
        batch_size=wl.batch_size,
        prompt_tokens=wl.prompt_tokens,
        output_tokens=wl.output_tokens,
        tensor_parallel=wl.tensor_parallel,
        gpu=gpu,
    )
    r = predict({k: [v] for k, v in row.items()}, texts=False)
    ttft = float(r["ttft_s"][0])
    return {
        "ttft_s": ttft,
        "decode_s": max(float(r["latency_s"][0]) - ttft, 0.0),
        "energy_j": float(r["energy_j"][0]),
        "energy_per_output_token_j": float(r["energy_per_output_token_j"][0]),
        "source": str(r["source"][0]),
        "artifact_id": str(r["artifact_id"][0]),
    }


def _fmt_j(j: float) -> str:
    if j == 0:
        return "0"
    if abs(j) < 1:
        return f"{j * 1e3:.4g} mJ"
    return f"{j:.4g} J"


def _print(
    config: dict[str, Any],
    results: dict[str, Any],
    notes: dict[str, str],
    predicted: dict[str, Any] | None = None,
) -> None:
    from dse.estimators.tokens2wh import COMPONENTS

    w = config["workload"]
    print(
        f"model: {config['total_params'] / 1e9:.3f} B parameters "
        f"({config['active_params'] / 1e9:.3f} B active) on {config['gpu']}"
    )
    print(
        f"workload: batch {w['batch_size']} x ({w['prompt_tokens']} in, {w['output_tokens']} out), "
        f"tensor parallel {w['tensor_parallel']}; energy of the batch summed over GPUs"
    )
    for preset in ("paper", "corrected"):
        if preset not in results:
            continue
        r = results[preset]
        print(f"\npreset {preset}: {notes[preset]}")
        print(f"  {'component':<14}{'prefill':>14}{'decode':>14}{'total':>14}")
        for comp in COMPONENTS:
            vals = [r[f"breakdown.{comp}.{ph}_j"] for ph in ("prefill", "decode", "total")]
            print(f"  {comp:<14}" + "".join(f"{_fmt_j(v):>14}" for v in vals))
        print(
            f"  {'total':<14}{_fmt_j(r['prefill_energy_j']):>14}{_fmt_j(r['decode_energy_j']):>14}"
            f"{_fmt_j(r['energy_j']):>14}"
        )
        print(
            f"  per request {_fmt_j(r['energy_per_request_j'])} ({r['energy_wh'] / w['batch_size']:.4g} Wh); "
            f"per output token {_fmt_j(r['energy_per_output_token_j'])} (whole request)"
        )
        print(
            f"  prefill energy per input token {_fmt_j(r['prefill_energy_per_input_token_j'])}; "
            f"decode energy per output token {_fmt_j(r['decode_energy_per_output_token_j'])}"
        )
        if preset == "corrected":
            where = "its own roofline"
            if predicted is not None:
                where = f"dse predict ({predicted['source']} {predicted['artifact_id']})"
            print(
                f"  static energy over {r['time_s']:.4g} s "
                f"(prefill {r['prefill_time_s']:.4g} s, decode {r['decode_time_s']:.4g} s; "
                f"times from {where})"
            )
            if predicted is not None:
                print(
                    f"  dse predict's energy of the same batch: {_fmt_j(predicted['energy_j'])} "
                    f"(per output token {_fmt_j(predicted['energy_per_output_token_j'])})"
                )
        if not r["calibrated"]:
            print("  warning: this GPU's constants are uncalibrated (derived from another GPU)")
    if "simplified" in results:
        s = results["simplified"]
        print(
            f"\npaper, parameters-only estimate (compute only): prefill energy per input token "
            f"{_fmt_j(s['prefill_energy_per_input_token_j'])}, decode energy per output token "
            f"{_fmt_j(s['decode_energy_per_output_token_j'])}"
        )
