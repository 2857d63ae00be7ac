"""Declared source fields: the parts of a raw Kubernetes object that a model's parser reads.

A `Fields` names the keys of a map that are read, each with what is read of its value:
all of it (a plain name), the named keys of a map (a nested `Fields`), or the same of every
item of a list (`Each`). `keep` returns a value cut down to those parts, for the `--workers`
relay (`objects.essentials`); a part that is not of the declared shape (a map where a list
is declared, a string where a map is) is kept as it is, so that it is reported the same.
`decoder` decodes JSON into the same, through msgspec `TypedDict`s made of the declaration
(`typed`): what is not declared is skipped, never built, and the parts kept are plain dicts
and lists, as the parsers read every other source (no second form of the rules). A part
declared `Later` is kept as its JSON text instead (msgspec.Raw) by a decoder asked for it
(`decoder(later=True)`), for its parser to decode when it is first read (ops/load.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeAlias, TypedDict

from msgspec import Raw

from ..kube.apiclient.typedlist import Typed

Path: TypeAlias = tuple[str, ...]  # map keys, and ITEM for "every item of a list"
ITEM = "[]"


class Fields:
    """The keys of a map that are read: `names` whole, `nested` (key=shape) in part."""

    __slots__ = ("keys",)

    def __init__(self, *names: str, **nested: Shape) -> None:
        self.keys: dict[str, Shape | None] = {**dict.fromkeys(names), **nested}

    def keep(self, value: Any) -> Any:
        """`value` with only the declared keys, if it is a map; otherwise as it is."""
        if not isinstance(value, dict):
            return value
        return {k: v if shape is None else shape.keep(v)
                for k, shape in self.keys.items() if k in value for v in (value[k],)}

    def decoder(self, later: bool = False) -> Typed:
        """JSON objects decoded keeping only these fields, as `keep` keeps them (`later`:
        the `Later` parts as their text); msgspec.ValidationError where a declared part is
        not of the declared shape (then json decodes it whole, and the parser says what is
        wrong)."""
        return Typed(self.typed("Kept", later))

    def typed(self, name: str, later: bool = False) -> Any:
        """This declaration as a msgspec-decodable TypedDict: a key per declared key (any
        string), absent when absent; null allowed where a map or list is declared."""
        keys = {k: Any if shape is None else shape.member(f"{name}_{i}", later)
                for i, (k, shape) in enumerate(self.keys.items())}
        return TypedDict(name, keys, total=False)  # type: ignore[operator]

    def member(self, name: str, later: bool) -> Any:
        return self.typed(name, later) | None

    def paths(self, at: Path = ()) -> Iterator[Path]:
        """Every declared path that ends the declaration (a part read whole, or a map of
        which no key is read)."""
        if not self.keys:
            yield at
        for k, shape in self.keys.items():
            if shape is None:
                yield (*at, k)
            else:
                yield from shape.paths((*at, k))

    def covers(self, path: Path) -> bool:
        """Whether a read at `path` is declared (at or under a part read whole)."""
        if not path:
            return True
        if path[0] not in self.keys:
            return False
        shape = self.keys[path[0]]
        return shape is None or shape.covers(path[1:])


class Each:
    """The same parts of every item of a list."""

    __slots__ = ("item",)

    def __init__(self, item: Fields) -> None:
        self.item = item

    def keep(self, value: Any) -> Any:
        return [self.item.keep(v) for v in value] if isinstance(value, list) else value

    def typed(self, name: str, later: bool = False) -> Any:
        return list[self.item.typed(name, later)]  # type: ignore[misc]

    def member(self, name: str, later: bool) -> Any:
        return self.typed(name, later) | None

    def paths(self, at: Path) -> Iterator[Path]:
        return self.item.paths((*at, ITEM))

    def covers(self, path: Path) -> bool:
        return not path or (path[0] == ITEM and self.item.covers(path[1:]))


class Later:
    """A part read as `shape` declares, which a decoder asked for it keeps as its JSON text
    (any JSON value), its parser decoding it when first read."""

    __slots__ = ("shape",)

    def __init__(self, shape: Fields | Each) -> None:
        self.shape = shape

    def keep(self, value: Any) -> Any:
        return self.shape.keep(value)

    def member(self, name: str, later: bool) -> Any:
        return Raw if later else self.shape.member(name, later)

    def paths(self, at: Path) -> Iterator[Path]:
        return self.shape.paths(at)

    def covers(self, path: Path) -> bool:
        return self.shape.covers(path)


Shape: TypeAlias = "Fields | Each | Later"
