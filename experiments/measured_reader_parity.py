"""Before/after check for issue 36 item 3: the estimators' measured rows, calibration and
scores are the same whichever reader produced them.

    PYTHONPATH=<old checkout> python experiments/measured_reader_parity.py dump old.pkl
    PYTHONPATH=.              python experiments/measured_reader_parity.py dump new.pkl
    python experiments/measured_reader_parity.py compare old.pkl new.pkl   # 1e-9 relative

Uses only entry points whose signatures both versions share: `calibrate.load_tables / fit /
cross_validate / cross_validate_kernels / manifest` and `fitting.serving.serving_rows /
constants_entry`.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def dump(out: str, data: Path = DATA) -> None:
    from dse.estimators import calibrate
    from dse.fitting import serving as S

    tables = calibrate.load_tables(data)
    cal = calibrate.fit(tables)
    cv = calibrate.cross_validate(tables)
    doc = calibrate.manifest(tables, cal, cv)
    doc.pop("library_versions")
    rows = S.serving_rows(data)
    got = {
        "energy": tables["energy"],
        "time": tables["time"],
        "kernels": tables["kernels"],
        "files": tables["files"],
        "fit": cal,
        "cv": cv,
        "manifest": doc,
        "serving_rows": rows,
        "serving_h100": S.constants_entry(rows[rows["gpu"] == "h100_sxm"], data),
        "serving_a100": S.constants_entry(rows[rows["gpu"] == "a100_sxm_40gb"], data),
    }
    Path(out).write_bytes(pickle.dumps(got))
    print(f"wrote {out}: " + ", ".join(f"{k} {len(v)}" for k, v in got.items()))


def _same(a: Any, b: Any, where: str, tol: float, bad: list[str]) -> None:
    if isinstance(a, pd.DataFrame):
        if not isinstance(b, pd.DataFrame) or len(a) != len(b):
            bad.append(f"{where}: {len(a)} rows vs {len(b) if hasattr(b, '__len__') else b}")
            return
        for col in a.columns:
            if col not in b.columns:
                bad.append(f"{where}: column {col!r} missing after")
                continue
            _same(a[col].to_numpy(), b[col].to_numpy(), f"{where}[{col}]", tol, bad)
        extra = sorted(set(b.columns) - set(a.columns))
        if extra:
            bad.append(f"{where}: new columns {extra}")
    elif isinstance(a, np.ndarray):
        b = np.asarray(b)
        if a.shape != b.shape:
            bad.append(f"{where}: shape {a.shape} vs {b.shape}")
        elif a.dtype.kind in "fiu" and b.dtype.kind in "fiu":
            x, y = a.astype(float), b.astype(float)
            ok = np.isclose(x, y, rtol=tol, atol=0.0) | (np.isnan(x) & np.isnan(y))
            if not ok.all():
                i = int(np.flatnonzero(~ok)[0])
                bad.append(
                    f"{where}: {int((~ok).sum())} values differ, first row {i}: {x[i]!r} vs {y[i]!r}"
                )
        elif not all(str(p) == str(q) for p, q in zip(a, b, strict=True)):
            i = next(i for i, (p, q) in enumerate(zip(a, b, strict=True)) if str(p) != str(q))
            bad.append(f"{where}: row {i}: {a[i]!r} vs {b[i]!r}")
    elif isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            bad.append(f"{where}: keys {sorted(a)} vs {sorted(b) if isinstance(b, dict) else b}")
            return
        for k in a:
            _same(a[k], b[k], f"{where}.{k}", tol, bad)
    elif isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            bad.append(
                f"{where}: length {len(a)} vs {b if not isinstance(b, (list, tuple)) else len(b)}"
            )
            return
        for i, (p, q) in enumerate(zip(a, b, strict=True)):
            _same(p, q, f"{where}[{i}]", tol, bad)
    elif isinstance(a, (float, int, np.floating, np.integer)) and not isinstance(a, bool):
        if not (
            np.isclose(float(a), float(b), rtol=tol, atol=0.0) or (np.isnan(a) and np.isnan(b))
        ):
            bad.append(f"{where}: {a!r} vs {b!r}")
    elif a != b:
        bad.append(f"{where}: {a!r} vs {b!r}")


def compare(old: str, new: str, tol: float = 1e-9) -> int:
    a = pickle.loads(Path(old).read_bytes())
    b = pickle.loads(Path(new).read_bytes())
    bad: list[str] = []
    _same(a, b, "", tol, bad)
    for line in bad:
        print(line)
    print(
        f"{'DIFFERENT' if bad else 'same'} (relative tolerance {tol:g}): {len(bad)} difference(s)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
