"""The project's error classes: user mistakes become one clear message, never a traceback."""

from __future__ import annotations


class DSEError(Exception):
    """A user-facing error; the CLI prints its message and exits non-zero."""


class ConfigError(DSEError):
    """An invalid architecture, workload, hardware name or search-space file."""


class ArtifactError(DSEError):
    """A frozen predictor artifact is missing, corrupt or of an unsupported format."""


class DataError(DSEError):
    """A measured-data file is malformed (names the file and the problem)."""


class ImageExportError(DSEError):
    """The static image of the main figure could not be written (no Chrome for kaleido, ...)."""
