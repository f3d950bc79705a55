"""Credentials out of what is stored: a request's copy with its secrets' values replaced.

The receiver verifies the request as received, then hands the store this copy, for
accepted deliveries and quarantined (401) requests alike: an operator reading a delivery
(`/api/events/{id}`, `porteiro events show`) or the quarantine must never read a
credential back. What counts as one:

- the headers `Authorization`, `Proxy-Authorization` (a registered scheme word such as
  `Basic` or `Bearer` is kept: it says which kind of credential came) and `Cookie`;
- the query parameter `hmac` (Efí's Pix webhook token travels as `?hmac=...`);
- any header a source lists in `secret_headers`, any parameter in `secret_params`.

Signature headers (`Stripe-Signature`, `webhook-signature`, `x-signature`,
`X-Hub-Signature`, `X-Adyen-...`) are kept: each is a MAC over this one body, useless
for forging another, and what lets an operator re-check a disputed delivery later.

Only values change: header names, their order and repeats, the query's other parameters
and its encoding stay exactly as received, and the body is never touched (signatures are
over its bytes). Nothing a `parse` reads is redacted, so `porteiro replay` re-parses a
stored delivery as the receiver did. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote_plus

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.model import InboundRequest

REDACTED = "[redacted]"
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
CREDENTIAL_PARAMS = frozenset({"hmac"})
# Auth headers whose scheme word is kept ("Basic [redacted]"). Only registered names:
# a first word that is anything else may itself be (part of) the secret.
_SCHEME_HEADERS = frozenset({"authorization", "proxy-authorization"})
_SCHEMES = frozenset({"basic", "bearer", "digest", "token", "negotiate", "ntlm", "hoba"})


@dataclass(frozen=True, slots=True)
class Redaction:
    """The header names (lower case) and query parameter names (lower case) to redact."""

    headers: frozenset[str] = CREDENTIAL_HEADERS
    params: frozenset[str] = CREDENTIAL_PARAMS

    def request(self, request: InboundRequest) -> InboundRequest:
        """`request` with its credentials' values redacted; itself when it carries none
        (the common case on the hot path costs no copy)."""
        headers = redact_headers(request.headers, self.headers)
        query = redact_query(request.query, self.params)
        if headers is request.headers and query is request.query:
            return request
        return replace(request, headers=headers, query=query)


def redaction_for(source: SourceConfig) -> Redaction:
    """The defaults plus the source's `secret_headers` / `secret_params` (ConfigError
    when either is not a list of non-empty strings)."""
    where = f"[sources.{source.name}]"
    extra_headers = _names(source.options, "secret_headers", where)
    extra_params = _names(source.options, "secret_params", where)
    return Redaction(CREDENTIAL_HEADERS | extra_headers, CREDENTIAL_PARAMS | extra_params)


def redactions(sources: Mapping[str, SourceConfig]) -> dict[str, Redaction]:
    """One Redaction per configured source."""
    return {name: redaction_for(source) for name, source in sources.items()}


def redact_headers(
    headers: Sequence[tuple[str, str]], secret: frozenset[str]
) -> Sequence[tuple[str, str]]:
    """`headers` with every secret one's value redacted; the same object when none is
    there. Names are compared as given: InboundRequest holds them lower-cased (the
    receiver lowers them), so no lower() per header on the hot path."""
    for name, _ in headers:
        if name in secret:
            break
    else:
        return headers
    return [
        (name, redact_value(name, value)) if name in secret else (name, value)
        for name, value in headers
    ]


def redact_value(name: str, value: str) -> str:
    """One secret header's stored value: empty stays empty (nothing to hide), an auth
    header keeps a registered scheme word, anything else is REDACTED."""
    stripped = value.strip(" \t")
    if not stripped:
        return value
    if name.lower() in _SCHEME_HEADERS:
        scheme, space, _ = stripped.partition(" ")
        if space and scheme.lower() in _SCHEMES:
            return f"{scheme} {REDACTED}"
    return REDACTED


def redact_query(query: str, secret: frozenset[str]) -> str:
    """The raw query with every secret parameter's value redacted, the rest byte for
    byte. Pairs are split on `&` and names percent-decoded, as `parse_qsl` (what the
    adapters read the query with) does, so `hm%61c=...` is redacted too. The same string
    when nothing is redacted."""
    if not query or "=" not in query:
        return query
    pieces = query.split("&")
    changed = False
    for index, piece in enumerate(pieces):
        name, equals, value = piece.partition("=")
        if equals and value and unquote_plus(name).lower() in secret:
            pieces[index] = f"{name}={REDACTED}"
            changed = True
    return "&".join(pieces) if changed else query


def _names(options: Mapping[str, Any], key: str, where: str) -> frozenset[str]:
    value = options.get(key, [])
    if not isinstance(value, list) or not all(
        isinstance(item, str) and item.strip() for item in value
    ):
        raise ConfigError(f"{where} {key} must be a list of non-empty strings")
    return frozenset(item.strip().lower() for item in value)
