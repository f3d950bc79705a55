"""Stripe's v2 thin notifications (`object: "v2.core.event"`): which payment object a
`v1.*` notification is about and where to GET it; the event itself carries no state and
is enriched later (api.py). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from porteiro.errors import ParseError
from porteiro.model import Kind, ParsedEvent
from porteiro.providers import fields

# Thin v2 notifications: the v1 objects a `v1.*` event may be about that are payments (or
# belong to one), and where the API serves each (the SDKs' `related_object.url`).
THIN_PREFIX = "v1."
RELATED_PATHS: Mapping[str, str] = {
    "payment_intent": "/v1/payment_intents/",
    "charge": "/v1/charges/",
    "refund": "/v1/refunds/",
    "dispute": "/v1/disputes/",
    "checkout.session": "/v1/checkout/sessions/",
}
_PAYMENT_TYPES = ("payment_intent.", "charge.", "refund.", "checkout.session.")
# The object a `v1.*` payment type is about, when `related_object.type` is absent.
_RELATED_BY_TYPE = (
    ("charge.dispute.", "dispute"),
    ("charge.refund.", "refund"),
    ("payment_intent.", "payment_intent"),
    ("charge.", "charge"),
    ("refund.", "refund"),
    ("checkout.session.", "checkout.session"),
)
_SAFE_PATH = re.compile(r"/v1/[A-Za-z0-9_./-]+")
# Warning rules (metric labels of porteiro_event_warnings_total): see webhook.py.
RULE_CREATED = "stripe.created"
RULE_RELATED = "stripe.related_object"


def thin_event(body: Mapping[str, Any]) -> ParsedEvent:
    """A v2 thin notification: `{id, object: "v2.core.event", type, created (RFC 3339),
    livemode, context?, related_object: {id, type, url}?}`. About a payment object (a
    `v1.*` type whose related object is one of RELATED_PATHS): thin, enriched later.
    Anything else: kind other with no payment object (stored, ignored)."""
    event_id = fields.req_str(body, "id")
    event_type = fields.req_str(body, "type")
    warnings: list[dict[str, str]] = []
    occurred = fields.lenient_time(
        body.get("created"), field="created", rule=RULE_CREATED, warnings=warnings
    )
    related = body.get("related_object")
    snapshot_type = event_type.removeprefix(THIN_PREFIX)
    related_type = _related_type(snapshot_type, related, warnings)
    payment_type = event_type.startswith(THIN_PREFIX) and snapshot_type.startswith(_PAYMENT_TYPES)
    if payment_type and not isinstance(related, dict):
        raise ParseError(f"{event_type}: related_object must name the payment object")
    object_id: str | None = None
    if (
        payment_type
        and isinstance(related, dict)
        and related_type is not None
        and related_type in RELATED_PATHS
    ):
        object_id = fields.req_str(related, "id", where="related_object")
        context = related_context(body)
        data: dict[str, Any] = {
            "notification": "thin",
            "snapshot_type": snapshot_type,
            "related_type": related_type,
            "related_path": _related_path(related_type, object_id, related, warnings),
            **({"context": context} if context else {}),
        }
    else:
        what = related_type[:60] if related_type else "no related object"
        data = {"notification": "thin", "ignored": f"v2 event not about a payment ({what})"}
    event = ParsedEvent(
        dedup_key=event_id,
        kind=Kind.OTHER,
        type=event_type,
        object_id=object_id,
        occurred_at=occurred,
        # Only a notification about a payment object is enriched; the rest is stored as is.
        thin=object_id is not None,
        data=data,
    )
    return fields.with_warnings(event, warnings)


def _related_type(
    snapshot_type: str, related: object, warnings: list[dict[str, str]]
) -> str | None:
    """`related_object.type`; when absent, the object a `v1.*` payment type is about."""
    if not isinstance(related, dict):
        return None
    declared = related.get("type")
    if isinstance(declared, str) and declared:
        return declared
    for prefix, name in _RELATED_BY_TYPE:
        if snapshot_type.startswith(prefix):
            warnings.append(fields.warning(RULE_RELATED, f"related_object.type absent: {name}"))
            return name
    return None


def related_context(body: Mapping[str, Any]) -> str | None:
    """The notification's `context` (a connected account, `acct_...`), sent back as
    `Stripe-Context` when fetching; anything but a string is no context."""
    context = body.get("context")
    return context if isinstance(context, str) and context else None


def _related_path(
    related_type: str, related_id: str, related: Mapping[str, Any], warnings: list[dict[str, str]]
) -> str:
    """Where to GET the related object: its `url` when it is a plain path under the one
    Stripe serves that type at, on the configured API (never another host or object),
    else that path built from the id, with a warning."""
    url = related.get("url")
    prefix = RELATED_PATHS[related_type]
    own = prefix + quote(related_id, safe="")
    if (
        isinstance(url, str)
        and url.startswith(prefix)
        and _SAFE_PATH.fullmatch(url)
        and ".." not in url
        and "//" not in url
    ):
        return url
    detail = "absent" if url is None else f"not a path under {prefix}"
    warnings.append(fields.warning(RULE_RELATED, f"related_object.url {detail}: GET {own}"))
    return own
