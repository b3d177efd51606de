"""Should `engine: trtllm` be priced by TensorRT-LLM's own kernel tables (as SGLang's are) once
an artifact has them? docs/dev/accuracy-journal.md "B200 TensorRT-LLM kernel models (issue 35)".

    OMP_NUM_THREADS=1 PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates \\
        python experiments/trtllm_own_tables.py --gpu b200_sxm [--data ../shared/data]

Levels 2-3 are fitted on argonne's vLLM / TensorRT-LLM end-to-end rows priced by Level 1, so a
routing change moves them: for each routing, set in this process only, the script refits
`--only hymell-levels-2-3` over a copy of the GPU's artifact (in a temporary folder; the shipped
one is not written) and prints Level 3's held-out error per engine (the manifest's
leave-one-model-out CV on the rows of `dse.spec.stand_ins` "level3_rows"), whether Levels 2-3
came out byte-identical to the shipped ones, and a few TensorRT-LLM predictions (TTFT, TPOT,
energy) with the kernel models that priced them. Routings:

- `vllm tables (shipped)`: TensorRT-LLM priced by vLLM's tables (`adapters.OWN_TABLE_ENGINES`
  without trtllm);
- `own tables`: TensorRT-LLM an own-table engine (`OWN_PREFER["trtllm"]` below).

About 2-4 min a routing on one core (the Levels 2-3 fit).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from dse.predict import adapters, pricing

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
OWN_TRTLLM: dict[str, tuple[str, ...]] = {
    "attention_prefill": ("trtllm",),
    "attention_decode": ("trtllm",),
    "moe": ("trtllm.bfloat16",),
    "moe_4bit": ("trtllm.w4a16_mxfp4",),
    "moe_nvfp4": ("trtllm.nvfp4",),
    "moe_fp8": ("trtllm.fp8_block", "trtllm.fp8"),
    "allreduce": ("trtllm.custom.trtllm",),
    "attention_mla_prefill": ("trtllm",),
    "attention_mla_decode": ("trtllm",),
}
# (label, architecture + workload) priced under each routing: a dense and a MoE model
CONFIGS: list[tuple[str, dict[str, object]]] = [
    (
        "Llama-3-8B b8 1024/256",
        dict(
            d_model=4096,
            n_layers=32,
            n_heads=32,
            n_kv_heads=8,
            d_ff=14336,
            vocab_size=128256,
            batch_size=8,
            prompt_tokens=1024,
            output_tokens=256,
        ),
    ),
    (
        "Mixtral-8x7B TP2 b16 2048/512",
        dict(
            d_model=4096,
            n_layers=32,
            n_heads=32,
            n_kv_heads=8,
            d_ff=14336,
            vocab_size=32000,
            n_experts=8,
            top_k=2,
            d_ff_expert=14336,
            tensor_parallel=2,
            batch_size=16,
            prompt_tokens=2048,
            output_tokens=512,
        ),
    ),
]


def _route(own: bool) -> None:
    engines = ("sglang", "trtllm") if own else ("sglang",)
    adapters.OWN_TABLE_ENGINES = engines
    pricing.OWN_TABLE_ENGINES = engines
    if own:
        adapters.OWN_PREFER["trtllm"] = OWN_TRTLLM
    else:
        adapters.OWN_PREFER.pop("trtllm", None)
    adapters._FOUND.clear()


def _predict(art_dir: Path, gpu: str) -> list[str]:
    from dse.models.artifact import Artifact
    from dse.predict import predict

    art = Artifact.load(art_dir)
    out = []
    for label, cfg in CONFIGS:
        cols = {k: [v] for k, v in cfg.items()} | {"gpu": [gpu], "engine": ["trtllm"]}
        res = predict(cols, {gpu: art}, models=True)
        out.append(
            f"  {label}: TTFT {1e3 * float(res['ttft_s'][0]):.3f} ms, TPOT "
            f"{1e3 * float(res['tpot_s'][0]):.4f} ms, energy {float(res['energy_j'][0]):.2f} J; "
            f"kernel models: {res['kernel_models'][0]}"
        )
    return out


def _same_levels(a: Path, b: Path) -> bool:
    from dse.models.artifact import Artifact

    x, y = Artifact.load(a), Artifact.load(b)
    names = [n for n in x.models if n.startswith(("level2.", "level3."))]
    wa, wb = np.load(a / "weights.npz"), np.load(b / "weights.npz")
    keys = [k for k in wa.files if any(k.startswith(n) for n in names)]
    return (
        sorted(keys) == sorted(k for k in wb.files if any(k.startswith(n) for n in names))
        and all(np.array_equal(wa[k], wb[k]) for k in keys)
        and all(
            y.manifest["models"][n].get("cv") == x.manifest["models"][n].get("cv") for n in names
        )
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="b200_sxm")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--artifact", help="artifact folder (default: surrogates/<gpu>)")
    ap.add_argument("--keep", help="write the refitted artifacts under this folder")
    args = ap.parse_args()
    from dse.fitting.run import fit_artifact
    from dse.models.artifact import Artifact

    src = Path(args.artifact or REPO / "surrogates" / args.gpu)
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="trtllm_routing_"))
    print(f"artifact {src} ({Artifact.load(src).artifact_id})")
    for own in (False, True):
        label = "own tables" if own else "vllm tables (shipped)"
        _route(own)
        folder = tmp / ("own" if own else "shipped")
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(src, folder)
        print(f"\n{label}: shipped Levels 2-3")
        for line in _predict(folder, args.gpu):
            print(line)
        art = fit_artifact(
            args.data,
            args.gpu,
            only=["hymell-levels-2-3"],
            keep=Artifact.load(folder),
            log=lambda s: None,
            jobs=1,
            threads=1,
        )
        art.save(folder)
        l3 = art.manifest["models"]["level3.e2e"]["cv"]
        print(
            f"{label}: Levels 2-3 refitted; byte-identical to the shipped: "
            f"{_same_levels(src, folder)}; Level 3 held out (latency MAPE, leave-one-model-out): "
            + ", ".join(
                f"{e} {v['latency_mape_pct']:.3f}% ({v['rows']} rows)" for e, v in l3.items()
            )
        )
        for line in _predict(folder, args.gpu):
            print(line)
    _route(False)
    if not args.keep:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
