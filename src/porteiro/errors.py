"""One exception tree. The receiver maps each branch to one HTTP status.

And `error_text`, how a failure reads where it is stored for operators (an event's or an
outbox row's last_error).
"""

from __future__ import annotations

_ERROR_TEXT_LIMIT = 1000


def error_text(exc: BaseException) -> str:
    """`Type: message`, truncated: what operators see as last_error."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _ERROR_TEXT_LIMIT else text[: _ERROR_TEXT_LIMIT - 3] + "..."


class PorteiroError(Exception):
    """Root of every error Porteiro raises on purpose."""


class ConfigError(PorteiroError):
    """The configuration file or environment is invalid."""


class AuthenticationError(PorteiroError):
    """The delivery could not be authenticated: 401, nothing enters the event stream.

    `reason` is a short stable code kept in the quarantine table and metrics.
    """

    reason = "authentication_failed"


class MissingHeader(AuthenticationError):
    reason = "missing_header"


class MalformedHeader(AuthenticationError):
    reason = "malformed_header"


class SignatureMismatch(AuthenticationError):
    reason = "bad_signature"


class TimestampOutOfTolerance(AuthenticationError):
    reason = "stale_timestamp"


class UnknownKey(AuthenticationError):
    """The signature names a key (e.g. a JWKS `kid`) that we do not have."""

    reason = "unknown_key"


class ForbiddenPeer(AuthenticationError):
    """The client address or TLS certificate is not allowed for this source."""

    reason = "forbidden_peer"


class ParseError(PorteiroError):
    """An authenticated body could not be turned into events: stored and dead-lettered."""


class StoreUnavailable(PorteiroError):
    """The store cannot be reached or did not answer in time: 503 with Retry-After."""


class GatewayError(PorteiroError):
    """A call to a gateway's API failed; the worker retries it."""


class NonRetryable(PorteiroError):
    """Processing this event can never succeed as it stands (e.g. the PSP denies a Pix
    that the webhook announced): the worker dead-letters it at once, for review."""


class PaymentBusy(PorteiroError):
    """Another worker holds the event's payment: the event was handed back unattempted
    (its attempt not counted) to be claimed again shortly; not a failure."""
