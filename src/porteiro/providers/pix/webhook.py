"""The Pix callback dialect: authentication (auth.py: mTLS, or Efí's `?hmac=` secret and
an address allow-list) and the callback bodies' events (payload.py).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from porteiro.model import InboundRequest, ParsedEvent
from porteiro.providers.base import Ack
from porteiro.providers.pix import auth as pix_auth
from porteiro.providers.pix.payload import body_events


class PixWebhook:
    """Verify and parse callbacks: pure, on the raw request only."""

    auth: pix_auth.PixAuth
    keys: frozenset[str]
    confirm: bool

    def verify(self, request: InboundRequest, now: datetime) -> None:
        self.auth.verify(request, now)

    def parse(self, request: InboundRequest) -> Sequence[ParsedEvent]:
        return body_events(request.body, self.keys, thin=self.confirm)

    def ack(self) -> Ack:
        return Ack()
