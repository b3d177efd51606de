"""SGLang's MoE kernel as an input of its MoE models (issue 35): how exactly the rule of
`dse.models.moe_kernels` names the kernel of each layout, and the layout-held-out CV `dse fit`
runs (3 seeded folds by layout, fits on <= 8,000 rows) of one model over both kernels (as
shipped before) against one model per kernel picked by the rule.

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/sglang_moe_kernel.py --data ../shared/data \
        --gpu b200_sxm --dtype bfloat16
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dse.fitting import bands, plausible
from dse.fitting._hybrid_tables import hybrid_band_table
from dse.fitting.moe import MOE_SHAPE_GROUP
from dse.metrics import mape_pct
from dse.models.base import batch_size_of
from dse.models.moe import MoEModel, moe_inputs
from dse.models.moe_kernels import SOURCE_KERNEL, KernelMoEModel, sglang_moe_kernel

LAYOUT = ["hidden_size", "inter_size", "topk", "num_experts"]


def main() -> None:
    from dse.data import load

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--gpu", default="b200_sxm")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--skip-before", action="store_true", help="only the per-kernel model")
    ap.add_argument(
        "--oracle",
        action="store_true",
        help="also one model per kernel by the kernel each layout ran (its kernel_source)",
    )
    args = ap.parse_args()
    rows = load(args.data, ["moe"])["moe"]
    rows, _ = plausible.screen("moe", rows)
    sel = (rows["gpu"] == args.gpu) & (rows["engine"] == "sglang")
    rows = rows[sel & (rows["dtype"].astype(str) == args.dtype)].reset_index(drop=True)
    ins = moe_inputs(rows)
    rule = sglang_moe_kernel(args.gpu, ins["topk"], len(rows))
    truth = rows["kernel_source"].map(SOURCE_KERNEL).fillna(rows["kernel_source"]).to_numpy()
    lay = rows.groupby(LAYOUT).indices
    hit = sum(bool((rule[i] == truth[i]).all()) for i in lay.values())
    print(
        f"{args.gpu} sglang {args.dtype}: {len(rows)} rows, {len(lay)} layouts; the rule names "
        f"the kernel of {hit} layouts, {int((rule == truth).sum())} rows"
    )
    for key, i in sorted(lay.items()):
        if not (rule[i] == truth[i]).all():
            print(f"  missed {key}: ran {truth[i][0]}, rule says {rule[i][0]}")
    y = rows["latency_s"].to_numpy(float)
    classes: list[tuple[str, type]] = [("per kernel", KernelMoEModel)]
    if not args.skip_before:
        classes.insert(0, ("one model", MoEModel))
    if args.oracle:
        ran = {key: str(truth[i][0]) for key, i in lay.items()}

        class Oracle(KernelMoEModel):
            """The kernel each measured layout ran (not known for a user's layout)."""

            def kernels(self, **arrays: object) -> np.ndarray:
                n = batch_size_of(arrays)
                cols = [np.broadcast_to(np.asarray(arrays[c], float), (n,)) for c in LAYOUT]
                keys = zip(*cols, strict=True)
                return np.array([ran[tuple(int(v) for v in key)] for key in keys])

        classes.append(("per kernel, kernel as measured", Oracle))
    for what, cls in classes:
        t0 = time.perf_counter()
        table = hybrid_band_table(
            f"moe.sglang.{args.dtype}",
            rows,
            lambda cls=cls, **kw: cls(args.gpu, "sglang", args.dtype, seed=0, **kw),
            moe_inputs,
            (MOE_SHAPE_GROUP, "layer shape"),
            0,
        )
        pred = bands.held_out(table)["latency_s"]
        by = {k: mape_pct(pred[truth == k], y[truth == k]) for k in np.unique(truth)}
        parts = ", ".join(f"{k} {v:.2f}%" for k, v in by.items())
        print(
            f"  {what}: held out by layout {mape_pct(pred, y):.2f}% ({parts}) "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
        for key, i in sorted(lay.items()):
            print(f"    {key} ({truth[i][0]}): {mape_pct(pred[i], y[i]):.2f}%")


if __name__ == "__main__":
    main()
