"""Which inputs put the shipped examples' configurations out of the fitted range, and how often.

For each shipped example (search_spaces/*.yaml) every configuration is predicted when the space
has at most `--limit` of them, else `--limit` are drawn uniformly (seed 0); the table counts, over
all valid configurations and over the feasible ones (constraints met: the ones a front can hold),
how many are flagged `out_of_range`, and per flagged input (`out_of_range_inputs` without the
values: "<phase> <operator>: <input>" or "level3: <input>") how many carry it.

    python benchmarks/out_of_range_table.py [--limit 2000] [--spaces dense_8b moe]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

import numpy as np

from dse.spec import columns as C
from dse.spec.space import load_space, resolve_space_path
from dse.sweep._evaluate import evaluate

SPACES = ("dense_8b", "gpu_batch", "moe", "heads_study")


def flag_keys(text: str) -> list[str]:
    """'decode attention/decode: num_kv_heads 1 < 2 (x0.5); level3: d_model ...' ->
    ['decode attention/decode: num_kv_heads', 'level3: d_model']; the older comma-joined
    names ('prefill lm_head,level3 d_model') pass through as they are."""
    if not text:
        return []
    if ";" not in text and ":" not in text:
        return text.split(",")
    return [re.sub(r"\s+[-0-9.e+]+\s*[<>].*$", "", p.strip()) for p in text.split(";")]


def sample(space_name: str, limit: int) -> dict[str, np.ndarray]:
    space = load_space(resolve_space_path(space_name))
    if space.size() <= limit:
        return space.enumerate()
    rows = space.examples(limit, seed=0)
    cols, _ = C.as_columns({k: np.asarray([r[k] for r in rows]) for k in rows[0]})
    return cols


def table(space_name: str, limit: int) -> tuple[str, dict[str, int]]:
    space = load_space(resolve_space_path(space_name))
    cols = sample(space_name, limit)
    ev = evaluate(space, cols, with_tokens2wh=False)
    oor = np.asarray(ev.pred.get("out_of_range", np.zeros(ev.n)), dtype=object)
    flagged = np.array([bool(v) if v is not None else False for v in oor])
    texts = np.asarray(ev.pred.get("out_of_range_inputs", np.full(ev.n, "")), dtype=object)
    lines = []
    head = (
        f"{space_name}: {ev.valid.sum()} valid, {ev.feasible.sum()} feasible; out of range: "
        f"{flagged[ev.valid].sum()} valid ({flagged[ev.valid].mean():.0%}), "
        f"{flagged[ev.feasible].sum()} feasible "
        f"({flagged[ev.feasible].mean() if ev.feasible.any() else 0:.0%})"
    )
    lines.append(head)
    counts: Counter[str] = Counter()
    counts_f: Counter[str] = Counter()
    for i in np.nonzero(ev.valid)[0]:
        for k in set(flag_keys(str(texts[i] or ""))):
            counts[k] += 1
            if ev.feasible[i]:
                counts_f[k] += 1
    for k, c in counts.most_common():
        lines.append(f"  {k:55s} {c:6d} valid {counts_f[k]:6d} feasible")
    if "out_of_range_degree" in ev.pred:
        deg = np.asarray(ev.pred["out_of_range_degree"], dtype=float)[ev.feasible]
        if len(deg):
            lines.append(
                f"  degree over feasible: median {np.median(deg):.3f}, "
                f"90th pct {np.quantile(deg, 0.9):.3f}, max {deg.max():.3f}"
            )
    return "\n".join(lines), dict(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--spaces", nargs="*", default=list(SPACES))
    args = ap.parse_args()
    for s in args.spaces:
        print(table(s, args.limit)[0])


if __name__ == "__main__":
    main()
