"""dse: design-space exploration of LLM architectures against predicted latency and energy."""

from __future__ import annotations

__version__ = "0.1.0"
