"""Standard Webhooks signatures as a sender computes them.

They come from the official `standardwebhooks` library, not from Porteiro's own adapter,
so a mistake shared by both could not make the tests pass.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

SECRET = "whsec_" + base64.b64encode(b"porteiro-e2e-secret-0123456789ab").decode()


def standard_headers(
    body: bytes, msg_id: str | None = None, *, at: datetime | None = None, secret: str = SECRET
) -> dict[str, str]:
    """Signed headers for `body`; `msg_id` is by default the body's own `id`, as a sender
    that reuses its event ids for webhook-id sends it."""
    webhook_id = json.loads(body)["id"] if msg_id is None else msg_id
    moment = at or datetime.now(UTC)
    signature = Webhook(secret).sign(webhook_id, moment, body.decode("utf-8"))
    return {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signature,
    }


def raw_standard_headers(body: bytes, msg_id: str, secret: str = SECRET) -> dict[str, str]:
    """Signed headers for bytes that are not text, which the reference library refuses:
    the HMAC of the spec computed here."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    timestamp = str(int(datetime.now(UTC).timestamp()))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }
