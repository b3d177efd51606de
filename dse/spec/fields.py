"""Every numeric and choice field a user can give, declared once: kind, limits, choices, default.

In the spirit of scikit-learn's `_parameter_constraints`: one table (`FIELDS`) and one
`check(name, values, where)` serve every way a value comes in, so a rule and its message are
the same everywhere:

- CLI flags (`dse predict`, `dse energy`, `dse arch`; `dse/commands/_flags.py`),
  `--batch-size: must be an integer in [1, 1048576], got 0`;
- batch CSV rows (`dse predict --batch`), `in.csv: row 3: batch_size: ..., got -3`;
- search-space YAML (`dse.spec.space._param`), `space.yaml:7: workload.batch_size: ..., got 0`;
- every batch of configurations the predictor sees (`dse.spec.columns.as_columns`).

The limits reject what cannot be a model or a workload, and they are chosen so that the
accounting's int64 arithmetic cannot overflow anywhere inside them (tests/commands/test_bad_inputs_cli.py
checks the products at the corners):

- parameters: n_layers x n_experts x 3 x d_model x d_ff_expert <= 2**10 * 2**12 * 3 * 2**16 *
  2**20 < 2**60;
- attention FLOPs per token: 4 x n_layers x n_heads x head_dim x context <= 2**2 * 2**10 *
  2**12 * 2**12 * 2**25 = 2**61;
- tokens in a batch x d_model: batch_size x (prompt + output tokens) x d_model <= 2**20 *
  2**25 * 2**16 = 2**61.

Relations between fields (n_kv_heads divides n_heads, top_k <= n_experts, tensor-parallel
splits, memory) are not per-value rules; `dse.spec.rules.check_columns` and the memory rule judge
them per configuration.

One file (~670 lines) on purpose: the field table (one row per field: type, limits, unit, help)
is the one source flags, YAML and CSV read, and the value checks it drives sit beside it so a
field's rule and its check are read together.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dse.errors import ConfigError
from dse.spec.choices import (
    BATCHING,
    DEFAULT_ENGINE_VERSION,
    ENGINES,
    KV_DTYPES,
    LINEAR_KINDS,
    NORMS,
    ROUTINGS,
    WEIGHT_DTYPES,
)
from dse.spec.pattern import KINDS_OF, Kinds
from dse.spec.pattern import canonical as canonical_pattern

KINDS = ("int", "float", "bool", "choice", "pattern", "version")
# A version text: numbers separated by dots, then an optional tag ("0.11.1", "0.4.2",
# "1.3.0rc20", "0.6.3.post1"); a YAML number (0.11) is refused, since 0.10 would read as 0.1
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+){0,3}([a-z][a-z0-9]*)?(\.?[a-z]+[0-9]*)?$")
_TRUE = ("true", "1")
_FALSE = ("false", "0")


def _weight_dtypes() -> tuple[str, ...]:
    return tuple(WEIGHT_DTYPES)


def _kv_dtypes() -> tuple[str, ...]:
    return tuple(KV_DTYPES)


def _norms() -> tuple[str, ...]:
    return tuple(NORMS)


def _linear_kinds() -> tuple[str, ...]:
    return tuple(LINEAR_KINDS)


def _engines() -> tuple[str, ...]:
    return tuple(ENGINES)


def _batching() -> tuple[str, ...]:
    return tuple(BATCHING)


def _routings() -> tuple[str, ...]:
    return tuple(ROUTINGS)


def _gpus() -> tuple[str, ...]:
    from dse.spec.hardware import gpu_names

    return tuple(gpu_names())


@dataclass(frozen=True)
class Field:
    """One field: `kind` is int, float, bool, choice, pattern (a list of layer kinds,
    `dse.spec.pattern`, carried as its canonical text) or version (a version text such as
    "0.11.1"); `min`/`max` are inclusive limits."""

    name: str
    kind: str
    min: float | None = None
    max: float | None = None
    default: Any = None
    unit: str = ""
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    even: bool = False  # int: a multiple of 2 (head_dim: RoPE rotates pairs)
    power_of_two: bool = False  # int: 1, 2, 4, 8, ...
    case_insensitive: bool = False  # choice: compared (and returned) in lower case
    note: str = ""  # flag help after the rule: what an absent value means
    group: str = "architecture"  # architecture | workload | hardware | training | cli | constraint
    positive: bool = False  # float: > 0 (a limit of a ratio metric; 0 would divide by zero)
    # (low, high) in `unit`: values outside are allowed but warned about (`implausible`); a
    # limit there is most likely a unit slip (50 for a TPOT of 50 ms), or nothing can meet it
    plausible: tuple[float, float] | None = None
    # choice: (value, why) for values a user may try that are not options (kv_dtype nvfp4): the
    # message says why instead of a "did you mean"
    refused: tuple[tuple[str, str], ...] = ()

    def options(self) -> tuple[str, ...]:
        c = self.choices
        return tuple(c() if callable(c) else (c or ()))

    @property
    def rule(self) -> str:
        """The rule as messages state it: 'must be an integer in [1, 1048576]'."""
        if self.kind == "bool":
            return "must be true or false"
        if self.kind == "pattern":
            return self.pattern_kinds.rule
        if self.kind == "version":
            return "must be a version text like '0.11.1' (quoted in YAML)"
        if self.kind == "choice":
            return f"must be one of {', '.join(self.options())}"
        if self.kind == "int":
            what = (
                "a power of two"
                if self.power_of_two
                else "an even integer"
                if self.even
                else "an integer"
            )
        else:
            what = "a number"
        if self.positive and self.min is None and self.max is None:
            return "must be a finite number > 0"
        lo, hi = _limit(self.min, self.kind), _limit(self.max, self.kind)
        return f"must be {what} in [{lo}, {hi}]"

    def implausible(self, value: float) -> str | None:
        """'<value> <unit> is outside the plausible range ...' for a valid value outside
        `plausible`, None inside it (or without a plausible range)."""
        if self.plausible is None:
            return None
        lo, hi = self.plausible
        if lo <= value <= hi:
            return None
        unit = f" {self.unit}" if self.unit else ""
        what = f" ({self.note})" if self.note else ""
        return (
            f"{show(value)}{unit} is outside the plausible range [{lo:g}, {hi:g}]{unit} of "
            f"{self.name}{what}; check its unit (the limit is kept as written)"
        )

    def describe(self, default: Any = None) -> str:
        """Flag help: the rule without 'must be', the unit and the default."""
        text = self.rule.removeprefix("must be ").removeprefix("one of ")
        if self.kind == "pattern":
            text = "comma-separated " + text.removeprefix("a list of ")
        elif self.kind == "choice":
            text = "one of " + text
        elif self.kind == "version":
            text = "a version such as 0.11.1"
        if self.unit:
            text += f" {self.unit}"
        if self.note:
            text += f"; {self.note}"
        shown = self.default if default is None else default
        if shown is not None:
            text += f" (default {show(shown)})"
        return text

    def message(self, raw: Any) -> str:
        """'<rule>, got <value>' for a value that breaks the rule (with a hint for a choice)."""
        hint = ""
        why = dict(self.refused).get(str(raw).strip()) if isinstance(raw, str | np.str_) else None
        if self.kind == "choice" and why:
            hint = f" ({why})"
        elif self.kind == "choice" and isinstance(raw, str | np.str_):
            close = difflib.get_close_matches(str(raw).strip(), self.options(), n=1)
            if close:
                hint = f" (did you mean {close[0]!r}?)"
        shown = show(number_or_text(raw) if self.kind in ("int", "float") else raw)
        return f"{self.rule}{hint}, got {shown}"

    @property
    def pattern_kinds(self) -> Kinds:
        """The layer kinds of a pattern field (`dse.spec.pattern`)."""
        return KINDS_OF[self.name]

    # ------------------------------------------------------------------ one value
    def parse(self, raw: Any) -> tuple[bool, Any]:
        """(ok, the value as a plain Python int/float/bool/str) of one raw value.

        Strings (a flag's text, a CSV cell) are read as numbers for numeric fields; floats with an
        integral value are integers ('4096.0', 4.096e3).
        """
        if isinstance(raw, np.generic):
            raw = raw.item()
        if self.kind == "pattern":
            text = canonical_pattern(raw, self.pattern_kinds)
            return (True, text) if text is not None else (False, raw)
        if self.kind == "choice":
            if not isinstance(raw, str):
                return False, raw
            v = raw.strip().lower() if self.case_insensitive else raw.strip()
            return v in self.options(), v
        if self.kind == "version":
            if not isinstance(raw, str):
                return False, raw
            v = raw.strip().lower().removeprefix("v")
            return _VERSION.match(v) is not None, v
        if self.kind == "bool":
            if isinstance(raw, bool):
                return True, raw
            if isinstance(raw, int) and raw in (0, 1):
                return True, bool(raw)
            if isinstance(raw, str) and raw.strip().lower() in (*_TRUE, *_FALSE):
                return True, raw.strip().lower() in _TRUE
            return False, raw
        x = number_or_text(raw)
        if isinstance(x, bool) or not isinstance(x, int | float):
            return False, raw
        if isinstance(x, float):
            if not math.isfinite(x):
                return False, x
            if self.kind == "int":
                if not x.is_integer():
                    return False, x
                x = int(x)
        if self.kind == "float":
            x = float(x)
        if (self.min is not None and x < self.min) or (self.max is not None and x > self.max):
            return False, x
        if self.positive and x <= 0:
            return False, x
        if self.even and x % 2:
            return False, x
        if self.power_of_two and x & (x - 1):
            return False, x
        return True, x

    # ------------------------------------------------------------------ many values
    def parse_array(self, raw: Any) -> tuple[np.ndarray, np.ndarray]:
        """(typed values, bad mask) of an array, vectorised for numeric and string dtypes.

        Typed values: int64 (int), float64 (float), bool, or str; at bad positions they are a
        placeholder (the lower limit) that callers must not use.
        """
        if self.kind == "pattern":
            return self._parse_patterns(raw)
        a = np.asarray(raw)
        if self.kind == "version":
            a = a.reshape(-1)
            if a.dtype.kind in "US" and _all_same(a):  # one version for the batch
                uniq, inv = a[:1], np.zeros(len(a), dtype=np.intp)
            elif a.dtype.kind in "US":  # a sweep or a CSV holds a few: each distinct text once
                uniq, inv = np.unique(a, return_inverse=True)
            else:  # numbers (refused) or mixed objects: each element
                uniq, inv = a, np.arange(len(a))
            parsed = [self.parse(x) for x in uniq.tolist()]
            text = np.array([v if ok else self.default for ok, v in parsed], dtype=str)
            bad = np.array([not ok for ok, _ in parsed], dtype=bool)
            return text[inv], bad[inv]
        if a.ndim != 1:
            a = a.reshape(-1)
        n = len(a)
        if n == 1:  # one configuration (interactive use): the scalar rule is cheaper
            ok, v = self.parse(a[0])
            return np.array([v if ok else self._placeholder()], dtype=self._dtype()), np.array(
                [not ok]
            )
        numeric = self.kind in ("int", "float") and a.dtype.kind in "iuf"
        if (
            n
            and (numeric or (self.kind == "bool" and a.dtype.kind == "b"))
            and (a[0] == a[-1] and bool((a == a[0]).all()))
        ):
            # one value over the batch (a field left at its default): its rule once
            ok, v = self.parse(a[0].item())
            return (
                np.full(n, v if ok else self._placeholder(), dtype=self._dtype()),
                np.full(n, not ok),
            )
        if self.kind in ("int", "float"):
            x = a
            if a.dtype.kind in "US":
                try:
                    x = a.astype(np.float64)
                except ValueError:
                    return self._per_element(a)
            elif a.dtype.kind == "O":
                return self._per_element(a)
            elif a.dtype.kind == "b":
                return np.full(n, self._placeholder()), np.ones(n, dtype=bool)
            elif a.dtype.kind not in "iuf":
                return self._per_element(a)
            if x.dtype.kind == "u":
                over = x > np.uint64(2**63 - 1)
                x = np.where(over, np.uint64(2**63 - 1), x).astype(np.int64)
            else:
                over = np.zeros(n, dtype=bool)
            bad = over.copy()
            if x.dtype.kind == "f":
                with np.errstate(invalid="ignore"):
                    bad |= ~np.isfinite(x)
                    if self.kind == "int":
                        bad |= x != np.floor(x)
            with np.errstate(invalid="ignore"):
                if self.min is not None:
                    bad |= x < self.min
                if self.max is not None:
                    bad |= x > self.max
                if self.positive:
                    bad |= x <= 0
            if self.kind == "float":
                return np.where(bad, self._placeholder(), x).astype(np.float64), bad
            xi = np.where(bad, self._placeholder(), x).astype(np.int64)
            if self.even:
                bad |= (xi % 2) != 0
            if self.power_of_two:
                bad |= (xi & (xi - 1)) != 0
            return np.where(bad, self._placeholder(), xi), bad
        if self.kind == "bool":
            if a.dtype.kind == "b":
                return a.astype(bool), np.zeros(n, dtype=bool)
            if a.dtype.kind in "iuf":
                with np.errstate(invalid="ignore"):
                    good = (a == 0) | (a == 1)
                return np.where(good, a, 0).astype(bool), ~good
            return self._per_element(a)
        # choice
        if a.dtype.kind in "US" and not self.case_insensitive:
            opts = self.options()
            s = a.astype(str)
            if _all_same(s):  # one value: test it once
                if s[0] in opts:
                    return s, np.zeros(n, dtype=bool)
                return np.full(n, opts[0] if opts else ""), np.ones(n, dtype=bool)
            good = np.isin(s, list(opts))
            return np.where(good, s, opts[0] if opts else ""), ~good
        return self._per_element(a)

    def _parse_patterns(self, raw: Any) -> tuple[np.ndarray, np.ndarray]:
        """Patterns: each distinct text parsed once (a sweep holds a few). A sequence is one
        pattern per element (each a text or a list of kinds)."""
        a = raw.reshape(-1) if isinstance(raw, np.ndarray) else object_array(raw)
        kinds = self.pattern_kinds
        if a.dtype.kind in "US":
            # each distinct text parsed once; one pattern for the batch without np.unique's sort
            same = _all_same(a)
            uniq, inv = (
                (a[:1], np.zeros(len(a), np.intp)) if same else np.unique(a, return_inverse=True)
            )
            parsed = [canonical_pattern(str(u), kinds) for u in uniq]
        else:
            inv = np.arange(len(a))
            parsed = [canonical_pattern(x, kinds) for x in a.tolist()]
        bad = np.array([p is None for p in parsed], dtype=bool)
        text = np.array([p or kinds.default for p in parsed], dtype=str)
        return text[inv], bad[inv]

    def _dtype(self) -> Any:
        return {"int": np.int64, "float": np.float64, "bool": bool}.get(self.kind, str)

    def _placeholder(self) -> Any:
        if self.kind == "version":
            return self.default
        if self.kind == "int":
            return int(self.min) if self.min is not None else 0
        if self.kind == "float":
            return float(self.min) if self.min is not None else 0.0
        return False

    def _per_element(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parsed = [self.parse(x) for x in a.tolist()]
        bad = np.array([not ok for ok, _ in parsed], dtype=bool)
        ph = self._placeholder()
        vals = [v if ok else ph for ok, v in parsed]
        if self.kind == "int":
            return np.array(vals, dtype=np.int64), bad
        if self.kind == "float":
            return np.array(vals, dtype=np.float64), bad
        if self.kind == "bool":
            return np.array(vals, dtype=bool), bad
        opts = self.options()
        vals = [v if ok else (opts[0] if opts else "") for ok, v in parsed]
        return np.array(vals, dtype=str), bad


def object_array(values: Any) -> np.ndarray:
    """A 1-d object array of the elements of a sequence, kept whole (lists stay lists)."""
    seq = list(values) if isinstance(values, list | tuple) else [values]
    out = np.empty(len(seq), dtype=object)
    for i, v in enumerate(seq):
        out[i] = v
    return out


def is_one_pattern(values: Any) -> bool:
    """A value that is one pattern, not a column of them: a text or a flat list (of kinds)."""
    if isinstance(values, str):
        return True
    return isinstance(values, list | tuple) and not any(
        isinstance(v, list | tuple | np.ndarray) for v in values
    )


# ---------------------------------------------------------------------- the table
def _int(name: str, lo: int, hi: int, default: Any = None, unit: str = "", **kw: Any) -> Field:
    return Field(name, "int", lo, hi, default, unit, **kw)


def _limit_field(name: str, unit: str, plausible: tuple[float, float], note: str) -> Field:
    """A constraint's limit (`constraints.<name>.min` / `.max`): a finite number > 0."""
    return Field(
        name, "float", unit=unit, positive=True, plausible=plausible, note=note, group="constraint"
    )


FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        # architecture (dse.spec.arch.Architecture)
        _int("d_model", 1, 2**16, note="the hidden size"),
        _int("n_layers", 1, 1024),
        _int("n_heads", 1, 2**12),
        _int("n_kv_heads", 1, 2**12, note="absent: n_heads (MHA)"),
        _int("head_dim", 8, 2**12, even=True, note="absent: d_model / n_heads"),
        _int("d_ff", 1, 2**20, note="the FFN width"),
        Field("gated_mlp", "bool", default=True),
        _int("vocab_size", 1, 2**22, 32000),
        Field("tied_embeddings", "bool", default=False),
        _int("n_experts", 1, 2**12, 1),
        _int("top_k", 1, 2**12, 1),
        _int("d_ff_expert", 1, 2**20, note="absent: d_ff"),
        _int("shared_expert_d_ff", 0, 2**20, 0),
        Field("shared_expert_gate", "bool", default=False),
        Field("qkv_bias", "bool", default=False),
        Field("norm", "choice", default="rmsnorm", choices=_norms),
        Field(
            "weight_dtype",
            "choice",
            default="bfloat16",
            choices=_weight_dtypes,
            note="nvfp4 on Blackwell GPUs only",
            refused=(("fp4", "did you mean 'nvfp4'?"),),
        ),
        Field(
            "kv_dtype",
            "choice",
            default="bfloat16",
            choices=_kv_dtypes,
            refused=(("nvfp4", "nvfp4 is a weight dtype: no engine stores its KV cache in it"),),
        ),
        _int("norms_per_layer", 1, 8, 2),
        Field("qk_norm", "bool", default=False),
        # attention beyond GQA (issue 21; docs/architecture.md "Attention families"). Every
        # default is a plain full-attention GQA model, so existing architectures do not move.
        Field("attention_pattern", "pattern", default="full", note="the mixer of each layer"),
        Field("ffn_pattern", "pattern", default="ffn", note="the FFN of each layer"),
        _int("sliding_window", 0, 2**25, 0, "tokens", note="the window of sliding layers"),
        Field("attn_output_gate", "bool", default=False),
        Field("rope", "bool", default=True, note="false: attention layers without RoPE (NoPE)"),
        _int("kv_lora_rank", 0, 2**16, 0, note="MLA's KV latent; 0: no MLA"),
        _int("q_lora_rank", 0, 2**16, 0, note="MLA's query latent; 0: q projected directly"),
        _int("qk_rope_head_dim", 0, 2**12, 0, even=True, note="MLA's decoupled RoPE part"),
        _int("qk_nope_head_dim", 0, 2**12, 0, note="0: head_dim - qk_rope_head_dim"),
        _int("v_head_dim", 0, 2**12, 0, note="0: head_dim"),
        Field("linear_kind", "choice", default="gated_deltanet", choices=_linear_kinds),
        # up to d_model: Mamba-1 has one head of width 1 per inner channel (2 d_model of them)
        _int("linear_n_heads", 0, 2**16, 0, note="value heads of linear layers; 0: n_heads"),
        _int("linear_head_dim", 0, 2**12, 0, note="0: head_dim"),
        _int("linear_n_groups", 0, 2**12, 0, note="key heads / B,C groups; 0: linear_n_heads"),
        _int("linear_state_dim", 0, 2**12, 0, note="key dim / d_state; 0: linear_head_dim"),
        _int("linear_conv_width", 1, 64, 4, note="causal conv kernel of linear layers"),
        Field("linear_norm", "bool", default=True),
        _int("n_dense_layers", 0, 1024, 0, note="MoE: first layers with a dense FFN of d_ff"),
        # workload (dse.spec.workload.Workload)
        _int("batch_size", 1, 2**20, 1, "requests", group="workload"),
        _int("prompt_tokens", 1, 2**24, 1024, "tokens", group="workload"),
        _int("output_tokens", 1, 2**24, 256, "tokens", group="workload"),
        _int("tensor_parallel", 1, 1024, 1, "GPUs", power_of_two=True, group="workload"),
        Field(
            "engine",
            "choice",
            default="vllm",
            choices=_engines,
            note="sglang: SGLang's own kernel tables where the GPU's artifact has them"
            " (attention: the backend SGLang runs for the heads, named in the provenance)",
            group="workload",
        ),
        Field(
            "batching",
            "choice",
            default="static",
            choices=_batching,
            note="continuous: priced with the engine's fitted host time per decode step",
            group="workload",
        ),
        Field(
            "routing",
            "choice",
            default="uniform",
            choices=_routings,
            note="MoE routing of the batch's tokens: uniform (independent tokens), round_robin "
            "(min(n_experts, tokens x top_k) experts), identical (copies of one sequence: a "
            "decode step touches top_k experts)",
            group="workload",
        ),
        Field(
            "engine_version",
            "version",
            default=DEFAULT_ENGINE_VERSION,
            note="continuous batching's host constants are fitted per version (vLLM 0.4.2, "
            "0.11.1; 0.11.1 also prices GQA-aware decode attention and the running batch's KV "
            "at mean context); another version takes the nearest fitted one's and is flagged "
            "out of range",
            group="workload",
        ),
        # hardware
        Field(
            "gpu",
            "choice",
            default="h100_sxm",
            choices=_gpus,
            case_insensitive=True,
            group="hardware",
        ),
        # training (the quality objective's token budget)
        _int("training_tokens", 10**6, 10**15, unit="tokens", group="training"),
        # limits of a search space's constraints (`constraints: {tpot: {max: 0.05}}`,
        # dse.spec.space): any finite number > 0; outside `plausible` a warning, since such a
        # limit is most likely a unit slip (tpot max 50 meant 50 ms) or one nothing can meet.
        _limit_field("latency", "s", (1e-3, 86400.0), "request latency; a day at most"),
        _limit_field("ttft", "s", (1e-4, 3600.0), "time to first token; an hour at most"),
        _limit_field("tpot", "s", (1e-4, 10.0), "time per output token"),
        _limit_field("energy", "J", (1e-2, 1e9), "HYMELL energy per request"),
        _limit_field("energy_per_output_token", "J", (1e-5, 1e4), "HYMELL energy per token"),
        _limit_field("throughput", "tokens/s", (1e-2, 1e7), "output tokens per s per GPU"),
        _limit_field("user_speed", "tokens/s", (0.1, 1e4), "per user, 1 / tpot"),
        # the laws' irreducible loss is 1.69 (Chinchilla) to 1.82 (Besiroglu); a uniform guess
        # over a 4M-token vocabulary is ln(2**22) = 15.2 nats
        _limit_field("loss", "nats/token", (1.0, 15.0), "the scaling law's loss"),
        _limit_field("active_params", "parameters", (1e6, 1e13), "1e6 to 1e13, not billions"),
        _limit_field("total_params", "parameters", (1e6, 1e13), "1e6 to 1e13, not billions"),
        _limit_field("kv_bytes_per_token", "bytes", (1e2, 1e8), "KV cache per token, not KiB"),
        _limit_field("memory_bytes", "bytes", (1e8, 1e12), "per GPU, not GiB"),
        # served output tokens over the model's life (`lifetime_energy`); 0: training only
        _int("lifetime_tokens", 0, 10**18, unit="tokens", group="training"),
        # command-line only
        _int("context", 1, 2**25, unit="tokens", group="cli"),
        _int("entry", 0, 2**31 - 1, 0, group="cli"),
        Field("time_s", "float", 1e-9, 1e9, unit="s", group="cli"),
        Field(
            "preset", "choice", default="both", choices=("paper", "corrected", "both"), group="cli"
        ),
    )
}


def _all_same(a: np.ndarray) -> bool:
    """One value over the whole array (a field a sweep holds fixed, or left at its default):
    its rule is then applied once. Comparing 10^5 texts costs ~0.3 ms, np.unique's sort of
    them ~10 ms (for each such field of every chunk an exact sweep predicts)."""
    return bool(len(a)) and bool(a[0] == a[-1]) and bool((a == a[0]).all())


def field(name: str) -> Field:
    try:
        return FIELDS[name]
    except KeyError:
        raise KeyError(f"no field {name!r} in dse.spec.fields.FIELDS") from None


# ---------------------------------------------------------------------- checking
Where = str | Callable[[int, str], Exception]


def check(name: str, values: Any, where: Where = "") -> Any:
    """Validate `values` of field `name` and return them typed; raise at the first bad value.

    A scalar comes back as a plain int/float/bool/str, an array as int64/float64/bool/str.
    `where` says where the value came from: a prefix ('--batch-size', 'workload.batch_size';
    an array's index is appended as '[i]' when it has more than one element) or a callable
    `(index, '<rule>, got <value>') -> Exception` to raise instead (a YAML document's located
    error). The message is `<where>: <rule>, got <value>`.
    """
    f = field(name)
    if isinstance(values, np.ndarray) and values.size == 1 and f.kind != "pattern":
        # one configuration (interactive use): `parse_array`'s one-value rule, without its
        # arrays of one bad flag
        raw1 = values.reshape(-1)[0]
        ok, v = f.parse(raw1)
        if not ok:
            raise _error(where, 0, f.message(raw1), 1)
        return np.array([v], dtype=f._dtype())
    one = f.kind == "pattern" and is_one_pattern(values)
    if one or (np.ndim(values) == 0 and not isinstance(values, np.ndarray)):
        ok, v = f.parse(values)
        if not ok:
            raise _error(where, 0, f.message(values), None)
        return v
    typed, bad = f.parse_array(values)
    if bad.any():
        i = int(np.argmax(bad))
        raw = np.asarray(values).reshape(-1)
        raise _error(where, i, f.message(raw[i]), len(raw))
    return typed


def violations(name: str, values: Any) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """(typed values, [(index, '<rule>, got <value>'), ...] for every bad one) of an array."""
    f = field(name)
    raw = np.asarray(values).reshape(-1)
    typed, bad = f.parse_array(raw)
    return typed, [(int(i), f.message(raw[i])) for i in np.nonzero(bad)[0]]


def _error(where: Where, i: int, msg: str, n: int | None) -> Exception:
    if callable(where):
        return where(i, msg)
    prefix = where if (n is None or n == 1 or not where) else f"{where}[{i}]"
    return ConfigError(f"{prefix}: {msg}" if prefix else msg)


# ---------------------------------------------------------------------- showing values
def show(v: Any) -> str:
    """A value as messages show it, as Python prints it: 8.5, nan, 1e+30, 4096 (an integral
    float), 100000000000000000000000, 'fp3' (strings quoted), True; never np.float64(...)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    if isinstance(v, str | bool) or v is None:
        return repr(v)
    if isinstance(v, int | float):
        return str(v)
    return repr(v)


def number_or_text(raw: Any) -> Any:
    """A string that reads as a number becomes that number ('1e30' -> 1e+30, '7' -> 7, exact
    for long integers); anything else comes back unchanged."""
    if isinstance(raw, np.generic):
        raw = raw.item()
    if not isinstance(raw, str):
        return raw
    s = raw.strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return raw


def _limit(x: float | None, kind: str) -> str:
    if x is None:
        return "..."
    if kind == "int" or (float(x).is_integer() and abs(x) < 1e6):
        return str(int(x))
    return f"{x:g}"
