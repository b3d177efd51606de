"""Shared pieces of the measured-data readers: column contract, name normalisation, checks.

Every reader turns one source's files into tidy tables (one row per measurement) whose common
columns are `COMMON_COLUMNS`; units live in column names (`latency_s`, `power_w`, `energy_j`,
`message_bytes`). Units are converted and checked here, once, so consumers never guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from dse.errors import DataError

# The columns every table carries, in this order (kind-specific columns follow).
COMMON_COLUMNS: tuple[str, ...] = (
    "source",
    "gpu",
    "engine",
    "engine_version",
    "kind",
    "dtype",
    "file",
    "latency_s",
    "power_w",
    "energy_j",
)

# Device strings as the sources write them -> registry names (dse/hardware_specs). Keys are
# compared after lower-casing and squeezing non-alphanumerics to "_".
_GPU_ALIASES: dict[str, str] = {
    "h100_sxm": "h100_sxm",
    "h100": "h100_sxm",  # argonne and vidur: SXM 80GB HBM3 (README)
    "nvidia_h100_80gb_hbm3": "h100_sxm",
    "h100_80gb_hbm3": "h100_sxm",
    "dgx_h100": "h100_sxm",
    "h200_sxm": "h200_sxm",
    "h200": "h200_sxm",
    "nvidia_h200": "h200_sxm",
    "a100_sxm": "a100_sxm",
    "a100": "a100_sxm",  # vidur, argonne, splitwise, llmcompass: the 80GB SXM part
    "a100_80gb": "a100_sxm",
    "nvidia_a100_sxm4_80gb": "a100_sxm",
    "a100_sxm4_80gb": "a100_sxm",
    "dgx_a100": "a100_sxm",
    "a100_sxm_40gb": "a100_sxm_40gb",
    "a100_40gb": "a100_sxm_40gb",
    "a100_sxm4_40gb": "a100_sxm_40gb",
    "nvidia_a100_sxm4_40gb": "a100_sxm_40gb",
    "gh200": "gh200",
    "nvidia_gh200": "gh200",
}


# Words that do not change which registry part a device string names (vendor, form factor of
# the SXM parts, memory generation, the usual memory size); "40gb" and "pcie"/"nvl" do and stay.
_GPU_NOISE = re.compile(r"^(nvidia|gpu|tensor|core|sxm[45]?|hbm\d?e?|(80|94|96|141|144|480)gb)$")


def normalise_gpu(name: str) -> str:
    """A registry name for a GPU as a source writes it; other GPUs get a lowercase slug.

    Spellings not listed are looked up again without vendor, SXM and memory words, so a new
    source's "H200 141GB HBM3e" is h200_sxm; PCIe / NVL parts keep their own slug.

    >>> normalise_gpu("H100 80GB HBM3"), normalise_gpu("A100-SXM4-40GB"), normalise_gpu("MI250")
    ('h100_sxm', 'a100_sxm_40gb', 'mi250')
    >>> normalise_gpu("NVIDIA H200 141GB HBM3e"), normalise_gpu("H100 PCIe")
    ('h200_sxm', 'h100_pcie')
    """
    slug = re.sub(r"[^0-9a-z]+", "_", str(name).strip().lower()).strip("_")
    if slug in _GPU_ALIASES:
        return _GPU_ALIASES[slug]
    core = "_".join(w for w in slug.split("_") if not _GPU_NOISE.match(w))
    return _GPU_ALIASES.get(core, slug)


_DTYPE_ALIASES: dict[str, str] = {
    "half": "float16",
    "fp16": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp8": "fp8",
    "float8": "fp8",
    "fp8_block": "fp8_block",
    "int8": "int8",
    "fp32": "float32",
    "float32": "float32",
}


def normalise_dtype(values: pd.Series) -> pd.Series:
    """Lowercase dtype names with the usual aliases folded (half -> float16, bf16 -> bfloat16)."""
    # few distinct values over many rows: map the uniques, then take by code
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    names = [str(u).strip().lower() for u in uniques]
    mapped = np.array([_DTYPE_ALIASES.get(n, n) for n in names], dtype=object)
    return pd.Series(mapped[codes], index=values.index, dtype="str")


def rel(path: Path, root: Path) -> str:
    """`path` relative to the data root, POSIX style (what every table's `file` column holds)."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def read_csv(path: Path, file: str, **kwargs: object) -> pd.DataFrame:
    """`pd.read_csv(path, **kwargs)`; unreadable files are a DataError naming `file`.

    A file with a header and no rows, or no bytes at all, is an empty table: no measurements, not
    a malformed file (a held-out share filtered by shape or model can leave a file empty). The
    caller skips it; `dse validate` lists the files that gave no rows.
    """
    try:
        return pd.read_csv(path, **kwargs)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except Exception as exc:  # parser errors, bad encoding
        raise DataError(f"{file}: cannot read CSV ({exc})") from exc


def require_columns(df: pd.DataFrame, columns: Iterable[str], file: str) -> None:
    """Raise DataError naming the file and every missing column."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(
            f"{file}: missing column(s) {', '.join(missing)}; found {', '.join(map(str, df.columns))}"
        )


def numeric(df: pd.DataFrame, column: str, file: str) -> np.ndarray:
    """A column as float64; unparsable entries are a DataError naming the file, column and value."""
    raw = df[column]
    values = pd.to_numeric(raw, errors="coerce")
    bad = values.isna() & raw.notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{file}: column {column!r} row {i}: cannot parse {raw.iloc[i]!r} as a number"
        )
    return values.to_numpy(dtype=float)


def check_positive(values: np.ndarray, column: str, file: str) -> None:
    """Every value finite and > 0 (latencies, sizes): else DataError with the first bad row."""
    bad = ~np.isfinite(values) | (values <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{file}: {column} must be a finite number > 0, got {values[i]!r} at row {i} "
            f"({int(bad.sum())} bad row(s))"
        )


def check_range(values: np.ndarray, lo: float, hi: float, what: str, file: str) -> None:
    """Every finite value within [lo, hi] (a unit sanity check): else DataError naming the file."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return
    if v.min() < lo or v.max() > hi:
        worst = v.min() if v.min() < lo else v.max()
        raise DataError(
            f"{file}: {what} must lie in [{lo:g}, {hi:g}] (wrong units?), got {worst:g}"
        )


# The slowest best rate (FLOP/s or bytes/s) a table of a profiled device may have: what any
# computing device beats (a CPU core does ~1e9 FLOP/s and moves ~1e9 B/s). Bounds a profiled
# device's tables without assuming how fast one kind of kernel runs next to another there.
ANY_DEVICE_MIN_RATE = 1e6


def rate_floor(gpu: str, default: float) -> float:
    """The slow-slip floor of a rate check (`check_peak_rate`'s `lo`): `default` for a registry
    GPU (and an unknown one); ANY_DEVICE_MIN_RATE for a profiled device (`dse profile`, maybe a
    CPU, far below the registry's GPUs; its tables are written by `dse profile` in known units)."""
    from dse.spec.hardware import profiled_names

    return ANY_DEVICE_MIN_RATE if gpu in profiled_names() else default


def check_peak_rate(
    work: np.ndarray, latency_s: np.ndarray, lo: float, hi: float, what: str, file: str
) -> None:
    """The achieved rates (work per second) of a file must be physically plausible.

    A file in the wrong time unit (seconds or microseconds instead of milliseconds) moves every
    rate by 1000x, which these wide bounds catch: the best row must reach `lo` (a slow slip),
    the median row must stay below `hi` (a fast slip). The median, not the best row, for the
    upper bound: upstream tables of the share's own commit have a few rows above the peak
    (L2-resident KV caches, int8 GEMMs on A100, odd rows of some attention tables; up to 12% of
    one table), and one such row must not make a whole held-out folder unreadable.
    """
    rate = np.asarray(work, dtype=float) / np.asarray(latency_s, dtype=float)
    rate = rate[np.isfinite(rate)]
    best = float(rate.max()) if rate.size else float("nan")
    mid = float(np.median(rate)) if rate.size else float("nan")
    if not np.isfinite(best) or best < lo:
        raise DataError(
            f"{file}: best achieved {what} must be at least {lo:.3g} (wrong units?), got {best:.3g}"
        )
    if mid > hi:
        raise DataError(
            f"{file}: median achieved {what} must be at most {hi:.3g} (wrong units?), got {mid:.3g}"
        )


def finish(df: pd.DataFrame, extra_order: Iterable[str] = ()) -> pd.DataFrame:
    """Fill missing common columns, put the common columns first and reset the index."""
    for col in ("power_w", "energy_j"):
        if col not in df.columns:
            df[col] = np.nan
    if "energy_j" in df.columns and "power_w" in df.columns:
        # energy of one call = latency x mean power wherever power was measured (and not given)
        fill = df["energy_j"].isna() & df["power_w"].notna()
        if fill.any():
            df.loc[fill, "energy_j"] = df.loc[fill, "latency_s"] * df.loc[fill, "power_w"]
    front = [c for c in COMMON_COLUMNS if c in df.columns]
    rest = [c for c in extra_order if c in df.columns and c not in front]
    tail = [c for c in df.columns if c not in front and c not in rest]
    out = df[front + rest + tail].reset_index(drop=True)
    for col in ("latency_s", "power_w", "energy_j"):
        out[col] = out[col].astype(float)
    return out


def concat(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate same-kind tables (columns unioned; absent ones become NaN)."""
    tables = [t for t in tables if len(t)]
    if not tables:
        return pd.DataFrame(columns=list(COMMON_COLUMNS))
    if len(tables) == 1:
        return tables[0]
    return pd.concat(tables, ignore_index=True, sort=False)


def add_table(out: dict[str, list[pd.DataFrame]], kind: str, df: pd.DataFrame) -> None:
    """Append a table to the per-kind lists a reader collects."""
    out.setdefault(kind, []).append(df)


def merge_kinds(out: dict[str, list[pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """Per-kind lists -> one table per kind."""
    return {kind: concat(tables) for kind, tables in out.items() if tables}
