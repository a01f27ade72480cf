"""``replog cluster up --secure``: a local cluster with a SASL_SSL listener for clients
and between brokers.

A CA and a broker certificate (for 127.0.0.1) are made in ``<dir>/certs``; each broker
also serves SASL_SSL with SCRAM-SHA-512 for clients and PLAIN for the brokers themselves,
which replicate and take the controller's requests over it (``inter.broker.listener.name``,
logged in as ``broker`` with a random password from the listener's JAAS entry, so no
ZooKeeper credential has to exist before they start). PLAINTEXT stays on 127.0.0.1 for
local tools. A SCRAM user ``admin`` with a random password is created once the brokers
are up, and the client settings to use (librdkafka / Kafka client properties) are
written to ``<dir>/client.properties`` and printed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from replog.cluster.certificates import make_ca, make_cert
from replog.cluster.launcher import LocalCluster
from replog.security import sasl
from replog.zk.client import KafkaZkClient

USER = "admin"
BROKER_USER = "broker"


@dataclass
class SecureCluster:
    directory: Path
    password: str
    broker_password: str

    @property
    def certs(self) -> Path:
        return self.directory / "certs"

    @property
    def overrides(self) -> dict[str, str]:
        return {
            "ssl.keystore.location": str(self.certs / "broker.pem"),
            "ssl.truststore.location": str(self.certs / "ca.pem"),
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": f"{sasl.SCRAM_SHA_512},{sasl.PLAIN}",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": sasl.PLAIN,
            # the brokers' login (username/password) and the one PLAIN user they accept
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{BROKER_USER}" password="{self.broker_password}" '
                f'user_{BROKER_USER}="{self.broker_password}";'
            ),
        }

    def add_user(self, cluster: LocalCluster) -> None:
        """The SCRAM user, in ``/config/users`` (what ``replog users add`` writes)."""
        zk = KafkaZkClient(cluster.zookeeper_connect)
        zk.start()
        try:
            config, version = zk.get_entity_config("users", USER)
            credential = sasl.scram_credential(sasl.SCRAM_SHA_512, self.password)
            updated = {**config, sasl.SCRAM_SHA_512: sasl.format_credential(credential)}
            zk.change_entity_config("users", USER, updated, version)
        finally:
            zk.close()

    def client_properties(self, cluster: LocalCluster) -> str:
        text = (
            f"bootstrap.servers={cluster.bootstrap_servers(listener='SASL_SSL')}\n"
            "security.protocol=SASL_SSL\n"
            f"sasl.mechanisms={sasl.SCRAM_SHA_512}\n"
            f"sasl.username={USER}\n"
            f"sasl.password={self.password}\n"
            f"ssl.ca.location={self.certs / 'ca.pem'}\n"
        )
        path = self.directory / "client.properties"
        path.write_text(text)
        path.chmod(0o600)
        shown = text.replace(f"sasl.password={self.password}", "sasl.password=(in the file)")
        return f"client configuration ({path}, readable by its owner only):\n{shown}"


def prepare_secure_cluster(directory: Path) -> SecureCluster:
    certs = directory / "certs"
    make_ca(certs, "ca")
    make_cert(certs, "broker", "ca", "/CN=127.0.0.1", "IP:127.0.0.1")
    return SecureCluster(directory, secrets.token_urlsafe(18), secrets.token_urlsafe(18))
