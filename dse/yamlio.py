"""YAML reading that remembers where every key came from, for error messages with line numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dse.errors import ConfigError

KeyPath = tuple[str, ...]


class Located:
    """A parsed YAML document plus the line (1-based) of every key path in it."""

    def __init__(self, path: Path, data: Any, lines: dict[KeyPath, int]) -> None:
        self.path = path
        self.data = data
        self.lines = lines

    def where(self, keys: KeyPath) -> str:
        """`file:line: a.b.c` for a key path (the nearest known ancestor's line)."""
        k = tuple(keys)
        while k and k not in self.lines:
            k = k[:-1]
        line = self.lines.get(k)
        loc = f"{self.path}:{line}" if line else str(self.path)
        return f"{loc}: {'.'.join(keys)}" if keys else loc

    def error(self, keys: KeyPath, message: str) -> ConfigError:
        return ConfigError(f"{self.where(keys)}: {message}")


def load_located(path: str | Path) -> Located:
    """Read a YAML mapping from `path`; a missing, unreadable or non-YAML file is a ConfigError."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{p}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read file ({exc})") from None
    return loads_located(text, p)


def loads_located(text: str, path: Path) -> Located:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: not valid YAML ({problem})") from None
    if node is None:
        raise ConfigError(f"{path}: file is empty, expected a YAML mapping")
    lines: dict[KeyPath, int] = {}
    _walk(node, (), lines)
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a YAML mapping at the top level, got {type(data).__name__}"
        )
    return Located(path, data, lines)


def _walk(node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (*prefix, str(key_node.value))
            lines[key] = key_node.start_mark.line + 1
            _walk(value_node, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            key = (*prefix, str(i))
            lines[key] = item.start_mark.line + 1
            _walk(item, key, lines)
