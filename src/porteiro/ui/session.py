"""The console's login session and its CSRF tokens (pure: no I/O, no clock of its own).

A session is a signed cookie, not a server-side row: `name.expiry.nonce.signature`,
signed with a key derived from the admin token the operator logged in with. So:

- any number of `serve` processes accept the same cookie with no shared secret to
  configure or store (every process has the tokens already);
- rotating or removing a token ends every session opened with it, at once;
- the cookie names the token (for the audit trail), never holds it.

The CSRF token of a session is a second MAC over the same nonce: a form posted from
elsewhere cannot know it (SameSite=Strict already keeps the cookie off cross-site
requests; the token is the second lock). Before login, the login form is protected by
a double-submit value: a random cookie that the form must echo.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

_SESSION_KEY_LABEL = b"porteiro ui session v1"


@dataclass(frozen=True, slots=True)
class Session:
    token_name: str
    expires_at: datetime
    nonce: str


def _key(token: bytes) -> bytes:
    return hmac.new(token, _SESSION_KEY_LABEL, hashlib.sha256).digest()


def _mac(token: bytes, *parts: str) -> str:
    signed = hmac.new(_key(token), "\x00".join(parts).encode("utf-8"), hashlib.sha256)
    return base64.urlsafe_b64encode(signed.digest()).decode("ascii").rstrip("=")


def _encode_name(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode("utf-8")).decode("ascii").rstrip("=")


def _decode_name(text: str) -> str | None:
    """The token name, or None for anything `_encode_name` did not write (decoded
    strictly: the lenient decoder drops stray characters, so "!!!" read as "")."""
    padded = (text + "=" * (-len(text) % 4)).encode("ascii", errors="replace")
    try:
        name = base64.b64decode(padded, altchars=b"-_", validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError
        return None
    return name or None


def new_session(token_name: str, now: datetime, lifetime: timedelta) -> Session:
    return Session(token_name, now + lifetime, secrets.token_urlsafe(16))


def session_cookie(session: Session, token: bytes) -> str:
    expiry = str(int(session.expires_at.timestamp()))
    name = _encode_name(session.token_name)
    return ".".join((name, expiry, session.nonce, _mac(token, name, expiry, session.nonce)))


def claimed_name(cookie: str) -> str | None:
    """The token name a cookie claims, unverified: which token's key to check it with."""
    name, _, _ = cookie.partition(".")
    return _decode_name(name) if name else None


def open_session(cookie: str, token: bytes, now: datetime) -> Session | None:
    """The session in `cookie` if `token` signed it and it has not expired; else None."""
    parts = cookie.split(".")
    if len(parts) != 4:
        return None
    name, expiry, nonce, signature = parts
    if not hmac.compare_digest(signature, _mac(token, name, expiry, nonce)):
        return None
    token_name = _decode_name(name)
    if token_name is None or not expiry.isdigit():
        return None
    expires_at = datetime.fromtimestamp(int(expiry), tz=now.tzinfo)
    if expires_at <= now:
        return None
    return Session(token_name, expires_at, nonce)


def csrf_token(session: Session, token: bytes) -> str:
    return _mac(token, "csrf", session.nonce)


def csrf_matches(session: Session, token: bytes, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(presented, csrf_token(session, token))


def login_nonce() -> str:
    """The double-submit value of the login form (its cookie and its hidden field)."""
    return secrets.token_urlsafe(16)


def nonces_match(cookie: str | None, field: str | None) -> bool:
    return bool(cookie) and bool(field) and hmac.compare_digest(str(cookie), str(field))
