"""YAML streams → documents with line numbers, under YAML 1.2's idea of a boolean.

PyYAML follows YAML 1.1, where `on`, `off`, `yes` and `no` are booleans: the schema's
`retries: {on: [...]}` would silently become `{True: [...]}`. Only `true`/`false` are
booleans here. Each document keeps its node tree so an error can name the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Yaml12Loader(_BaseLoader):  # type: ignore[misc]
    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        # Tag resolution runs in Python even under the C loader and is a pure function
        # of a scalar's text; route files repeat the same keys thousands of times.
        if kind is not yaml.ScalarNode or not isinstance(value, str):
            return str(super().resolve(kind, value, implicit))
        key = (value, implicit)
        tag = _RESOLVED.get(key)
        if tag is None:
            tag = str(super().resolve(kind, value, implicit))
            if len(_RESOLVED) >= 50_000:
                _RESOLVED.clear()
            _RESOLVED[key] = tag
        return tag

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # PyYAML keeps the last of two equal keys; a forgotten `---` would then silently
        # merge two routes into one. Refuse instead. Only keys written in this mapping
        # count: a `<<:` merge may be overridden, that is what merges are for.
        seen: dict[tuple[str, str], yaml.Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key_node.value!r} (first on line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

_RESOLVED: dict[tuple[str, tuple[bool, bool]], str] = {}
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


@dataclass(frozen=True, slots=True)
class Document:
    index: int
    line: int
    data: Any
    node: yaml.Node

    def line_of(self, loc: Sequence[str | int]) -> int:
        """Best line for a field path (as pydantic reports it); falls back to the parent."""
        node = self.node
        line = node.start_mark.line + 1
        for key in loc:
            child = _child(node, key)
            if child is None:
                break
            node = child
            line = node.start_mark.line + 1
        return line


def _child(node: yaml.Node, key: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == key:
                return value_node  # type: ignore[no-any-return]
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        return node.value[key]  # type: ignore[no-any-return]
    return None


def load_documents(text: str | bytes) -> Iterator[Document]:
    """Yield each non-empty document; yaml.YAMLError carries the line on bad syntax."""
    loader = _Yaml12Loader(text)
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            data = loader.construct_document(node)
            if data is not None:
                yield Document(index=index, line=node.start_mark.line + 1, data=data, node=node)
            index += 1
    finally:
        loader.dispose()


def load_plain(text: str | bytes) -> Any:
    """One document, YAML 1.2 booleans; for config files."""
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass
