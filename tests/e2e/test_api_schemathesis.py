"""Property tests of the whole HTTP surface against its own OpenAPI document (schemathesis).

For each operation of /api/openapi.json, schemathesis generates requests from the
document (parameters, query strings and the replay routes' JSON bodies) and sends them,
with the admin token, to the real app on a real uvicorn over a real store of each kind:
no answer is a 5xx, and each answer's status, content type, headers and body are ones
the document declares. Bounded and derandomized: the same examples on every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from porteiro.http.app import create_app
from porteiro.http.openapi import openapi_document
from porteiro.runtime import Runtime
from tests.support.app import SOURCE, admin_headers, make_config
from tests.support.events import event_body
from tests.support.servers import live_server_thread
from tests.support.services import fresh_database
from tests.support.signing import standard_headers

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def _seed(url: str) -> None:
    """Rows for the generated requests to find: a pending event, a dead one (unparseable),
    one nested deeper than JSON encoders go, and a quarantined request."""
    deep = "[" * 400 + "]" * 400
    bodies = [
        event_body("evt_seed_1"),
        event_body("evt_seed_2", kind="payment.refunded", object_id="pay_2"),
        b'{"id": "evt_broken", "type": "payment.paid"',
        event_body("evt_deep").replace(
            b'"currency"', b'"nested": ' + deep.encode() + b', "currency"'
        ),
    ]
    with httpx.Client(base_url=url) as http:
        for index, body in enumerate(bodies):
            headers = standard_headers(body, f"msg_seed_{index}")
            assert (
                http.post(f"/webhooks/{SOURCE}", content=body, headers=headers).status_code == 200
            )
        forged = {**standard_headers(b"{}", "msg_forged"), "webhook-signature": "v1,AAAA"}
        assert http.post(f"/webhooks/{SOURCE}", content=b"{}", headers=forged).status_code == 401


# Built from the same function that serves /api/openapi.json (the fixture checks the
# served document is this one): schemathesis needs the operations at collection time,
# and its fixture-based loader does not run under pytest 9.
schema = schemathesis.openapi.from_dict(openapi_document())


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def base_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One server per store for every operation: a server and a database per operation
    cost more than the examples themselves."""
    if request.param == "sqlite":
        yield from _serve(f"sqlite:///{tmp_path_factory.mktemp('schemathesis') / 'porteiro.db'}")
        return
    with fresh_database() as url:
        yield from _serve(url)


def _serve(store_url: str) -> Iterator[str]:
    runtime = Runtime.build(make_config(store_url))
    with live_server_thread(create_app(runtime, migrate=True)) as url:
        served = httpx.get(f"{url}/api/openapi.json").json()
        assert served == openapi_document(served["info"]["version"])
        _seed(url)
        yield url


@schema.parametrize()
@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_as_its_document_says(
    base_url: str, case: schemathesis.Case[Any]
) -> None:
    case.call_and_validate(base_url=base_url, headers=admin_headers(), checks=CHECKS, timeout=10)
