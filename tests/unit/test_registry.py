"""The built-in registry: every documented provider, each a whole adapter, and the
package's shape: webhook modules free of I/O, no import cycle, base.py importing no
adapter."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import porteiro.providers
from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.providers import PROVIDERS, build_provider
from porteiro.providers.base import (
    Provider,
    SupportsClose,
    SupportsPrepare,
    SupportsWindow,
    SupportsWindowScope,
)

DOCUMENTED = ["adyen", "mercadopago", "pagarme", "pix", "standard", "stripe"]
PACKAGE = Path(porteiro.providers.__file__).parent

# The least each adapter needs to be built (no network is touched building one).
MINIMAL: Mapping[str, SourceConfig] = {
    "adyen": SourceConfig(
        name="a",
        provider="adyen",
        secrets=("44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",),
    ),
    "mercadopago": SourceConfig(name="m", provider="mercadopago", secrets=("mp-secret",)),
    "pagarme": SourceConfig(name="g", provider="pagarme"),
    "pix": SourceConfig(
        name="p", provider="pix", options={"hmac_token": "t", "confirm": False, "keys": ["k"]}
    ),
    "standard": SourceConfig(
        name="s", provider="standard", secrets=("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",)
    ),
    "stripe": SourceConfig(name="t", provider="stripe", secrets=("whsec_test",)),
}

# Modules whose import means I/O (network, files, processes, the store): never in the
# pure verify/parse half of an adapter.
IO_MODULES = frozenset({
    "aiohttp", "anyio", "asyncio", "http.client", "httpx", "os", "pathlib", "requests",
    "shutil", "socket", "sqlite3", "ssl", "subprocess", "tempfile", "urllib.request",
    "porteiro.outgoing.gateway_http", "porteiro.providers.jwks", "porteiro.sinks", "porteiro.store",
})  # fmt: skip


def test_every_documented_provider_is_built_in() -> None:
    # A fresh interpreter: importing the registry alone must list every adapter.
    code = "from porteiro.providers import PROVIDERS; print(*sorted(PROVIDERS))"
    listed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listed == DOCUMENTED
    assert sorted(PROVIDERS) == DOCUMENTED


def test_an_unknown_provider_is_a_config_error_naming_the_known_ones() -> None:
    source = SourceConfig(name="shop", provider="paypal")
    try:
        build_provider(source)
    except ConfigError as exc:
        assert "unknown provider 'paypal'" in str(exc)
        assert ", ".join(DOCUMENTED) in str(exc)
    else:
        raise AssertionError("an unknown provider was built")


def test_every_registered_provider_satisfies_the_base_protocol() -> None:
    assert sorted(MINIMAL) == sorted(PROVIDERS)
    for name, source in MINIMAL.items():
        provider = build_provider(source)
        assert isinstance(provider, Provider), name
        assert provider.source is source


def test_the_optional_capabilities_are_where_the_gateways_have_them() -> None:
    built = {name: build_provider(source) for name, source in MINIMAL.items()}

    def having(capability: type) -> list[str]:
        return sorted(name for name, provider in built.items() if isinstance(provider, capability))

    assert having(SupportsWindow) == ["mercadopago", "pagarme", "pix", "stripe"]
    assert having(SupportsPrepare) == ["pagarme"]
    assert having(SupportsClose) == ["pix"]
    assert having(SupportsWindowScope) == ["pix"]


def test_every_webhook_module_is_free_of_io_imports() -> None:
    webhooks = sorted(PACKAGE.glob("*/webhook.py"))
    assert [path.parent.name for path in webhooks] == DOCUMENTED
    for path in webhooks:
        tree = ast.parse(path.read_text())
        found = {name for name in _runtime_imports(tree) if _is_io(name)}
        assert not found, f"{path.relative_to(PACKAGE)} imports {sorted(found)}"


def test_no_import_cycle_among_the_provider_modules() -> None:
    graph = _import_graph()
    for start in graph:
        cycle = _cycle_from(start, graph)
        assert cycle is None, " -> ".join(cycle or [])


def test_base_imports_no_adapter() -> None:
    imported = _import_graph()["porteiro.providers.base"]
    assert imported == set(), imported


# -- helpers ----------------------------------------------------------------------------


def _is_io(module: str) -> bool:
    return any(module == io or module.startswith(io + ".") for io in IO_MODULES)


def _runtime_imports(tree: ast.Module) -> Iterator[str]:
    """The modules a module imports when it runs (not under `if TYPE_CHECKING:`), with
    `from package import name` read as `package.name` too (name may be a module)."""
    for node in _outside_type_checking(tree.body):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _outside_type_checking(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            continue
        yield node
        if isinstance(node, ast.If | ast.Try):
            for block in (node.body, node.orelse, getattr(node, "finalbody", [])):
                yield from _outside_type_checking(block)


def _module_name(path: Path) -> str:
    parts = ["porteiro", "providers", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Each porteiro.providers module -> the porteiro.providers modules it imports, every
    import counted (TYPE_CHECKING ones too). A submodule's implicit import of its parent
    package is not an edge: Python completes it before the submodule's own imports."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names if alias.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module in modules:
                submodules = {f"{node.module}.{alias.name}" for alias in node.names}
                edges |= (submodules & modules.keys()) or {node.module}
        graph[name] = edges - {name}
    return graph


def _cycle_from(start: str, graph: Mapping[str, set[str]]) -> list[str] | None:
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt)
            if found:
                return found
        path.pop()
        return None

    return visit(start)
