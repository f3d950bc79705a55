"""The OpenAPI document (porteiro/http/openapi.yaml) against the code it describes.

It ships in the package, is a valid OpenAPI 3.1 document, describes exactly the routes
the app registers, and its enumerations and limits are the code's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from starlette.routing import Route

from porteiro.config import Config, DestinationConfig
from porteiro.http.admin import MAX_ADMIN_BODY
from porteiro.http.app import create_app
from porteiro.http.openapi import openapi_document
from porteiro.http.params import MAX_LIMIT
from porteiro.model import EventStatus, Kind, PaymentState, Verdict
from porteiro.runtime import Runtime
from porteiro.sinks.operations import DestinationView
from porteiro.store.outbox import DestinationState, OutboxStatus

DOCUMENT = openapi_document()
SCHEMAS = DOCUMENT["components"]["schemas"]
PATHS = DOCUMENT["paths"]


def _values(enum: type[StrEnum]) -> list[str]:
    return [member.value for member in enum]


Keys = tuple[str | int, ...]


def _enums(node: Any, keys: Keys = ()) -> Iterator[tuple[Keys, list[Any]]]:
    """Every `enum` in the document, with the keys leading to the schema holding it."""
    if isinstance(node, dict):
        if isinstance(node.get("enum"), list):
            yield keys, node["enum"]
        for key, value in node.items():
            yield from _enums(value, (*keys, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _enums(value, (*keys, index))


def _at(keys: Keys) -> Any:
    node: Any = DOCUMENT
    for key in keys:
        node = node[key]
    return node


def test_the_document_ships_as_package_data() -> None:
    document = resources.files("porteiro.http").joinpath("openapi.yaml")
    assert document.is_file()
    assert document.read_text(encoding="utf-8").lstrip("# \n").startswith("The OpenAPI 3.1")


def test_it_is_a_valid_openapi_3_1_document() -> None:
    assert DOCUMENT["openapi"] == "3.1.0"
    schemathesis.openapi.from_dict(DOCUMENT).validate()  # raises on an invalid document


def test_the_version_is_the_callers_and_each_call_a_fresh_copy() -> None:
    first = openapi_document("1.2.3")
    assert first["info"]["version"] == "1.2.3"
    first["paths"].clear()
    assert openapi_document("1.2.3")["paths"] == PATHS


def test_every_reference_resolves() -> None:
    refs = re.findall(r"'#/components/schemas/(\w+)'", repr(DOCUMENT))
    assert refs
    assert set(refs) <= set(SCHEMAS)


@pytest.fixture
def app_routes(tmp_path: Path) -> set[tuple[str, str]]:
    """(path as OpenAPI spells it, method) of every route of the app but the console's
    HTML pages (/ui, docs/ui.md); nothing is opened."""
    runtime = Runtime.build(Config(store_url=f"sqlite:///{tmp_path / 'porteiro.db'}"))
    return {
        (re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path), method.lower())
        for route in create_app(runtime).routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"  # Starlette's implicit HEAD of each GET
        and not route.path.startswith("/ui")
    }


def test_the_documented_operations_are_the_apps_routes(app_routes: set[tuple[str, str]]) -> None:
    documented = {(path, method) for path, operations in PATHS.items() for method in operations}
    api = {(path, method) for path, method in app_routes if path.startswith("/api/")}
    assert len(api) >= 16
    assert api <= documented, "registered under /api but undocumented"
    assert documented == app_routes


_JSON = ("content", "application/json", "schema")
_OUTBOX = ("paths", "/api/destinations/{name}/outbox", "get")
_OUTBOX_ROW = (*_OUTBOX, "responses", "200", *_JSON, "properties", "items", "items")


def _property(schema: str, name: str) -> Keys:
    return ("components", "schemas", schema, "properties", name)


# Where each enumeration filled in from a Python enum sits, and its values. The others
# (in the destination and reconciliation report schemas) are checked further down.
PYTHON_ENUMS: dict[Keys, list[Any]] = {
    _property("Event", "kind"): _values(Kind),
    _property("Event", "status"): _values(EventStatus),
    _property("Transition", "from"): [*_values(PaymentState), None],
    _property("Transition", "to"): _values(PaymentState),
    _property("Transition", "verdict"): _values(Verdict),
    _property("Payment", "state"): _values(PaymentState),
    _property("ListedPayment", "state"): _values(PaymentState),
    ("paths", "/api/payments", "get", "parameters", 1, "schema"): _values(PaymentState),
    _property("DlqReplayFilter", "kind"): _values(Kind),
    _property("ReplayFilter", "kind"): _values(Kind),
    _property("ReplayFilter", "status"): _values(EventStatus),
    ("paths", "/api/events", "get", "parameters", 1, "schema"): _values(EventStatus),
    ("paths", "/api/events", "get", "parameters", 2, "schema"): _values(Kind),
    (*_OUTBOX, "parameters", 1, "schema"): _values(OutboxStatus),
    (*_OUTBOX_ROW, "properties", "status"): _values(OutboxStatus),
}


def _destination_schema() -> dict[str, Any]:
    keys = ("paths", "/api/destinations", "get", "responses", "200", *_JSON)
    schema: dict[str, Any] = _at((*keys, "properties", "items", "items"))
    return schema


def _report_schema() -> dict[str, Any]:
    schema: dict[str, Any] = _at(
        ("paths", "/api/reconciliation/reports/{id}", "get", "responses", "200", *_JSON)
    )
    return schema


def test_each_enumeration_lists_the_python_enums_values() -> None:
    found = dict(_enums(DOCUMENT))
    for keys, values in PYTHON_ENUMS.items():
        assert found.pop(keys) == values, keys
    for keys in found:  # the rest: a destination's or a report's, wherever either appears
        assert _at(keys[:-2]) in (_destination_schema(), _report_schema()), keys


def test_a_destinations_status_transport_and_backlog_are_the_codes() -> None:
    properties = _destination_schema()["properties"]
    http = DestinationConfig("shop", url="https://merchant.example/hooks")
    rabbit = DestinationConfig("shop", rabbitmq_url="amqp://broker.example/")
    states = [
        DestinationState("shop"),
        DestinationState("shop", paused=True),
        DestinationState("shop", disabled_reason="410 Gone"),
        DestinationState("shop", circuit_open_until=datetime.now(UTC)),
    ]
    assert {DestinationView(http, state, {}).status for state in states} == set(
        properties["status"]["enum"]
    )
    assert {http.transport, rabbit.transport} == set(properties["transport"]["enum"])
    assert list(properties["backlog"]["properties"]) == _values(OutboxStatus)


def _check_constraint(column: str) -> set[str]:
    """The values a migration's `CHECK (column IN (...))` lets the store hold."""
    migrations = resources.files("porteiro.store").joinpath("migrations")
    found: set[str] = set()
    for dialect in ("sqlite", "postgres"):
        for script in migrations.joinpath(dialect).iterdir():
            for listed in re.findall(rf"CHECK \({column} IN \(([^)]*)\)\)", script.read_text()):
                found |= set(re.findall(r"'(\w+)'", listed))
    return found


def test_a_reports_kinds_are_the_ones_the_store_holds() -> None:
    assert set(_report_schema()["properties"]["kind"]["enum"]) == _check_constraint("kind")


def test_the_event_schema_requires_every_field() -> None:
    event = SCHEMAS["Event"]
    assert event["required"] == list(event["properties"])


def test_the_documented_limits_are_the_codes() -> None:
    limits = {
        parameter["schema"]["maximum"]
        for operations in PATHS.values()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "limit"
    }
    assert limits == {MAX_LIMIT}
    too_large = PATHS["/api/replay"]["post"]["responses"]["413"]["description"]
    assert f"({MAX_ADMIN_BODY // 2**20} MiB)" in too_large
    assert MAX_ADMIN_BODY % 2**20 == 0
