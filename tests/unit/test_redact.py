"""porteiro.http.redact: which values go, what stays exactly as received."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qsl

import pytest

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.http.redact import (
    CREDENTIAL_HEADERS,
    CREDENTIAL_PARAMS,
    REDACTED,
    Redaction,
    redact_headers,
    redact_query,
    redact_value,
    redaction_for,
)
from porteiro.model import InboundRequest

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def request(query: str, headers: list[tuple[str, str]]) -> InboundRequest:
    return InboundRequest("src", "POST", "/webhooks/src", query, headers, b'{"a": 1}', None, NOW)


@pytest.mark.parametrize(
    ("name", "value", "stored"),
    [
        ("authorization", "Basic d3M6cGFzcw==", "Basic [redacted]"),
        ("authorization", "bearer tok_123", "bearer [redacted]"),
        ("proxy-authorization", "Digest username=u, response=abc", "Digest [redacted]"),
        ("authorization", "tok_without_scheme", REDACTED),
        # A first word that is no registered scheme may be part of the secret itself.
        ("authorization", "s3cr3t-part two", REDACTED),
        ("cookie", "session=abc; theme=dark", REDACTED),
        ("cookie", "Basic looks-like-a-scheme", REDACTED),
        ("authorization", "", ""),
        ("authorization", "  ", "  "),
        ("x-api-token", "Bearer abc", REDACTED),
    ],
)
def test_a_secret_header_value_is_replaced(name: str, value: str, stored: str) -> None:
    assert redact_value(name, value) == stored


def test_header_names_order_and_repeats_stay_and_signatures_are_kept() -> None:
    headers = [
        ("host", "porteiro.example"),
        ("authorization", "Basic abc"),
        ("stripe-signature", "t=1,v1=deadbeef"),
        ("cookie", "a=1"),
        ("authorization", "Bearer again"),
        ("webhook-signature", "v1,c2ln"),
        ("x-hub-signature", "sha256=abcd"),
    ]
    assert redact_headers(headers, CREDENTIAL_HEADERS) == [
        ("host", "porteiro.example"),
        ("authorization", "Basic [redacted]"),
        ("stripe-signature", "t=1,v1=deadbeef"),
        ("cookie", REDACTED),
        ("authorization", "Bearer [redacted]"),
        ("webhook-signature", "v1,c2ln"),
        ("x-hub-signature", "sha256=abcd"),
    ]


def test_the_receiver_lowers_header_names_so_any_case_is_redacted() -> None:
    # The receiver lower-cases names before anything reads them (InboundRequest's
    # contract); redact_headers relies on it and compares them as given.
    source = SourceConfig(name="s", provider="standard", options={"secret_headers": ["X-Key"]})
    headers = [("authorization", "Basic abc"), ("x-key", "k"), ("x-other", "o")]
    assert redact_headers(headers, redaction_for(source).headers) == [
        ("authorization", "Basic [redacted]"),
        ("x-key", REDACTED),
        ("x-other", "o"),
    ]


@pytest.mark.parametrize(
    ("query", "stored"),
    [
        ("hmac=tok3n&ignorar=/pix", "hmac=[redacted]&ignorar=/pix"),
        ("hmac=tok3n/pix", "hmac=[redacted]"),
        ("a=1&HMAC=x&b=%20two&&c", "a=1&HMAC=[redacted]&b=%20two&&c"),
        ("hm%61c=tok3n&z=1", "hm%61c=[redacted]&z=1"),  # parse_qsl decodes names too
        ("hmac=a&hmac=b", "hmac=[redacted]&hmac=[redacted]"),
        ("hmac=", "hmac="),
        ("hmacx=1&xhmac=2&x=hmac=3", "hmacx=1&xhmac=2&x=hmac=3"),
        ("data.id=123&type=payment", "data.id=123&type=payment"),
        ("", ""),
    ],
)
def test_only_a_secret_parameters_value_changes_in_the_query(query: str, stored: str) -> None:
    assert redact_query(query, CREDENTIAL_PARAMS) == stored


def test_a_redacted_query_still_parses_to_the_other_parameters() -> None:
    query = redact_query("data.id=9&hmac=tok&type=payment", CREDENTIAL_PARAMS)
    assert dict(parse_qsl(query)) == {"data.id": "9", "hmac": REDACTED, "type": "payment"}


def test_a_request_without_credentials_is_returned_as_it_is() -> None:
    plain = request("data.id=1", [("content-type", "application/json")])
    assert Redaction().request(plain) is plain


def test_the_copy_changes_headers_and_query_only() -> None:
    original = request("hmac=tok&x=1", [("authorization", "Basic abc"), ("a", "b")])
    copy = Redaction().request(original)
    assert copy.query == "hmac=[redacted]&x=1"
    assert list(copy.headers) == [("authorization", "Basic [redacted]"), ("a", "b")]
    assert (copy.body, copy.source, copy.path, copy.received_at) == (
        original.body,
        original.source,
        original.path,
        original.received_at,
    )
    assert original.query == "hmac=tok&x=1"  # the verified request is not touched


def test_a_source_adds_its_own_secret_headers_and_params() -> None:
    source = SourceConfig(
        name="std",
        provider="standard",
        options={"secret_headers": ["X-Api-Token"], "secret_params": [" Api_Key "]},
    )
    redaction = redaction_for(source)
    assert redaction.headers == CREDENTIAL_HEADERS | {"x-api-token"}
    assert redaction.params == CREDENTIAL_PARAMS | {"api_key"}
    copy = redaction.request(request("api_key=k&a=1", [("x-api-token", "t"), ("cookie", "c")]))
    assert copy.query == "api_key=[redacted]&a=1"
    assert list(copy.headers) == [("x-api-token", REDACTED), ("cookie", REDACTED)]


def test_defaults_without_options() -> None:
    assert redaction_for(SourceConfig(name="s", provider="stripe")) == Redaction()


@pytest.mark.parametrize("bad", ["X-Api-Token", [""], ["ok", 3], [" "]])
def test_a_malformed_secret_list_is_a_config_error(bad: object) -> None:
    source = SourceConfig(name="s", provider="standard", options={"secret_headers": bad})
    with pytest.raises(ConfigError, match=r"\[sources.s\] secret_headers"):
        redaction_for(source)
