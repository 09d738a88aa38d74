"""librdkafka-style client settings -> Faust (aiokafka) credentials, so SASL/TLS reach the workers too."""
from __future__ import annotations

import ssl
from typing import Any


def faust_credentials(client: dict[str, str]) -> Any:
    import faust

    proto = client.get("security.protocol", "PLAINTEXT").upper()
    if proto == "PLAINTEXT":
        return None
    ctx = None
    if proto in ("SSL", "SASL_SSL"):
        ctx = ssl.create_default_context(cafile=client.get("ssl.ca.location"))
        if client.get("ssl.certificate.location"):
            ctx.load_cert_chain(client["ssl.certificate.location"], client.get("ssl.key.location"),
                                client.get("ssl.key.password"))
        if client.get("enable.ssl.certificate.verification", "true").lower() == "false":
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if proto == "SSL":
            return faust.SSLCredentials(ctx)
    mechanism = client.get("sasl.mechanism", client.get("sasl.mechanisms", "PLAIN")).upper()
    return faust.SASLCredentials(username=client.get("sasl.username"), password=client.get("sasl.password"),
                                 ssl_context=ctx, mechanism=mechanism)
