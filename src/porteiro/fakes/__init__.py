"""`porteiro fake-provider`: fake payment gateways that own a truth and prove Porteiro.

One module per gateway (stripe, pagarme, mercadopago, adyen, pix) on a shared engine:
core (truth, gateway seam, control API), emitter (webhooks with faults and retries),
idempotency (creates with each gateway's idempotency semantics), scenario (what a run
does) and server (one run's app). docs/fake-provider.md describes the whole.
"""

from __future__ import annotations

from porteiro.fakes.core import FakeGateway, FakePayment, Outcome, Settings, Step, Webhook
from porteiro.fakes.scenario import Scenario, scenario_from
from porteiro.fakes.server import GATEWAYS, FakeServer, gateway_class

__all__ = [
    "GATEWAYS",
    "FakeGateway",
    "FakePayment",
    "FakeServer",
    "Outcome",
    "Scenario",
    "Settings",
    "Step",
    "Webhook",
    "gateway_class",
    "scenario_from",
]
