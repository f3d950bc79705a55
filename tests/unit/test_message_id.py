"""The forwarded event id (porteiro.sinks.message_id): a pure function of source and
de-duplication key, fixed across releases, and never the same for two events."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from porteiro.sinks.message_id import message_id

SHAPE = re.compile(r"evt_[a-z2-7]{32}")

# Keys built to trip a naive encoding: separators, a split point moved between the two
# fields, unicode and its look-alikes, empty-ish and whitespace keys.
AWKWARD = st.one_of(
    st.text(),
    st.text(alphabet=":,|/\x00\n \t\\", max_size=8),
    st.sampled_from(["", " ", "\x00", "evt_1", "1", "é", "e\u0301", "\ud800", "4:abcd,"]),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
)


def test_the_id_of_an_event_never_changes_between_releases() -> None:
    # Merchants de-duplicate on these across upgrades: a changed encoding would make
    # every event of a replay look new to them. These values are fixed forever (worked
    # out apart from the code: printf 'porteiro-event-id-v1:0:,0:,' | sha256sum, the
    # first 20 bytes, base32, lowercase).
    assert message_id("stripe", "evt_1QGMYpBvKgtYAhL5Hq3dIJ2f") == (
        "evt_4hfr37kxqfxnggk4wpz3e26inq2ql6bh"
    )
    assert message_id("", "") == "evt_tmgjidb5lesqqevzd7edr5j7obbfqptx"


def test_shape_and_no_overlap_with_the_row_number_ids_of_older_releases() -> None:
    found = message_id("pagarme", "hook_7")
    assert SHAPE.fullmatch(found)
    # Older releases sent `evt_<row number>`: at most 19 digits, never 32 base32 letters.
    assert not re.fullmatch(r"evt_\d{1,19}", found)


def test_the_same_pair_always_gives_the_same_id() -> None:
    assert message_id("mp", "pay:1:approved") == message_id("mp", "pay:1:approved")


@given(AWKWARD, AWKWARD)
def test_every_pair_has_an_id_of_the_fixed_shape(source: str, key: str) -> None:
    assert SHAPE.fullmatch(message_id(source, key))


@given(st.lists(st.tuples(AWKWARD, AWKWARD), max_size=30))
def test_distinct_pairs_never_share_an_id(pairs: list[tuple[str, str]]) -> None:
    ids = {pair: message_id(*pair) for pair in pairs}
    assert len(set(ids.values())) == len(ids)


@given(AWKWARD, AWKWARD)
def test_moving_characters_between_source_and_key_changes_the_id(head: str, tail: str) -> None:
    # What a plain concatenation would confuse: "ab" + "c" and "a" + "bc".
    whole = head + tail
    for cut in range(len(whole) + 1):
        if (whole[:cut], whole[cut:]) != (head, tail):
            assert message_id(whole[:cut], whole[cut:]) != message_id(head, tail)


def test_one_source_of_two_accounts_is_two_sources() -> None:
    # Two Stripe accounts configured as two sources: the same key is two events.
    assert message_id("stripe_br", "evt_1") != message_id("stripe_mx", "evt_1")
