"""Adyen: the payments "Standard webhook" (JSON), one HMAC per item inside the body.

Authentication (docs/gateways/adyen.md), all of it required for a 2xx:
- optional HTTP Basic auth (`basic_auth = "user:pass"`, or a list during a rotation),
  compared in constant time;
- for EVERY `NotificationRequestItem`: `additionalData.hmacSignature` is the base64
  HMAC-SHA256, keyed with the hex-decoded HMAC key of any of `secrets`, of
  `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`
  (`value`/`currency` from `amount`; absent or null fields are empty strings; no
  escaping of `:` or `\\`). Values are rendered as the official Python SDK renders them
  (`Adyen.util.generate_notification_sig`: `str()` of strings and numbers), except JSON
  null, which is empty here (as in Adyen's other SDKs) where that SDK writes "None".
  One failing item refuses the whole delivery: Adyen then retries the batch.

The signatures live inside the body, so `verify` has to parse JSON: a body that is not a
JSON notification cannot be authenticated and is refused (401 `malformed_header`,
"unauthenticatable body"), never stored as an authenticated-but-unparseable delivery.

Events: one per item, de-duplicated on `{pspReference}:{eventCode}:{success}`. The
payment is `originalReference` when present (Adyen sets it on modifications: capture,
refund, cancel, chargeback...) else `pspReference`, so a refund lands on its payment.
`capture = "automatic"` (default: Adyen sends no CAPTURE then) makes a successful
AUTHORISATION mean paid; `capture = "manual"` makes it authorized until CAPTURE.
CAPTURE_FAILED undoes the capture (failed until a re-capture), REFUND_FAILED and
REFUNDED_REVERSED take back the refund whose pspReference they carry (refunds and their
reversals name it as `settlement_id`), EXPIRE expires what was not captured.
Acknowledged with `[accepted]`. The Checkout API has no status read: no fetch_status.

What is read strictly, what is read past (issue 21; docs/gateways/adyen.md): an item whose
pspReference, eventCode, success, originalReference or amount cannot be read is stored
dead on its own (`fields.each_item`) while the other items apply; a deviating eventDate,
merchantReference, `live`, a boolean `success`, a CANCEL_OR_REFUND without
`modification.action`, an event code Adyen does not document and `notificationItems` sent
as one object are read the way Adyen means them, with a warning (`RULES`).
"""

from __future__ import annotations

import httpx

from porteiro.config import SourceConfig
from porteiro.errors import ConfigError
from porteiro.model import ParsedEvent
from porteiro.providers.adyen.samples import AdyenSamples
from porteiro.providers.adyen.webhook import AdyenWebhook, decode_key
from porteiro.providers.base import signing_keys

CAPTURE_MODES = ("automatic", "manual")


class AdyenProvider(AdyenWebhook, AdyenSamples):
    """Adyen Standard webhooks for one source."""

    def __init__(self, source: SourceConfig) -> None:
        self.source = source
        self._keys = signing_keys(source, decode_key, hint=" (HMAC key)")
        self._basic = _basic_credentials(source)
        capture = source.option_str("capture") or "automatic"
        if capture not in CAPTURE_MODES:
            raise ConfigError(f"source {source.name!r}: capture must be automatic or manual")
        self.manual_capture = capture == "manual"
        self._merchant = source.option_str("merchant_account") or "PorteiroSimulate"

    async def enrich(self, event: ParsedEvent, http: httpx.AsyncClient) -> ParsedEvent:
        return event

    async def fetch_status(self, object_id: str, http: httpx.AsyncClient) -> ParsedEvent | None:
        return None  # the Checkout API has no "GET payment by pspReference"


def _basic_credentials(source: SourceConfig) -> list[bytes]:
    raw = source.options.get("basic_auth")
    if raw is None or raw == "":
        return []
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not all(isinstance(v, str) and ":" in v for v in values):
        raise ConfigError(f'source {source.name!r}: basic_auth must be "user:password"')
    return [value.encode("utf-8") for value in values]
