"""The import map of CONTRIBUTING.md holds: each package of the server's chain (the map's
lines from dns/ to roles/, in that order) imports only packages before it, in Python (any
import, at the top, in a function or for the type checker only) and in C (an #include of
another package's header, a module imported by name). No back edge: nameserver never
imports transport."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support.helpers import REPO

PKG = REPO / "mcsdns"


def chain() -> list[str]:
    """The packages of CONTRIBUTING's map, in order, up to roles/ (the last of the chain)."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    block = text.split("`mcsdns/`: one way through the server", 1)[1].split("```")[1]
    names = re.findall(r"^([a-z]+)/ ", block, re.M)
    return names[:names.index("roles") + 1]


def py_imports(path: Path, root: Path = PKG) -> set[str]:
    """The mcsdns packages a Python module under `root` (mcsdns/) imports (the first name
    after mcsdns)."""
    parts = path.relative_to(root).parts[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("mcsdns.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                mod = (node.module or "").split(".")
                if mod[0] != "mcsdns":
                    continue
                full = mod[1:]
            else:
                full = list(parts[:len(parts) - node.level + 1]) + (node.module or "").split(".")
            full = [p for p in full if p]
            out |= {full[0]} if full else {a.name for a in node.names}
    return out


def c_imports(path: Path) -> set[str]:
    """The mcsdns packages a C source names: `#include "../pkg/...` or "mcsdns.pkg..."."""
    text = path.read_text()
    included = re.findall(r'#include\s+"\.\./([a-z]+)/', text)
    return set(included) | set(re.findall(r'"mcsdns\.([a-z]+)\.', text))


def back_edges() -> list[str]:
    order = chain()
    out = []
    for i, pkg in enumerate(order):
        later = set(order[i + 1:])
        for path in sorted((PKG / pkg).rglob("*")):
            if path.suffix == ".py" or path.suffix == ".pyi":
                got = py_imports(path)
            elif path.suffix in (".c", ".h"):
                got = c_imports(path)
            else:
                continue
            out += [f"{path.relative_to(REPO)} imports {q}" for q in sorted(got & later)]
    return out


def test_the_map_lists_the_chain() -> None:
    order = chain()
    assert order[:1] == ["dns"] and order.index("nameserver") < order.index("transport")
    assert all((PKG / p / "__init__.py").is_file() for p in order), order


def test_no_package_imports_one_after_it() -> None:
    assert back_edges() == []


def test_a_back_edge_is_found(tmp_path: Path) -> None:
    """The check sees a relative, a lazy and a C import of a later package."""
    src = tmp_path / "mcsdns" / "nameserver"
    src.mkdir(parents=True)
    lazy = src / "lazy.py"
    lazy.write_text("def f() -> None:\n    from ..transport import _batchio\n")
    c = src / "x.c"
    c.write_text('#include "../transport/x.h"\nPyImport_ImportModule("mcsdns.transport._batchio");\n')
    assert py_imports(lazy, tmp_path / "mcsdns") == {"transport"}
    assert c_imports(c) == {"transport"}
