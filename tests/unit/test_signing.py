"""The shared signature core: constant-time matching, timestamps, header parsing."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from porteiro.errors import (
    AuthenticationError,
    MalformedHeader,
    SignatureMismatch,
    TimestampOutOfTolerance,
)
from porteiro.providers import signing

NOW = datetime(2021, 2, 26, 1, 2, 10, tzinfo=UTC)  # unix 1614301330


def test_hmac_digest_matches_the_standard_library() -> None:
    for name in ("sha1", "sha256", "sha512"):
        expected = hmac.new(b"key", b"message", getattr(hashlib, name)).digest()
        assert signing.hmac_digest(b"key", b"message", name) == expected


@given(st.binary(max_size=200), st.lists(st.binary(max_size=2000), min_size=1, max_size=5))
def test_hmac_digest_of_many_messages_under_one_key_stays_exact(
    key: bytes, messages: list[bytes]
) -> None:
    # The key's prepared HMAC is reused: no message may leak into the next digest.
    for message in messages:
        for name in ("sha1", "sha256", "sha512"):
            assert signing.hmac_digest(key, message, name) == hmac.digest(key, message, name)


def test_any_match_finds_one_among_several() -> None:
    assert signing.any_match([b"a", b"b"], [b"x", b"b"])
    assert not signing.any_match([b"a", b"b"], [b"x", b"y"])
    assert not signing.any_match([b"a"], [])
    assert not signing.any_match([], [b"a"])


def test_verify_hmac_accepts_any_secret_and_any_signature() -> None:
    good = signing.hmac_digest(b"new", b"body")
    signing.verify_hmac(b"body", [b"old", b"new"], [b"\x00" * 32, good])


def test_verify_hmac_refuses_a_wrong_secret() -> None:
    sig = signing.hmac_digest(b"other", b"body")
    with pytest.raises(SignatureMismatch):
        signing.verify_hmac(b"body", [b"old", b"new"], [sig])


def test_verify_hmac_refuses_a_tampered_message() -> None:
    sig = signing.hmac_digest(b"key", b"body")
    with pytest.raises(SignatureMismatch):
        signing.verify_hmac(b"body!", [b"key"], [sig])


def test_verify_hmac_uses_the_named_algorithm() -> None:
    sha1 = signing.hmac_digest(b"key", b"body", "sha1")
    signing.verify_hmac(b"body", [b"key"], [sha1], algorithm="sha1")
    with pytest.raises(SignatureMismatch):
        signing.verify_hmac(b"body", [b"key"], [sha1], algorithm="sha256")


@pytest.mark.parametrize(("keys", "signatures"), [([], [b"x"]), ([b"k"], [])])
def test_verify_hmac_needs_keys_and_signatures(keys: list[bytes], signatures: list[bytes]) -> None:
    with pytest.raises(SignatureMismatch):
        signing.verify_hmac(b"body", keys, signatures)


def test_parse_timestamp_reads_integer_seconds() -> None:
    assert signing.parse_timestamp("1614265330") == 1614265330
    assert signing.parse_timestamp(" 1614265330 ") == 1614265330


@pytest.mark.parametrize(
    "value", ["", "abc", "1614265330.5", "-1", "+5", "1_000", "1e9", "١٢٣", "9" * 13]
)
def test_parse_timestamp_refuses_non_integers(value: str) -> None:
    with pytest.raises(MalformedHeader):
        signing.parse_timestamp(value)


def test_check_timestamp_accepts_the_edges_of_the_window() -> None:
    now = int(NOW.timestamp())
    signing.check_timestamp(now, NOW, 300)
    signing.check_timestamp(now - 300, NOW, 300)
    signing.check_timestamp(now + 300, NOW, 300)


@pytest.mark.parametrize("offset", [-301, 301, -86400, 86400])
def test_check_timestamp_refuses_both_directions(offset: int) -> None:
    with pytest.raises(TimestampOutOfTolerance):
        signing.check_timestamp(int(NOW.timestamp()) + offset, NOW, 300)


def test_check_timestamp_uses_the_given_tolerance() -> None:
    stamp = int(NOW.timestamp()) - 10
    signing.check_timestamp(stamp, NOW, 10)
    with pytest.raises(TimestampOutOfTolerance):
        signing.check_timestamp(stamp, NOW, 9)


def test_check_timestamp_reads_naive_now_as_utc() -> None:
    naive = NOW.replace(tzinfo=None)
    signing.check_timestamp(int(NOW.timestamp()), naive, 1)
    aware_elsewhere = NOW.astimezone(
        datetime.now().astimezone().tzinfo  # the same instant in the local zone
    )
    signing.check_timestamp(int(NOW.timestamp()), aware_elsewhere, 1)
    with pytest.raises(TimestampOutOfTolerance):
        signing.check_timestamp(int(NOW.timestamp()), naive + timedelta(seconds=5), 1)


def test_parse_pairs_comma_separated_keeps_duplicates_in_order() -> None:
    assert signing.parse_pairs("t=1,v1=aa,v1=bb,v0=cc") == [
        ("t", "1"),
        ("v1", "aa"),
        ("v1", "bb"),
        ("v0", "cc"),
    ]


def test_parse_pairs_semicolons_with_spaces_and_padding() -> None:
    value = " alg=RS256 ;  kid = k1; signature=YWJj== ; "
    assert signing.parse_pairs(value, separator=";") == [
        ("alg", "RS256"),
        ("kid", "k1"),
        ("signature", "YWJj=="),
    ]


def test_parse_pairs_lower_cases_keys() -> None:
    assert signing.parse_pairs("ALG=RS256", separator=";") == [("alg", "RS256")]


@pytest.mark.parametrize("value", ["", " , ", "novalue", "=v", "a=1,b", " ; "])
def test_parse_pairs_refuses_items_without_key_and_value(value: str) -> None:
    with pytest.raises(MalformedHeader):
        signing.parse_pairs(value, separator=";" if ";" in value else ",")


def test_parse_unique_pairs_refuses_a_repeated_key() -> None:
    assert signing.parse_unique_pairs("a=1; b=2", separator=";") == {"a": "1", "b": "2"}
    with pytest.raises(MalformedHeader):
        signing.parse_unique_pairs("kid=a; kid=b", separator=";")


@pytest.mark.parametrize("data", [b"", b"a", b"ab", b"abc", bytes(range(256))])
def test_decode_base64_with_and_without_padding(data: bytes) -> None:
    padded = base64.b64encode(data).decode()
    assert signing.decode_base64(padded) == data
    assert signing.decode_base64(padded.rstrip("=")) == data
    url = base64.urlsafe_b64encode(data).decode()
    assert signing.decode_base64(url, urlsafe=True) == data
    assert signing.decode_base64(url.rstrip("="), urlsafe=True) == data
    assert signing.encode_base64url(data) == url.rstrip("=")
    assert signing.base64_text(data) == padded


@pytest.mark.parametrize("value", ["!!!!", "abcde", "ab=c", "a", "é" * 4, "YW=Jj", "-_-_"])
def test_decode_base64_refuses_garbage(value: str) -> None:
    with pytest.raises(MalformedHeader):
        signing.decode_base64(value)


def test_decode_hex() -> None:
    assert signing.decode_hex("00ffAB") == b"\x00\xff\xab"
    for bad in ("0", "zz", "0 0", "é0", "0x00"):
        with pytest.raises(MalformedHeader):
            signing.decode_hex(bad)


def accepts_what_the_regex_matches(
    parse: Callable[[str], object], pattern: str, text: str, expected: Callable[[str], object]
) -> None:
    """`parse` takes `text` exactly when `pattern` fully matches it stripped, and then
    returns `expected(stripped text)`; else MalformedHeader."""
    strict = re.fullmatch(pattern, text.strip())
    try:
        value = parse(text)
    except MalformedHeader:
        assert strict is None
    else:
        assert strict is not None
        assert value == expected(text.strip())


@given(text=st.text(alphabet=" \t\n0123456789abcdefABCDEFx\u00e9\u0663", max_size=12))
def test_decode_hex_takes_exactly_pairs_of_hex_digits(text: str) -> None:
    accepts_what_the_regex_matches(signing.decode_hex, r"(?:[0-9a-fA-F]{2})*", text, bytes.fromhex)


@given(text=st.text(alphabet=" \t0123456789+-._e\u0661\u00b2", max_size=15))
def test_parse_timestamp_takes_exactly_one_to_twelve_ascii_digits(text: str) -> None:
    accepts_what_the_regex_matches(signing.parse_timestamp, r"[0-9]{1,12}", text, int)


def test_header_bytes_recovers_the_wire_bytes() -> None:
    wire = "msg_é€".encode()
    assert signing.header_bytes(wire.decode("latin-1")) == wire  # as the receiver decodes
    assert signing.header_bytes("msg_€") == "msg_€".encode()  # not latin-1: UTF-8
    with pytest.raises(MalformedHeader):
        signing.header_bytes("msg_\ud800")


_PARSERS: list[Callable[[str], object]] = [
    signing.parse_timestamp,
    signing.parse_pairs,
    lambda text: signing.parse_pairs(text, separator=";"),
    lambda text: signing.parse_unique_pairs(text, separator=";"),
    signing.decode_base64,
    lambda text: signing.decode_base64(text, urlsafe=True),
    signing.decode_hex,
    signing.header_bytes,
]


@given(text=st.text(), which=st.integers(min_value=0, max_value=len(_PARSERS) - 1))
def test_parsers_raise_only_authentication_errors(text: str, which: int) -> None:
    with contextlib.suppress(AuthenticationError):
        _PARSERS[which](text)


@given(text=st.text(alphabet="=,; abcv1tkid0-_+/AZ", max_size=40))
def test_pair_parsers_on_header_like_text(text: str) -> None:
    for separator in (",", ";"):
        try:
            pairs = signing.parse_pairs(text, separator=separator)
        except MalformedHeader:
            continue
        assert pairs and all(key and key == key.strip() for key, _ in pairs)
