"""The OpenAPI 3.1 document of every HTTP route, served at /api/openapi.json.

Hand-written rather than generated: the receiver's contract (status codes a gateway
sees) matters as much as the admin API's shapes. The document itself needs no token:
it describes the surface, it reveals no data. A test checks that every registered
route is described here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from porteiro.model import EventStatus, Kind, PaymentState, Verdict

_JSON = "application/json"
_DATETIME = {"type": "string", "format": "date-time"}


def _values(enum: type[StrEnum]) -> list[str]:
    return [member.value for member in enum]


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(description, _ref("Error"))


def _query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema or {"type": "string"},
    }


def _path(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema or {"type": "string"}}


def _nullable(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **extra}


_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}
}
_UNAVAILABLE = {**_error("The store is unavailable; retry later"), "headers": _RETRY_AFTER}
_ADMIN_ERRORS = {
    "401": {
        **_error("Missing or invalid admin token"),
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
    },
    "503": {**_error("Admin API disabled (no [admin] token) or store unavailable")},
}
_LIMIT = _query(
    "limit", "Page size (default 50)", {"type": "integer", "minimum": 1, "maximum": 500}
)
_CURSOR = _query("cursor", "Opaque cursor from a previous page's `next`")
_SOURCE = _query("source", "Source name (the /webhooks/{source} segment)")


def _schemas() -> dict[str, Any]:
    headers = {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
    body = {
        "body": {"type": "string", "description": "UTF-8 text, or base64 if body_base64"},
        "body_base64": {"type": "boolean"},
        "body_size": {"type": "integer"},
    }
    event = {
        "id": {"type": "integer"},
        "source": {"type": "string"},
        "dedup_key": {"type": "string"},
        "kind": {"type": "string", "enum": [k.value for k in Kind]},
        "type": {"type": "string", "description": "The gateway's own event type"},
        "object_id": _nullable("string"),
        "reference": _nullable("string"),
        "amount": _nullable("integer", description="Minor units"),
        "currency": _nullable("string"),
        "refunded_total": _nullable("integer"),
        "thin": {"type": "boolean"},
        "occurred_at": _nullable("string", format="date-time"),
        "status": {"type": "string", "enum": [s.value for s in EventStatus]},
        "attempts": {"type": "integer"},
        "next_attempt_at": _nullable("string", format="date-time"),
        "last_error": _nullable("string"),
        "duplicates": {"type": "integer"},
        "received_at": {"type": "string", "format": "date-time"},
        "updated_at": {"type": "string", "format": "date-time"},
        "origin": {"type": "string"},
        "warnings": {
            "type": "array",
            "description": "Deviations from the gateway's documented shape that were read "
            "past (docs/gateways: the rule per gateway)",
            "items": {
                "type": "object",
                "properties": {"rule": {"type": "string"}, "detail": {"type": "string"}},
                "required": ["rule", "detail"],
            },
        },
    }
    states = [s.value for s in PaymentState]
    filter_props = {
        "source": {"type": "string"},
        "kind": {"type": "string", "enum": [k.value for k in Kind]},
        "since": {"type": "string", "format": "date-time"},
        "until": {"type": "string", "format": "date-time"},
        "ids": {"type": "array", "items": {"type": "integer"}},
    }
    return {
        "Error": {"type": "object", "properties": {"error": {"type": "string"}}},
        "Event": {"type": "object", "properties": event, "required": list(event)},
        "EventPage": {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": _ref("Event")},
                "next": _nullable("string"),
            },
        },
        "Delivery": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "source": {"type": "string"},
                "received_at": {"type": "string", "format": "date-time"},
                "path": {"type": "string"},
                "query": {"type": "string"},
                "peer": _nullable("string"),
                "parse_error": _nullable("string"),
                "headers": headers,
                **body,
            },
        },
        "EventDetail": {
            "allOf": [
                _ref("Event"),
                {
                    "type": "object",
                    "properties": {
                        "data": {
                            "type": "object",
                            "description": "The parsed data; objects and arrays nested deeper "
                            "than 128 levels are replaced by a marker string",
                        },
                        "data_truncated": {
                            "type": "boolean",
                            "description": "Whether `data` was cut at 128 levels (the raw "
                            "body in `deliveries` is always whole)",
                        },
                        "deliveries": {"type": "array", "items": _ref("Delivery")},
                    },
                },
            ]
        },
        "Transition": {
            "type": "object",
            "properties": {
                "from": {"type": ["string", "null"], "enum": [*states, None]},
                "to": {"type": "string", "enum": states},
                "event_id": {"type": "integer"},
                "verdict": {"type": "string", "enum": [v.value for v in Verdict]},
                "note": _nullable("string"),
                "at": {"type": "string", "format": "date-time"},
            },
        },
        "Payment": {
            "type": "object",
            "properties": {
                "source": {"type": "string"},
                "object_id": {"type": "string"},
                "state": {"type": "string", "enum": states},
                "amount": _nullable("integer"),
                "currency": _nullable("string"),
                "refunded_amount": {"type": "integer"},
                "reference": _nullable("string"),
                "version": {"type": "integer"},
                "last_event_at": _nullable("string", format="date-time"),
                "anomalies": {"type": "integer"},
                "history": {"type": "array", "items": _ref("Transition")},
            },
        },
        "QuarantinedRequest": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "source": {"type": "string"},
                "received_at": {"type": "string", "format": "date-time"},
                "reason": {"type": "string"},
                "detail": _nullable("string"),
                "peer": _nullable("string"),
                "headers": headers,
                **body,
            },
        },
        "DlqReplayFilter": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                **filter_props,
                "all": {
                    "type": "boolean",
                    "description": "true: every dead event (alone: no ids, no filter)",
                },
            },
            "description": (
                '`ids`, at least one filter field, or `{"all": true}`: an empty body is '
                "refused. `ids` cannot be combined with a filter. Dead unparseable "
                "deliveries are re-parsed with the current code."
            ),
        },
        "ReplayFilter": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                **filter_props,
                "status": {"type": "string", "enum": [s.value for s in EventStatus]},
                "object_id": {"type": "string"},
                "dedup_key": {"type": "string"},
                "reparse": {
                    "type": "boolean",
                    "description": "Re-parse the raw deliveries with the current code first",
                },
                "dry_run": {
                    "type": "boolean",
                    "description": "Change nothing; report the transitions in `planned`",
                },
            },
            "description": "`ids`, or at least one filter field.",
        },
        "Requeued": {"type": "object", "properties": {"requeued": {"type": "integer"}}},
        "ReplayReport": {
            "type": "object",
            "properties": {
                "requeued": {"type": "integer", "description": "Events made due again"},
                "deliveries": {"type": "integer", "description": "Deliveries re-parsed"},
                "event_ids": {"type": "array", "items": {"type": "integer"}},
                "failures": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "delivery_id": {"type": "integer"},
                            "reason": {"type": "string"},
                        },
                    },
                },
                "missing": {"type": "array", "items": {"type": "integer"}},
                "skipped": {"type": "array", "items": {"type": "integer"}},
                "planned": {
                    "type": "array",
                    "description": "Dry run: the transition the ledger would make per event",
                    "items": {
                        "type": "object",
                        "properties": {
                            "event_id": _nullable("integer"),
                            "source": {"type": "string"},
                            "dedup_key": {"type": "string"},
                            "kind": {"type": "string"},
                            "object_id": _nullable("string"),
                            "from": _nullable("string"),
                            "to": _nullable("string"),
                            "verdict": {"type": "string"},
                        },
                    },
                },
            },
        },
    }


def _webhook_paths() -> dict[str, Any]:
    post = {
        "tags": ["receiver"],
        "summary": "Receive a gateway webhook",
        "description": (
            "The source's adapter authenticates the raw body, then the delivery and its "
            "events are stored in one transaction before the acknowledgement. A duplicate "
            "is acknowledged the same way. An authenticated body that cannot be parsed is "
            "stored, dead-lettered and acknowledged."
        ),
        "security": [],
        "parameters": [_path("source")],
        "requestBody": {
            "required": True,
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        },
        "responses": {
            "200": {"description": "Durably stored; the body is the gateway's expected ack"},
            "401": _error("Authentication failed; the request is quarantined"),
            "404": _error("Unknown source"),
            "413": _error("Body over the configured limit"),
            "503": _UNAVAILABLE,
        },
    }
    pix = {**post, "summary": "Receive a Pix webhook (PSPs append /pix to the URL)"}
    automatico = {
        **post,
        "summary": "Receive a Pix Automático callback (recurrences /rec, recurring charges "
        "/cobr); Pix sources only, else 404",
    }
    return {
        "/webhooks/{source}": {"post": post},
        "/webhooks/{source}/pix": {"post": pix},
        "/webhooks/{source}/rec": {"post": automatico},
        "/webhooks/{source}/cobr": {"post": automatico},
    }


def _probe_paths() -> dict[str, Any]:
    status = {"type": "object", "properties": {"status": {"type": "string"}}}
    return {
        "/healthz": {
            "get": {
                "tags": ["probes"],
                "summary": "Liveness",
                "security": [],
                "responses": {"200": _json("Alive", status)},
            }
        },
        "/readyz": {
            "get": {
                "tags": ["probes"],
                "summary": "Readiness: the store answers",
                "security": [],
                "responses": {
                    "200": _json("Ready", status),
                    "503": {**_json("Store unreachable", status), "headers": _RETRY_AFTER},
                },
            }
        },
        "/metrics": {
            "get": {
                "tags": ["probes"],
                "summary": "Prometheus exposition",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Metrics",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
    }


def _admin(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "tags": ["admin"],
        "summary": summary,
        **extra,
        "responses": {**responses, **_ADMIN_ERRORS},
    }


# The admin routes that read a JSON body refuse one over 1 MiB (api.MAX_ADMIN_BODY).
_TOO_LARGE = {"413": _error("Body over the limit (1 MiB)")}


def _replay_body(schema: str) -> dict[str, Any]:
    return {"required": False, "content": {_JSON: {"schema": _ref(schema)}}}


def _admin_paths() -> dict[str, Any]:
    event_id = _path("id", {"type": "integer"})
    bad = {"400": _error("Invalid parameter")}
    requeued = {"200": _json("Number of events requeued", _ref("Requeued"))}
    report = {"200": _json("What the replay did", _ref("ReplayReport"))}
    list_params = [
        _SOURCE,
        _query(
            "status", "Event status", {"type": "string", "enum": [s.value for s in EventStatus]}
        ),
        _query("kind", "Canonical kind", {"type": "string", "enum": [k.value for k in Kind]}),
        _query("object_id", "Gateway object id"),
        _query("dedup_key", "The gateway's event identity"),
        _query(
            "since", "received_at >= since (ISO 8601)", {"type": "string", "format": "date-time"}
        ),
        _query(
            "until", "received_at < until (ISO 8601)", {"type": "string", "format": "date-time"}
        ),
        _CURSOR,
        _LIMIT,
    ]
    return {
        "/api/openapi.json": {
            "get": {
                "tags": ["admin"],
                "summary": "This document (no token needed)",
                "security": [],
                "responses": {"200": _json("OpenAPI 3.1 document", {"type": "object"})},
            }
        },
        "/api/events": {
            "get": _admin(
                "List events, newest first",
                {"200": _json("A page of events", _ref("EventPage")), **bad},
                parameters=list_params,
            )
        },
        "/api/events/{id}": {
            "get": _admin(
                "One event with its data and raw deliveries",
                {
                    "200": _json("The event", _ref("EventDetail")),
                    "404": _error("Unknown event"),
                },
                parameters=[event_id],
            )
        },
        "/api/events/{id}/replay": {
            "post": _admin(
                "Requeue one event, whatever its status",
                {**requeued, "404": _error("Unknown event")},
                parameters=[event_id],
            )
        },
        "/api/dlq": {
            "get": _admin(
                "List dead-lettered events",
                {"200": _json("A page of dead events", _ref("EventPage")), **bad},
                parameters=[_SOURCE, _CURSOR, _LIMIT],
            )
        },
        "/api/dlq/replay": {
            "post": _admin(
                "Requeue the dead events matching a filter",
                {**report, **bad, **_TOO_LARGE},
                requestBody=_replay_body("DlqReplayFilter"),
            )
        },
        "/api/replay": {
            "post": _admin(
                "Requeue (or re-parse) events by id or by filter",
                {**report, **bad, **_TOO_LARGE},
                requestBody=_replay_body("ReplayFilter"),
            )
        },
        "/api/payments/{source}/{object_id}": {
            "get": _admin(
                "A payment's canonical state and its full history",
                {
                    "200": _json("The payment", _ref("Payment")),
                    "400": _error("A NUL character in the source or object id"),
                    "404": _error("Unknown payment"),
                },
                parameters=[_path("source"), _path("object_id")],
            )
        },
        "/api/quarantine": {
            "get": _admin(
                "Recent requests refused at authentication",
                {
                    "200": _json(
                        "Newest first",
                        {
                            "type": "object",
                            "properties": {
                                "items": {"type": "array", "items": _ref("QuarantinedRequest")}
                            },
                        },
                    ),
                    **bad,
                },
                parameters=[_LIMIT],
            )
        },
    }


def _reconcile_paths() -> dict[str, Any]:
    """Reconciliation reports (porteiro.http.admin_reconcile; docs/reconciliation.md)."""
    summary = {"type": "object", "description": "Counts: listed, missing, divergent..."}
    report = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "source": {"type": "string"},
            "kind": {"type": "string", "enum": ["audit", "stale"]},
            "created_at": _DATETIME,
            "since": _nullable("string", format="date-time"),
            "until": _nullable("string", format="date-time"),
            "summary": summary,
            "report": {"type": "object", "description": "The whole report (findings)"},
        },
    }
    page = {"type": "object", "properties": {"items": {"type": "array", "items": report}}}
    return {
        "/api/reconciliation/reports": {
            "get": _admin(
                "Latest reconciliation reports, newest first (summaries)",
                {"200": _json("Reports", page), "400": _error("Invalid parameter")},
                parameters=[_SOURCE, _LIMIT],
            )
        },
        "/api/reconciliation/reports/{id}": {
            "get": _admin(
                "One reconciliation report with its findings",
                {"200": _json("The report", report), "404": _error("Unknown report")},
                parameters=[_path("id", {"type": "integer"})],
            )
        },
    }


def _destination_paths() -> dict[str, Any]:
    """Merchant delivery (porteiro.http.admin_destinations; docs/destinations.md)."""
    name = _path("name")
    backlog = {
        "type": "object",
        "properties": {s: {"type": "integer"} for s in ("pending", "delivering", "done", "dead")},
    }
    destination = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "transport": {"type": "string", "enum": ["http", "rabbitmq"]},
            "target": {"type": "string", "description": "URL, or broker and exchange"},
            "kinds": {"type": "array", "items": {"type": "string"}},
            "status": {
                "type": "string",
                "enum": ["active", "paused", "disabled", "circuit_open"],
            },
            "paused": {"type": "boolean"},
            "disabled_reason": _nullable("string"),
            "circuit_open_until": _nullable("string", format="date-time"),
            "backlog": backlog,
        },
    }
    row = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "destination": {"type": "string"},
            "event_id": {"type": "integer"},
            "message_id": {"type": "string", "description": "webhook-id / AMQP message_id"},
            "source": {"type": "string"},
            "object_id": {"type": "string"},
            "kind": {"type": "string"},
            "status": {"type": "string", "enum": ["pending", "delivering", "done", "dead"]},
            "attempts": {"type": "integer"},
            "next_attempt_at": _DATETIME,
            "last_error": _nullable("string"),
            "last_status": _nullable("string"),
            "created_at": _DATETIME,
            "updated_at": _DATETIME,
            "delivered_at": _nullable("string", format="date-time"),
            "payload": {"type": "object", "description": "The normalised event sent"},
        },
    }
    unknown = {"404": _error("Unknown destination")}
    state = {"200": _json("The destination", destination), **unknown}
    status = _query(
        "status",
        "Outbox status",
        {"type": "string", "enum": ["pending", "delivering", "done", "dead"]},
    )
    ids = {"ids": {"type": "array", "items": {"type": "integer"}}}
    redrive_body = {"type": "object", "properties": ids, "additionalProperties": False}
    return {
        "/api/destinations": {
            "get": _admin(
                "Every configured destination with its state and backlog",
                {
                    "200": _json(
                        "Destinations",
                        {
                            "type": "object",
                            "properties": {"items": {"type": "array", "items": destination}},
                        },
                    )
                },
            )
        },
        "/api/destinations/{name}/pause": {
            "post": _admin("Stop sending; events accumulate", state, parameters=[name])
        },
        "/api/destinations/{name}/resume": {
            "post": _admin(
                "Send again (also re-enables after 410 Gone, closes the circuit)",
                state,
                parameters=[name],
            )
        },
        "/api/destinations/{name}/outbox": {
            "get": _admin(
                "The destination's outbox rows, newest first",
                {
                    "200": _json(
                        "A page of rows",
                        {
                            "type": "object",
                            "properties": {
                                "items": {"type": "array", "items": row},
                                "next": _nullable("string"),
                            },
                        },
                    ),
                    "400": _error("Invalid parameter"),
                    **unknown,
                },
                parameters=[name, status, _CURSOR, _LIMIT],
            )
        },
        "/api/destinations/{name}/redrive": {
            "post": _admin(
                "Dead rows (all, or these ids) pending again",
                {
                    "200": _json(
                        "How many rows",
                        {"type": "object", "properties": {"redriven": {"type": "integer"}}},
                    ),
                    "400": _error("Invalid body"),
                    **_TOO_LARGE,
                    **unknown,
                },
                parameters=[name],
                requestBody={"required": False, "content": {_JSON: {"schema": redrive_body}}},
            )
        },
    }


def openapi_document(version: str = "0.1.0") -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Porteiro",
            "version": version,
            "description": "Durable, idempotent inbox for payment-gateway webhooks.",
        },
        "security": [{"bearerAuth": []}],
        "paths": {
            **_webhook_paths(),
            **_probe_paths(),
            **_admin_paths(),
            **_reconcile_paths(),
            **_destination_paths(),
        },
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The [admin] token of the configuration",
                }
            },
            "schemas": _schemas(),
        },
    }
