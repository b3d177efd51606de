"""Speed of the frozen predictor, side by side: full predictions (prefill + every decode step,
latency and energy, band, breakdown, provenance) per second in batch on one core, for the code
of one or more checkouts timed in the same run.

    PYTHONPATH=. python benchmarks/predictor_speed.py [--code DIR ...] [--n 50000] [--no-write]

Each `--code DIR` is a checkout to time (default: this one; e.g. a baseline made with
`git worktree add /tmp/base-8aa1249 8aa1249` or `git archive 8aa1249 | tar -x -C DIR`). The
checkouts are interleaved round by round (`--rounds`, 3): in each round every checkout runs in
a fresh worker process (the machinery of benchmarks/small_calls.py: PYTHONPATH and the
artifacts of that checkout, pinned to one core with taskset, one BLAS/OpenMP thread) that
times, by CPU time, best of 3:
- all distinct: four 7-13B models (Llama-2 7B and 13B, Llama-3 8B, Mistral 7B) on h100_sxm
  (vLLM, the default engine), batch size, prompt and output length and tensor parallelism
  drawn independently from wide integer ranges (the worst case for shape deduplication);
- sweep-like: the same four models, workloads from grids like the bundled search spaces
  (operator shapes repeat, as in a sweep);
- exact-sweep grid (`exact_grid`): distinct dense decoders drawn from a grid like
  benchmarks/sweep_3m_space.yaml's at one workload (no configuration repeats, the operator
  calls do: what a chunk of an exact sweep predicts);
- one configuration, warm process: the median CPU time of 50 one-row calls.
The ratio of each checkout to the first one is taken within each round (the checkouts of a
round are seconds apart, so a change in a shared machine's speed falls on them alike) and the
median over rounds is reported. Writes the section "Predictor speed" of docs/performance.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import inspect
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _docsection import replace_section  # noqa: E402  (benchmarks/, the script's folder)
from _provenance import checkout_label  # noqa: E402
from small_calls import _env, cpu_name  # noqa: E402  (one checkout's worker environment)

SECTION = "## Predictor speed"
NOTES = [
    'Where the time goes: section "Where a bulk batch spends its time" below',
    "(benchmarks/predictor_profile.py). The numbers and notes of earlier sessions, from one",
    'checkout at a time: "Predictor speed before issue 37" below.',
]
COMMAND = "PYTHONPATH=. python benchmarks/predictor_speed.py"
GPU = "h100_sxm"
# (d_model, n_layers, n_heads, n_kv_heads, d_ff, vocab_size): Llama-2 7B, Llama-3 8B,
# Mistral 7B, Llama-2 13B (head_dim 128 in all four)
MODELS = np.array(
    [
        (4096, 32, 32, 32, 11008, 32000),
        (4096, 32, 32, 8, 14336, 128256),
        (4096, 32, 32, 8, 14336, 32000),
        (5120, 40, 40, 40, 13824, 32000),
    ]
)
ONE_ROW_CALLS = 50


def sweep_like(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The four models, workloads from search-space-like grids (operator shapes repeat)."""
    m = MODELS[rng.integers(0, len(MODELS), n)]
    cols = {
        k: m[:, j]
        for j, k in enumerate(
            ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab_size")
        )
    }
    cols["head_dim"] = np.full(n, 128)
    cols["batch_size"] = rng.choice([1, 4, 8, 16, 32, 64], n)
    cols["prompt_tokens"] = rng.choice([128, 256, 512, 1024, 2048, 4096], n)
    cols["output_tokens"] = rng.choice([64, 128, 256, 512, 1024], n)
    cols["tensor_parallel"] = rng.choice([1, 2, 4, 8], n)
    cols["gpu"] = np.full(n, GPU)
    return cols


def all_distinct(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The four models, every workload drawn freely (the worst case for deduplication)."""
    cols = sweep_like(n, rng)
    cols["batch_size"] = rng.integers(1, 129, n)
    cols["prompt_tokens"] = rng.integers(16, 8193, n)
    cols["output_tokens"] = rng.integers(2, 2049, n)
    return cols


BATCHES = {"all_distinct": all_distinct, "sweep_like": sweep_like}


def exact_grid(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A chunk of an exact sweep: n distinct configurations drawn without repetition from a
    grid of dense decoders like benchmarks/sweep_3m_space.yaml's (d_model x layers x heads x
    KV heads x FFN width, 24,192 architectures; cycled past that), one workload, GPU and TP.
    No configuration repeats, but the operator calls do: every depth makes the same calls."""
    grid = np.array(
        np.meshgrid(
            [2048, 3072, 4096, 5120, 6144, 8192],
            np.arange(16, 77, 4),
            [16, 32, 64],
            [1, 2, 4, 8],
            np.arange(8192, 28673, 1024),
            indexing="ij",
        )
    ).reshape(5, -1)
    pick = np.concatenate([rng.permutation(grid.shape[1]) for _ in range(-(-n // grid.shape[1]))])
    g = grid[:, pick[:n]]
    cols = dict(zip(("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"), g, strict=True))
    cols["head_dim"] = cols["d_model"] // cols["n_heads"]
    cols["vocab_size"] = np.full(n, 128256)
    cols["batch_size"] = np.full(n, 16)
    cols["prompt_tokens"] = np.full(n, 1024)
    cols["output_tokens"] = np.full(n, 256)
    cols["tensor_parallel"] = np.full(n, 4)
    cols["gpu"] = np.full(n, GPU)
    return cols


# Batches of other architectures than the four models (timed like BATCHES).
OTHER_BATCHES = {"exact_grid": exact_grid}


def worker(n: int, repeats: int) -> dict[str, float]:
    """Rates of the checkout on sys.path (a fresh process per checkout and round)."""
    from dse.predict import predict

    rows = sweep_like(ONE_ROW_CALLS, np.random.default_rng(37))
    one = [{k: v[i : i + 1] for k, v in rows.items()} for i in range(ONE_ROW_CALLS)]
    predict(one[0])  # warm-up: artifact load, lazy imports, tables
    cpu = []
    for r in one:
        c0 = time.process_time()
        predict(r)
        cpu.append(time.process_time() - c0)
    out = {"one_row_cpu_ms": 1e3 * statistics.median(cpu)}
    # a sweep's scan (exact, screened) predicts without the out-of-range text where the code
    # has that option (issue 37); older code builds the text on every row
    scan = {"texts": False} if "texts" in inspect.signature(predict).parameters else {}
    for name, make in {**BATCHES, **OTHER_BATCHES}.items():
        cols = make(n, np.random.default_rng(0))
        for suffix, kw in (("", {}), ("_scan", scan)):
            best = np.inf
            for _ in range(repeats):
                c0 = time.process_time()
                res = predict(cols, **kw)
                best = min(best, time.process_time() - c0)
            assert np.all(np.isfinite(res["latency_s"])) and np.all(np.isfinite(res["energy_j"]))
            out[f"{name}{suffix}_per_s"] = n / best
    return out


def run_worker(code: Path, n: int, repeats: int) -> dict[str, float]:
    """`worker` in a fresh process on `code`'s dse and artifacts, pinned to one core."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--n", str(n)]
    cmd += ["--repeats", str(repeats)]
    if hasattr(os, "sched_getaffinity"):
        cmd = ["taskset", "-c", str(sorted(os.sched_getaffinity(0))[0]), *cmd]
    done = subprocess.run(cmd, cwd=code, env=_env(code), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"worker for {code} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


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


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--code", action="append", type=Path, help="a checkout to time (repeatable)")
    p.add_argument("--label", action="append", help="a label per --code (default: its commit)")
    p.add_argument("--n", type=int, default=50_000, help="configurations per batch")
    p.add_argument("--repeats", type=int, default=3, help="runs per batch (best by CPU time)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (every checkout once each)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument(
        "--level1-n",
        type=int,
        default=0,
        help="also time each Level-1 model of this checkout on this many shapes (0: skip)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.n, args.repeats)))
        return
    codes = [c.resolve() for c in (args.code or [REPO])]
    labels = args.label or [checkout_label(c) for c in codes]
    load0 = os.getloadavg()
    t0 = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    runs: list[list[dict[str, float]]] = [[] for _ in codes]
    for r in range(args.rounds):
        for i, code in enumerate(codes):
            runs[i].append(run_worker(code, args.n, args.repeats))
            print(f"round {r}: {labels[i]}: {runs[i][-1]}", file=sys.stderr)
    load1 = os.getloadavg()
    keys = (
        "all_distinct_per_s",
        "sweep_like_per_s",
        "all_distinct_scan_per_s",
        "sweep_like_scan_per_s",
        "exact_grid_scan_per_s",
        "one_row_cpu_ms",
    )

    def ratio(i: int, k: str) -> float:  # median over rounds of the round's ratio to code 0
        per = [b[k] / a[k] for a, b in zip(runs[0], runs[i], strict=True)]
        return statistics.median(per)

    lines = [
        SECTION,
        "",
        f"Command: `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 {COMMAND} --n {args.n}"
        + "".join(f" --code {c}" for c in args.code or [])
        + f"` ({t0} UTC).",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores shared with other jobs (load average "
        f"{load0[0]:.1f} / {load0[1]:.1f} at the start, {load1[0]:.1f} / {load1[1]:.1f} at the "
        f"end, 1 / 5 min); each worker pinned to 1 core, 1 BLAS thread; Python "
        f"{platform.python_version()}, numpy {np.__version__}. On a loaded machine absolute rates "
        "move with the load; the ratios, taken within each round, are the number to compare.",
        "",
        f"Batches of {args.n:,} configurations of four 7-13B models on {GPU} (vLLM), CPU time, "
        f"best of {args.repeats} per round, median over {args.rounds} rounds; ratio = median over "
        f"rounds of the round's rate against {labels[0]} (for one row: its time over the "
        "baseline's, lower is faster):",
        "",
        "| code | all distinct (configs/s) | ratio | sweep-like (configs/s) | ratio "
        "| all distinct, scan | ratio | sweep-like, scan | ratio | exact-sweep grid, scan "
        "| ratio | one configuration, warm (CPU ms) | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, lab in enumerate(labels):
        med = {k: statistics.median(x[k] for x in runs[i]) for k in keys}
        cells = [f"{med[k]:,.0f} | {ratio(i, k):.2f}" for k in keys[:-1]]
        cells.append(f"{med[keys[-1]]:.2f} | {ratio(i, keys[-1]):.2f}")
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "All distinct and sweep-like: `predict(cols)`, every output (the out-of-range text",
        "included). Scan: what a sweep's exact and screened scans call, which keep only a front",
        "and evaluate it again in full: `predict(cols, texts=False)` where the code has it (no",
        "`out_of_range_inputs` text), `predict(cols)` in code before it. Exact-sweep grid:",
        "distinct dense decoders from a grid like benchmarks/sweep_3m_space.yaml's",
        "(`exact_grid`: what one chunk of `--sampler exact` predicts), scan path.",
    ]
    if args.level1_n:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        sys.path.insert(0, str(REPO))
        from dse.predict import load_artifact

        art, _ = load_artifact(GPU)
        if art is not None:
            lines += [
                "",
                "Level-1 operator models alone (this checkout),"
                f" each called on {args.level1_n:,} random shapes (every row evaluated, no "
                "deduplication), best of 3:",
                "",
                "| model | operator predictions/s, wall | CPU time |",
                "|---|---|---|",
            ]
            lines += [
                f"| {m} | {w:,.0f} | {c:,.0f} |" for m, w, c in level1_rates(art, args.level1_n, 3)
            ]
    lines += ["", *NOTES, ""]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        replace_section(REPO / "docs" / "performance.md", SECTION, text, "Performance")


if __name__ == "__main__":
    main()
