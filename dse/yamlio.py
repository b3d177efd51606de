"""YAML reading that remembers where every key came from, for error messages with line numbers.

The reader refuses, before anything is expanded: a file over MAX_BYTES, text that is not
UTF-8, more than MAX_ALIASES aliases, a document whose aliases would expand to more than
MAX_NODES values ("billion laughs"), a recursive alias, nesting deeper than MAX_DEPTH and a key
given twice in one mapping (at any depth). Every refusal is one `FILE:LINE: what: rule, got
value` message.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from dse.errors import ConfigError

KeyPath = tuple[str, ...]

MAX_BYTES = 1 << 20  # 1 MiB: a search space or configuration file is a few kB
MAX_ALIASES = 100  # `*name` references in one document
MAX_NODES = 100_000  # values in the document once every alias is expanded
MAX_DEPTH = 64  # nested mappings/sequences


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
        size = p.stat().st_size
        if p.is_dir():
            raise IsADirectoryError
        if size > MAX_BYTES:
            raise ConfigError(
                f"{p}: file size: at most {MAX_BYTES} bytes (1 MiB) for a YAML document, got {size}"
            )
        with open(p, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{p}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, expected a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read file ({exc.strerror or exc})") from None
    if len(raw) > MAX_BYTES:  # grew while read, or a device that reports no size
        raise ConfigError(
            f"{p}: file size: at most {MAX_BYTES} bytes (1 MiB) for a YAML document, got more"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"{p}:{line}: encoding: must be UTF-8 text, got byte 0x{raw[exc.start]:02x} at "
            f"column {col}"
        ) from None
    return loads_located(text, p)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer counts aliases and nesting while it builds the node graph
    (the graph shares aliased nodes, so nothing is expanded yet)."""

    def __init__(self, stream: str, path: Path) -> None:
        super().__init__(stream)
        self.path = path
        self.n_aliases = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self.n_aliases += 1
            if self.n_aliases > MAX_ALIASES:
                raise ConfigError(
                    f"{self.path}:{event.start_mark.line + 1}: alias *{event.anchor}: at most "
                    f"{MAX_ALIASES} aliases per document, got more"
                )
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                event = self.peek_event()
                raise ConfigError(
                    f"{self.path}:{event.start_mark.line + 1}: nesting: at most {MAX_DEPTH} "
                    f"levels deep, got {self.depth}"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def loads_located(text: str, path: Path) -> Located:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ConfigError(
            f"{path}: file size: at most {MAX_BYTES} bytes (1 MiB) for a YAML document, "
            f"got {len(text.encode('utf-8', 'surrogatepass'))}"
        )
    try:
        loader = _Loader(text, path)
    except yaml.YAMLError as exc:  # the reader checks every character first
        raise _syntax_error(exc, path, text) from None
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise _syntax_error(exc, path, text) from None
        except RecursionError:
            raise ConfigError(
                f"{path}: nesting: at most {MAX_DEPTH} levels deep, got more"
            ) from None
        if node is None:
            raise ConfigError(f"{path}: file is empty, expected a YAML mapping")
        _check_expansion(node, path)
        lines: dict[KeyPath, int] = {}
        _walk(node, (), lines, path)
        if not isinstance(node, yaml.MappingNode):
            kind = "a list" if isinstance(node, yaml.SequenceNode) else "a single value"
            if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
                kind = "nothing (an empty document)"
            raise ConfigError(
                f"{path}:{node.start_mark.line + 1}: expected a YAML mapping at "
                f"the top level (key: value lines), got {kind}"
            )
        try:
            data = loader.construct_document(node)
        except yaml.YAMLError as exc:
            raise _syntax_error(exc, path, text) from None
        except (ValueError, TypeError, OverflowError) as exc:
            raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a YAML mapping at the top level, got {type(data).__name__}"
        )
    return Located(path, data, lines)


def _syntax_error(exc: yaml.YAMLError, path: Path, text: str) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        where = f"{path}:{text[: exc.position].count(chr(10)) + 1}"
        problem = f"character {ord(exc.character) if isinstance(exc.character, str) else exc.character:#06x} is not allowed in YAML"
    elif getattr(exc, "context", None):
        problem = f"{exc.context}, {problem}"
    if "'\\t'" in problem:
        problem += "; YAML is indented with spaces, not tabs"
    return ConfigError(f"{where}: not valid YAML ({problem})")


def _check_expansion(root: yaml.Node, path: Path) -> None:
    """Refuse a recursive alias, or a document that aliases would expand past MAX_NODES
    values; sizes are counted on the shared graph (each node once), never by expanding."""
    size: dict[int, int] = {}
    busy: set[int] = set()

    def count(node: yaml.Node) -> int:
        key = id(node)
        if key in size:
            return size[key]
        if key in busy:
            raise ConfigError(
                f"{path}:{node.start_mark.line + 1}: alias: must not refer to a mapping or "
                "list that contains it, got a recursive alias"
            )
        busy.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += count(k) + count(v)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                total += count(item)
        busy.discard(key)
        if total > MAX_NODES:
            raise ConfigError(
                f"{path}:{node.start_mark.line + 1}: aliases: the document may expand to at "
                f"most {MAX_NODES} values, got {total}"
            )
        size[key] = total
        return total

    count(root)


def _walk(node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int], path: Path) -> None:
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            name = str(key_node.value)
            line = key_node.start_mark.line + 1
            key = (*prefix, name)
            if isinstance(key_node, yaml.ScalarNode) and name != "<<":
                if name in first:
                    raise ConfigError(
                        f"{path}:{line}: {'.'.join(key)}: duplicate key (first at line "
                        f"{first[name]})"
                    )
                first[name] = line
            lines.setdefault(key, line)
            _walk(value_node, key, lines, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            key = (*prefix, str(i))
            lines.setdefault(key, item.start_mark.line + 1)
            _walk(item, key, lines, path)


# ------------------------------------------------------------------ names that become folders
NAME_MAX = 100
NAME_RULE = (
    f"must be letters, digits, '-', '_' or '.' (not starting with '.', at most {NAME_MAX} "
    "characters)"
)
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def safe_name(value: object) -> bool:
    """True when `value` may name a study folder: no separator, no `..`, no hidden file."""
    return (
        isinstance(value, str)
        and len(value) <= NAME_MAX
        and _SAFE_NAME.fullmatch(value) is not None
    )
