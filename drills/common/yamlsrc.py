"""Load YAML into typed models, keeping the line of every value for error messages.

Only this module sees raw YAML. ``load_model`` returns a validated pydantic model or raises
``ConfigError`` whose every line reads ``FILE:LINE FIELD.PATH: what is wrong (got VALUE)``.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from drills.common.errors import ConfigError

__all__ = [
    "Located",
    "YamlDocument",
    "format_path",
    "load_model",
    "load_yaml",
    "located",
    "parse_model",
]

Path_ = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)

# Files larger than this are refused before parsing: drills are short, and a hostile or
# generated multi-megabyte YAML should not be able to exhaust the runner's memory.
MAX_YAML_BYTES = 1024 * 1024
# After aliases are expanded, and how deep: a drill has hundreds of values, a few levels deep.
MAX_NODES = 100_000
MAX_DEPTH = 64


class Located(Protocol):
    """A model that can report semantic problems after field validation.

    ``problems`` yields ``(field_path, message, value)`` for each cross-field problem.
    """

    def problems(self) -> Iterable[tuple[Path_, str, Any]]: ...


@dataclass(frozen=True)
class YamlDocument:
    """Plain data of one YAML document and the line (1-based) of each node, keyed by path."""

    path: Path
    data: Any
    lines: dict[Path_, int]

    def line_of(self, loc: Path_) -> int:
        """The line of the deepest node on ``loc`` that exists in the file."""
        for end in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return 1


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _check_shape(path: Path, root: yaml.Node) -> None:
    """Refuse documents that are small on disk but huge in memory: anchors and aliases that
    expand exponentially (the "billion laughs"), recursive aliases, deep nesting."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def measure(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ConfigError(
                [f"{path}:{node.start_mark.line + 1} invalid YAML: an alias refers to itself"]
            )
        if depth > MAX_DEPTH:
            raise ConfigError(
                [
                    f"{path}:{node.start_mark.line + 1} invalid YAML: nested more than "
                    f"{MAX_DEPTH} levels deep"
                ]
            )
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += measure(k, depth + 1) + measure(v, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                total += measure(item, depth + 1)
        open_nodes.discard(key)
        sizes[key] = total
        if total > MAX_NODES:
            raise ConfigError(
                [
                    f"{path}:{node.start_mark.line + 1} invalid YAML: expands to more than "
                    f"{MAX_NODES} values (anchors and aliases repeat it); at most {MAX_NODES} "
                    "are accepted"
                ]
            )
        return total

    measure(root, 0)


def _index_lines(node: yaml.Node, prefix: Path_, out: dict[Path_, int]) -> None:
    out[prefix] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            # Point a field's errors at its key's line, where a reader looks first.
            _index_lines(value_node, (*prefix, key), out)
            out[(*prefix, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, (*prefix, index), out)


def load_yaml(path: Path | str) -> YamlDocument:
    """Parse one YAML file; raise ``ConfigError`` for unreadable, oversized or malformed files."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    if len(raw) > MAX_YAML_BYTES:
        raise ConfigError(
            [f"{path}: file is {len(raw)} bytes; at most {MAX_YAML_BYTES} bytes are accepted"]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    loader: _UniqueKeyLoader | None = None
    try:
        loader = _UniqueKeyLoader(text)  # reads the stream: may refuse non-printable characters
        node = loader.get_single_node()
        if node is not None:
            _check_shape(path, node)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise ConfigError([f"{path}:{line} invalid YAML: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: invalid YAML: {exc}"]) from None
    except RecursionError:
        raise ConfigError(
            [f"{path}: invalid YAML: nested too deeply (at most {MAX_DEPTH} levels are accepted)"]
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict[Path_, int] = {}
    if node is not None:
        _index_lines(node, (), lines)
    return YamlDocument(path=path, data=data, lines=lines)


def located(doc: YamlDocument | None, *loc: str | int) -> str:
    """``FILE:LINE `` of ``loc`` in ``doc`` (the start of an error message), or nothing when
    there is no file (a scenario built in code)."""
    return f"{doc.path}:{doc.line_of(loc)} " if doc else ""


def format_path(loc: Iterable[str | int]) -> str:
    """``("phases", 1, "inject", 0, "kind")`` -> ``phases[1].inject[0].kind``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_fields(model: type[BaseModel], loc: Path_) -> list[str] | None:
    """Field names allowed at ``loc`` inside ``model`` (for 'unknown field' errors)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _model_in(field.annotation)
        if current is None:
            return None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The single BaseModel class inside an annotation such as ``list[X] | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    found = [m for arg in typing.get_args(annotation) if (m := _model_in(arg)) is not None]
    return found[0] if len(found) == 1 else None


def _describe(model: type[BaseModel], error: Any) -> str:
    kind = error["type"]
    loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    if kind == "extra_forbidden":
        allowed = _allowed_fields(model, loc[:-1])
        hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return f"unknown field{hint}"
    if kind == "missing":
        return "required field is missing"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _data_loc(data: Any, loc: Path_) -> Path_:
    """``loc`` without the tags pydantic inserts for tagged unions (``inject[0].toxiproxy.latency
    .latency`` -> ``inject[0].latency``): a reader looks for the path in the file."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part not in node:
            if part in {str(v) for v in node.values() if isinstance(v, str | int)}:
                continue  # a union tag, not a key of the file
            out.append(part)
            node = None
            continue
        out.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(out)


def parse_model(model: type[M], doc: YamlDocument) -> M:
    """Validate ``doc`` against ``model``; raise ``ConfigError`` listing every problem found."""
    problems: list[str] = []
    try:
        result = model.model_validate(doc.data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = _data_loc(
                doc.data,
                tuple(
                    p
                    for p in error["loc"]
                    if not (isinstance(p, str) and p.startswith("function-"))
                ),
            )
            line = doc.line_of(loc)
            where = format_path(loc)
            detail = _describe(model, error)
            # A whole mapping as "the value" helps nobody; such messages name the value already.
            shown = error["type"] == "missing" or isinstance(error["input"], dict)
            value = "" if shown else f" (got {_short(error['input'])})"
            problems.append(f"{doc.path}:{line} {where}: {detail}{value}")
        raise ConfigError(problems) from None
    if hasattr(result, "problems"):
        for loc, message, value in _iter_problems(result):
            problems.append(
                f"{doc.path}:{doc.line_of(loc)} {format_path(loc)}: {message} (got {_short(value)})"
            )
    if problems:
        raise ConfigError(problems)
    return result


def _iter_problems(model: Located) -> Iterator[tuple[Path_, str, Any]]:
    yield from model.problems()


def load_model(model: type[M], path: Path | str) -> M:
    """Read ``path`` and validate it against ``model`` (see ``parse_model``)."""
    return parse_model(model, load_yaml(path))
