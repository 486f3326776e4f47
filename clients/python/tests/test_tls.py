"""The clients over TLS: lease serve --tls-cert/--tls-key with a certificate
the client's ssl_context trusts; one it does not trust is refused."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from leasehq_lease import AsyncLeaseClient, LeaseClient, UnavailableError

from conftest import RENEWED_TTL, StartServer, past_first_ttl, renewed_past, renewed_past_async, unique


def certificate(d: Path) -> tuple[str, str]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl not found: the TLS tests make their certificate with it (Debian: openssl)")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    key.chmod(0o600)
    return str(cert), str(key)


def test_tls(start_server: StartServer, tmp_path: Path) -> None:
    cert, key = certificate(tmp_path)
    s = start_server(args=("--tls-cert", cert, "--tls-key", key))
    url = s.url.replace("http://", "https://")
    trusting = ssl.create_default_context(cafile=cert)
    c = LeaseClient(url, ssl_context=trusting)
    k = unique("tls")
    with c.acquire(k, RENEWED_TTL) as h:
        renewed_past(h, past_first_ttl(h))  # over TLS
        h.check()
        got = c.get(k)
        assert got is not None and got.token == h.token
    # The system's CAs do not know the certificate: nothing is sent.
    with pytest.raises(UnavailableError):
        LeaseClient(url).get(k)

    async def main() -> None:
        ac = AsyncLeaseClient(url, ssl_context=trusting)
        async with ac.acquire(k, RENEWED_TTL) as ah:
            await renewed_past_async(ah, past_first_ttl(ah))
            ah.check()
        assert await ac.get(k) is None
        with pytest.raises(UnavailableError):
            await AsyncLeaseClient(url).get(k)
        await ac.close()

    asyncio.run(main())
