"""Row counts of the measured-data tables per (source, gpu, kind), and how long reading takes.

    PYTHONPATH=. python benchmarks/data_inventory.py [--data ../shared/data]

Prints a Markdown table (pasted into docs/data.md) and the wall time of `dse.data.load`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from dse.data import load


def inventory(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Rows per (source, gpu, kind), with how many of them carry measured power."""
    parts = [
        df.groupby(["source", "gpu", "kind"], sort=True)
        .agg(rows=("latency_s", "size"), with_power=("power_w", "count"))
        .reset_index()
        for df in tables.values()
    ]
    return pd.concat(parts, ignore_index=True).sort_values(["source", "gpu", "kind"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    parser.add_argument("--data", type=Path, default=default)
    args = parser.parse_args()
    start = time.perf_counter()
    tables = load(args.data)
    elapsed_s = time.perf_counter() - start
    inv = inventory(tables)
    print("| source | gpu | kind | rows | rows with power |")
    print("|---|---|---|---:|---:|")
    for r in inv.itertuples(index=False):
        print(f"| {r.source} | {r.gpu} | {r.kind} | {r.rows:,} | {r.with_power:,} |")
    total = int(inv["rows"].sum())
    print(f"\n{total:,} rows in {len(tables)} kinds; load() took {elapsed_s:.1f} s")


if __name__ == "__main__":
    main()
