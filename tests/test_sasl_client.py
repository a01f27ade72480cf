"""The client side of SASL (``replog.security.sasl_client``), pure: its SCRAM exchange
against the broker's ``ScramServer`` and against ``scramp``'s independent server, its
checks of what the server says (the final signature, the nonce, the iteration count),
and PLAIN against ``PlainServer``."""

from __future__ import annotations

import base64

import pytest
from scramp import ScramMechanism

from replog.security import sasl
from replog.security.sasl import AuthenticationFailed
from replog.security.sasl_client import PlainClient, ScramClient, client_for


def _exchange(client, server) -> None:
    token = client.first()
    while token is not None:
        token = client.evaluate(server.evaluate(token))


@pytest.mark.parametrize("mechanism", [sasl.SCRAM_SHA_256, sasl.SCRAM_SHA_512])
def test_scram_against_the_broker(mechanism: str) -> None:
    stored = {"al,ice=": sasl.scram_credential(mechanism, "pässword")}
    server = sasl.ScramServer(mechanism, stored.get)
    client = ScramClient(mechanism, "al,ice=", "pässword")
    _exchange(client, server)
    assert client.complete and server.complete and server.user == "al,ice="
    wrong = ScramClient(mechanism, "al,ice=", "password")
    with pytest.raises(AuthenticationFailed):
        _exchange(wrong, sasl.ScramServer(mechanism, stored.get))
    assert not wrong.complete


def test_scram_against_scramp() -> None:
    m = ScramMechanism("SCRAM-SHA-512")
    salt, stored_key, server_key, iterations = m.make_auth_info("secret", iteration_count=4096)
    server = m.make_server(lambda user: (salt, stored_key, server_key, iterations))
    client = ScramClient(sasl.SCRAM_SHA_512, "bob", "secret")
    server.set_client_first(client.first().decode())
    final = client.evaluate(server.get_server_first().encode())
    server.set_client_final(final.decode())  # scramp checks the proof
    assert client.evaluate(server.get_server_final().encode()) is None and client.complete


def test_the_client_checks_the_server() -> None:
    credential = sasl.scram_credential(sasl.SCRAM_SHA_512, "secret")
    server = sasl.ScramServer(sasl.SCRAM_SHA_512, lambda user: credential)
    client = ScramClient(sasl.SCRAM_SHA_512, "bob", "secret")
    client.evaluate(server.evaluate(client.first()))
    forged = "v=" + base64.b64encode(b"\0" * 64).decode()
    with pytest.raises(AuthenticationFailed, match="signature"):
        client.evaluate(forged.encode())
    assert not client.complete
    # A server nonce that does not extend the client's; too few iterations; an error.
    salt = base64.b64encode(b"salt").decode()
    for server_first, reason in [
        (f"r=other,s={salt},i=4096", "nonce"),
        (f"r=n0nce+server,s={salt},i=100", "iterations"),
        ("e=unknown-user", "unknown-user"),
    ]:
        client = ScramClient(sasl.SCRAM_SHA_512, "bob", "secret", nonce=lambda: "n0nce")
        client.first()
        with pytest.raises(AuthenticationFailed, match=reason) as failure:
            client.evaluate(server_first.encode())
        assert "secret" not in str(failure.value)


def test_plain_and_unknown_mechanisms() -> None:
    server = sasl.PlainServer({"carol": "pw"})
    client = client_for("plain", "carol", "pw")
    assert isinstance(client, PlainClient)
    _exchange(client, server)
    assert client.complete and server.user == "carol"
    with pytest.raises(AuthenticationFailed):
        _exchange(PlainClient("carol", "nope"), sasl.PlainServer({"carol": "pw"}))
    with pytest.raises(ValueError, match="GSSAPI"):
        client_for("GSSAPI", "u", "p")
