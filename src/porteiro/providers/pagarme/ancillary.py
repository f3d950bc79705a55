"""Pagar.me's ancillary fields, read past a deviation with a warning (rule
`pagarme.ancillary_field` and the timestamp rules): a sub-object of another type, a code
sent as a number, a timestamp without its offset. Never a reason to dead-letter.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from porteiro.providers import fields
from porteiro.providers.pagarme.kinds import RULE_BAD_TIME, RULE_FIELD, RULE_NAIVE_TIME


def sub_object(
    data: Mapping[str, Any], key: str, where: str, warnings: list[dict[str, str]]
) -> Mapping[str, Any]:
    """An ancillary sub-object; absent or null is {}, another type {} with a warning."""
    value = data.get(key)
    if value is None or isinstance(value, dict):
        return value or {}
    detail = f"{where}.{key} is a JSON {json_type(value)}, not an object: ignored"
    warnings.append(fields.warning(RULE_FIELD, detail))
    return {}


def ancillary_str(
    obj: Mapping[str, Any],
    key: str,
    where: str,
    warnings: list[dict[str, str]],
    *,
    digits: bool = True,
) -> str | None:
    """A string that decides no money; a number is read as its digits when `digits`
    (a code), anything else is ignored, with a warning either way."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value or None
    if digits and isinstance(value, int) and not isinstance(value, bool):
        detail = f"{where}.{key} is a number, not a string: read as its digits"
        warnings.append(fields.warning(RULE_FIELD, detail))
        return str(value)
    detail = f"{where}.{key} is a JSON {json_type(value)}, not a string: ignored"
    warnings.append(fields.warning(RULE_FIELD, detail))
    return None


def json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def read_time(value: object, field: str, warnings: list[dict[str, str]]) -> datetime | None:
    """An ancillary timestamp. Pagar.me writes UTC, sometimes without the offset (its own
    docs' example: `2017-06-29T20:23:47`): read as UTC, with a warning; unreadable, None
    with a warning. Never a reason to dead-letter."""
    seen: list[dict[str, str]] = []
    moment = fields.lenient_time(value, field=field, rule=RULE_NAIVE_TIME, warnings=seen, naive=UTC)
    if moment is None:
        seen = [fields.warning(RULE_BAD_TIME, w["detail"]) for w in seen]
    warnings.extend(seen)
    return moment
