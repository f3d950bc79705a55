"""`fields.load_object` takes orjson's fast path but must behave exactly like `json.loads`:
same values (types included), and a ParseError wherever `json` fails."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from porteiro.errors import ParseError
from porteiro.providers.fields import load_object


def same(a: Any, b: Any) -> bool:
    """Equal with types (1 is not 1.0) and NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or repr(a) == repr(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def expected(raw: bytes | str) -> Any:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return ParseError
    return value if isinstance(value, dict) else ParseError


def check(raw: bytes | str) -> None:
    want = expected(raw)
    if want is ParseError:
        with pytest.raises(ParseError):
            load_object(raw)
    else:
        assert same(load_object(raw), want), raw


@pytest.mark.parametrize(
    "raw",
    [
        b'{"amount": 123456789012345678901234567890}',  # orjson would give a float
        b'{"a": [-12345678901234567890]}',
        b'{"a":\n18446744073709551616}',
        b'{"a": -9223372036854775809}',
        b'{"a": 18446744073709551615, "b": -9223372036854775808}',
        b'{"e2e": "E0003816620201125123412345678901", "n": 1}',
        b'{"a": NaN, "b": Infinity, "c": -Infinity}',
        b'{"a": 1e309}',
        b'{"a": "\\ud800"}',
        b'\xef\xbb\xbf{"a": 1}',  # UTF-8 BOM: json decodes bytes with utf-8-sig
        '{"a": 1}'.encode("utf-16"),
        '{"a": 1}'.encode("utf-32"),
        b'{"a": 1, "a": 2}',
        b'{"a": -0.0, "b": -0, "c": 1.0, "d": 1e2, "e": 4.9e-324}',
        b' {"a": "caf\xc3\xa9"} ',
        b'{"a": "\xff"}',  # invalid UTF-8
        b'{"a": 1,}',
        b"[1, 2]",
        b"123",
        b"",
        b"null",
        b'{"a": 01}',
        b'{"a": "\x01"}',  # raw control character
        b"[" * 5000 + b"]" * 5000,
        '{"text": "str input, ação"}',
        '{"a": 123456789012345678901234567890}',
    ],
)
def test_edge_cases_behave_like_json(raw: bytes | str) -> None:
    check(raw)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), json_values, max_size=6), st.booleans(), st.booleans())
def test_any_object_reads_as_json_reads_it(
    document: dict[str, Any], ascii_only: bool, spaced: bool
) -> None:
    text = json.dumps(document, ensure_ascii=ascii_only, indent=1 if spaced else None)
    check(text.encode("utf-8", "surrogatepass"))


def test_a_caller_names_its_own_error_and_messages() -> None:
    class Refused(Exception):
        pass

    options: dict[str, Any] = {
        "error": Refused,
        "not_json": "not JSON ({kind})",
        "not_object": "not a JSON object",
    }
    with pytest.raises(Refused, match=r"^not JSON \(JSONDecodeError\)$"):
        load_object(b"{", **options)
    with pytest.raises(Refused, match=r"^not a JSON object$"):
        load_object(b"[1]", **options)
    with pytest.raises(ParseError, match=r"^body is not valid JSON: Expecting"):
        load_object(b"{")
