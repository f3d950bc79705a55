"""Standard Webhooks (https://www.standardwebhooks.com): Porteiro's generic input.

Authentication: headers `webhook-id`, `webhook-timestamp` (unix seconds of the attempt)
and `webhook-signature` (space-separated `v1,<base64>` items; other versions such as the
asymmetric `v1a` are ignored). The signed content is `{id}.{timestamp}.{raw body}`,
HMAC-SHA256, base64. Secrets are `whsec_<base64>`: the prefix is stripped and the rest
base64-decoded (a secret without the prefix is base64 too). Any configured secret may
match any signature (rotation); the timestamp must be within `tolerance_seconds` of now,
in both directions.

The body is Porteiro's normalised event, one JSON object per delivery, so any system
can feed Porteiro (and Porteiro's own forwarding emits the same shape):

    {
      "id": "evt_01J...",                 # event id, the dedup key (optional: else
                                          #   the webhook-id header is used)
      "type": "payment.paid",             # a canonical kind; anything else is "other"
      "object_id": "pay_123",             # the payment; required unless type is "other"
      "reference": "order-42",            # optional: the merchant's own reference
      "amount": 1000,                     # optional int, minor units; for refund kinds
                                          #   the amount of this one refund
      "currency": "BRL",                  # optional ISO 4217 code
      "occurred_at": "2024-11-28T16:37:11.65Z",  # optional RFC 3339 with an offset
      "refunded_total": 1000,             # optional int, cumulative refunded amount
      "data": {...}                       # optional object, kept as is
    }

Unknown keys are ignored, so the format can grow. A field of the wrong type is a
ParseError naming the field: the delivery is stored and dead-lettered, not dropped. The one
exception is `occurred_at`, which decides no money: without an offset it is read as UTC,
unreadable it is left out, each with a `standard.occurred_at` warning on the event.
"""

from __future__ import annotations

import httpx

from porteiro.config import SourceConfig
from porteiro.model import ParsedEvent
from porteiro.providers.base import signing_keys
from porteiro.providers.standard.samples import StandardSamples
from porteiro.providers.standard.webhook import StandardWebhook, decode_secret


class StandardProvider(StandardWebhook, StandardSamples):
    """Standard Webhooks signature over Porteiro's normalised event JSON."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._keys = signing_keys(source, decode_secret)

    # No API behind Standard Webhooks: events arrive complete and have no status to read.
    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        return event

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        return None
