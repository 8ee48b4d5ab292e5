"""Throwaway certificates for the TLS tests: a CA and the leaves it signs, as PEM files.

`TestCa(directory, "name")` makes a CA; `server(...)` and `client(...)` issue leaf
certificates (for other names, or expired, when a test needs one). Every file
is written under `directory`; `Leaf.cert` / `Leaf.key` are their paths.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

LOOPBACK_NAMES = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class Leaf:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class TestCa:
    """A self-signed CA whose certificate is at `self.cert`."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, directory: Path, label: str = "ca") -> None:
        self.directory = directory
        self.label = label
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"{label} test CA"))
            .issuer_name(_name(f"{label} test CA"))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=2))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = directory / f"{label}.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def _issue(self, label: str, names: tuple[str, ...], expired: bool) -> Leaf:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)
        if expired:
            start, end = now - datetime.timedelta(days=1), now - datetime.timedelta(hours=1)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(label))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
        )
        if names:
            sans: list[x509.GeneralName] = []
            for name in names:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(name)))
                except ValueError:
                    sans.append(x509.DNSName(name))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        leaf = Leaf(
            self.directory / f"{self.label}-{label}.pem",
            self.directory / f"{self.label}-{label}.key",
        )
        leaf.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        leaf.key.write_bytes(_key_pem(key))
        return leaf

    def server(
        self, label: str = "server", names: tuple[str, ...] = LOOPBACK_NAMES, expired: bool = False
    ) -> Leaf:
        """A server certificate for `names` (DNS names and IP addresses)."""
        return self._issue(label, names, expired)

    def client(self, label: str = "client") -> Leaf:
        """A client certificate (for mutual TLS)."""
        return self._issue(label, (), False)
