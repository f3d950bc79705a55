"""The naive baseline (b), as a well-known "handle Stripe webhooks idempotently" article
teaches it: Flask under gunicorn sync workers, check the HMAC, open a NEW psycopg
connection per request, `INSERT ... ON CONFLICT DO NOTHING` into processed_events, update
the order inline, commit, answer 200.

Kept deliberately plain: it is the honest comparison, not a straw man. It does check the
signature and the timestamp, de-duplicates, and commits durably (synchronous_commit on).

Run: BENCH_NAIVE_DSN=postgresql://... BENCH_NAIVE_SECRET=whsec_... \
     gunicorn -w 1 -b 127.0.0.1:8001 bench.naive.app:app
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time

import psycopg
from flask import Flask, Response, request

TOLERANCE_SECONDS = 300

app = Flask(__name__)


def verify(payload: bytes, header: str, secret: str) -> bool:
    """Stripe's scheme: `t=<unix>,v1=<hex HMAC-SHA256 of "t.payload">`."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(time.time() - timestamp) > TOLERANCE_SECONDS:
        return False
    signed = f"{timestamp}.".encode() + payload
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts.get("v1", ""))


@app.post("/webhooks/stripe")
def stripe_webhook() -> Response:
    payload = request.get_data()
    secret = os.environ["BENCH_NAIVE_SECRET"]
    if not verify(payload, request.headers.get("Stripe-Signature", ""), secret):
        return Response("bad signature", status=400)
    event = json.loads(payload)
    with psycopg.connect(os.environ["BENCH_NAIVE_DSN"]) as conn:  # a new one per request
        inserted = conn.execute(
            "INSERT INTO processed_events (event_id, type) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (event["id"], event["type"]),
        ).rowcount
        if inserted and event["type"] == "payment_intent.succeeded":
            order = event["data"]["object"].get("metadata", {}).get("order_id")
            conn.execute("UPDATE orders SET status = 'paid' WHERE id = %s", (order,))
        conn.commit()
    return Response("ok", status=200)
