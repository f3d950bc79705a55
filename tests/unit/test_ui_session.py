"""The console's signed session cookies and CSRF tokens: what a cookie signed with one
admin token opens, and every way a changed, expired or foreign cookie is refused."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest

from porteiro.ui import session as sessions
from porteiro.ui.session import Session

TOKEN = b"operator-token-one"
OTHER = b"operator-token-two"
NOW = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def fresh(name: str = "alice") -> tuple[Session, str]:
    made = sessions.new_session(name, NOW, HOUR)
    return made, sessions.session_cookie(made, TOKEN)


def replaced(cookie: str, index: int, value: str) -> str:
    parts = cookie.split(".")
    parts[index] = value
    return ".".join(parts)


def flipped(text: str) -> str:
    """`text` with its last character changed (still URL-safe base64)."""
    return text[:-1] + ("A" if text[-1] != "A" else "B")


def encoded(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def test_a_cookie_opens_to_its_session() -> None:
    made, cookie = fresh("alice")
    opened = sessions.open_session(cookie, TOKEN, NOW)
    assert opened == made
    assert made.expires_at == NOW + HOUR
    # The cookie names the token, never holds it.
    assert TOKEN.decode() not in cookie


def test_a_name_with_dots_and_non_ascii_survives_the_round_trip() -> None:
    made, cookie = fresh("joão.ops")
    assert len(cookie.split(".")) == 4
    assert sessions.open_session(cookie, TOKEN, NOW) == made
    assert sessions.claimed_name(cookie) == "joão.ops"


def test_each_session_has_its_own_nonce() -> None:
    assert fresh()[0].nonce != fresh()[0].nonce


@pytest.mark.parametrize(
    ("index", "value"),
    [
        (0, encoded("mallory")),  # another token's name
        (1, str(int((NOW + 30 * HOUR).timestamp()))),  # a later expiry
        (2, "a-nonce-of-my-own"),
    ],
    ids=["name", "expiry", "nonce"],
)
def test_a_changed_part_is_refused(index: int, value: str) -> None:
    _, cookie = fresh()
    assert sessions.open_session(replaced(cookie, index, value), TOKEN, NOW) is None


def test_a_changed_signature_is_refused() -> None:
    _, cookie = fresh()
    signature = cookie.split(".")[3]
    assert sessions.open_session(replaced(cookie, 3, flipped(signature)), TOKEN, NOW) is None
    assert sessions.open_session(replaced(cookie, 3, ""), TOKEN, NOW) is None


@pytest.mark.parametrize(
    "cookie",
    ["", "garbage", "a.b.c", "a.b.c.d.e", "....", "YWxpY2U.notanumber.nonce.sig"],
)
def test_a_malformed_cookie_is_refused(cookie: str) -> None:
    assert sessions.open_session(cookie, TOKEN, NOW) is None


def test_an_expired_session_is_refused() -> None:
    _, cookie = fresh()
    assert sessions.open_session(cookie, TOKEN, NOW + HOUR - timedelta(seconds=1)) is not None
    # Expiry is exclusive: at the very instant it is over.
    assert sessions.open_session(cookie, TOKEN, NOW + HOUR) is None
    assert sessions.open_session(cookie, TOKEN, NOW + 2 * HOUR) is None


def test_a_cookie_signed_with_another_token_is_refused() -> None:
    made = sessions.new_session("alice", NOW, HOUR)
    assert sessions.open_session(sessions.session_cookie(made, OTHER), TOKEN, NOW) is None
    assert sessions.open_session(sessions.session_cookie(made, TOKEN), OTHER, NOW) is None


def test_claimed_name_reads_the_name_unverified() -> None:
    _, cookie = fresh("alice")
    assert sessions.claimed_name(cookie) == "alice"
    # Unverified: a forged cookie claims whatever it says (open_session is the check).
    assert sessions.claimed_name(encoded("mallory") + ".1.n.s") == "mallory"


@pytest.mark.parametrize(
    "cookie",
    [
        "",
        ".rest.of.it",
        "!!!.1.n.s",  # not base64
        "/w.1.n.s",  # base64 of 0xff: not UTF-8
        "a",  # base64 of a lone character: no whole byte
    ],
)
def test_claimed_name_of_garbage_is_none(cookie: str) -> None:
    assert sessions.claimed_name(cookie) is None


def test_the_csrf_token_matches_only_its_own_session() -> None:
    mine, _ = fresh()
    theirs, _ = fresh()
    token = sessions.csrf_token(mine, TOKEN)
    assert sessions.csrf_matches(mine, TOKEN, token)
    assert not sessions.csrf_matches(theirs, TOKEN, token)
    assert not sessions.csrf_matches(mine, OTHER, token)
    assert not sessions.csrf_matches(mine, TOKEN, flipped(token))
    assert not sessions.csrf_matches(mine, TOKEN, "")
    assert not sessions.csrf_matches(mine, TOKEN, None)


def test_the_csrf_token_is_not_the_cookie_signature() -> None:
    mine, cookie = fresh()
    assert sessions.csrf_token(mine, TOKEN) != cookie.split(".")[3]
    assert mine.nonce not in sessions.csrf_token(mine, TOKEN)


def test_nonces_match_only_when_both_are_given_and_equal() -> None:
    nonce = sessions.login_nonce()
    assert sessions.nonces_match(nonce, nonce)
    assert not sessions.nonces_match(nonce, sessions.login_nonce())
    assert not sessions.nonces_match(nonce, None)
    assert not sessions.nonces_match(None, nonce)
    assert not sessions.nonces_match(None, None)
    # An empty cookie and an empty field are equal, and still no proof of anything.
    assert not sessions.nonces_match("", "")
    assert not sessions.nonces_match(nonce, "")
    assert not sessions.nonces_match("", nonce)
