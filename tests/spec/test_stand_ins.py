"""Which chip stands in for which is written once, in dse/spec/stand_ins.py (issue 23)."""

from __future__ import annotations

import re
from pathlib import Path

from dse.spec.hardware import gpu_names
from dse.spec.stand_ins import ANY_GPU, PURPOSES, STAND_INS, lender, lenders

ROOT = Path(__file__).resolve().parents[2]


def test_every_entry_names_registered_gpus() -> None:
    known = set(gpu_names())
    assert set(STAND_INS) == set(PURPOSES)
    for purpose, table in STAND_INS.items():
        for gpu, lent in table.items():
            assert gpu == ANY_GPU or gpu in known, (purpose, gpu)
            assert lent and set(lent) <= known, (purpose, gpu, lent)


def test_lenders_keep_the_old_defaults() -> None:
    # Row purposes answer the GPU's own rows when it is not listed; the others answer none.
    assert lenders("level3_rows", "some_new_gpu") == ("some_new_gpu",)
    assert lenders("level2_rows", "some_new_gpu") == ("some_new_gpu",)
    assert lenders("level2_rows", "gh200") == ("h100_sxm",)  # as H200, whose kernels it carries
    assert lenders("artifact", "h100_sxm") == ()
    assert lender("gemm_tables", "h100_sxm") is None
    assert lenders("power_rows", "a100_sxm") == ("h200_sxm",)
    # The pairs the predictor and the fit drivers relied on before the table existed.
    assert lender("artifact", "gh200") is None  # GH200 ships its own (Level 3 on its rows)
    assert lenders("level3_power_rows", "gh200") == ("h100_sxm",)
    assert lenders("level3_power_rows", "h100_sxm") == ()
    assert lender("artifact", "a100_sxm_40gb") == "a100_sxm"
    assert lender("gemm_tables", "h200_sxm") == "h100_sxm"
    assert lenders("level3_rows", "a100_sxm") == ("a100_sxm_40gb",)


def test_no_other_module_spells_a_gpu_to_gpu_entry() -> None:
    names = "|".join(map(re.escape, gpu_names()))
    entry = re.compile(rf'"({names})":\s*\(?"({names})"')
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "dse").rglob("*.py"))
        if p.name != "stand_ins.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        for m in [entry.search(line)]
        if m and m.group(1) != m.group(2)  # a name mapped to itself is an alias, not a stand-in
    ]
    assert not hits, f"GPU stand-in pairs outside dse/spec/stand_ins.py: {hits}"
