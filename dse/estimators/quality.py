"""Model quality: pretraining loss predicted by published scaling laws.

Eight laws and `auto`, each evaluated exactly as its paper states it (coefficients copied from the paper,
parameters counted the paper's way) and flagged wherever an input leaves the range the law was
fitted on. Losses are the papers' own units (nats per token on their own training data and
tokenizer); they are not comparable across laws. See docs/quality.md.

- ``chinchilla``: Hoffmann et al. 2022, arXiv 2203.15556, Approach 3, eq. (10) of App. D.2:
  L(N, D) = E + A / N^alpha + B / D^beta.
- ``besiroglu``: Besiroglu et al. 2024, arXiv 2404.10102, the same form refitted to data
  digitised from Hoffmann et al.'s Figure 4.
- ``joint_moe``: Ludziejewski et al. 2025, arXiv 2502.05172 (ICML 2025), eq. (6) with the
  expert transformation of eq. (4) and the coefficients of Table 3 (App. B):
  L(N_act, D, E) = a Ê^delta N_act^(alpha + gamma ln Ê) + b Ê^omega D^(beta + zeta ln Ê) + c.
- ``krajewski2024``: Krajewski et al. 2024, arXiv 2402.07871, eq. (9) and Table 1:
  L(N, D, G) = c + (g / G^gamma + a) / N^alpha + b / D^beta in total non-embedding parameters,
  tokens and granularity G (fitted at expansion rate E = 64); dense rows by the same paper's
  dense fit (Table 1).
- ``gqa_chen2025``: Chen et al. 2025, arXiv 2503.09579 (EMNLP 2025), App. I: at a fixed trunk
  (model size), L(n_h) = a n_h^b + c in the number of attention heads, printed for three model
  sizes (MHA, head size 64, 20 tokens per parameter, training context 1K). Sees the trunk and
  the heads, not the training tokens.
- ``besiroglu_heads``: besiroglu's L(N, D) at the vanilla-attention parameter count plus the
  gqa_chen2025 head term (its change from the trunk's vanilla d/64 heads); the sum is our
  assumption, not a fitted law.
- ``shen2024``: Shen et al. 2024, arXiv 2406.16690 (EMNLP 2024), Table 3: L(C) = beta C^alpha
  per architecture, C the training compute in PFLOP/s-days counted the paper's way (Table 1,
  App. A.1: 6 x non-embedding parameters per token plus the attention's n^2 term at its 8K
  training context). Softmax rows take the LLaMA fit; linear layers (Gated DeltaNet, Mamba-2,
  Mamba-1: data-dependent decay) the HGRN2 fit, the nearest fitted family (assumption,
  flagged); hybrids the two weighted by their linear share (assumption, flagged). Sees compute
  only: every (N, D) is priced at the compute-optimal loss of its compute.
- ``auto``: per row, the most specific of the above for the row's family (dense softmax
  attention: besiroglu_heads; MoE: joint_moe or krajewski2024; a dense space with
  linear-attention layers: shen2024 for every row), named in ``law``.

One file (~800 lines) on purpose: every law shares the same counting helpers, range flags and
the `_PRICERS` registry, and a law is 40-100 lines of its paper's constants beside the code that
uses them; splitting by law would scatter the conventions a reader must compare across laws.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dse.errors import ConfigError
from dse.spec import arch as A
from dse.spec import columns

LAWS: tuple[str, ...] = (
    "chinchilla",
    "besiroglu",
    "joint_moe",
    "krajewski2024",
    "gqa_chen2025",
    "besiroglu_heads",
    "shen2024",
)
# The laws in parameters and training tokens (the ones `compute_optimal` can split a budget with).
ND_LAWS: tuple[str, ...] = ("chinchilla", "besiroglu", "joint_moe")
# `auto` is not a law: it picks one of LAWS per row (`law_for_rows`).
SOURCES: tuple[str, ...] = (*LAWS, "auto")


@dataclass(frozen=True)
class _Dense:
    """L = E + A / N^alpha + B / D^beta, fitted on dense models (N counts embeddings)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    params_range: tuple[float, float]  # parameters the fitted models had (counted as N)
    tokens_range: tuple[float, float]  # training tokens the fitted models saw


# Hoffmann et al. 2022, App. D.2 eq. (10), as printed (rounded): E 1.69, A 406.4, B 410.7,
# alpha 0.34, beta 0.28. N counts every parameter, embeddings included (App. F: "we also count
# embeddings matrices in the total parameter count"). Range: the abstract's "over 400 language
# models ranging from 70 million to over 16 billion parameters on 5 to 500 billion tokens".
_CHINCHILLA = _Dense(1.69, 406.4, 410.7, 0.34, 0.28, (7.0e7, 1.6e10), (5.0e9, 5.0e11))

# Besiroglu et al. 2024 refit (excluding 5 outliers): E 1.8172, A 482.01, B 2085.43,
# alpha 0.3478, beta 0.3658; the same counting (they refit Hoffmann's N and D). Range: the 240
# points they fitted (github.com/epoch-research/analyzing-chinchilla, data/svg_extracted_data.csv,
# the 5 highest losses dropped as in their notebook): N 5.73e7 to 1.62e10, D = FLOP / 6N from
# 8.19e8 to 3.18e11 tokens.
_BESIROGLU = _Dense(1.8172, 482.01, 2085.43, 0.3478, 0.3658, (5.73e7, 1.62e10), (8.19e8, 3.18e11))

_DENSE_LAWS: dict[str, _Dense] = {"chinchilla": _CHINCHILLA, "besiroglu": _BESIROGLU}


@dataclass(frozen=True)
class _JointMoE:
    """Ludziejewski et al. 2025, Table 3 (App. B). alpha, beta are the paper's signed exponents."""

    a: float = 35.91
    alpha: float = -0.1889
    delta: float = -0.2285
    gamma: float = 0.0098
    b: float = 35.98
    beta: float = -0.1775
    omega: float = 0.5529
    zeta: float = -0.0259
    e_start: float = 2.0732
    e_max: float = 290.4521
    c: float = 1.3637
    # App. E (experiment listing), its extreme models counted with eqs. (9)-(10) (embeddings
    # included, App. A.1): N_act from 78.7M (printed 79M: d_model 512 x 8) to 2.716B (printed
    # 2.7B: 2304 x 36), N_total up to 5.002B (printed 5.0B: 1024 x 16, E=32), E in
    # {1, 2, 4, 8, 16, 32}, D from 500M to 80B tokens, and D / N_act from 0.36 (2.7B dense on
    # 980M tokens) to 72.8 (426M active, E=4, on 31B tokens). App. C: beyond the dataset's
    # token-to-parameter ratios the authors do not trust the law.
    params_range: tuple[float, float] = (7.85e7, 2.72e9)
    total_params_max: float = 5.01e9
    experts_range: tuple[float, float] = (1.0, 32.0)
    tokens_range: tuple[float, float] = (5.0e8, 8.0e10)
    tokens_per_param_range: tuple[float, float] = (0.36, 73.0)


_JOINT = _JointMoE()


@dataclass(frozen=True)
class _Krajewski:
    """Krajewski et al. 2024, arXiv 2402.07871, eq. (9) and Table 1 (MoE and dense rows).

    MoE: L = c + (g / G^gamma + a) / N^alpha + b / D^beta; dense: L = c + a_d / N^alpha_d +
    b_d / D^beta_d, fitted on the same runs (same data and tokenizer: comparable losses).
    """

    a: float = 18.1
    alpha: float = 0.115
    b: float = 30.8
    beta: float = 0.147
    g: float = 2.1
    gamma: float = 0.58
    c: float = 0.47
    a_dense: float = 16.3
    alpha_dense: float = 0.126
    b_dense: float = 26.7
    beta_dense: float = 0.127
    # §5: "models with sizes ranging from 129M to 3.7B parameters ... from 16B to 130B tokens",
    # "logarithmically spaced values of granularity between 1 and 16", "E = 64 is fixed". The
    # size is read as N, the law's own count (total non-embedding parameters, §5).
    params_range: tuple[float, float] = (1.29e8, 3.7e9)
    tokens_range: tuple[float, float] = (1.6e10, 1.3e11)
    granularity_range: tuple[float, float] = (1.0, 16.0)
    expansion: float = 64.0


_KRAJEWSKI = _Krajewski()


@dataclass(frozen=True)
class _HeadFit:
    """One printed curve of Chen et al. 2025 App. I: L(n_h) = a n_h^b + c at a fixed trunk."""

    trunk_params: float  # non-embedding parameters of the paper's MHA model (n_h d_h = d)
    a: float
    b: float  # the paper's signed exponent (negative)
    c: float


# Chen et al. 2025 App. I (Figure 12: MHA, training context 1K), the printed curves for the
# models the paper calls 470M, 680M and 1.2B. Their shapes are Table 9 (L x d: 24 x 1280,
# 24 x 1536, 36 x 1536; d_ff = 8d/3 rounded to a multiple of 32, SwiGLU, head size 64), and the
# paper counts non-embedding parameters (§4 footnote 4), so each trunk is L (4 d^2 + 3 d d_ff):
# 472.8M, 679.5M and 1,019.2M (the last one the paper labels 1.2B; Table 9's shape gives 1.02B).
_CHEN_FITS: tuple[_HeadFit, ...] = (
    _HeadFit(472_842_240.0, 0.579, -0.124, 2.473),
    _HeadFit(679_477_248.0, 0.398, -0.177, 2.583),
    _HeadFit(1_019_215_872.0, 0.301, -0.227, 2.622),
)
# App. I: "the fitted curves are very accurate up to 128 heads"; H_cand starts at 1 head (eq. 6).
_CHEN_HEADS_RANGE = (1.0, 128.0)
_CHEN_HEAD_DIM = 64  # Table 1 / App. A: d_h = 64 for every model
# §5.1: "we use a 20:1 ratio between training data and model parameters" (non-embedding N);
# the law is that ratio's loss and does not see D. +-5% is read as the same ratio.
_CHEN_TOKENS_PER_PARAM = (19.0, 21.0)
# ASSUMPTION (not in the paper): the printed curves are MHA (n_kv = n_h). A GQA row is priced at
# the effective head count n_eff = w n_h + (1 - w) n_kv. The paper states (§5.4, Takeaway 2) that
# adding query heads lowers the loss more than adding the same number of KV heads, i.e. w > 1/2,
# and that both lower it (Takeaway 1); it prints no split (Figures 3 and 14 only), so w = 2/3 is
# our choice, and every GQA row is flagged as priced by it.
CHEN_QUERY_HEAD_WEIGHT = 2.0 / 3.0


@dataclass(frozen=True)
class _ShenFit:
    """One row of Shen et al. 2024 Table 3: L(C) = beta C^alpha, N_opt = n_k C^n_a,
    D_opt = d_k C^d_a, C in PFLOP/s-days (the axes of Figure 1)."""

    beta: float
    alpha: float  # the paper's signed exponent (negative)
    n_k: float
    n_a: float
    d_k: float
    d_a: float


# Table 3, as printed. Only llama and hgrn2 price rows (dse has no TNL or cosFormer2 layer);
# the other two are kept so that the table is whole.
SHEN_FITS: dict[str, _ShenFit] = {
    "llama": _ShenFit(3.7087, -0.0798, 1.82e8, 0.7118, 2.56e10, 0.5102),
    "tnl": _ShenFit(3.5391, -0.0768, 2.74e8, 0.6470, 4.43e10, 0.4684),
    "hgrn2": _ShenFit(3.4788, -0.0753, 2.66e8, 0.6427, 4.80e10, 0.4500),
    "cosformer2": _ShenFit(3.5877, -0.0756, 2.65e8, 0.6516, 4.23e10, 0.4529),
}
PF_DAY_FLOPS = 1e15 * 86_400.0  # one PFLOP/s-day
# §3.3: every model trained with a context length of 8192; the attention's n^2 FLOPs (Table 1:
# 72 b n l d^2 (1 + n / 6d), i.e. 12 n d per layer per token over forward and backward) are
# counted at it. dse has no training-context field, so this is the paper's, not the row's.
SHEN_CONTEXT = 8192
# Range (§3.3, Table 7): six sizes from 20.5M to 6,511M non-embedding parameters, up to 300B
# tokens; compute from Figure 1's axes (10^-2 PF-days) to the largest run, LLaMA-7B on 300B
# tokens: 202.7 PFLOPs per step of 480 x 8192 tokens x 76,294 steps = 179 PF-days; 180 by
# this module's count of that model (0.4% above Table 7's), so that the run itself is inside.
_SHEN_PARAMS_RANGE = (2.05e7, 6.511e9)
_SHEN_TOKENS_RANGE = (0.0, 3.0e11)
_SHEN_COMPUTE_RANGE = (1.0e-2, 180.0)
# The law is the envelope of the minimum loss per FLOP (§4.2), i.e. the loss of the
# compute-optimal model. A row whose N is more than this factor off N_opt(C) (Table 3) is
# flagged: its own loss lies above the envelope. The factor is ours (Hoffmann et al.'s IsoFLOP
# profiles, their Figure 3, are flat within about this factor of the optimum).
_SHEN_ALLOCATION_FACTOR = 2.0


def predict_loss(
    cols: Mapping[str, np.ndarray],
    training_tokens: np.ndarray,
    law: str,
    *,
    moe_space: bool | None = None,
    granular_space: bool | None = None,
    linear_space: bool | None = None,
) -> dict[str, np.ndarray]:
    """Pretraining loss of each configuration under one published scaling law.

    cols: complete configuration columns as produced by ``dse.spec.columns.as_columns`` (arrays of
    length n). training_tokens: (n,) training tokens D. law: one of ``SOURCES`` (a law of
    ``LAWS``, or ``auto``: per row the law ``law_for_rows`` picks). moe_space (``auto`` only):
    whether the rows come from a space that holds MoE configurations, so that its dense rows
    are priced by the same law (None: whether these rows hold one); granular_space: whether
    that space routes a token to more than one expert (None: whether these rows do);
    linear_space: whether that space holds configurations with linear-attention layers, so that
    its softmax rows are priced by shen2024 too (None: whether these rows do).

    Returns (n,) arrays:
      loss: predicted final pretraining loss, nats/token on the paper's own data and tokenizer
      params_counted: the parameter count the law was evaluated at (the paper's convention:
        every parameter including embeddings and the LM head for the dense laws, active
        parameters including embeddings for joint_moe and for MoE rows under a dense law,
        the trunk's non-embedding parameters for gqa_chen2025, every parameter with the
        attention taken as vanilla MHA for besiroglu_heads, non-embedding parameters for
        shen2024)
      out_of_range: True where any input lies outside the range the law was fitted on
      out_of_range_inputs: '' inside, else every input that left the range and by how much,
        e.g. 'params 1.2e12 > 1.6e10 (x75); tokens 1e9 < 5e9 (x5)', joined by '; '
      law: the law that priced the row (the argument itself unless it is ``auto``)
    """
    if law not in SOURCES:
        raise ConfigError(f"unknown scaling law {law!r}; valid laws: {', '.join(SOURCES)}")
    arch = columns.architecture(cols)
    counts = A.param_breakdown(arch)
    active = np.atleast_1d(np.asarray(counts["active"], dtype=np.float64))
    n = active.shape[0]
    tokens = _tokens(training_tokens, n)
    chosen = (
        law_for_rows(cols, moe_space, granular_space, linear_space)
        if law == "auto"
        else np.full(n, law, dtype=object)
    )
    loss = np.full(n, np.nan)
    counted = np.zeros(n)
    issues = _Issues(n)
    for name in LAWS:
        rows = chosen == name
        if not rows.any():
            continue
        got, at = _PRICERS[name](cols, arch, counts, tokens, issues, rows)
        loss[rows], counted[rows] = got[rows], at[rows]
    if law == "auto":
        _, _, linear = (np.broadcast_to(np.asarray(x), (n,)) for x in A.layer_kinds(arch))
        issues.add(
            (np.asarray(linear) > 0) & (chosen != "shen2024"),
            np.asarray(linear),
            "linear layers {}: no shipped law is fitted on MoE with linear layers",
        )
    text = issues.text()
    return {
        "loss": loss,
        "params_counted": counted.astype(np.int64),
        "out_of_range": text != "",
        "out_of_range_inputs": text,
        "law": chosen.astype(str),
    }


def law_for_rows(
    cols: Mapping[str, np.ndarray],
    moe_space: bool | None = None,
    granular_space: bool | None = None,
    linear_space: bool | None = None,
) -> np.ndarray:
    """``auto``: the most specific law covering each row's family, as (n,) law names.

    A space with MoE configurations (moe_space; None: any of these rows) gets one law for every
    row, so that the one loss column stays comparable: krajewski2024 when it routes a token to
    several experts (granular_space; None: any MoE row with top_k > 1), the only law that sees
    the granularity, whose dense fit prices its dense rows on the same runs; else joint_moe
    (top-1 routing is its home), whose E = 1 case prices the dense rows. A dense space: rows
    whose every mixer is softmax attention (full, sliding or MLA) get besiroglu_heads, which
    sees parameters, tokens and heads (gqa_chen2025 alone sees no tokens and no size beyond
    1.02B). A dense space with linear-attention layers (linear_space; None: any of these
    rows) gets shen2024 for every row, the only law fitted on linear-complexity models, whose
    LLaMA fit prices the softmax rows on the same corpus (one comparable loss column); no law
    covers MoE with linear layers, so an MoE space keeps its MoE law and flags them.
    """
    arch = columns.architecture(cols)
    e = np.atleast_1d(np.asarray(cols["n_experts"], dtype=np.float64))
    n = e.shape[0]
    k = np.broadcast_to(np.asarray(cols["top_k"], dtype=np.float64), (n,))
    if bool((e > 1).any()) if moe_space is None else moe_space:
        fine = bool(((e > 1) & (k > 1)).any()) if granular_space is None else granular_space
        return np.full(n, "krajewski2024" if fine else "joint_moe", dtype=object)
    _, _, linear = (np.broadcast_to(np.asarray(x), (n,)) for x in A.layer_kinds(arch))
    has_linear = np.asarray(linear) > 0
    if bool(has_linear.any()) if linear_space is None else linear_space:
        out = np.full(n, "shen2024", dtype=object)
    else:
        # told linear_space=False, a linear row still needs a law fitted on linear layers
        out = np.where(has_linear, "shen2024", "besiroglu_heads").astype(object)
    out[e > 1] = "joint_moe"  # told moe_space=False, an MoE row still needs the expert term
    return out


# ------------------------------------------------------------------------------ the laws
_Priced = tuple[np.ndarray, np.ndarray]  # (loss, params counted), (n,) each


def _dense(
    name: str,
    cols: Mapping[str, np.ndarray],
    counts: Mapping[str, object],
    tokens: np.ndarray,
    issues: _Issues,
    rows: np.ndarray,
) -> _Priced:
    p = _DENSE_LAWS[name]
    active = np.atleast_1d(np.asarray(counts["active"], dtype=np.float64))
    n_experts = _row(cols, "n_experts", rows.shape[0])
    # MoE rows: the dense law is evaluated at active parameters (the compute per token, the
    # N of C = 6ND) and flagged, since no MoE model was in the fitted data.
    loss = p.E + p.A * active ** (-p.alpha) + p.B * tokens ** (-p.beta)
    issues.outside("params", active, p.params_range, rows=rows)
    issues.outside("tokens", tokens, p.tokens_range, rows=rows)
    issues.add(rows & (n_experts > 1), n_experts, "n_experts {}: dense law fitted on dense models")
    return loss, active


def _joint(
    cols: Mapping[str, np.ndarray],
    counts: Mapping[str, object],
    tokens: np.ndarray,
    issues: _Issues,
    rows: np.ndarray,
) -> _Priced:
    j = _JOINT
    active = np.atleast_1d(np.asarray(counts["active"], dtype=np.float64))
    total = np.atleast_1d(np.asarray(counts["total"], dtype=np.float64))
    n = active.shape[0]
    n_experts, top_k = _row(cols, "n_experts", n), _row(cols, "top_k", n)
    moe = rows & (n_experts > 1)
    # The paper's models route each token to one expert the width of the dense FFN (Switch,
    # §5.1), so its E is also total/active expert parameters. A top-k router is mapped to
    # that ratio, E = n_experts / top_k (Mixtral's 8 experts, top-2: E = 4), and flagged.
    e = np.where(n_experts > 1, n_experts / np.maximum(top_k, 1.0), 1.0)
    loss = _joint_loss(active, tokens, np.maximum(e, 1.0))
    issues.outside("params", active, j.params_range, rows=rows)
    issues.outside("total params", total, (0.0, j.total_params_max), rows=rows)
    issues.outside("tokens", tokens, j.tokens_range, rows=rows)
    issues.outside("tokens/param", tokens / active, j.tokens_per_param_range, rows=rows)
    # Named as the user wrote it: n_experts for top-1 routing, n_experts/top_k otherwise.
    issues.outside("n_experts", e, j.experts_range, rows=rows & (top_k == 1))
    issues.outside("n_experts/top_k", e, j.experts_range, rows=rows & (top_k != 1))
    issues.add(moe & (top_k != 1), top_k, "top_k {}: law fitted on top-1 (Switch) routing")
    sff = _row(cols, "shared_expert_d_ff", n)
    issues.add(moe & (sff > 0), sff, "shared_expert_d_ff {}: law fitted without a shared expert")
    return loss, active


def _krajewski(
    cols: Mapping[str, np.ndarray],
    counts: Mapping[str, object],
    tokens: np.ndarray,
    issues: _Issues,
    rows: np.ndarray,
) -> _Priced:
    """Krajewski et al. 2024 at the row's non-embedding parameters, tokens and granularity.

    N: total non-embedding parameters without the router (§4: "excluding routing"; §6.1 counts
    the attention and every expert). Their models route a token to G experts each 1/G of the
    dense FFN, keeping the active parameters of a top-1 layer (§4, Fig. 2), so a top-k router is
    read as G = top_k and the expansion rate as E = n_experts / top_k (eq. 3: N_expert = G E).
    Dense rows (one expert) take the paper's dense fit (Table 1, eq. 1), from the same runs.
    """
    k = _KRAJEWSKI
    n = rows.shape[0]
    item = {
        key: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for key, v in counts.items()
    }
    big_n = (
        item["total"]
        - item["embedding"]
        - item["lm_head"]
        - item["final_norm"]
        - item["norms"]
        - item["moe/router"]
    )
    n_experts, top_k = _row(cols, "n_experts", n), _row(cols, "top_k", n)
    moe = n_experts > 1
    g = np.where(moe, np.maximum(top_k, 1.0), 1.0)
    e = np.where(moe, n_experts / np.maximum(top_k, 1.0), 1.0)
    moe_loss = k.c + (k.g / g**k.gamma + k.a) / big_n**k.alpha + k.b / tokens**k.beta
    dense_loss = k.c + k.a_dense / big_n**k.alpha_dense + k.b_dense / tokens**k.beta_dense
    issues.outside("params", big_n, k.params_range, rows=rows)
    issues.outside("tokens", tokens, k.tokens_range, rows=rows)
    issues.outside("granularity (top_k)", g, k.granularity_range, rows=rows & moe)
    issues.outside("n_experts/top_k", e, (k.expansion, k.expansion), rows=rows & moe)
    sff = _row(cols, "shared_expert_d_ff", n)
    issues.add(rows & moe & (sff > 0), sff, "shared_expert_d_ff {}: law fitted without one")
    return np.where(moe, moe_loss, dense_loss), big_n


@dataclass(frozen=True)
class _Heads:
    """A row as the head law reads it (all (n,) arrays)."""

    trunk: np.ndarray  # non-embedding parameters with vanilla MHA attention (4 d^2 per layer)
    n_eff: np.ndarray  # effective head count (n_heads for MHA)
    n_vanilla: np.ndarray  # the trunk's own head count at the paper's head size, d / 64
    non_embedding: np.ndarray  # the row's own non-embedding parameters
    vanilla_total: np.ndarray  # every parameter, the attention taken as vanilla MHA


def _heads(
    cols: Mapping[str, np.ndarray],
    arch: A.Architecture,
    counts: Mapping[str, object],
    issues: _Issues,
    rows: np.ndarray,
) -> _Heads:
    """The head law's inputs, and its flags except the token ratio.

    Trunk: the non-embedding parameters of the same model with the paper's vanilla MHA
    attention (n_h d_h = d, i.e. 4 d^2 per layer), so that the head count moves the head term
    only, as in the paper's decoupled design (App. I varies n_h at a fixed model size).
    """
    n = rows.shape[0]
    item = {k: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for k, v in counts.items()}
    d, layers = _row(cols, "d_model", n), _row(cols, "n_layers", n)
    h, kv = _row(cols, "n_heads", n), _row(cols, "n_kv_heads", n)
    kv = np.where(kv > 0, kv, h)  # 0: MHA
    hd = np.broadcast_to(np.asarray(arch.resolved().head_dim, dtype=np.float64), (n,))
    non_embedding = item["active"] - item["embedding"] - item["lm_head"] - item["final_norm"]
    attention = item["attention/qkv"] + item["attention/out"] + item["attention/qk_norm"]
    vanilla = 4.0 * layers * d * d
    trunk = non_embedding - attention - item["norms"] + vanilla
    w = CHEN_QUERY_HEAD_WEIGHT
    out = _Heads(
        trunk=trunk,
        n_eff=w * h + (1.0 - w) * kv,  # = n_h for MHA rows (the printed curves)
        n_vanilla=d / _CHEN_HEAD_DIM,
        non_embedding=non_embedding,
        vanilla_total=item["active"] - attention + vanilla,
    )
    sizes = (_CHEN_FITS[0].trunk_params, _CHEN_FITS[-1].trunk_params)
    issues.outside("trunk params", trunk, sizes, rows=rows)
    issues.outside("n_heads", h, _CHEN_HEADS_RANGE, rows=rows)
    issues.add(
        rows & (kv < h),
        kv,
        "n_kv_heads {}: GQA priced at n_eff = (2 n_heads + n_kv_heads)/3 (an assumption, "
        "law printed for MHA)",
    )
    issues.add(rows & (hd != _CHEN_HEAD_DIM), hd, "head_dim {}: law fitted on head_dim 64")
    n_experts = _row(cols, "n_experts", n)
    issues.add(rows & (n_experts > 1), n_experts, "n_experts {}: law fitted on dense models")
    _, sliding, linear = (np.broadcast_to(np.asarray(x), (n,)) for x in A.layer_kinds(arch))
    issues.add(
        rows & (np.asarray(sliding) > 0),
        np.asarray(sliding),
        "sliding layers {}: law fitted on full attention",
    )
    issues.add(
        rows & (np.asarray(linear) > 0),
        np.asarray(linear),
        "linear layers {}: law fitted on softmax attention only",
    )
    mla = np.broadcast_to(np.asarray(A.mla_dims(arch)[0]), (n,))
    issues.add(
        rows & mla,
        _row(cols, "kv_lora_rank", n),
        "kv_lora_rank {}: law fitted on GQA, not MLA",
    )
    return out


def _chen(
    cols: Mapping[str, np.ndarray],
    arch: A.Architecture,
    counts: Mapping[str, object],
    tokens: np.ndarray,
    issues: _Issues,
    rows: np.ndarray,
) -> _Priced:
    """Chen et al. 2025 App. I at the row's trunk and (effective) head count. Between two
    fitted trunks the loss is interpolated linearly in log(trunk) (ASSUMPTION: the paper prints
    three sizes and no law across sizes); outside them the nearest curve is used and the row
    flagged."""
    x = _heads(cols, arch, counts, issues, rows)
    issues.outside("tokens/param", tokens / x.non_embedding, _CHEN_TOKENS_PER_PARAM, rows=rows)
    return _chen_loss(x.trunk, x.n_eff), x.trunk


def _besiroglu_heads(
    cols: Mapping[str, np.ndarray],
    arch: A.Architecture,
    counts: Mapping[str, object],
    tokens: np.ndarray,
    issues: _Issues,
    rows: np.ndarray,
) -> _Priced:
    """Besiroglu's L(N, D) at the vanilla-attention model plus Chen's head term.

    L = L_besiroglu(N_vanilla, D) + [L_chen(n_eff; trunk) - L_chen(d / 64; trunk)]: the dense
    law prices size and tokens (N_vanilla counts every parameter with the attention taken as
    vanilla MHA, 4 d^2 per layer, so the heads' own parameters are not counted twice), and the
    head curve of App. I prices the heads as the change from the trunk's vanilla head count.
    ASSUMPTION (named in docs/quality.md): the head term adds to the dense law unchanged across
    corpora, token budgets and (beyond 1.02B, the nearest curve) model sizes.
    """
    x = _heads(cols, arch, counts, issues, rows)
    p = _BESIROGLU
    base = p.E + p.A * x.vanilla_total ** (-p.alpha) + p.B * tokens ** (-p.beta)
    issues.outside("params", x.vanilla_total, p.params_range, rows=rows)
    issues.outside("tokens", tokens, p.tokens_range, rows=rows)
    head = _chen_loss(x.trunk, x.n_eff) - _chen_loss(x.trunk, x.n_vanilla)
    return base + head, x.vanilla_total


def _shen(
    cols: Mapping[str, np.ndarray],
    arch: A.Architecture,
    counts: Mapping[str, object],
    tokens: np.ndarray,
    issues: _Issues,
    rows: np.ndarray,
) -> _Priced:
    """Shen et al. 2024 Table 3 at the row's training compute, in the paper's own count.

    C = D x (6 N + attention + linear state): N the non-embedding parameters (Table 1, §4.2);
    per softmax layer and token 12 n (n_heads head_dim) FLOPs at the paper's context n = 8192
    (a sliding layer at min(window, n)); per linear layer HGRN2's 24 d^2 / h (App. A.1.3, h
    the linear heads). The subleading terms the paper also drops (Table 1: norms, RoPE,
    gating, under 0.1% at d >= 512) are left out. Loss: (1 - s) L_llama(C) + s L_hgrn2(C), s
    the linear share of the mixers (ASSUMPTION for 0 < s < 1: no hybrid was fitted; and every
    dse linear kind is priced as HGRN2, the fitted family with data-dependent decay, §5.3).
    """
    n = rows.shape[0]
    item = {k: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for k, v in counts.items()}
    non_embedding = item["active"] - item["embedding"] - item["lm_head"] - item["final_norm"]
    r = arch.resolved()
    full, sliding, linear = (
        np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)) for x in A.layer_kinds(arch)
    )
    width = _row(cols, "n_heads", n) * np.broadcast_to(
        np.asarray(r.head_dim, dtype=np.float64), (n,)
    )
    window = np.minimum(_row(cols, "sliding_window", n), SHEN_CONTEXT)
    lin_heads = np.broadcast_to(np.asarray(A.linear_dims(r)[0], dtype=np.float64), (n,))
    d = _row(cols, "d_model", n)
    per_token = (
        6.0 * non_embedding
        + 12.0 * width * (SHEN_CONTEXT * full + window * sliding)
        + np.where(linear > 0, 24.0 * d * d / np.maximum(lin_heads, 1.0), 0.0) * linear
    )
    compute = per_token * tokens / PF_DAY_FLOPS
    mixers = full + sliding + linear
    share = np.where(mixers > 0, linear / np.maximum(mixers, 1.0), 0.0)
    softmax, lin = SHEN_FITS["llama"], SHEN_FITS["hgrn2"]
    loss = (1.0 - share) * softmax.beta * compute**softmax.alpha
    loss = loss + share * lin.beta * compute**lin.alpha
    issues.outside("params", non_embedding, _SHEN_PARAMS_RANGE, rows=rows)
    issues.outside("tokens", tokens, _SHEN_TOKENS_RANGE, rows=rows)
    issues.outside("compute (PF-days)", compute, _SHEN_COMPUTE_RANGE, rows=rows)
    n_opt = np.exp(
        (1.0 - share) * np.log(softmax.n_k * compute**softmax.n_a)
        + share * np.log(lin.n_k * compute**lin.n_a)
    )
    f = _SHEN_ALLOCATION_FACTOR
    issues.outside("params/N_opt(C)", non_embedding / n_opt, (1.0 / f, f), rows=rows)
    kind = np.broadcast_to(np.asarray(r.linear_kind).astype(str), (n,))
    for name in np.unique(kind[rows & (linear > 0)]):
        issues.add(
            rows & (linear > 0) & (kind == name),
            linear,
            f"linear layers {{}}: {name} priced as HGRN2 (nearest fitted family, an assumption)",
        )
    hybrid = rows & (share > 0) & (share < 1)
    if hybrid.any():
        issues.note(
            hybrid,
            np.char.add(
                np.char.add("linear share ", _fmt(share[hybrid])),
                ": hybrid priced between the LLaMA and HGRN2 fits (assumption)",
            ),
        )
    n_experts = _row(cols, "n_experts", n)
    issues.add(rows & (n_experts > 1), n_experts, "n_experts {}: law fitted on dense models")
    issues.add(rows & (sliding > 0), sliding, "sliding layers {}: law fitted on full attention")
    mla = np.broadcast_to(np.asarray(A.mla_dims(arch)[0]), (n,))
    issues.add(
        rows & mla, _row(cols, "kv_lora_rank", n), "kv_lora_rank {}: law fitted on MHA, not MLA"
    )
    return loss, non_embedding


def _chen_loss(trunk: np.ndarray, n_heads: np.ndarray) -> np.ndarray:
    """App. I curves at n_heads, interpolated linearly in log(trunk) between fitted sizes."""
    fits = _CHEN_FITS
    x = np.log(np.asarray(trunk, dtype=np.float64))
    xs = np.log([f.trunk_params for f in fits])
    at = np.stack([f.a * np.asarray(n_heads, dtype=np.float64) ** f.b + f.c for f in fits])
    i = np.clip(np.searchsorted(xs, x) - 1, 0, len(fits) - 2)
    t = np.clip((x - xs[i]) / (xs[i + 1] - xs[i]), 0.0, 1.0)  # nearest curve outside
    cols = np.arange(x.shape[0])
    return (1.0 - t) * at[i, cols] + t * at[i + 1, cols]


def _row(cols: Mapping[str, np.ndarray], key: str, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(cols[key], dtype=np.float64), (n,))


_PRICERS = {
    "chinchilla": lambda c, a, k, t, i, r: _dense("chinchilla", c, k, t, i, r),
    "besiroglu": lambda c, a, k, t, i, r: _dense("besiroglu", c, k, t, i, r),
    "joint_moe": lambda c, a, k, t, i, r: _joint(c, k, t, i, r),
    "krajewski2024": lambda c, a, k, t, i, r: _krajewski(c, k, t, i, r),
    "gqa_chen2025": _chen,
    "besiroglu_heads": _besiroglu_heads,
    "shen2024": _shen,
}


def compute_optimal(
    law: str, compute_flops: np.ndarray, n_experts: float = 1.0
) -> dict[str, np.ndarray]:
    """Loss-minimising (params, tokens) at a training budget C = 6 N D FLOPs under one law.

    The closed form of Hoffmann et al. 2022 eq. (4), which Ludziejewski et al. 2025 eq. (7)
    apply at each fixed E: N_opt = G (C/6)^a, D_opt = (C/6) / N_opt,
    G = (alpha A / (beta B))^(1 / (alpha + beta)), a = beta / (alpha + beta). n_experts is the
    law's E (joint_moe only; the dense laws ignore it). Returns params, tokens and loss there.
    """
    if law not in ND_LAWS:
        raise ConfigError(
            f"unknown scaling law {law!r} for compute_optimal; valid laws: chinchilla, "
            "besiroglu, joint_moe (gqa_chen2025 does not see the training tokens; shen2024's "
            "own N_opt(C) and D_opt(C) are in SHEN_FITS)"
        )
    c = np.asarray(compute_flops, dtype=np.float64)
    if np.any(~np.isfinite(c) | (c <= 0)):
        raise ConfigError("compute_flops: must be positive and finite")
    if law in _DENSE_LAWS:
        p = _DENSE_LAWS[law]
        big_a, alpha, big_b, beta = p.A, p.alpha, p.B, p.beta
    else:
        big_a, alpha, big_b, beta = _joint_reduced(np.float64(max(float(n_experts), 1.0)))
    n_opt, d_opt = _dense_optimum(big_a, big_b, alpha, beta, c)
    if law in _DENSE_LAWS:
        loss = _DENSE_LAWS[law].E + big_a * n_opt ** (-alpha) + big_b * d_opt ** (-beta)
    else:
        loss = _joint_loss(n_opt, d_opt, np.full(n_opt.shape, max(float(n_experts), 1.0)))
    return {"params": n_opt, "tokens": d_opt, "loss": loss}


# ------------------------------------------------------------------------------ internals
def _tokens(training_tokens: np.ndarray, n: int) -> np.ndarray:
    d = np.asarray(training_tokens, dtype=np.float64)
    if d.ndim == 0:
        d = np.full(n, float(d))
    if d.shape != (n,):
        raise ConfigError(f"training_tokens: expected {n} values, got shape {d.shape}")
    bad = ~np.isfinite(d) | (d <= 0)
    if bad.any():
        raise ConfigError(f"training_tokens: must be positive and finite, got {d[bad][0]!r}")
    return d


def _e_hat(e: np.ndarray) -> np.ndarray:
    """Eq. (4): 1/Ê = 1 / (E - 1 + (1/E_start - 1/E_max)^-1) + 1/E_max (Ê = E_start at E = 1)."""
    j = _JOINT
    shift = 1.0 / (1.0 / j.e_start - 1.0 / j.e_max)
    return 1.0 / (1.0 / (e - 1.0 + shift) + 1.0 / j.e_max)


def _joint_loss(n_act: np.ndarray, tokens: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Eq. (6), in logs (the paper fits it that way): both exponents stay negative for all E."""
    j = _JOINT
    le = np.log(_e_hat(e))
    model = np.exp(np.log(j.a) + j.delta * le + (j.alpha + j.gamma * le) * np.log(n_act))
    data = np.exp(np.log(j.b) + j.omega * le + (j.beta + j.zeta * le) * np.log(tokens))
    return model + data + j.c


def _joint_reduced(e: np.floating) -> tuple[float, float, float, float]:
    """Table 4: the joint law at fixed E as A / N^alpha + B / D^beta + c (positive exponents)."""
    j = _JOINT
    le = float(np.log(_e_hat(np.asarray(e))))
    return (
        j.a * np.exp(j.delta * le),
        -(j.alpha + j.gamma * le),
        j.b * np.exp(j.omega * le),
        -(j.beta + j.zeta * le),
    )


def _dense_optimum(
    big_a: float, big_b: float, alpha: float, beta: float, compute_flops: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Hoffmann et al. eq. (4): (N_opt, D_opt) minimising A/N^alpha + B/D^beta at 6ND = C."""
    n_times_d = np.asarray(compute_flops, dtype=np.float64) / 6.0  # C = 6ND
    g = (alpha * big_a / (beta * big_b)) ** (1.0 / (alpha + beta))
    n_opt = g * n_times_d ** (beta / (alpha + beta))
    return n_opt, n_times_d / n_opt


def _fmt(x: np.ndarray) -> np.ndarray:
    """3 significant digits, exponent without '+' or leading zeros: 1.2e12, 5e-05 -> 5e-5."""
    s = np.char.mod("%.3g", np.asarray(x, dtype=np.float64))
    for old, new in (("e+0", "e"), ("e+", "e"), ("e-0", "e-")):
        s = np.char.replace(s, old, new)
    return s


class _Issues:
    """Per-row '; '-joined messages, built with numpy string ops on the flagged rows only."""

    def __init__(self, n: int) -> None:
        self._text = np.full(n, "", dtype=object)

    def _append(self, mask: np.ndarray, messages: np.ndarray) -> None:
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            return
        old = self._text[idx].astype(str)
        sep = np.where(old == "", "", "; ")
        self._text[idx] = np.char.add(np.char.add(old, sep), messages.astype(str))

    def outside(
        self,
        name: str,
        value: np.ndarray,
        bounds: tuple[float, float],
        rows: np.ndarray | None = None,
    ) -> None:
        """Flag value outside [lo, hi] (only among `rows`), with the ratio to the nearest bound."""
        lo, hi = bounds
        keep = np.ones(value.shape, dtype=bool) if rows is None else rows
        for mask, op, bound, ratio in (
            (keep & (value < lo), " < ", lo, lo / np.where(value > 0, value, np.nan)),
            (keep & (value > hi), " > ", hi, value / hi),
        ):
            if not mask.any():
                continue
            v, r = value[mask], ratio[mask]
            msg = np.char.add(np.char.add(f"{name} ", _fmt(v)), f"{op}{_fmt(np.asarray(bound))}")
            self._append(mask, np.char.add(np.char.add(np.char.add(msg, " (x"), _fmt(r)), ")"))

    def add(self, mask: np.ndarray, value: np.ndarray, template: str) -> None:
        """Flag rows with a fixed message around one value, e.g. 'n_experts 8: ...'."""
        if not mask.any():
            return
        head, tail = template.split("{}")
        whole = np.char.mod("%d", np.rint(value[mask]).astype(np.int64))  # counts, not floats
        self._append(mask, np.char.add(np.char.add(head, whole), tail))

    def note(self, mask: np.ndarray, message: str | np.ndarray) -> None:
        """Flag rows with a message as given (one text, or one per flagged row)."""
        if not mask.any():
            return
        msg = np.asarray(message, dtype=str)
        self._append(mask, np.full(int(mask.sum()), str(msg)) if msg.ndim == 0 else msg)

    def text(self) -> np.ndarray:
        return self._text.astype(str)
