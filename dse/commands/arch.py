"""`dse arch`: parameters, FLOPs, KV bytes and memory of one architecture at a workload."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dse.commands import _flags
from dse.commands._flags import WORKLOAD_FLAGS
from dse.errors import ConfigError
from dse.spec import arch as A
from dse.spec import rules as R
from dse.spec.hardware import fp4_gpu_names, get_gpu
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
    "attn_output_gate": ("--attn-output-gate", "--no-attn-output-gate"),
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
    R.validate_architecture(arch, wl.tensor_parallel)
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
    errors = R.check_architecture(fields)
    if errors:
        raise ConfigError(errors[0])
    return title, A.Architecture.from_mapping(fields), notes


def _approx_notes(exact: bool, unmodelled: int, notes: tuple[str, ...]) -> tuple[str, ...]:
    if exact:
        return notes
    if not unmodelled:  # every parameter counted, some layers priced approximately
        return (
            "approximate: every parameter is modelled, some layers are priced approximately",
            *notes,
        )
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
        "attention": attention_summary(a, context),
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
            # '' or why the weights cannot run there (nvfp4 without FP4 tensor cores): the
            # accounting above still holds, but `dse predict` and a sweep refuse the pair
            "refusal": str(
                R.check_weight_dtype_on_gpu(
                    a.weight_dtype,
                    gpu.name,
                    gpu.peak_fp4_flops_per_s is not None,
                    fp4_gpu_names(),
                )[0]
            ),
        },
    }


def memory_labels(w: dict[str, Any]) -> dict[str, str]:
    """What each line of the memory table counts (`dse.spec.arch.memory_breakdown`), per GPU,
    with the workload's numbers: total has the whole batch resident, required one sequence."""
    seq = f"{w['prompt_tokens']} + {w['output_tokens']} tokens"
    return {
        "weights": f"parameters held by this GPU (1/{w['tensor_parallel']} of them)",
        "kv_cache": f"KV cache of the whole batch: {w['batch_size']} sequences x ({seq})",
        "activations": "peak of the largest step (one layer's live tensors, logits)",
        "reserved": "CUDA graphs and workspaces",
        "total": "weights + kv_cache + activations + reserved: the whole batch resident",
        "required": "weights + activations + reserved + ONE sequence's KV cache: the least "
        "that runs (the engine then queues the batch's other sequences)",
    }


def attention_summary(a: A.Architecture, context: int) -> dict[str, Any]:
    """The attention families of an architecture (docs/architecture.md "Attention families"),
    whole model, one GPU's worth at tensor_parallel 1: layers of each kind, the MLA and linear
    sizes, and the KV cache and state one sequence holds at `context` tokens (sliding layers
    at most their window, linear layers a constant state)."""
    a = a.resolved()
    full, sliding, linear = (int(x) for x in A.layer_kinds(a))
    mixers, n_layers = int(A.mixer_layers(a)), int(a.n_layers)
    dense, moe = (int(x) for x in A.ffn_layers(a))
    rate_full, rate_sliding = (float(x) for x in A.kv_rates_per_gpu(a, 1))
    mla, nope, rope, vd = (x.item() if hasattr(x, "item") else x for x in A.mla_dims(a))
    out: dict[str, Any] = {
        "pattern": str(a.attention_pattern),
        "layers": {"full": full, "sliding": sliding, "linear": linear},
        # layers with no mixer, and with an attention and a linear layer side by side
        "no_mixer_layers": n_layers - mixers,
        "parallel_layers": full + sliding + linear - mixers,
        "ffn_pattern": str(a.ffn_pattern),
        "ffn_layers": {"dense": dense, "moe": moe, "none": n_layers - dense - moe},
        "sliding_window": int(a.sliding_window) if sliding else None,
        "mla": {
            "kv_lora_rank": int(a.kv_lora_rank),
            "q_lora_rank": int(a.q_lora_rank),
            "qk_rope_head_dim": int(rope),
            "qk_nope_head_dim": int(nope),
            "v_head_dim": int(vd),
        }
        if bool(mla)
        else None,
        "linear": None,
        "n_dense_layers": int(a.n_dense_layers) if bool(a.is_moe) else 0,
        "kv_bytes_per_token_full_layers": rate_full,
        "kv_bytes_per_token_sliding_layers": rate_sliding,
        "state_bytes_per_sequence": float(A.state_bytes(a, 1)),
        "context": int(context),
        "kv_cache_bytes_per_sequence": float(A.kv_cache_bytes_per_gpu(a, float(context), 1)),
        # what the same sequence would hold if every attention or linear layer were full
        "kv_cache_bytes_per_sequence_all_full": float(
            A.kv_bytes_per_token(
                A.Architecture.from_mapping(
                    {**a.to_dict(), "attention_pattern": "full", "head_dim": a.head_dim}
                )
            )
        )
        * context,
    }
    if linear:
        nv, dv, ng, ds, _ = (int(x) for x in A.linear_dims(a))
        out["linear"] = {
            "kind": str(a.linear_kind),
            "n_heads": nv,
            "head_dim": dv,
            "n_groups": None if str(a.linear_kind) == "mamba1" else ng,  # Mamba-1: no groups
            "state_dim": ds,
            "conv_width": int(a.linear_conv_width),
            "norm": bool(a.linear_norm),
        }
    return out


def _is_plain(at: dict[str, Any]) -> bool:
    """Every layer full GQA attention and the model's FFN: `dse arch` prints what it always
    printed."""
    return (
        at["layers"]["sliding"] == 0
        and at["layers"]["linear"] == 0
        and at["mla"] is None
        and at["no_mixer_layers"] == 0
        and at["ffn_layers"]["none"] == 0
        and at["ffn_pattern"] == "ffn"
    )


def _short(pattern: str) -> str:
    """A pattern as `dse arch` prints it: Gemma 3's 62 layers are one period, the start says
    enough."""
    return pattern if len(pattern) <= 48 else pattern[: pattern.rfind(",", 0, 48)] + ", ..."


def _print_attention(at: dict[str, Any]) -> None:
    n = at["layers"]
    kinds = [f"{n['full']} full"]
    if n["sliding"]:
        kinds.append(f"{n['sliding']} sliding (window {at['sliding_window']:,} tokens)")
    if n["linear"]:
        lin = at["linear"]
        groups = "" if lin["n_groups"] is None else f"{lin['n_groups']} groups x "
        kinds.append(
            f"{n['linear']} linear ({lin['kind']}: {lin['n_heads']} heads x {lin['head_dim']}, "
            f"{groups}state {lin['state_dim']}, conv {lin['conv_width']}"
            f"{'' if lin['norm'] else ', no norm'})"
        )
    if at["no_mixer_layers"]:
        kinds.append(f"{at['no_mixer_layers']} without a mixer")
    both = (
        f" ({at['parallel_layers']} attention + linear in parallel)"
        if at["parallel_layers"]
        else ""
    )
    print(f"  attention: {' + '.join(kinds)} layers{both}; pattern {_short(at['pattern'])}")
    f = at["ffn_layers"]
    if f["none"] or at["ffn_pattern"] != "ffn":
        parts = [f"{f['dense']} dense (d_ff)"] + ([f"{f['moe']} MoE"] if f["moe"] else [])
        parts += [f"{f['none']} without an FFN"] if f["none"] else []
        print(f"  FFN: {' + '.join(parts)} layers; pattern {_short(at['ffn_pattern'])}")
    if at["mla"]:
        m = at["mla"]
        print(
            f"  MLA: kv_lora_rank={m['kv_lora_rank']} q_lora_rank={m['q_lora_rank']} "
            f"qk_rope_head_dim={m['qk_rope_head_dim']} qk_nope_head_dim={m['qk_nope_head_dim']} "
            f"v_head_dim={m['v_head_dim']}"
        )
    if at["n_dense_layers"]:
        print(f"  first {at['n_dense_layers']} layers dense (FFN of d_ff), the rest MoE")


def _print_kv(kv: float, at: dict[str, Any]) -> None:
    if _is_plain(at):
        print(f"\nKV cache: {kv:,.0f} bytes per token ({kv / 2**10:,.1f} KiB)")
        return
    n = at["layers"]
    print(f"\nKV cache (whole model): {kv:,.0f} bytes per token ({kv / 2**10:,.1f} KiB)")
    what = "MLA latent" if at["mla"] else "K and V"
    if n["full"]:
        print(
            f"  {n['full']} full layers: {at['kv_bytes_per_token_full_layers']:,.0f} ({what}) every token"
        )
    if n["sliding"]:
        print(
            f"  {n['sliding']} sliding layers: {at['kv_bytes_per_token_sliding_layers']:,.0f} "
            f"({what}) per token, at most {at['sliding_window']:,} tokens"
        )
    if at["mla"]:
        m = at["mla"]
        print(
            f"  MLA caches kv_lora_rank + qk_rope_head_dim = {m['kv_lora_rank'] + m['qk_rope_head_dim']} "
            "values per token and layer, whole on every GPU"
        )
    if n["linear"]:
        st = at["state_bytes_per_sequence"]
        print(
            f"  {n['linear']} linear layers: a constant state of {st / 2**20:,.1f} MiB per sequence"
        )
    one, all_full = at["kv_cache_bytes_per_sequence"], at["kv_cache_bytes_per_sequence_all_full"]
    line = f"  one sequence at context {at['context']:,}: {one / 2**30:,.2f} GiB"
    if n["sliding"] or n["linear"]:
        line += f" ({all_full / 2**30:,.2f} GiB if every layer were full attention)"
    print(line)


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
    shown = ("gated_mlp", "tied_embeddings", "qkv_bias", "qk_norm", "attn_output_gate")
    flags = [k for k in shown if a[k]] + ([] if a["rope"] else ["rope=false"])
    extra.append(f"{a['norms_per_layer']} {a['norm']} per layer")
    extra.append(f"weights={a['weight_dtype']} kv={a['kv_dtype']}")
    print("  " + " ".join(extra + flags))
    if not _is_plain(r["attention"]):
        _print_attention(r["attention"])
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
    _print_kv(r["kv_bytes_per_token"], r["attention"])
    w, m, g = r["workload"], r["memory_per_gpu_bytes"], r["gpu"]
    print(
        f"\nmemory per GPU: batch {w['batch_size']} x ({w['prompt_tokens']} + {w['output_tokens']}) "
        f"tokens, tensor_parallel {w['tensor_parallel']}"
    )
    for key, what in memory_labels(w).items():
        print(f"  {key:<12}{m[key] / 2**30:>10.2f} GiB  {what}")
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
    if g["refusal"]:
        print(f"  warning: cannot run there: {g['refusal']}")


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
