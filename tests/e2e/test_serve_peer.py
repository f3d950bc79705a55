"""`porteiro serve` hands the adapters the TCP peer as it is, not what X-Forwarded-For
claims: which proxies may speak for a client is each source's own setting.

Through the real CLI server (uvicorn would otherwise rewrite the client address from
X-Forwarded-For for every request from 127.0.0.1, its default trusted proxy).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import httpx

from porteiro.providers.pix.auth import EFI_WEBHOOK_IPS
from porteiro.providers.pix.samples import body, pix_item
from tests.support.processes import serving
from tests.support.servers import free_port

CHAVE = "c0ffee00-5b2d-4e8f-9a7c-1d2e3f4a5b6c"
EFI_IP = EFI_WEBHOOK_IPS[0]
PROXY_VERIFIED = {"x-ssl-client-verify": "SUCCESS", "x-ssl-client-s-dn": "CN=webhook.efipay.com.br"}


def write_config(folder: Path) -> Path:
    path = folder / "porteiro.toml"
    path.write_text(
        f"""
[store]
url = "sqlite:///{folder / "porteiro.db"}"

[sources.behind_nginx]
provider = "pix"
trusted_proxies = ["127.0.0.1"]
keys = ["{CHAVE}"]
confirm = false

[sources.efi_direct]
provider = "pix"
hmac_token = "e2e-token"
allow_ips = ["{EFI_IP}"]
keys = ["{CHAVE}"]
confirm = false
"""
    )
    return path


def test_a_trusted_local_proxy_is_seen_as_the_peer_and_nobody_else_is(tmp_path: Path) -> None:
    port = free_port()
    item = pix_item(txid=None, amount=1500, chave=CHAVE, at=datetime.now(UTC), rng=random.Random(1))
    payload = body(item)
    with serving(write_config(tmp_path), port, tmp_path / "serve.log", "--no-worker"):
        base = f"http://127.0.0.1:{port}/webhooks"

        def post(path: str, headers: dict[str, str]) -> httpx.Response:
            return httpx.post(f"{base}/{path}", content=payload, headers=headers, timeout=10)

        # nginx on the same host verified the certificate and names the client: the
        # peer Porteiro sees is the proxy (trusted), so its headers count.
        behind = post("behind_nginx", {**PROXY_VERIFIED, "x-forwarded-for": EFI_IP})
        assert behind.status_code == 200, behind.text
        # Without trusted proxies, a claimed address changes nothing: the peer is
        # 127.0.0.1, which is not Efí's allowed address.
        claimed = post("efi_direct?hmac=e2e-token", {"x-forwarded-for": EFI_IP})
        assert claimed.status_code == 401
        assert claimed.json() == {"error": "forbidden_peer"}
