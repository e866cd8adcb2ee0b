"""Certificates and keys for one throw-away control plane, and the kubeconfig files that use them.

This module owns the PKI the local control plane runs with, modelled on controller-runtime's envtest:
one CA (ECDSA P-256) that signs the kube-apiserver serving certificate (SANs 127.0.0.1, localhost, the
`kubernetes` Service's ClusterIP and names, and the address pods reach it on where there is one) and the
client certificates (CN = user, O = groups; the admin and the API server's kubelet client are in
`system:masters`), plus an RSA key pair that signs and verifies ServiceAccount tokens. `issue` signs more
(the real node's kubelet serving and client certificates). Everything lives in a private directory of the run and is
valid for one week.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=7)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files of one control plane."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.directory / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.directory / "admin.key"

    @property
    def kubelet_client_cert(self) -> Path:
        return self.directory / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        return self.directory / "apiserver-kubelet-client.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name(attributes)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(data)


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


# The `kubernetes` Service: its ClusterIP (the first address of the service range) and DNS names.
KUBERNETES_SERVICE_IP = "10.96.0.1"
KUBERNETES_SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


def _sans(dns: tuple[str, ...], ips: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    return names + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]


def _write_leaf(path_cert: Path, path_key: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    path_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(path_key, _key_pem(key))


def issue(
    pki: Pki,
    stem: str,
    common_name: str,
    organizations: tuple[str, ...] = (),
    *,
    server: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> tuple[Path, Path]:
    """Sign `<stem>.crt`/`<stem>.key` in the PKI's directory with its CA: a client certificate, or a serving
    one (`server`) for the names and addresses given. Returns the two paths."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key}: not the EC key this module writes")
    ca_name = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()).subject
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    cert, key = _leaf(ca_key, ca_name, _name(common_name, organizations), usage, _sans(dns, ips))
    paths = (pki.directory / f"{stem}.crt", pki.directory / f"{stem}.key")
    _write_leaf(*paths, cert, key)
    return paths


def generate(directory: Path, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Write a fresh CA, serving cert, admin and kubelet-client certs and ServiceAccount key pair into `directory`.

    `extra_ips`: more addresses the API server is reached on (the real node's pod-facing address)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    pki = Pki(directory)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("grpo-operator-local-ca", ("grpo-operator",))
    now = dt.datetime.now(dt.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(pki.ca_key, _key_pem(ca_key))

    serving, serving_key = _leaf(
        ca_key,
        ca_name,
        _name("localhost"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        _sans(("localhost", *KUBERNETES_SERVICE_NAMES), ("127.0.0.1", KUBERNETES_SERVICE_IP, *extra_ips)),
    )
    _write_leaf(pki.serving_cert, pki.serving_key, serving, serving_key)

    # kube-apiserver's identity towards kubelets (logs, exec, port-forward): kubelets authorize it by
    # SubjectAccessReview, which `system:masters` passes.
    kubelet_client, kubelet_client_key = _leaf(
        ca_key,
        ca_name,
        _name("grpo-apiserver-kubelet-client", ("system:masters",)),
        ExtendedKeyUsageOID.CLIENT_AUTH,
        [],
    )
    _write_leaf(pki.kubelet_client_cert, pki.kubelet_client_key, kubelet_client, kubelet_client_key)

    admin, admin_key = _leaf(ca_key, ca_name, _name("admin", ("system:masters",)), ExtendedKeyUsageOID.CLIENT_AUTH, [])
    pki.admin_cert.write_bytes(admin.public_bytes(serialization.Encoding.PEM))
    _write_private(pki.admin_key, _key_pem(admin_key))

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_private(pki.sa_key, _key_pem(sa_key))
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, pki: Pki, user: dict[str, str], name: str = "grpo-local") -> Path:
    """Write a one-cluster, one-user kubeconfig for `server` (trusting the CA) to `path` (mode 0600)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(pki.ca_cert)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
    return path


def admin_user(pki: Pki) -> dict[str, str]:
    return {"client-certificate-data": _b64(pki.admin_cert), "client-key-data": _b64(pki.admin_key)}
