"""The Store's quarantine (store/base.py): refused requests kept for forensics in
a bounded table, written once for both stores over the connection port (store/port.py).
The stores give it `_port` and `quarantine_limit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from porteiro.model import InboundRequest, QuarantinedRequest
from porteiro.store import rows
from porteiro.store.port import Port, Queries

INSERT_QUARANTINE: Final = """
INSERT INTO quarantine (source, received_at, reason, detail, headers, body, peer)
VALUES (%(source)s, %(received_at)s, %(reason)s, %(detail)s, %(headers)s, %(body)s,
        %(peer)s)"""

# Keep the newest `limit` rows: drop every id at or below the (limit + 1)-th newest.
TRIM_QUARANTINE: Final = """
DELETE FROM quarantine
WHERE id <= (SELECT id FROM quarantine ORDER BY id DESC LIMIT 1 OFFSET %(limit)s)"""

LIST_QUARANTINE: Final = "SELECT * FROM quarantine ORDER BY id DESC LIMIT %(limit)s"


class QuarantineVerbs:
    _port: Port
    quarantine_limit: int

    async def quarantine(self, request: InboundRequest, reason: str, detail: str | None) -> None:
        """Keep a refused request for forensics; the table is bounded (oldest dropped)."""
        d = self._port.dialect
        params = {
            "source": request.source,
            "received_at": d.time(request.received_at),
            "reason": reason,
            "detail": detail,
            "headers": d.json([[name, value] for name, value in request.headers]),
            "body": request.body[: rows.QUARANTINE_BODY_LIMIT],
            "peer": request.peer,
        }
        limit = self.quarantine_limit

        async def keep(tx: Queries) -> None:
            await tx.execute(INSERT_QUARANTINE, params)
            await tx.execute(TRIM_QUARANTINE, {"limit": limit})

        await self._port.transaction(keep)

    async def list_quarantine(self, limit: int) -> Sequence[QuarantinedRequest]:
        found = await self._port.fetch(LIST_QUARANTINE, {"limit": max(limit, 0)})
        return [rows.quarantined_from_row(row) for row in found]
