"""`python -m dse` runs the `dse` command."""

from __future__ import annotations

from dse.cli import main

raise SystemExit(main())
