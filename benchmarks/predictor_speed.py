"""Speed of the frozen predictor: full predictions (prefill + every decode step, latency and
energy, band, breakdown, provenance) per second in batch on one core, and the wall time of one
`dse predict` including interpreter start.

    PYTHONPATH=. python benchmarks/predictor_speed.py [--n 100000] [--gpu h100_sxm] [--no-write]

The process pins itself to one CPU core and one BLAS/OpenMP thread before numpy loads (BLAS
threads only contend on small matrices). Two batches:
- sweep-like: values drawn from grids like the bundled search spaces (a sweep samples grids,
  so operator shapes repeat and the Level-1 models run once per distinct shape);
- all distinct: every batch size, prompt and output length drawn independently from wide
  integer ranges (the worst case for that deduplication).
Writes the section "Predictor speed" of docs/performance.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _docsection import replace_section  # noqa: E402  (benchmarks/, the script's folder)

from dse.predict import load_artifact, predict  # noqa: E402

SECTION = "## Predictor speed"
# Where the time goes (written up from cProfile / line_profiler runs of 10^5 configurations on
# the shipped h100_sxm artifact; update with the code).
NOTES = [
    "How the predictor gets there (`dse/predict/request.py`, `dse/predict/pricing.py`,",
    "`dse/predict/adapters.py`, `dse/models/_nn.py`):",
    "",
    "- Each Level-1 model runs once per distinct operator shape over the batch and the 5",
    "  quadrature nodes (integer keys packed and hashed; a 4000-row sample decides first whether",
    "  deduplication pays), the kernel models in 16k-row blocks (their feature matrices stay in",
    "  cache), and only on the configurations that run the operator when fewer than 90% do (the",
    "  MoE block of dense rows, the all-reduce at TP 1). Operators priced as the same vidur",
    "  operator (input and final norm, both residual adds) share the layer-op model's times.",
    "- MLPs (attention and MoE residuals, Level 2, power) run in float32: inputs standardised in",
    "  float64, 4096-row blocks padded to multiples of 16 rows, biases added 16 rows at a time,",
    "  the output column as an einsum. 2.5x (32x32) to 4x (64x64) faster than the float64",
    "  forward, outputs within 2e-7 of a float64 reference, and a row's MLP output is",
    "  bit-identical whatever batch it comes in (OpenBLAS picks other kernels for GEMMs of",
    "  fewer than 16 rows, and a GEMV's order depends on the row's position).",
    "- Operator power from the tabulated power model in float32 (per-cell bilinear",
    "  coefficients), read once per group of rows that share time, FLOPs and bytes.",
    "- Flag names, dtype sizes and input normalisation without string sorts; no pandas import",
    "  on the prediction path (`dse.spec.columns`, `dse.predict` and the model modules import it",
    "  only inside their fitting code, see `dse predict` below).",
    "",
    "Where the time goes now (CPU time, 10^5 all-distinct configurations, ~0.84 s, refitted",
    "h100_sxm artifact with 64x64x64 attention and MoE MLPs): decode attention ~29% (the MLP",
    "over 5x10^5 quadrature-node rows runs near the core's float32 GEMM peak; the rest is the",
    "model's features), layer ops ~22%, GEMM ~10%, prefill attention ~6%, all-reduce ~4% (a",
    "Python set over every row in `AllReduceModel.predict`), MoE ~4%, and ~25% outside the",
    "Level-1 models (operator list, Levels 2-3, outputs). Sweep-like batches (~0.35 s): ~40%",
    "Level-1 models, the rest per-row arithmetic.",
    "",
    "Session 4: prefill attention and MoE average 2 seeded 64x64x64 residual MLPs (decode",
    "attention keeps one). Each member costs ~4% of an all-distinct prediction: 1 / 2 / 3",
    "members in both took the all-distinct rate from ~113k to ~105k and ~100k/s in the same",
    "minutes (docs/accuracy.md, attention section, has the measurement and the accuracy each",
    "buys).",
    "",
    "Session 6: decode attention is the mean of 3 seeded MLPs, and the predictor runs one",
    "member per quadrature node (`dse.predict.request.node_strata`; every member carries a third of",
    "the Simpson weights), so an all-distinct batch runs as many decode MLP rows as with one",
    "member. Old (one member) against new artifact, interleaved in one process, 8 runs each",
    "by CPU time on 10^5 configurations (07:05 UTC, the VM ~10% slower than at 05:32): all",
    "distinct 1.067 s against 1.095 s median (ratio 1.027), sweep-like 0.449 s against 0.445 s",
    "(0.991). The strata enter the deduplication key of the decode-attention shapes: a",
    "sweep-like batch runs 12,960 rows instead of 8,928 per 10^5 configurations. A direct",
    "`predict` of the decode model (the operator table below) averages all three members.",
    "",
    "Before this work: the code of commit c1cbd16 timed with this script on the same VM at",
    "22:40 UTC (load ~4-5): sweep-like 101,884 wall median / 207,769 by CPU time,",
    "all distinct 38,993 / 79,656; Level-1 MLP models 2.0-2.4 M/s by CPU time (32x32). On a",
    "copy of the artifact with 64x64x64 attention and MoE MLPs (random weights; the size of",
    "commit 12f83e5), all distinct by CPU time: 54,316 before -> 122,885 after (decode",
    "attention 0.74 s -> 0.22 s per 10^5 configurations).",
    "",
    "Batch of one vs the same row inside a batch: bit-identical through Levels 1-3 since commit",
    "19c2e4b (Level 3 now runs its ensemble through `MLP.predict`; the former `Forward32`, which",
    "folded the input scaler into float32 weights and used a GEMV, moved every output of a row by",
    "~1.5e-8 with the batch). tests/test_predictor_batching.py checks it end to end.",
    "",
    "`dse predict` for one configuration (interpreter start, imports, artifact load, one",
    "prediction), `python -m dse predict --model llama-3-8b --gpu h100_sxm --json`, wall",
    "median of 7 runs, before/after interleaved, load ~0.5, shipped h100_sxm artifact,",
    "2026-11-29 23:38 UTC: **0.33 s** (0.31-0.53 s) with the code of commit 71de2b5, 0.68 s",
    "(0.64-1.06 s) with the code before it (d67d076), where the model modules",
    "(_fitutil, gemm, layerops, attention, moe, allreduce, power) imported pandas (+ pyarrow,",
    "~0.3 s) at module level although only their fitting code uses it. Now they import it only",
    "for annotations (`TYPE_CHECKING`) and inside fitting functions, and",
    "tests/test_predict_imports.py checks that a one-configuration `dse predict` (table, JSON,",
    "MoE with tensor parallelism, flags) leaves no pandas, pyarrow, Optuna, plotly,",
    "scikit-learn, scipy or torch in `sys.modules` (`--batch IN.csv` reads the CSV with pandas,",
    "which is allowed there). `dse predict --model llama-3-8b --gpu h100_sxm` through the",
    "console script: 0.34 s median of 5 (0.33-0.38 s); `python -c pass` takes 0.03 s and",
    '`python -c "import numpy"` 0.11 s on the same VM.',
    "",
    "What remains, in process: numpy ~0.10 s, the dse modules ~0.12 s (`dse.predict` with the",
    "artifact, HYMELL and Level-1 adapter modules ~0.04 s; `dse.spec.columns` ~0.03 s, of which",
    "PyYAML, imported by `dse.spec.hardware`, ~0.015 s), then ~0.13 s for the artifact load, the",
    "lazily imported model modules, `numpy.ma` (~0.01 s, pulled in by `np.unique` on the",
    "GPU-name column in `dse.predict`) and the prediction itself (a second prediction in the",
    "same process takes 0.02 s). Commands:",
    "",
    "    # wall time, 5 runs",
    "    for i in 1 2 3 4 5; do /usr/bin/time -f %e dse predict --model llama-3-8b --gpu h100_sxm >/dev/null; done",
    "    # what is imported, and how long each import takes",
    "    python -X importtime -m dse predict --model llama-3-8b --gpu h100_sxm 2>&1 >/dev/null | sort -t'|' -k2 -n | tail -20",
]
COMMAND = "PYTHONPATH=. python benchmarks/predictor_speed.py"


def sweep_like(n: int, gpu: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Dense and MoE architectures and workloads from search-space-like grids."""
    moe = rng.random(n) < 0.25
    heads = rng.choice([16, 32, 64], n)
    cols = {
        "d_model": rng.choice([2048, 3072, 4096, 5120, 8192], n),
        "n_layers": rng.choice(np.arange(16, 81, 4), n),
        "n_heads": heads,
        "n_kv_heads": np.minimum(rng.choice([1, 2, 4, 8, 16], n), heads),
        "head_dim": np.full(n, 128),
        "d_ff": rng.choice(np.arange(8192, 28673, 1024), n),
        "vocab_size": rng.choice([32000, 128256], n),
        "n_experts": np.where(moe, rng.choice([8, 16, 64], n), 1),
        "top_k": np.where(moe, rng.choice([1, 2], n), 1),
        "d_ff_expert": rng.choice([1408, 4096, 14336], n),
        "batch_size": rng.choice([1, 4, 8, 16, 32, 64], n),
        "prompt_tokens": rng.choice([128, 256, 512, 1024, 2048, 4096], n),
        "output_tokens": rng.choice([64, 128, 256, 512, 1024], n),
        "tensor_parallel": rng.choice([1, 2, 4, 8], n),
    }
    cols["gpu"] = np.full(n, gpu)
    return cols


def all_distinct(n: int, gpu: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    cols = sweep_like(n, gpu, rng)
    cols["batch_size"] = rng.integers(1, 129, n)
    cols["prompt_tokens"] = rng.integers(16, 8193, n)
    cols["output_tokens"] = rng.integers(2, 2049, n)
    cols["d_ff"] = rng.integers(64, 448, n) * 64
    return cols


def rate(cols: dict[str, np.ndarray], repeats: int) -> tuple[float, float, float]:
    """(median, best, best by CPU time) predictions per second over `repeats` runs of the
    whole batch. CPU time (process_time) is what this process got of the core: on a shared
    machine the wall time also counts the other jobs' turns."""
    n = len(cols["d_model"])
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = predict(cols)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        assert np.all(np.isfinite(out["latency_s"])) and np.all(np.isfinite(out["energy_j"]))
    return n / statistics.median(times), n / min(times), n / min(cpu)


def level1_inputs(kind: str, n: int, rng: np.random.Generator) -> dict[str, Any]:
    """predict() keyword arrays of n random operator shapes of one Level-1 model kind."""
    ints = lambda lo, hi: rng.integers(lo, hi + 1, n).astype(float)  # noqa: E731
    pick = lambda *v: rng.choice(np.array(v, dtype=float), n)  # noqa: E731
    if kind in ("generation_attention", "context_attention"):
        heads = pick(16, 32, 64)
        out = {
            "batch_size": ints(1, 256),
            "num_heads": heads,
            "num_kv_heads": np.minimum(pick(1, 2, 4, 8), heads),
            "head_dim": pick(64, 128),
            "kv_fp8": pick(0, 1),
        }
        out["kv_len" if kind == "generation_attention" else "isl"] = ints(16, 16384)
        return out
    if kind == "moe":
        return {
            "num_tokens": ints(1, 16384),
            "hidden_size": pick(2048, 4096, 6144),
            "inter_size": pick(1408, 4096, 14336),
            "topk": pick(1, 2, 8),
            "num_experts": pick(8, 64, 128),
            "moe_tp_size": pick(1, 2, 4, 8),
        }
    if kind == "layer_op":
        return {
            "op": "input_layernorm",
            "num_tokens": ints(1, 8192),
            "d_model": pick(2560, 4096, 5120, 8192),
            "n_heads": np.full(n, 32.0),
            "n_kv_heads": np.full(n, 8.0),
            "d_ff": np.full(n, 14336.0),
            "tensor_parallel": pick(1, 2, 4, 8),
        }
    if kind == "allreduce":
        return {"message_bytes": np.rint(2.0 ** rng.uniform(10, 28, n)), "n_gpus": pick(2, 4, 8)}
    if kind == "gemm":
        return {"m": ints(1, 8192), "n": ints(8, 3584) * 8, "k": ints(8, 3584) * 8}
    raise ValueError(kind)


LEVEL1_KINDS = ("gemm", "layer_op", "allreduce", "context_attention", "generation_attention", "moe")


def level1_rates(art: Any, n: int, repeats: int) -> list[tuple[str, float, float]]:
    """(model, best wall, best CPU) operator predictions per second of one model per kind,
    called directly on n random shapes (no deduplication: every row is evaluated)."""
    from dse.predict.adapters import PREFER

    rng = np.random.default_rng(1)
    out = []
    for kind in LEVEL1_KINDS:
        names = sorted(art.names(kind))
        if not names:
            continue
        prefs = {"gemm": ("vllm.bfloat16",), "moe": ("vllm.bfloat16",)}.get(kind) or PREFER.get(
            {
                "generation_attention": "attention_decode",
                "context_attention": "attention_prefill",
            }.get(kind, kind),
            (),
        )
        name = next((m for p in prefs for m in names if p in m), names[0])
        model = art.model(name)
        kw = level1_inputs(kind, n, rng)
        walls, cpus = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            res = model.predict(**kw)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        assert np.all(np.isfinite(res["latency_s"]))
        out.append((name, n / min(walls), n / min(cpus)))
    return out


def one_config_wall(repeats: int) -> list[float]:
    cmd = [sys.executable, "-m", "dse", "predict", "--d-model", "4096", "--n-layers", "32",
           "--n-heads", "32", "--n-kv-heads", "8", "--d-ff", "14336", "--json"]  # fmt: skip
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        env = {k: v for k, v in os.environ.items() if k != "DSE_SURROGATES"}
        env["PYTHONPATH"] = str(REPO)
        subprocess.run(cmd, check=True, capture_output=True, cwd=REPO, env=env)
        out.append(time.perf_counter() - t0)
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--gpu", default="h100_sxm")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-write", action="store_true")
    p.add_argument(
        "--level1-n",
        type=int,
        default=1_000_000,
        help="shapes per Level-1 model for the operator-speed table (0: skip it)",
    )
    p.add_argument(
        "--surrogates",
        action="append",
        help="an artifacts folder to time instead of the shipped one (repeatable)",
    )
    args = p.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    folders = args.surrogates or [None]
    load_start = os.getloadavg()[0]
    table, level1 = [], []
    for folder in folders:
        if folder is not None:
            os.environ["DSE_SURROGATES"] = folder
        rng = np.random.default_rng(0)
        art, _ = load_artifact(args.gpu)
        n_l1 = len([m for m in (art.models if art else []) if not m.startswith("level")])
        label = (
            f"{art.artifact_id} ({n_l1} Level-1 models, "
            f"{len([m for m in art.models if m.startswith('level')])} Level-2/3)"
            if art
            else "none (roofline)"
        )
        predict({k: v[:10] for k, v in sweep_like(10, args.gpu, rng).items()})  # warm caches
        for name, make in (("sweep-like", sweep_like), ("all distinct", all_distinct)):
            table.append((label, name, *rate(make(args.n, args.gpu, rng), args.repeats)))
        single = []
        one = {k: v[:1] for k, v in sweep_like(1, args.gpu, rng).items()}
        for _ in range(20):
            t0 = time.perf_counter()
            predict(one)
            single.append(time.perf_counter() - t0)
        table.append(
            (label, "one configuration, warm process (ms)", 1e3 * statistics.median(single))
        )
        if art is not None and args.level1_n:
            level1 += [(label, *r) for r in level1_rates(art, args.level1_n, 3)]
    walls = one_config_wall(3)
    lines = [
        SECTION,
        "",
        f"Command: `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 {COMMAND} --n {args.n} --gpu {args.gpu}"
        + "".join(" --surrogates DIR" for _ in args.surrogates or [])
        + f"` ({time.strftime('%Y-%m-%d %H:%M')} UTC).",
        f"Machine: shared 2-core VM ({cpu_name()}), the process pinned to 1 core, 1 BLAS thread; "
        f"Python {platform.python_version()}, numpy {np.__version__}. Other jobs shared the "
        f"machine (load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
        f"end, on {os.cpu_count()} cores): wall-clock rates are lower bounds; the CPU-time rate "
        "(this process's own share of the core) is the steadier number.",
        "",
        "A full prediction is prefill plus every decode step (Simpson quadrature over the KV length,",
        "5 nodes), latency and energy, error band, out-of-range flags, per-operator breakdown",
        "and provenance, for one configuration. Batches of "
        f"{args.n:,} configurations on {args.gpu} (best and median of {args.repeats} runs):",
        "",
        "| artifact | batch | predictions/s, wall median | wall best | CPU time best |",
        "|---|---|---|---|---|",
    ]
    for label, name, *v in table:
        if len(v) == 1:
            lines.append(f"| {label} | {name} | {v[0]:.1f} | | |")
        else:
            lines.append(f"| {label} | {name} | {v[0]:,.0f} | {v[1]:,.0f} | {v[2]:,.0f} |")
    if level1:
        lines += [
            "",
            f"Level-1 operator models alone (issue 3), each called on {args.level1_n:,} random "
            "shapes (every row evaluated, no deduplication), best of 3:",
            "",
            "| artifact | model | operator predictions/s, wall | CPU time |",
            "|---|---|---|---|",
        ]
        lines += [f"| {lab} | {m} | {w:,.0f} | {c:,.0f} |" for lab, m, w, c in level1]
    lines += ["", *NOTES, ""]
    lines += [
        f"`python -m dse predict ... --json` with the shipped artifact (interpreter start, imports, "
        f"artifact load, one prediction): {', '.join(f'{w:.2f}' for w in walls)} s.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        replace_section(REPO / "docs" / "performance.md", SECTION, text, "Performance")


if __name__ == "__main__":
    main()
