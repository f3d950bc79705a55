"""Faults injected into a real store, for the paths that must survive them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pytest

from porteiro.runtime import Runtime
from porteiro.store.base import Application, Applied


def fail_batches(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's batch apply fails for any batch of more than one event (a database
    error in the batch statement); batches of one go through: the worker's per-event
    fallback is what runs."""
    real = runtime.store.apply_many

    async def singles_only(batch: Sequence[Application], now: datetime) -> Sequence[Applied]:
        if len(batch) > 1:
            raise RuntimeError("a database error in the batch statement")
        return await real(batch, now)

    monkeypatch.setattr(runtime.store, "apply_many", singles_only)
