"""Layers point one way: each row of RULES says which porteiro modules a package may import.

Read from the source with `ast` (nothing is imported), every import counted: at module
level, inside functions and under `if TYPE_CHECKING:` alike, since a type-only import
still ties the lower layer to the upper one's definitions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# The modules below everything: they import no other porteiro module (held to that by
# their own rows), so any layer may use them sideways.
LEAVES = ("porteiro.model", "porteiro.errors", "porteiro.jsontext")

# (package or module, the porteiro modules it may import besides its own).
RULES: list[tuple[str, tuple[str, ...]]] = [
    ("porteiro.store", (*LEAVES, "porteiro.observability")),
    ("porteiro.model", ()),
    ("porteiro.errors", ()),
    ("porteiro.jsontext", ()),
    ("porteiro.observability", ("porteiro.observability.ingest",)),
    ("porteiro.observability.ingest", ()),
]


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(prefix: str) -> list[Path]:
    base = SRC.joinpath(*prefix.split("."))
    if base.is_dir():
        return sorted(base.rglob("*.py"))
    return [base.with_suffix(".py")]


def imports_of(source: str, module: str, *, package: bool = False) -> set[str]:
    """Every module the source of `module` imports: `import a.b`, `from a.b import c`
    (a.b, and a.b.c in case c is a module), relative imports resolved against its
    package (`module` itself when `package`: an `__init__.py`)."""
    parts = module.split(".") if package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, parts)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def _from_module(node: ast.ImportFrom, package: list[str]) -> str:
    """The module a `from ... import` names, a relative one resolved against the parts of
    the importing module's package."""
    anchor = package[: len(package) - node.level + 1] if node.level else []
    return ".".join([*anchor, *([node.module] if node.module else [])])


def _imports(path: Path) -> set[str]:
    source = path.read_text(encoding="utf-8")
    return imports_of(source, _module_name(path), package=path.name == "__init__.py")


def _is_module(name: str) -> bool:
    """Whether `name` is a porteiro module or package (not a name imported from one)."""
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(prefix: str, allowed: tuple[str, ...]) -> list[str]:
    wrong = []
    for path in _modules(prefix):
        for name in sorted(_imports(path)):
            if not _within(name, "porteiro") or name == "porteiro" or not _is_module(name):
                continue
            if not any(_within(name, ok) for ok in (prefix, *allowed)):
                wrong.append(f"{_module_name(path)} imports {name}")
    return wrong


@pytest.mark.parametrize(("prefix", "allowed"), RULES, ids=[prefix for prefix, _ in RULES])
def test_a_layer_imports_only_what_it_may(prefix: str, allowed: tuple[str, ...]) -> None:
    assert _modules(prefix), f"{prefix} names no module: the rule checks nothing"
    assert violations(prefix, allowed) == []


def test_the_reader_sees_every_kind_of_import() -> None:
    """A type-only import, one inside a function, `from porteiro import x` and a relative
    import are imports too; a name imported from a module is not a module."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from porteiro import jsontext\n"
        "from porteiro.model import Kind\n"
        "from ..handlers import Handlers\n"
        "if TYPE_CHECKING:\n"
        "    from porteiro.handlers import Executor\n"
        "def later():\n"
        "    import porteiro.worker\n"
    )
    imported = imports_of(source, "porteiro.store.probe")
    expected = {"porteiro.jsontext", "porteiro.model", "porteiro.handlers", "porteiro.worker"}
    assert expected <= imported
    assert _is_module("porteiro.jsontext") and not _is_module("porteiro.model.Kind")
    assert violations("porteiro.store", RULES[0][1]) == []  # the real package, as a control


# -- no import cycle ---------------------------------------------------------------------------


def _import_time_edges(path: Path) -> set[str]:
    """The porteiro modules `path` imports when it is imported: module level and under
    `if`/`try`, not inside functions nor under `if TYPE_CHECKING:`. `from pkg import mod`
    is an edge to pkg.mod; to pkg itself only for a name defined there."""
    module = _module_name(path)
    parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    visit(block)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _from_module(node, parts)
                for alias in node.names:
                    found.add(sub if _is_module(sub := f"{base}.{alias.name}") else base)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {name for name in found if _within(name, "porteiro") and _is_module(name)} - {module}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


def test_no_import_cycle_in_the_package() -> None:
    graph = {_module_name(p): _import_time_edges(p) for p in _modules("porteiro")}
    assert graph["porteiro.http.app"] >= {"porteiro.http.receiver", "porteiro.runtime"}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
