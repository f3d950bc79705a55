"""Webhook requests as the receiver hands them to adapters and stores."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from porteiro.model import InboundRequest


def inbound(
    source: str,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    received_at: datetime,
    query: str = "",
    peer: str = "127.0.0.1",
) -> InboundRequest:
    """A webhook POST to /webhooks/{source} from `peer`; header names lower-cased, as the
    receiver hands them over."""
    return InboundRequest(
        source=source,
        method="POST",
        path=f"/webhooks/{source}",
        query=query,
        headers=[(key.lower(), value) for key, value in (headers or {}).items()],
        body=body,
        peer=peer,
        received_at=received_at,
    )
