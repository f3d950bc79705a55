"""Per gateway, end to end with real processes: `porteiro simulate SOURCE --lifecycle
--duplicates 3 --shuffle` against a running `porteiro serve`, then the final payment
states and histories are read back through the admin API.

Every simulated payment goes through its whole lifecycle, refunds included, and every
delivery is sent four times in random order: each payment must end `refunded`, with each
distinct event applied exactly once.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from porteiro.config.load import load_config
from porteiro.fakes.simulate import build_plan
from porteiro.providers import build_provider
from tests.fakes.mercadopago import FakeMercadoPago, payment
from tests.support.admin import admin_get, wait_processed
from tests.support.app import ADMIN_TOKEN
from tests.support.processes import run_porteiro, serving
from tests.support.servers import free_port, live_server_thread

pytestmark = pytest.mark.slow

MP_TOKEN = "TEST-e2e-access-token"
REPO = Path(__file__).resolve().parents[2]
DEV_KEYS = REPO / "examples" / "dev-keys"

SOURCES: dict[str, str] = {
    "adyen": """
[sources.adyen]
provider = "adyen"
secrets = ["44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"]
""",
    "standard": """
[sources.standard]
provider = "standard"
secrets = ["whsec_DWn+aYYze9MYgeZDUxzzW/SkFmkxH0Kj"]
""",
    "mercadopago": f"""
[sources.mercadopago]
provider = "mercadopago"
secrets = ["mp-e2e-webhook-secret"]
api_key = "{MP_TOKEN}"
""",
    "pagarme": f"""
[sources.pagarme]
provider = "pagarme"
jwks_file = "{DEV_KEYS / "pagarme-dev-jwks.json"}"
signing_key_file = "{DEV_KEYS / "pagarme-dev-private.pem"}"
signing_kid = "porteiro-dev"
""",
    "efi": """
[sources.efi]
provider = "pix"
keys = ["porteiro-dev@example.com"]
hmac_token = "efi-dev-hmac-token"
allow_ips = ["127.0.0.1"]
confirm = false
""",
    "stripe": """
[sources.stripe]
provider = "stripe"
secrets = ["whsec_dev_stripe_0123456789abcdef"]
""",
}


SEED, COUNT = 7, 6


def write_config(directory: Path, source: str, extra: str = "") -> Path:
    path = directory / "porteiro.toml"
    path.write_text(
        f"""
[store]
url = "sqlite:///{directory / "porteiro.db"}"

[admin]
token = "{ADMIN_TOKEN}"

[worker]
poll_interval_seconds = 0.1
{SOURCES[source]}{extra}
"""
    )
    return path


@contextmanager
def mercadopago_api(config: Path) -> Iterator[str]:
    """The fake payments API, already knowing the final (refunded) state of every payment
    the seeded `simulate` run will notify about: Mercado Pago's notifications are thin."""
    source = load_config(config, {}).sources["mercadopago"]
    plan = build_plan(
        build_provider(source), count=COUNT, duplicates=0, shuffle=False, refunds=1.0,
        now=datetime.now(UTC), rng=random.Random(SEED),
    )  # fmt: skip
    fake = FakeMercadoPago(MP_TOKEN)
    for sample in plan.payments:
        value = Decimal(sample.amount) / 100
        fake.payments[sample.object_id] = payment(
            sample.object_id, status="refunded", status_detail="refunded", amount=value,
            refunded=value, reference=sample.reference,
        )  # fmt: skip
    with live_server_thread(fake.app(), lifespan="off") as url:
        yield url


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_simulated_lifecycles_converge(source: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, source)
    with ExitStack() as stack:
        if source == "mercadopago":
            api = stack.enter_context(mercadopago_api(config))
            config = write_config(tmp_path, source, f'api_base_url = "{api}"\n')
        simulate_and_check(source, config, tmp_path)


def simulate_and_check(source: str, config: Path, tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with serving(config, port, tmp_path / "serve.log"):
        output = run_porteiro(
            config, "simulate", source, "--url", base, "--count", str(COUNT), "--lifecycle",
            "--duplicates", "3", "--shuffle", "--concurrency", "8", "--seed", str(SEED),
        )  # fmt: skip
        assert "5xx 0" in output and "4xx 0" in output
        events = wait_processed(base, source)
        # Every delivery was sent 4 times; an event carried by k distinct deliveries (a Pix
        # resent with its devoluções) is seen 4k times: 4k - 1 duplicates.
        assert all(e["duplicates"] % 4 == 3 for e in events), [e["duplicates"] for e in events]
        object_ids = {e["object_id"] for e in events if e["object_id"]}
        assert len(object_ids) == COUNT
        for object_id in sorted(object_ids):
            payment = admin_get(base, f"/api/payments/{source}/{object_id}")
            assert payment["state"] == "refunded", payment
            assert payment["refunded_amount"] == payment["amount"] > 0
            applied = [h["event_id"] for h in payment["history"]]
            assert len(applied) == len(set(applied)), "an event was applied twice"
            mine = {
                e["id"] for e in events if e["object_id"] == object_id and e["status"] == "done"
            }
            assert set(applied) == mine
