"""A private CA and a server certificate for 127.0.0.1 / localhost, generated once per data directory.

Clients verify the emulator like any HTTPS server by trusting ``ca.pem`` (``requests`` ``verify=ca_file``), so the
code under test never needs ``verify=False``. Files are reused on restart so a client configured with the CA
file keeps working.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TlsFiles:
    ca_file: Path
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Salesforce emulator"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def ensure_tls(directory: Path) -> TlsFiles:
    """Create (or reuse) ``ca.pem``, ``server.pem`` and ``server.key`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    if all(p.exists() for p in (files.ca_file, files.cert_file, files.key_file)):
        return files
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=3650)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("Salesforce emulator local CA"))
        .issuer_name(_name("Salesforce emulator local CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca_cert.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files.key_file.write_bytes(_pem_key(server_key))
    files.key_file.chmod(0o600)
    files.cert_file.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    files.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return files


def connected_app_key_pair(directory: Path) -> tuple[Path, str]:
    """A private key file (``jwt.key``, RSA 2048, PEM) and its self-signed certificate (PEM text) for the JWT bearer
    flow: the certificate goes to the connected app (``Emulator.register_jwt_certificate``, or Setup in a real org),
    the key to the client (``SF_PRIVATE_KEY_FILE``). Created once, reused."""
    directory.mkdir(parents=True, exist_ok=True)
    key_file, cert_file = directory / "jwt.key", directory / "jwt.pem"
    if not (key_file.exists() and cert_file.exists()):
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name("CDC integration"))
            .issuer_name(_name("CDC integration"))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=3650))
            .sign(key, hashes.SHA256())
        )
        key_file.write_bytes(_pem_key(key))
        key_file.chmod(0o600)
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_file, cert_file.read_text()
