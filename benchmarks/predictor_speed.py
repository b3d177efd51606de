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

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dse.predictor import load_artifact, predict  # noqa: E402

SECTION = "## Predictor speed"
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


def rate(cols: dict[str, np.ndarray], repeats: int) -> tuple[float, float]:
    """(median, best) predictions per second over `repeats` runs of the whole batch."""
    n = len(cols["d_model"])
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = predict(cols)
        times.append(time.perf_counter() - t0)
        assert np.all(np.isfinite(out["latency_s"])) and np.all(np.isfinite(out["energy_j"]))
    return n / statistics.median(times), n / min(times)


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
        "--surrogates",
        action="append",
        help="an artifacts folder to time instead of the shipped one (repeatable)",
    )
    args = p.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    folders = args.surrogates or [None]
    table = []
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
            med, best = rate(make(args.n, args.gpu, rng), args.repeats)
            table.append((label, name, med, best))
        single = []
        one = {k: v[:1] for k, v in sweep_like(1, args.gpu, rng).items()}
        for _ in range(20):
            t0 = time.perf_counter()
            predict(one)
            single.append(time.perf_counter() - t0)
        table.append(
            (label, "one configuration, warm process (ms)", 1e3 * statistics.median(single), None)
        )
    walls = one_config_wall(3)
    lines = [
        SECTION,
        "",
        f"Command: `{COMMAND} --n {args.n} --gpu {args.gpu}"
        + "".join(" --surrogates DIR" for _ in args.surrogates or [])
        + f"` ({time.strftime('%Y-%m-%d')}).",
        f"Machine: {cpu_name()}, pinned to 1 core, 1 BLAS thread; Python {platform.python_version()}, "
        f"numpy {np.__version__}. The machine was shared with other jobs (load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end): treat the numbers "
        "as lower bounds.",
        "",
        "A full prediction is prefill plus every decode step (Simpson quadrature over the KV length,",
        "5 nodes), latency and energy, error band, out-of-range flags, per-operator breakdown",
        "and provenance, for one configuration. Batches of "
        f"{args.n:,} configurations on {args.gpu}:",
        "",
        "| artifact | batch | predictions/s (median) | best |",
        "|---|---|---|---|",
    ]
    for label, name, med, best in table:
        if best is None:
            lines.append(f"| {label} | {name} | {med:.1f} | |")
        else:
            lines.append(f"| {label} | {name} | {med:,.0f} | {best:,.0f} |")
    lines += [
        "",
        "The second artifact (where given) is a development build with every Level-1 family. Where",
        "the time goes with it (cProfile, 10^5 configurations): the attention models' residual MLPs",
        "(two 32-unit tanh layers in float64, over 5 quadrature nodes per configuration) and the",
        "layer-op model (a string `np.unique` per call) dominate when shapes are all distinct;",
        "with grid-like batches every Level-1 model runs once per distinct shape. Input",
        "normalisation (`dse.configs.as_columns`, pandas missing-value checks on string columns)",
        "and `dse.arch.dtype_bytes` (string `np.unique`) cost ~0.1 s per 10^5 rows regardless. On",
        "a quieter machine (load ~2) the same build ran 100-210k sweep-like and 60-72k all-distinct",
        "predictions/s.",
        "",
        f"`python -m dse predict ... --json` with the shipped artifact (interpreter start, imports, "
        f"artifact load, one prediction): {', '.join(f'{w:.2f}' for w in walls)} s.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        doc = REPO / "docs" / "performance.md"
        old = doc.read_text() if doc.is_file() else "# Performance\n"
        if SECTION in old:
            head, rest = old.split(SECTION, 1)
            nxt = rest.find("\n## ")
            tail = rest[nxt + 1 :] if nxt >= 0 else ""
            new = head + text.rstrip() + "\n" + ("\n" + tail if tail else "")
        else:
            new = old.rstrip() + "\n\n" + text.rstrip() + "\n"
        doc.write_text(new)


if __name__ == "__main__":
    main()
