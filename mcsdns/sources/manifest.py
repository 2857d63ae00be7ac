"""One manifest file read safely: YAML/JSON documents of Kubernetes objects.

Reading is bounded: only regular files of at most `max_bytes` are read; YAML
nesting is capped at MAX_DEPTH and alias expansion at MAX_ALIAS_NODES nodes
per file, so a hostile file is rejected in about the time it takes to read.
A key repeated in one mapping (YAML or JSON) refuses the file (error
"file_duplicate_key"): which value was meant is unknown, and Kubernetes'
own decoder rejects it too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, ScalarEvent
from yaml.nodes import MappingNode, Node
from yaml.resolver import Resolver

from ..ops import load
from ..ops.fileio import Refused, read_bounded
from ..ops.logs import show
from .limits import MANIFEST_MAX_BYTES

MAX_DEPTH = 100  # nested YAML collections (Kubernetes objects need about 10)
MAX_ALIAS_NODES = 100_000  # nodes that YAML aliases may add to one file

_Parser: Any
try:
    from yaml._yaml import CParser as _Parser  # libyaml's parser; composed in Python to bound it
except ImportError:  # pragma: no cover - libyaml missing
    from yaml.parser import Parser as _Parser


class _BoundedComposer(Composer):
    """PyYAML's composer, with nesting depth and alias expansion capped."""

    peek_event: Callable[[], Any]  # from the parser

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0  # collections around the node being composed
        self._deepest = 0  # most reached in the current subtree, aliases expanded
        self._expanded = 0  # nodes composed so far, aliases expanded
        self._alias_nodes = 0  # of those, nodes added by aliases
        self._size: dict[str, tuple[int, int]] = {}  # anchor: (expanded nodes, collection levels)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        kind = type(event)
        if kind is ScalarEvent and event.anchor is None:  # most nodes: only counted
            self._expanded += 1
            # no path resolvers to descend; the stub mistypes the anchor (str | None)
            return self.compose_scalar_node(None)  # type: ignore[arg-type]
        line = event.start_mark.line + 1
        if kind is AliasEvent:  # an unknown anchor is left to Composer's error
            nodes, height = self._size.get(event.anchor, (0, 0))
            self._alias_nodes += nodes
            self._expanded += nodes
            if self._alias_nodes > MAX_ALIAS_NODES:
                raise Refused("aliases",
                              f"YAML aliases expand to over {MAX_ALIAS_NODES} nodes (line {line})")
            level = self._depth + height
        else:  # a collection, or an anchored scalar
            level = self._depth + (kind is not ScalarEvent)
        if level > MAX_DEPTH:
            raise Refused("too_deep", f"YAML nested over {MAX_DEPTH} levels (line {line})")
        if kind is AliasEvent:
            self._deepest = max(self._deepest, level)
            return super().compose_node(parent, index)
        depth, outer, before = self._depth, self._deepest, self._expanded
        self._depth = self._deepest = level
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth = depth
        self._expanded += 1
        if event.anchor is not None:
            self._size[event.anchor] = (self._expanded - before, self._deepest - depth)
        self._deepest = max(outer, self._deepest)
        return node


_MERGE = "tag:yaml.org,2002:merge"


def _duplicate(key: Any, line: int | None = None) -> Refused:
    return Refused("duplicate_key", f"duplicate key {show(key)}" + (f" (line {line})" if line else ""))


class _UniqueKeys(SafeConstructor):
    """SafeConstructor that refuses a key given twice in one mapping (merge keys `<<`
    aside: the mapping's own keys override merged ones, as YAML 1.1 says)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise _duplicate(key, key_node.start_mark.line + 1)
                    seen.add(key)
                except TypeError:
                    continue  # unhashable: SafeConstructor's own error follows
        return super().construct_mapping(node, deep)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads' object_pairs_hook: the object, or Refused for a key given twice."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _duplicate(k)
            seen.add(k)
    return d


class _Loader(_BoundedComposer, _Parser, _UniqueKeys, Resolver):  # type: ignore[misc]
    """Safe loader: libyaml's parser when present, the bounded composer, safe types only,
    no key given twice in one mapping."""

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        _UniqueKeys.__init__(self)
        Resolver.__init__(self)
        _BoundedComposer.__init__(self)

    def construct_document(self, node: Node) -> Any:
        data = super().construct_document(node)
        _dismantle(node)
        return data


def _dismantle(node: Node) -> None:
    """Free a composed document's nodes one at a time, in Python steps between which the
    GIL is handed over: dropped whole, a 100k-endpoint document's million nodes were
    freed in one C cascade that held it for 180 ms."""
    stack = [node]
    while stack:
        value = stack.pop().value
        if isinstance(value, list):
            while value:
                item = value.pop()
                if isinstance(item, tuple):  # a mapping's (key, value)
                    stack.extend(item)
                else:
                    stack.append(item)


def load_file(path: Path, max_bytes: int = MANIFEST_MAX_BYTES) -> list[dict[str, Any]]:
    """Objects in one file (multi-document YAML, JSON, and `kind: List` supported);
    Refused for a file over the bounds, ValueError or YAMLError if it does not parse."""
    text = read_bounded(path, max_bytes).decode("utf-8")
    if path.suffix == ".json":
        try:
            docs = [load.loads(text, _unique_pairs)]
        except RecursionError:
            raise Refused("too_deep", "JSON nested too deep") from None
    else:
        loader = _Loader(text)
        try:
            docs = []
            while loader.check_data():  # type: ignore[no-untyped-call]
                docs.append(loader.get_data())
        except yaml.YAMLError as e:  # libyaml >= 0.2.6 has its own flow nesting limit
            if "maximum nesting depth" in str(getattr(e, "problem", "")):
                raise Refused("too_deep", "YAML nested deeper than libyaml allows") from None
            raise
        finally:
            loader.dispose()
    out: list[dict[str, Any]] = []
    for d in docs:
        if d is None:
            continue
        if not isinstance(d, dict):
            raise ValueError(f"document is a {type(d).__name__}, not an object")
        if d.get("kind") == "List" or (str(d.get("kind", "")).endswith("List") and "items" in d):
            items = d.get("items") or []
            if not isinstance(items, list):
                raise ValueError("List.items is not a list")
            out.extend(i for i in items if isinstance(i, dict))
        else:
            out.append(d)
    return out
