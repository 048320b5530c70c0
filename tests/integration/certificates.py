"""Certificates the TLS tests make themselves: a CA, a server certificate for
localhost/127.0.0.1 and a client certificate, with the ``cryptography`` package or the
``openssl`` CLI."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import LOOPBACK


def certificate_paths(folder: Path) -> dict[str, Path]:
    return {
        "ca": folder / "ca.pem",
        "server_cert": folder / "server.pem",
        "server_key": folder / "server.key",
        "client_cert": folder / "client.pem",
        "client_key": folder / "client.key",
    }


def make_certificates(folder: Path) -> dict[str, Path]:
    """A fresh set (its own CA) in ``folder``, made with ``cryptography``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = certificate_paths(folder)
    _make_certificates_with_cryptography(paths)
    return paths


def client_context(certs: dict[str, Path], client_certificate: bool = False) -> ssl.SSLContext:
    """What trusts the server's certificates (and shows the client certificate if asked)."""
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    if client_certificate:
        context.load_cert_chain(str(certs["client_cert"]), str(certs["client_key"]))
    return context


def server_tls_flags(
    certs: dict[str, Path], *, mutual: bool = False, grpc: bool = False
) -> list[str]:
    """The server flags for TLS with ``certs`` on HTTP (and gRPC if asked), mutual if asked."""
    flags = []
    for protocol in ("http", "grpc") if grpc else ("http",):
        flags += [
            f"--{protocol}-use-ssl{'-mutual' if mutual else ''}=true",
            f"--{protocol}-server-cert={certs['server_cert']}",
            f"--{protocol}-server-key={certs['server_key']}",
        ]
        if mutual:
            flags.append(f"--{protocol}-root-cert={certs['ca']}")
    return flags


@pytest.fixture(params=["cryptography", "openssl"])
def certificates(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Path]:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate, made
    with the ``cryptography`` package or the ``openssl`` CLI (skipped if it is missing)."""
    paths = certificate_paths(tmp_path)
    if request.param == "cryptography":
        pytest.importorskip("cryptography")
        _make_certificates_with_cryptography(paths)
    else:
        if shutil.which("openssl") is None:
            pytest.skip("the openssl CLI is not installed")
        _make_certificates_with_openssl(tmp_path, paths)
    return paths


def _make_certificates_with_cryptography(paths: dict[str, Path]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def builder(subject: str, issuer: x509.Name, key: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def write(key: Any, cert: x509.Certificate, key_path: Path | None, cert_path: Path) -> None:
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if key_path is not None:
            key_path.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        builder("pytriton test CA", name("pytriton test CA"), ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    write(ca_key, ca_cert, None, paths["ca"])
    san = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(LOOPBACK))]
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        builder("localhost", ca_cert.subject, server_key)
        .add_extension(san, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    write(server_key, server_cert, paths["server_key"], paths["server_cert"])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = builder("pytriton test client", ca_cert.subject, client_key).sign(
        ca_key, hashes.SHA256()
    )
    write(client_key, client_cert, paths["client_key"], paths["client_cert"])


def _make_certificates_with_openssl(folder: Path, paths: dict[str, Path]) -> None:
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    new_key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    ca_key = folder / "ca.key"
    ca_subject = ("-subj", "/CN=pytriton test CA")
    openssl(
        "req",
        "-x509",
        *new_key,
        "-days",
        "1",
        *ca_subject,
        "-keyout",
        str(ca_key),
        "-out",
        str(paths["ca"]),
    )
    extensions = folder / "server.ext"
    extensions.write_text(f"subjectAltName=DNS:localhost,IP:{LOOPBACK}\n")
    for role, subject, extra in (
        ("server", "/CN=localhost", ("-extfile", str(extensions))),
        ("client", "/CN=pytriton test client", ()),
    ):
        request = folder / f"{role}.csr"
        key, cert = str(paths[f"{role}_key"]), str(paths[f"{role}_cert"])
        openssl("req", *new_key, "-subj", subject, "-keyout", key, "-out", str(request))
        signing = ("-CA", str(paths["ca"]), "-CAkey", str(ca_key), "-CAcreateserial")
        openssl("x509", "-req", "-in", str(request), *signing, "-days", "1", "-out", cert, *extra)
