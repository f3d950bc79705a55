"""The OpenAPI 3.1 document of every HTTP route (openapi.yaml), served at /api/openapi.json.

The document is a data file, read and reviewed as a document. This module loads it once
and fills in what the code owns, so the two cannot drift: the package version, and each
`!enum Name` from the Python enum of that name. The document needs no token: it
describes the surface, it reveals no data.
"""

from __future__ import annotations

import copy
import functools
from enum import StrEnum
from importlib import resources
from typing import Any

import yaml

from porteiro.model import EventStatus, Kind, PaymentState, Verdict
from porteiro.store.outbox import OutboxStatus

# The enums the document may name in `!enum`: the values the API reads and writes.
ENUMS: dict[str, type[StrEnum]] = {
    enum.__name__: enum for enum in (EventStatus, Kind, OutboxStatus, PaymentState, Verdict)
}


class _Loader(yaml.SafeLoader):
    """Safe YAML (no Python objects) plus the `!enum` tag."""


def _enum_values(loader: yaml.SafeLoader, node: yaml.Node) -> list[str | None]:
    """`!enum Name`: the values of ENUMS[Name], in order; `!enum [Name, null]`: then null."""
    if isinstance(node, yaml.ScalarNode):
        names: list[Any] = [loader.construct_scalar(node)]
    elif isinstance(node, yaml.SequenceNode):
        names = loader.construct_sequence(node)
    else:
        raise yaml.constructor.ConstructorError(None, None, "!enum takes a name", node.start_mark)
    values: list[str | None] = []
    for name in names:
        if name is None:
            values.append(None)
        elif name in ENUMS:
            values.extend(member.value for member in ENUMS[name])
        else:
            raise yaml.constructor.ConstructorError(
                None, None, f"!enum {name!r}: not one of {sorted(ENUMS)}", node.start_mark
            )
    return values


_Loader.add_constructor("!enum", _enum_values)


@functools.cache
def _parsed() -> dict[str, Any]:
    text = resources.files("porteiro.http").joinpath("openapi.yaml").read_text(encoding="utf-8")
    document: dict[str, Any] = yaml.load(text, Loader=_Loader)
    return document


def openapi_document(version: str = "0.1.0") -> dict[str, Any]:
    """The document for this package `version`: a fresh copy the caller may change."""
    document = copy.deepcopy(_parsed())
    document["info"]["version"] = version
    return document
