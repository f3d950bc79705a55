"""Reading one key or table of the configuration file, refusing what is wrong with a
message that names it by its path (`[server] port`): the pieces every section's loader
in porteiro.config.load is made of (pure)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from porteiro.config import _number
from porteiro.errors import ConfigError


def keys_of(settings: type, *, besides: Iterable[str] = ()) -> frozenset[str]:
    """The keys of a table read into the dataclass `settings`: its fields' names, which
    the loaders below read one by one."""
    return frozenset(item.name for item in fields(settings)) - set(besides)


def refuse_unknown_keys(where: str, table: Mapping[str, Any], known: Iterable[str]) -> None:
    """A ConfigError naming every key of `table` (the table at `where`; "" for the top
    level) that is not in `known`, by its path, with the closest known key when one is
    close: a typo (`[server] prot`) stops start-up instead of being silently ignored."""
    choices = sorted(known)
    unknown = [key for key in table if key not in choices]
    if not unknown:
        return
    problems, far = [], False
    for key in unknown:
        close = difflib.get_close_matches(key, choices, n=1)
        far = far or not close
        hint = f", did you mean `{close[0]}`?" if close else ""
        problems.append(f"{key_path(where, key, table[key])}: unknown key{hint}")
    # Without a close match, the whole list is the most useful hint.
    known_list = f" (known: {', '.join(choices)})" if far else ""
    raise ConfigError("; ".join(problems) + known_list)


def key_path(where: str, key: str, value: Any) -> str:
    """`[server] prot`; at the top level, the key as the file spells it (`[sever]`)."""
    if where:
        return f"{where} {key}"
    return f"[{key}]" if isinstance(value, dict) else key


def subtable(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{key}] must be a table")
    return value


def opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{key} must be a string")
    return value


def whole(
    table: Mapping[str, Any],
    where: str,
    key: str,
    default: int,
    low: int,
    high: int | None = None,
) -> int:
    """The table's whole number `key` (or `default`) within `low`..`high`."""
    return int(_number(where, key, table.get(key, default), low, high, whole=True))


def positive(where: str, key: str, value: Any) -> float:
    return _number(where, key, value, above=0)
