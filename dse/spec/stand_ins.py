"""Which chip stands in for which, for each purpose: the one table (issue 23).

A GPU without data or an artifact of its own for some purpose borrows another's. Each purpose
maps a GPU to the GPUs that lend to it (`lenders(purpose, gpu)`); why each pair holds is measured
in docs/accuracy.md ("Fallbacks across engines, dtypes and sibling GPUs").

- `artifact`: a GPU without an artifact of its own is predicted and validated with the artifact
  of the same die (A100 40GB -> A100 80GB). GH200 has its own artifact: H200's Level-1 and
  Level-2 models (its manifest's `level1_gpu`, times moved to GH200's bandwidth by the
  roofline) under a Level 3 fitted on GH200's own end-to-end rows.
- `gemm_tables`: GEMM tables an artifact lacks for an (engine, dtype) come from the sibling chip's
  artifact stored next to it, the time moved by the roofline ratio. H200 is the H100's Hopper die
  (132 SMs, same clocks and tensor rates) with 4.8 instead of 3.35 TB/s of HBM: H100 tables priced
  onto H200's rows this way score 8.0% (vLLM bf16) and 11.0% (vLLM fp8_block), the spread of the
  two chips' own rows (8.4% and 11.9%).
- `collective_tables`: the all-reduce rows an artifact has no model for are scored, in
  `dse validate` only, with the sibling chip's (H200 and H100 share NVLink 4 and NVSwitch; the
  H100 models score 2.7-9.0% on H200's own tables). MoE and another engine's all-reduce scored
  14-190%: no fallback.
- `layer_op_rows`: a GPU without vidur rows fits its layer-op family on the rows of the chip it
  shares compute (SMs, kernels) with; the model is then a transfer and its manifest says so.
- `level2_rows` / `level3_rows`: the vidur rows (Level 2) and argonne end-to-end rows (Level 3,
  and its power calibration) an artifact's levels are fitted on. argonne's A100s are the 40GB
  part (ALCF Polaris); H200 has no end-to-end rows of its own. A GPU not listed uses its own rows.
  B200 has neither vidur nor argonne rows: its layer-op family, Level 2 and Level 3 are fitted
  on H100's rows over B200's own Level-1 kernel models, as H200's are (a transfer: its
  end-to-end error is unmeasured except against ml-energy v3's B200 serving rows).
- `level3_power_rows`: the argonne power rows Level 3's power calibration is fitted on, where
  not those of `level3_rows`: GH200 has 8 power rows of its own, which calibrate worse (16.7%
  held out) than H100's rows do for it (12.0%), so it keeps the calibration H200 uses.
- `power_rows`: the Level-1 power model is fitted on the only GPU with measured kernel power in
  the training share, for every GPU.
"""

from __future__ import annotations

PURPOSES: tuple[str, ...] = (
    "artifact",
    "gemm_tables",
    "collective_tables",
    "layer_op_rows",
    "level2_rows",
    "level3_rows",
    "level3_power_rows",
    "power_rows",
)
# Purposes whose unlisted GPU lends to itself (its own rows); the others answer ().
OWN_BY_DEFAULT: frozenset[str] = frozenset({"level2_rows", "level3_rows"})
ANY_GPU = "*"

STAND_INS: dict[str, dict[str, tuple[str, ...]]] = {
    "artifact": {"a100_sxm_40gb": ("a100_sxm",)},
    "gemm_tables": {"h200_sxm": ("h100_sxm",)},
    "collective_tables": {"h200_sxm": ("h100_sxm",)},
    "layer_op_rows": {
        "h200_sxm": ("h100_sxm",),
        "gh200": ("h100_sxm",),
        "a100_sxm_40gb": ("a100_sxm",),
        "b200_sxm": ("h100_sxm",),
    },
    "level2_rows": {
        "h100_sxm": ("h100_sxm",),
        "h200_sxm": ("h100_sxm",),
        "gh200": ("h100_sxm",),
        "a100_sxm": ("a100_sxm",),
        "a100_sxm_40gb": ("a100_sxm",),
        "b200_sxm": ("h100_sxm",),
    },
    "level3_rows": {
        "h100_sxm": ("h100_sxm",),
        "h200_sxm": ("h100_sxm",),
        "a100_sxm": ("a100_sxm_40gb",),
        "a100_sxm_40gb": ("a100_sxm_40gb",),
        "gh200": ("gh200",),
        "b200_sxm": ("h100_sxm",),
    },
    "level3_power_rows": {"gh200": ("h100_sxm",)},
    "power_rows": {ANY_GPU: ("h200_sxm",)},
}
POWER_GPU = STAND_INS["power_rows"][ANY_GPU][0]  # the only GPU with measured kernel power


def lenders(purpose: str, gpu: str) -> tuple[str, ...]:
    """The GPUs whose data or artifact stand in for `gpu` for `purpose`, first choice first:
    () when none does (`gpu`'s own for the row purposes of OWN_BY_DEFAULT)."""
    table = STAND_INS[purpose]
    if gpu in table:
        return table[gpu]
    if ANY_GPU in table:
        return table[ANY_GPU]
    return (gpu,) if purpose in OWN_BY_DEFAULT else ()


def lender(purpose: str, gpu: str) -> str | None:
    """The first lender of `gpu` for `purpose`, or None."""
    found = lenders(purpose, gpu)
    return found[0] if found else None


def first_lenders(purpose: str) -> dict[str, str]:
    """gpu -> first lender for every GPU listed for `purpose` (a plain mapping for callers that
    iterate the borrowers)."""
    return {g: v[0] for g, v in STAND_INS[purpose].items() if g != ANY_GPU and v}
