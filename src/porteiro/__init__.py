"""Porteiro: a durable, idempotent inbox for payment-gateway webhooks."""
