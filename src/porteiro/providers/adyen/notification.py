"""Adyen's notification envelope: the JSON object and its NotificationRequestItems, read
the same way before the items are verified and when they are parsed. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from porteiro.errors import PorteiroError
from porteiro.providers import fields


class Unreadable(PorteiroError):
    """The body is not a JSON notification: unauthenticatable, or unparseable."""


def load_notification(raw: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The notification object and its items (the dicts inside it, not copies)."""
    # Unreadable, not ParseError: verify makes it a 401, parse a dead letter.
    document = fields.load_object(
        raw, error=Unreadable, not_json="not JSON ({kind})", not_object="not a JSON object"
    )
    wrappers = document.get("notificationItems")
    if isinstance(wrappers, dict):  # one item sent as an object: read as a list of one
        wrappers = [wrappers]
    if not isinstance(wrappers, list) or not wrappers:
        raise Unreadable("notificationItems must be a non-empty list")
    items = []
    for index, wrapper in enumerate(wrappers):
        item = wrapper.get("NotificationRequestItem") if isinstance(wrapper, dict) else None
        if not isinstance(item, dict):
            raise Unreadable(f"notificationItems[{index}] has no NotificationRequestItem object")
        items.append(item)
    return document, items
