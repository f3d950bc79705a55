"""jsontext.loads reads every JSON text as `json.loads` does, orjson or not."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from porteiro import jsontext
from porteiro.model import Kind

VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def same(a: object, b: object) -> bool:
    """Equal, with every number of the same type (1 and 1.0 are equal in Python)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@given(VALUES, st.sampled_from([None, 0, 2]))
def test_loads_agrees_with_json(value: object, indent: int | None) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    assert same(jsontext.loads(text.encode()), json.loads(text))
    assert same(jsontext.loads(text), json.loads(text))


def test_integers_beyond_64_bits_stay_integers() -> None:
    for text in (
        b"[18446744073709551616]",
        b'{"a": -99999999999999999999}',
        b"[1, 10000000000000000000000]",
    ):
        assert same(jsontext.loads(text), json.loads(text))
    # orjson alone reads them as floats: the guard is what keeps them exact.
    assert jsontext.fast_load(b"[18446744073709551616]") is jsontext.UNPARSED


def test_what_orjson_rejects_json_decides() -> None:
    assert math.isnan(jsontext.loads(b"[NaN]")[0])
    assert jsontext.loads(b"[1e400]") == [math.inf]


def test_dumps_writes_what_orjson_refuses() -> None:
    moment = datetime(2026, 11, 30, 16, 3, 41, 120, tzinfo=UTC)
    row = {"at": moment, "kind": Kind.PAYMENT_PAID, "data": {"big": 10**30, "text": "ação"}}
    with pytest.raises(TypeError):
        orjson.dumps(row)  # Integer exceeds 64-bit range
    written = jsontext.dumps(row)
    assert json.loads(written) == {
        "at": orjson.dumps(moment).decode().strip('"'),
        "kind": "payment.paid",
        "data": {"big": 10**30, "text": "ação"},
    }
    small = {**row, "data": {"n": 1}}
    assert jsontext.dumps(small) == orjson.dumps(small)
    with pytest.raises(TypeError):
        jsontext.dumps({"big": 10**30, "other": object()})
