"""The id a forwarded event carries (pure): the payload's `id`, the `webhook-id` header,
the AMQP `message_id`. Merchants de-duplicate on it, so it must name one event and only
that one, whichever store, replay or redrive sent it.

An event *is* its source's de-duplication key: the store keeps one event per
(source, dedup_key), a replay or redrive of it keeps that pair, and a re-parse that
yields another key makes another event anyway. So the id is a hash of that pair, the
same on SQLite and PostgreSQL, on a rebuilt or restored store, and on two installations
fed the same gateway traffic. A per-store row number is not: every store counts from 1.

The source is its configured *name*, not its gateway: two Stripe accounts are two
sources whose keys may coincide for unrelated events, and the name is what the store
de-duplicates on. Renaming a source therefore starts new ids for its events, exactly as
it starts a new de-duplication space in the store.

Encoding: a version tag, then each of the two fields as a netstring (its UTF-8 byte
length, `:`, the bytes, `,`), so no source and key can spell another pair's bytes
whatever separators or characters they contain. SHA-256 of that, the first 20 bytes
(160 bits: a collision is out of reach of any number of events) in lowercase base32,
after `evt_`: 36 characters. Ids of older versions were `evt_<row number>` (at most 19
digits), so old and new ids never coincide.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Final

_TAG: Final = b"porteiro-event-id-v1:"
_DIGEST_BYTES: Final = 20  # base32 of 20 bytes is 32 characters, no padding


def message_id(source: str, dedup_key: str) -> str:
    """The stable id merchants see for the event `dedup_key` of source `source`."""
    digest = hashlib.sha256(_TAG + _netstring(source) + _netstring(dedup_key)).digest()
    return "evt_" + base64.b32encode(digest[:_DIGEST_BYTES]).decode("ascii").lower()


def _netstring(text: str) -> bytes:
    # surrogatepass: a key with a lone surrogate still has one encoding, not an error.
    data = text.encode("utf-8", "surrogatepass")
    return b"%d:%s," % (len(data), data)
