"""Porteiro: a durable, idempotent inbox for payment-gateway webhooks."""

from __future__ import annotations

from porteiro.handlers import HandlerContext, Handlers, on

__all__ = ["HandlerContext", "Handlers", "on"]
