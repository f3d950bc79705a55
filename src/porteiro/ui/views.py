"""Raw deliveries as the event page shows them (pure): the body as received (text, or
base64 when it is not UTF-8, as the API's jsonview does) and, when it is JSON, indented.
Credentials in headers were redacted before the delivery was stored (http/redact.py)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from porteiro.http.jsonview import body_to_json

# A body is pretty-printed up to this size; a larger one is shown as received only.
PRETTY_MAX_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class BodyView:
    raw: str  # as received (base64 when `base64`)
    base64: bool
    size: int
    pretty: str | None  # indented JSON, when the body is JSON


def pretty_body(body: bytes) -> BodyView:
    shown = body_to_json(body)
    pretty = None
    if len(body) <= PRETTY_MAX_BYTES:
        try:
            pretty = orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
        except (orjson.JSONDecodeError, TypeError):
            pretty = None
    return BodyView(shown["body"], shown["body_base64"], shown["body_size"], pretty)
