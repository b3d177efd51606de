"""`dse arch`: parameters, FLOPs, KV bytes and memory of one architecture at a workload."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dse.commands import _flags
from dse.commands._flags import WORKLOAD_FLAGS
from dse.errors import ConfigError
from dse.spec import arch as A
from dse.spec.hardware import get_gpu
from dse.spec.workload import Workload

# Architecture fields settable by flag (they override --model / --hf-config).
ARCH_FLAGS: tuple[str, ...] = (*_flags.ARCH_FLAGS, "norm", "norms_per_layer")
BOOL_FLAGS: dict[str, tuple[str, str]] = {
    # field: (flag that sets it true, flag that sets it false)
    "tied_embeddings": ("--tied", "--untied"),
    "gated_mlp": ("--gated", "--plain-mlp"),
    "qkv_bias": ("--qkv-bias", "--no-qkv-bias"),
    "qk_norm": ("--qk-norm", "--no-qk-norm"),
    "shared_expert_gate": ("--shared-expert-gate", "--no-shared-expert-gate"),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "arch",
        help="parameters, FLOPs, bytes and memory of one architecture",
        description="Itemised parameter count, total and active parameters, FLOPs per token "
        "(prefill average and decode at a context length), KV-cache bytes per token, and the "
        "memory one GPU needs at a workload, of an architecture given by flags, by a catalogue "
        "name or by a Hugging Face config.json. Flags override the catalogue / config values.\n\n"
        "examples:\n"
        "  dse arch --model meta-llama/Meta-Llama-3-8B --batch-size 16 --gpu h100_sxm\n"
        "  dse arch --d-model 4096 --n-layers 32 --n-heads 32 --n-kv-heads 8 --d-ff 14336 "
        "--vocab-size 128256\n"
        "  dse arch --model mixtral-8x7b --tensor-parallel 2 --kv-dtype fp8 --json\n"
        "  dse arch --hf-config path/to/config.json\n"
        "  dse arch --list",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("where the architecture comes from (at most one)")
    src.add_argument("--model", help="a published model from the catalogue (see --list)")
    src.add_argument("--hf-config", help="a Hugging Face config.json (or its folder)")
    src.add_argument(
        "--list", "--list-models", dest="list_models", action="store_true",
        help="list the catalogue's model names and exit",
    )  # fmt: skip
    arch = p.add_argument_group("architecture flags")
    _flags.add_field_flags(arch, ARCH_FLAGS)
    for name, (on, off) in BOOL_FLAGS.items():
        group = arch.add_mutually_exclusive_group()
        group.add_argument(on, dest=name, action="store_const", const=True)
        group.add_argument(off, dest=name, action="store_const", const=False)
    wl = p.add_argument_group("workload and GPU")
    _flags.add_field_flags(
        wl,
        (*WORKLOAD_FLAGS, "context"),
        defaults={
            "batch_size": 1,
            "prompt_tokens": 1024,
            "output_tokens": 256,
            "tensor_parallel": 1,
        },
        aliases={"tensor_parallel": ("--tensor-parallel", "--tp")},
        helps={"context": "context length of the decode FLOPs (default prompt + output tokens)"},
    )
    _flags.add_field_flags(
        wl, ("gpu",), defaults={"gpu": "h100_sxm"}, helps={"gpu": "GPU registry name"}
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(command="arch")


def run(args: argparse.Namespace) -> int:
    if args.list_models:
        return _list_models()
    wl = Workload(**_flags.read_flags(args, WORKLOAD_FLAGS)).validate()
    gpu = get_gpu(_flags.read_flag(args, "gpu"))
    context = _flags.read_flag(args, "context")
    if context is None:
        context = wl.prompt_tokens + wl.output_tokens
    title, arch, notes = _architecture(args)
    arch.validate(wl.tensor_parallel)
    report = summarise(arch, wl, gpu, context)
    report["model"] = title
    report["notes"] = list(notes)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_text(report)
    return 0


def _architecture(args: argparse.Namespace) -> tuple[str, A.Architecture, tuple[str, ...]]:
    """(title, validated-later Architecture, notes) from --model / --hf-config / flags."""
    if args.model and args.hf_config:
        raise _flags.conflict(
            "--model", "--hf-config", args.hf_config, "give one of --model, --hf-config"
        )
    fields: dict[str, Any] = {}
    notes: tuple[str, ...] = ()
    title = "custom architecture"
    if args.model:
        from dse.spec.catalogue import model_card

        card = model_card(args.model)
        fields.update(card.arch.to_dict())
        title, notes = (
            f"{card.name} ({card.hf_id})",
            _approx_notes(card.exact, card.unmodelled_params, card.notes),
        )
    elif args.hf_config:
        from dse.spec.hf import import_hf_config

        imp = import_hf_config(args.hf_config)
        fields.update(imp.arch.to_dict())
        title = f"{imp.source} (model_type {imp.model_type})"
        notes = _approx_notes(imp.exact, imp.unmodelled_params, imp.notes)
    flags = _flags.read_flags(args, ARCH_FLAGS)
    for name in BOOL_FLAGS:
        v = getattr(args, name, None)
        if v is not None:
            flags[name] = v
    fields.update(flags)
    overridden = bool(flags)
    if overridden and (args.model or args.hf_config):
        title += ", with flag overrides"
        if "head_dim" not in flags and ("d_model" in flags or "n_heads" in flags):
            fields["head_dim"] = None  # re-derive d_model // n_heads from the new shape
    missing = [
        _flags.flag_name(n)
        for n in ("d_model", "n_layers", "n_heads", "d_ff")
        if fields.get(n) is None
    ]
    if missing:
        raise ConfigError(
            f"{missing[0]}: required unless --model NAME or --hf-config PATH gives the "
            f"architecture; missing {', '.join(missing)}"
        )
    errors = A.check_architecture(fields)
    if errors:
        raise ConfigError(errors[0])
    return title, A.Architecture.from_mapping(fields), notes


def _approx_notes(exact: bool, unmodelled: int, notes: tuple[str, ...]) -> tuple[str, ...]:
    if exact:
        return notes
    return (f"approximate: {unmodelled:,} parameters are not modelled", *notes)


def summarise(arch: A.Architecture, wl: Workload, gpu: Any, context: int) -> dict[str, Any]:
    """Every number the command prints, as plain JSON-able values."""
    a = arch.resolved()
    p = A.param_breakdown(a)
    mm = A.matmul_params_per_token(a)
    s = wl.prompt_tokens
    # FLOPs in float: 4 L H hd S (S + 1) overflows int64 at long prompts (2**24 tokens).
    prefill_avg = float(A.prefill_flops(a, float(s))) / s
    decode = int(A.forward_flops_per_token(a, float(context)))
    mem = A.memory_breakdown(
        a, wl.batch_size, wl.prompt_tokens, wl.output_tokens, wl.tensor_parallel
    )
    usable = A.USABLE_FRACTION * gpu.hbm_capacity_bytes
    return {
        "architecture": a.to_dict(),
        "params": {k: int(v) for k, v in p.items()},
        "matmul_params_per_token": int(mm),
        "flops_per_token": {
            "prefill_average": prefill_avg,
            "prompt_tokens": s,
            "decode": decode,
            "decode_context": context,
            "decode_attention": int(A.attention_flops_per_token(a, float(context))),
        },
        "kv_bytes_per_token": float(A.kv_bytes_per_token(a)),
        "workload": {
            "batch_size": wl.batch_size,
            "prompt_tokens": wl.prompt_tokens,
            "output_tokens": wl.output_tokens,
            "tensor_parallel": wl.tensor_parallel,
        },
        "memory_per_gpu_bytes": {k: float(v) for k, v in mem.items()},
        "gpu": {
            "name": gpu.name,
            "capacity_bytes": float(gpu.hbm_capacity_bytes),
            "usable_bytes": float(usable),
            # runs: one sequence's KV cache fits next to the weights (dse.spec.arch's memory rule)
            "fits": bool(A.fits_memory(mem["required"], gpu.hbm_capacity_bytes)),
            "fits_whole_batch": bool(A.fits_memory(mem["total"], gpu.hbm_capacity_bytes)),
            "warning": str(A.memory_messages(mem, gpu.hbm_capacity_bytes, gpu.name)[1][0]),
        },
    }


def _print_text(r: dict[str, Any]) -> None:
    a, p = r["architecture"], r["params"]
    print(r["model"])
    shape = ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size")
    print("  " + " ".join(f"{k}={a[k]}" for k in shape))
    extra = (
        [f"experts={a['n_experts']} top_k={a['top_k']} d_ff_expert={a['d_ff_expert']}"]
        if a["n_experts"] > 1
        else []
    )
    if a["shared_expert_d_ff"]:
        extra.append(f"shared_expert_d_ff={a['shared_expert_d_ff']}")
    flags = [k for k in ("gated_mlp", "tied_embeddings", "qkv_bias", "qk_norm") if a[k]]
    extra.append(f"{a['norms_per_layer']} {a['norm']} per layer")
    extra.append(f"weights={a['weight_dtype']} kv={a['kv_dtype']}")
    print("  " + " ".join(extra + flags))
    for note in r["notes"]:
        print(f"  note: {note}")
    print("\nparameters")
    for key, v in p.items():
        if key in ("total", "active", "active/moe/experts") or (v == 0 and key != "lm_head"):
            continue
        print(f"  {key:<20}{v:>18,}")
    print(f"  {'total':<20}{p['total']:>18,}  ({p['total'] / 1e9:.2f} B)")
    print(f"  {'active per token':<20}{p['active']:>18,}  ({p['active'] / 1e9:.2f} B)")
    f = r["flops_per_token"]
    print("\nforward FLOPs per token (2 x matmul parameters + attention)")
    print(
        f"  prefill, average over {f['prompt_tokens']} prompt tokens: {f['prefill_average'] / 1e9:,.2f} GFLOP"
    )
    print(
        f"  decode at context {f['decode_context']}: {f['decode'] / 1e9:,.2f} GFLOP "
        f"(attention {f['decode_attention'] / 1e9:,.2f})"
    )
    kv = r["kv_bytes_per_token"]
    print(f"\nKV cache: {kv:,.0f} bytes per token ({kv / 2**10:,.1f} KiB)")
    w, m, g = r["workload"], r["memory_per_gpu_bytes"], r["gpu"]
    print(
        f"\nmemory per GPU: batch {w['batch_size']} x ({w['prompt_tokens']} + {w['output_tokens']}) "
        f"tokens, tensor_parallel {w['tensor_parallel']}"
    )
    for key in ("weights", "kv_cache", "activations", "reserved", "total", "required"):
        print(f"  {key:<12}{m[key] / 2**30:>10.2f} GiB")
    verdict = (
        "fits"
        if g["fits_whole_batch"]
        else "runs, the whole batch does not fit at once"
        if g["fits"]
        else "does NOT fit (not even one sequence)"
    )
    print(
        f"  {g['name']}: {g['capacity_bytes'] / 2**30:.1f} GiB, {g['usable_bytes'] / 2**30:.1f} GiB "
        f"usable (90%): {verdict}"
    )
    if g["warning"]:
        print(f"  warning: {g['warning']}")


def _list_models() -> int:
    from dse.spec.arch import active_params, total_params
    from dse.spec.catalogue import model_card, model_names

    print(f"{'name':<30}{'total':>10}{'active':>10}  exact  Hugging Face id")
    for name in model_names():
        c = model_card(name)
        print(
            f"{name:<30}{total_params(c.arch) / 1e9:>9.2f}B{active_params(c.arch) / 1e9:>9.2f}B"
            f"  {'yes' if c.exact else 'no ':<5}  {c.hf_id}"
        )
    return 0
