"""Every table of porteiro.toml refuses a key it does not know, naming the key by its
path and suggesting the closest known one, so a typo (`[server] prot = 8080`) stops
start-up instead of being silently ignored. `[sources.NAME]` accepts what its provider
reads, as porteiro.config.source_options declares it; the scan below keeps that list in step
with the code that reads options."""

from __future__ import annotations

import ast
import itertools
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import porteiro
from porteiro.config.load import load_config, parse_config
from porteiro.config.source_options import (
    COMMON_OPTIONS,
    PROVIDER_OPTIONS,
    SOURCE_FIELDS,
    source_keys,
)
from porteiro.errors import ConfigError
from porteiro.providers import PROVIDERS, build_provider

ROOT = Path(__file__).resolve().parents[2]
SOURCE_TREE = Path(porteiro.__file__).parent
SECRET = "whsec_ZXhhbXBsZS1zZWNyZXQ="  # any ${VAR} of a documented example
STRIPE = {"provider": "stripe", "secrets": ["whsec_x"]}
URL_DESTINATION = {"url": "http://127.0.0.1:9/hook", "secret": SECRET}


def parsed(raw: dict[str, Any]) -> Any:
    return parse_config(raw, {})


# -- every table -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"severs": {}}, "[severs]"),
        ({"store_url": "sqlite:///x.db"}, "store_url"),
        ({"store": {"uri": "sqlite:///x.db"}}, "[store] uri"),
        ({"admin": {"tokn": "t"}}, "[admin] tokn"),
        ({"admin": {"tokens": {"ops": {"token": "t", "rol": "read"}}}}, "[admin.tokens.ops] rol"),
        ({"server": {"prot": 8080}}, "[server] prot"),
        ({"worker": {"batchsize": 8}}, "[worker] batchsize"),
        ({"worker": {"retry": {"max_attempt": 3}}}, "[worker.retry] max_attempt"),
        ({"quarantine": {"limits": 5}}, "[quarantine] limits"),
        ({"reconcile": {"interval": 5}}, "[reconcile] interval"),
        ({"handlers": {"modules": "shop"}}, "[handlers] modules"),
        (
            {"destinations": {"erp": {**URL_DESTINATION, "timeout": 3}}},
            "[destinations.erp] timeout",
        ),
        (
            {"destinations": {"erp": {**URL_DESTINATION, "retry": {"jiter": 0.1}}}},
            "[destinations.erp.retry] jiter",
        ),
        ({"sources": {"shop": {**STRIPE, "secret": "whsec_y"}}}, "[sources.shop] secret"),
        (
            {"sources": {"efi": {"provider": "pix", "hmac_tokens": ["t"]}}},
            "[sources.efi] hmac_tokens",
        ),
    ],
)
def test_each_table_refuses_an_unknown_key_by_its_path(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(path)}: unknown key"):
        parsed(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"server": {"prot": 8080}}, "[server] prot: unknown key, did you mean `port`?"),
        ({"sever": {"port": 8080}}, "[sever]: unknown key, did you mean `server`?"),
        (
            {"sources": {"shop": {**STRIPE, "secret": "whsec_y"}}},
            "[sources.shop] secret: unknown key, did you mean `secrets`?",
        ),
        (
            {"sources": {"mp": {"provider": "mercadopago", "accept_ipns": False}}},
            "[sources.mp] accept_ipns: unknown key, did you mean `accept_ipn`?",
        ),
        (
            {"worker": {"retry": {"max_atempts": 3}}},
            "[worker.retry] max_atempts: unknown key, did you mean `max_attempts`?",
        ),
    ],
)
def test_a_close_key_is_suggested(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parsed(raw)
    assert str(caught.value) == message


def test_with_nothing_close_the_known_keys_are_listed_instead() -> None:
    with pytest.raises(ConfigError) as caught:
        parsed({"quarantine": {"zzz": 1}})
    assert str(caught.value) == "[quarantine] zzz: unknown key (known: limit)"
    assert "did you mean" not in str(caught.value)


def test_every_unknown_key_of_a_table_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        parsed({"server": {"prot": 1, "hots": "::", "port": 8000}})
    message = str(caught.value)
    assert "[server] prot: unknown key, did you mean `port`?" in message
    assert "[server] hots: unknown key, did you mean `host`?" in message


def test_an_unknown_provider_keeps_its_own_error_whatever_its_keys() -> None:
    config = parsed({"sources": {"shop": {"provider": "strype", "secret": "x"}}})
    with pytest.raises(ConfigError, match="unknown provider 'strype'"):
        build_provider(config.sources["shop"])


# -- sources: what each provider reads ------------------------------------------------


def test_source_options_declares_exactly_the_built_in_providers() -> None:
    assert set(PROVIDER_OPTIONS) == set(PROVIDERS)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_every_key_declared_for_a_provider_is_accepted_as_an_option(provider: str) -> None:
    keys = source_keys(provider)
    assert keys is not None
    table: dict[str, Any] = {key: "value" for key in keys - SOURCE_FIELDS}
    table |= {"provider": provider, "secrets": ["s"], "tolerance_seconds": 60}
    table |= {"api_base_url": "http://127.0.0.1:9", "api_key": "k"}
    source = parsed({"sources": {"s": table}}).sources["s"]
    assert set(source.options) == keys - SOURCE_FIELDS


def test_a_key_of_another_provider_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\[sources.shop\] hmac_token: unknown key"):
        parsed({"sources": {"shop": {**STRIPE, "hmac_token": "t"}}})


# -- the declared keys follow the code that reads them ----------------------------------


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_options(node: ast.AST) -> bool:
    """`source.options`, `self.source.options`: a SourceConfig's options mapping."""
    return isinstance(node, ast.Attribute) and node.attr == "options"


def _option_readers(tree: ast.Module) -> dict[str, int]:
    """A module's helpers that read the option their `key` parameter names from a
    SourceConfig parameter (`_str_list(source, "keys")`): name -> position of `key`."""
    readers = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [arg.arg for arg in node.args.args]
            notes = [
                ast.unparse(arg.annotation) if arg.annotation else "" for arg in node.args.args
            ]
            if "key" in names and "SourceConfig" in notes:
                readers[node.name] = names.index("key")
    return readers


def _options_built(function: ast.AST) -> Iterator[str]:
    """Keys of the options a function passes to `SourceConfig(..., options=...)`: a dict
    literal, or a local name bound to one and filled by `options["key"] = ...`."""
    names: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "SourceConfig":
            for keyword in node.keywords:
                if keyword.arg == "options" and isinstance(keyword.value, ast.Dict):
                    yield from filter(None, map(_literal, keyword.value.keys))
                elif keyword.arg == "options" and isinstance(keyword.value, ast.Name):
                    names.add(keyword.value.id)
    for node in ast.walk(function):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id in names for target in targets):
                yield from filter(None, map(_literal, node.value.keys))
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            target = node.value
            if isinstance(target, ast.Name) and target.id in names:  # options["key"] = ...
                yield from filter(None, [_literal(node.slice)])


def option_keys_read(tree: ast.Module) -> set[str]:
    """Every option key a module reads from (or writes into) a SourceConfig's options,
    as a string literal."""
    readers = _option_readers(tree)
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_options(node.value):
            found.add(_literal(node.slice))  # source.options["key"]
        elif isinstance(node, ast.Compare) and any(map(_is_options, node.comparators)):
            found.add(_literal(node.left))  # "key" in source.options
        elif isinstance(node, ast.Call) and node.args:
            func, args = node.func, node.args
            if isinstance(func, ast.Attribute) and func.attr == "get" and _is_options(func.value):
                found.add(_literal(args[0]))  # source.options.get("key", ...)
            elif isinstance(func, ast.Attribute) and func.attr in {"option_str", "option_number"}:
                found.add(_literal(args[0]))  # source.option_str("key")
            elif isinstance(func, ast.Name) and func.id in readers and len(args) > readers[func.id]:
                found.add(_literal(args[readers[func.id]]))  # _str_list(source, "key")
            for before, after in itertools.pairwise(args):
                if _is_options(before):
                    found.add(_literal(after))  # _names(source.options, "key", ...)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.update(_options_built(node))  # SourceConfig(options={"key": ...})
    return {key for key in found if key is not None}


def test_the_scan_sees_every_way_an_option_is_read() -> None:
    code = """
def _flag(source: SourceConfig, key: str) -> bool:
    return source.options.get(key, False)

def build(source: SourceConfig, ignored: Metrics) -> None:
    source.options.get("a")
    self.source.options["b"]
    "c" in source.options
    source.option_str("d")
    source.option_number("e", 1.0)
    _flag(source, "f")
    _names(source.options, "g", where)
    ignored.delivery(source, "not_an_option")
    store_options.get("not_an_option_either")

def fake() -> SourceConfig:
    options: dict[str, Any] = {"h": 1}
    options["i"] = 2
    other = {"not_an_option": 3}
    return SourceConfig(name="fake", provider="pix", options=options)
"""
    assert option_keys_read(ast.parse(code)) == set("abcdefghi")


def _modules() -> list[Path]:
    return sorted(SOURCE_TREE.rglob("*.py"))


def _provider_of(module: Path) -> str | None:
    """The provider a module belongs to by its path (`providers/pix/auth.py`,
    `providers/stripe/...`, `outgoing/pix.py`, `fakes/pix.py`), None for a shared one
    (reconcile/reconciler.py, http/tls.py...)."""
    for part in module.relative_to(SOURCE_TREE).with_suffix("").parts:
        if part in PROVIDER_OPTIONS:
            return part
    return None


def _keys_read_by_module() -> dict[Path, set[str]]:
    return {module: option_keys_read(ast.parse(module.read_text())) for module in _modules()}


def test_every_option_the_code_reads_is_declared_for_a_provider() -> None:
    declared = COMMON_OPTIONS.union(*PROVIDER_OPTIONS.values())
    undeclared = {
        f"{module.relative_to(SOURCE_TREE)}: {key}"
        for module, keys in _keys_read_by_module().items()
        for key in keys - declared
    }
    assert not undeclared, "declare these in porteiro/source_options.py"


def test_a_provider_modules_options_are_declared_for_that_provider() -> None:
    wrong = {
        f"{module.relative_to(SOURCE_TREE)}: {key}"
        for module, keys in _keys_read_by_module().items()
        if (provider := _provider_of(module)) is not None
        for key in keys - COMMON_OPTIONS - PROVIDER_OPTIONS[provider]
    }
    assert not wrong


def test_every_declared_option_is_read_somewhere() -> None:
    """No dead entry, and proof that the scan above sees each way options are read."""
    read = set().union(*_keys_read_by_module().values())
    assert COMMON_OPTIONS.union(*PROVIDER_OPTIONS.values()) - read == set()


# -- the shipped examples load -----------------------------------------------------------


def test_the_example_config_loads() -> None:
    env = {name: SECRET for name in _env_refs((ROOT / "porteiro.example.toml").read_text())}
    config = load_config(ROOT / "porteiro.example.toml", env)
    assert config.sources


def _env_refs(text: str) -> set[str]:
    return set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text))


def _documented_configs() -> Iterator[tuple[str, str]]:
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if page.name == "fake-provider.md":  # its TOML is a fake scenario, not porteiro.toml
            continue
        for index, block in enumerate(re.findall(r"```toml\n(.*?)```", page.read_text(), re.S)):
            yield f"{page.relative_to(ROOT)}#{index}", block


@pytest.mark.parametrize(("where", "text"), list(_documented_configs()))
def test_every_documented_config_loads(where: str, text: str) -> None:
    # Tokens get a value each (two admin tokens may not share one); secrets the shape a
    # source's secret must have.
    env = {name: f"token-{name}" if "TOKEN" in name else SECRET for name in _env_refs(text)}
    parse_config(tomllib.loads(text), env)
