"""The study record: what a study needs to be joined and resumed (its search space as read, a
hash of what defines it, sampler, seed, batch size, trial budget), kept in its user attributes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna

from dse.errors import ConfigError
from dse.spec.space import SearchSpace
from dse.sweep.storage import warn
from dse.yamlio import Located

ATTR_PREFIX = "dse:"
FORMAT = 1


def space_hash(space: SearchSpace) -> str:
    """Hash of what defines the study's trials: parameters and their values, constraints and
    objectives (not the sampler, seed or budget, which may change on resume)."""
    doc = {
        "params": [[p.name, [_jsonable(v) for v in p.values]] for p in space.params],
        "constraints": space.constraints,
        "objectives": list(space.objectives.names),
    }
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _jsonable(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


@dataclass(frozen=True)
class StudyRecord:
    """What a study needs to be joined and resumed, stored in its user attributes."""

    space_file: str
    space_raw: dict[str, Any]
    space_hash: str
    sampler: str
    seed: int
    batch_size: int
    trials: int  # the budget: evaluated trials (complete or invalid) the study aims for

    def attrs(self) -> dict[str, Any]:
        return {
            f"{ATTR_PREFIX}format": FORMAT,
            f"{ATTR_PREFIX}space_file": self.space_file,
            f"{ATTR_PREFIX}space": self.space_raw,
            f"{ATTR_PREFIX}space_hash": self.space_hash,
            f"{ATTR_PREFIX}sampler": self.sampler,
            f"{ATTR_PREFIX}seed": self.seed,
            f"{ATTR_PREFIX}batch_size": self.batch_size,
            f"{ATTR_PREFIX}trials": self.trials,
        }

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any], where: str) -> StudyRecord:
        try:
            return cls(
                space_file=str(attrs[f"{ATTR_PREFIX}space_file"]),
                space_raw=dict(attrs[f"{ATTR_PREFIX}space"]),
                space_hash=str(attrs[f"{ATTR_PREFIX}space_hash"]),
                sampler=str(attrs[f"{ATTR_PREFIX}sampler"]),
                seed=int(attrs[f"{ATTR_PREFIX}seed"]),
                batch_size=int(attrs[f"{ATTR_PREFIX}batch_size"]),
                trials=int(attrs[f"{ATTR_PREFIX}trials"]),
            )
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"{where}: this study was not created by `dse sweep` (its user attributes "
                "hold no dse search space)"
            ) from None


def restore_record(
    study: optuna.Study, rec: StudyRecord, where: str, flush: Callable[[], None]
) -> None:
    """Put back the study-record attributes a damaged journal lost (named by the recovery),
    from the command being resumed, when every one that survived agrees with it (its space,
    as hash or as read, sampler, seed and batch size); otherwise refuse the resume."""
    have = study.user_attrs
    want = rec.attrs()
    dse_keys = [k for k in have if k.startswith(ATTR_PREFIX)]
    missing = [k for k in want if k not in have]
    if not missing or not dse_keys:
        return  # whole, or not a dse study at all (from_attrs says so)
    for key in ("space_hash", "space", "sampler", "seed", "batch_size"):
        k = f"{ATTR_PREFIX}{key}"
        if k in have and have[k] != want[k]:
            shown = "the search space" if key in ("space", "space_hash") else f"{key}={have[k]!r}"
            raise ConfigError(
                f"{where}: study {study.study_name!r}: its record lost {', '.join(missing)}, "
                f"and {shown} it kept differs from this command's; resume it with the space and "
                "settings that created it, or use another --study name"
            )
    for k in missing:
        study.set_user_attr(k, want[k])
    flush()
    warn(
        [
            f"{where}: study {study.study_name!r}: its record lost {', '.join(missing)}; "
            "restored from this command (what survived agrees with it)"
        ]
    )


def json_safe(raw: Any) -> Any:
    """The YAML document as JSON-safe data (dates and other scalars as strings)."""
    return json.loads(json.dumps(raw, default=str))


def space_from_record(rec: StudyRecord) -> SearchSpace:
    """Rebuild the search space a study was created from (for workers and `dse show`)."""
    from dse.spec.space import parse_space

    return parse_space(Located(Path(rec.space_file), rec.space_raw, {}))


def check_same(existing: StudyRecord, new: StudyRecord, name: str, where: str) -> StudyRecord:
    """A resumed study must have the same space; sampler, seed and batch size too (so it
    continues deterministically). The budget may grow or shrink."""
    if existing.space_hash != new.space_hash:
        raise ConfigError(
            f"{where}: study {name!r} exists with a different search space (space hash "
            f"{existing.space_hash}, from {existing.space_file}; this one is {new.space_hash}, "
            f"from {new.space_file}); use another --study name (or --out folder)"
        )
    for key in ("sampler", "seed", "batch_size"):
        a, b = getattr(existing, key), getattr(new, key)
        if a != b:
            raise ConfigError(
                f"{where}: study {name!r} was created with {key}={a!r}, not {b!r}; resume it "
                f"with the same {key} or use another --study name"
            )
    return replace(existing, trials=new.trials)
