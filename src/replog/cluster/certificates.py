"""Certificates for local secured clusters, tests and benchmarks, made with the
``openssl`` command: a CA, and certificates it signs (PEM; the bundle file holds the
certificate then its key, as ``ssl.keystore.location`` takes it)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    try:
        subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"openssl {args[0]} failed: {exc.stderr.decode()[-300:]}") from None


def make_ca(directory: Path, name: str = "ca", days: int = 30) -> Path:
    """``<name>.pem`` (the CA certificate, a truststore) and ``<name>.key``."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days),
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    return directory / f"{name}.pem"


def make_cert(
    directory: Path, name: str, ca: str, subject: str, san: str = "", days: int = 30
) -> Path:
    """``<name>.pem``: a certificate for ``subject`` signed by CA ``ca`` (made by
    ``make_ca`` in ``directory``) followed by its key; also ``<name>.crt`` and
    ``<name>.key`` apart, as librdkafka's ``ssl.certificate.location``/``ssl.key.location``
    take them. ``san``: e.g. ``IP:127.0.0.1``."""
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.csr", "-subj", subject,
        cwd=directory,
    )  # fmt: skip
    ext = directory / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", str(days), "-out", f"{name}.crt", "-extfile", ext.name,
        cwd=directory,
    )  # fmt: skip
    bundle = directory / f"{name}.pem"
    bundle.write_text(
        (directory / f"{name}.crt").read_text() + (directory / f"{name}.key").read_text()
    )
    return bundle
