"""Stripe: `Stripe-Signature` webhooks carrying v1 snapshot events or v2 thin notifications
(docs.stripe.com/webhooks#verify-manually, docs.stripe.com/event-destinations).

Authentication: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256 over
`"{t}.{raw body}"` keyed with the `whsec_...` secret string as UTF-8 bytes (it is NOT
base64-decoded, unlike Standard Webhooks). Any v1 may match any configured secret: Stripe
sends one v1 per live secret while one is being rolled. Other schemes (v0) are ignored and
so is a v1 value that is not hex, as the SDK does; a header left with no usable v1 is a
signature mismatch. `t` must lie within `tolerance_seconds` of now, past or future (the
SDK checks only the past).

Events: one per delivery, de-duplicated on the event `id` (`evt_...`). The payment is the
PaymentIntent, so charge, refund, dispute and Checkout events are filed under their
`payment_intent` (falling back to the charge, or the Checkout Session, when there is none).
Refunds never double count: `charge.refunded` carries the charge's cumulative
`amount_refunded` as `refunded_total` (and no per-refund amount), and a refund's own
amount is counted once, by `refund.created` if it succeeded at once, else by the
`refund.updated` that moved it to `succeeded`.

Thin v2 notifications (event destinations, `"object": "v2.core.event"`, same signature):
a `v1.*` type about a payment object (`related_object.type` payment_intent, charge,
refund, dispute or checkout.session) is stored thin and enriched by GET of the related
object's `url`, then mapped like the snapshot of the same v1 type; any other v2 event
(billing meters, accounts, money management...) is stored and ignored with its reason.

The rule (fields.py): ids, type, status, amounts and the refunded total are read
strictly; an ancillary field that deviates (`created` not unix seconds, an unknown
dispute or Checkout `payment_status`, an unusable `related_object.url`) is read past and
recorded as a `stripe.*` warning on the event.
"""

from __future__ import annotations

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.providers.base import signing_keys
from porteiro.providers.stripe.api import StripeApi
from porteiro.providers.stripe.samples import StripeSamples
from porteiro.providers.stripe.webhook import StripeWebhook

DEFAULT_REFERENCE_KEYS = ("order_id", "reference", "order_reference")


class StripeProvider(StripeWebhook, StripeApi, StripeSamples):
    """Stripe webhook endpoint (snapshot events) for one source."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._keys = signing_keys(source, hint=" (whsec_...)")
        keys = source.options.get("reference_metadata_keys", list(DEFAULT_REFERENCE_KEYS))
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            raise ConfigError(
                f"source {source.name!r}: reference_metadata_keys must be a list of strings"
            )
        self.reference_keys: tuple[str, ...] = tuple(keys)
