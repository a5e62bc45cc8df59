"""Certificates for tests: CAs, chains, leaves and keys made here, so each test says them.

Why not the interface library's ``generate_*``: tests need what a provider would never
issue on purpose (a leaf for the wrong key, an expired one, a chain out of order, a CA
that did not sign it), and exact SANs and validity.

    root = Authority("Test Root CA")
    inter = root.intermediate("Test Intermediate CA")
    leaf = inter.issue(hosts=("127.0.0.1", "garm.internal"))
    tls = leaf.serving_tls()            # ServingTls: chain leaf, inter; ca root

    serving_tls(hosts=("10.0.0.5",))    # the same in one call (``intermediate=True``)

For a charm test on the ``tls-certificates`` relation, ``provider_app_databag`` answers
the CSRs the requirer library wrote into its unit databag with the application databag a
provider would write, in the library's own encoding (each key a JSON string).

EC P-256 keys by default (fast; GARM, curl and Python's ssl take them); ``rsa=True`` for
RSA 2048 like the library's. Nothing here touches the network or the disk.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from garm.config import GarmConfig, Proxy, SqliteDatabase, render_files
from garm.tls import ServingTls

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
# Far enough either side of any clock a test runs on that "now" is inside.
_BEFORE = timedelta(days=1)
_VALID = timedelta(days=365)


def new_key(*, rsa_key: bool = False) -> PrivateKey:
    """A fresh private key: EC P-256, or RSA 2048 with ``rsa_key``."""
    if rsa_key:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: PrivateKey) -> str:
    """``key`` as unencrypted PKCS#8 PEM (what GARM's key file holds)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def cert_pem(cert: x509.Certificate) -> str:
    """``cert`` as PEM, newline-terminated."""
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def san(hosts: Iterable[str]) -> x509.SubjectAlternativeName:
    """SANs for ``hosts``: an IP address entry for each address, a DNS entry otherwise."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _window(
    not_before: datetime | None, not_after: datetime | None, now: datetime | None
) -> tuple[datetime, datetime]:
    now = now or datetime.now(UTC)
    start = not_before or now - _BEFORE
    return start, not_after or start + _VALID + _BEFORE


@dataclass(frozen=True)
class Leaf:
    """A leaf certificate, the key it was issued for, and the CAs above it (nearest first)."""

    certificate: x509.Certificate
    key: PrivateKey = field(repr=False)
    issuers: tuple[Authority, ...]

    @property
    def pem(self) -> str:
        return cert_pem(self.certificate)

    @property
    def key_pem(self) -> str:
        return key_pem(self.key)

    @property
    def root(self) -> Authority:
        return self.issuers[-1]

    def chain(self) -> tuple[str, ...]:
        """The provider's chain: the leaf, then each CA above it up to the root."""
        return (self.pem, *(ca.pem for ca in self.issuers))

    def serving_tls(
        self,
        *,
        chain: tuple[str, ...] | None = None,
        ca: str | None = None,
        private_key: str | None = None,
    ) -> ServingTls:
        """As the charm builds it from the relation: the leaf, the chain, the root, the key;
        each replaceable to make a broken one."""
        return ServingTls(
            certificate=self.pem,
            chain=self.chain() if chain is None else chain,
            ca=self.root.pem if ca is None else ca,
            private_key=self.key_pem if private_key is None else private_key,
        )


class Authority:
    """A CA: a self-signed root, or an intermediate signed by ``parent``."""

    def __init__(
        self,
        name: str = "Test Root CA",
        *,
        parent: Authority | None = None,
        not_before: datetime | None = None,
        not_after: datetime | None = None,
        rsa_key: bool = False,
    ):
        self.name = name
        self.parent = parent
        self.key = new_key(rsa_key=rsa_key)
        start, end = _window(not_before, not_after, None)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        signer = parent.key if parent else self.key
        issuer = parent.certificate.subject if parent else subject
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
        )
        if parent:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(parent.key.public_key()),
                critical=False,
            )
        self.certificate = builder.sign(signer, hashes.SHA256())

    def __repr__(self) -> str:
        return f"Authority({self.name!r})"

    @property
    def pem(self) -> str:
        return cert_pem(self.certificate)

    def path(self) -> tuple[Authority, ...]:
        """This CA and every CA above it, up to the root."""
        return (self, *(self.parent.path() if self.parent else ()))

    def intermediate(self, name: str = "Test Intermediate CA") -> Authority:
        """A CA this one signs."""
        return Authority(name, parent=self)

    def issue(
        self,
        hosts: Iterable[str] = ("127.0.0.1",),
        *,
        common_name: str | None = None,
        not_before: datetime | None = None,
        not_after: datetime | None = None,
        now: datetime | None = None,
        key: PrivateKey | None = None,
        rsa_key: bool = False,
    ) -> Leaf:
        """A server certificate naming ``hosts`` in its SANs (none: no SAN extension),
        valid from a day before ``now`` for a year unless the window is given."""
        hosts = tuple(hosts)
        key = key or new_key(rsa_key=rsa_key)
        subject = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, common_name or (hosts or ("leaf",))[0])]
        )
        names = san(hosts) if hosts else None
        cert = self._sign_leaf(
            subject, key.public_key(), names, _window(not_before, not_after, now)
        )
        return Leaf(cert, key, self.path())

    def sign_csr(
        self,
        csr_pem: str,
        *,
        not_before: datetime | None = None,
        not_after: datetime | None = None,
    ) -> x509.Certificate:
        """A certificate for a CSR, with its subject and its SANs, as a provider issues it."""
        csr = x509.load_pem_x509_csr(csr_pem.encode())
        if not csr.is_signature_valid:
            raise ValueError("the CSR's signature does not verify")
        try:
            names = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            names = None
        public = csr.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
            raise ValueError("only EC and RSA keys are signed here")
        return self._sign_leaf(csr.subject, public, names, _window(not_before, not_after, None))

    def _sign_leaf(
        self,
        subject: x509.Name,
        public: ec.EllipticCurvePublicKey | rsa.RSAPublicKey,
        names: x509.SubjectAlternativeName | None,
        window: tuple[datetime, datetime],
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.certificate.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(window[0])
            .not_valid_after(window[1])
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if names is not None:
            builder = builder.add_extension(names, critical=False)
        return builder.sign(self.key, hashes.SHA256())


def serving_tls(
    hosts: Iterable[str] = ("127.0.0.1",),
    *,
    intermediate: bool = False,
    root: Authority | None = None,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
) -> ServingTls:
    """A good ``ServingTls`` for ``hosts``: from ``root`` (a new one if None), through an
    intermediate with ``intermediate``, valid now unless the window is given."""
    ca = root or Authority()
    signer = ca.intermediate() if intermediate else ca
    return signer.issue(hosts, not_before=not_before, not_after=not_after).serving_tls()


# --------------------------------------------------------------------------- the relation


def requested_csrs(unit_databag: Mapping[str, str]) -> list[str]:
    """The CSRs the requirer library wrote into its unit databag (non-CA requests only)."""
    requests = json.loads(unit_databag.get("certificate_signing_requests", "[]"))
    return [r["certificate_signing_request"] for r in requests if not r.get("ca")]


def provider_certificate(
    authority: Authority,
    csr_pem: str,
    *,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
) -> dict[str, object]:
    """One entry of the provider's ``certificates``, as the library's ``_Certificate``:
    the CSR answered by ``authority``, ``ca`` the root, ``chain`` leaf first up to the root.
    PEMs stripped, as the library writes them (``str(Certificate)``)."""
    cert = authority.sign_csr(csr_pem, not_before=not_before, not_after=not_after)
    csr = x509.load_pem_x509_csr(csr_pem.encode())
    chain = [cert_pem(cert), *(ca.pem for ca in authority.path())]
    return {
        "ca": authority.path()[-1].pem.strip(),
        "certificate_signing_request": csr.public_bytes(serialization.Encoding.PEM)
        .decode()
        .strip(),
        "certificate": chain[0].strip(),
        "chain": [pem.strip() for pem in chain],
    }


def provider_app_databag(
    unit_databag: Mapping[str, str],
    authority: Authority,
    *,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
) -> dict[str, str]:
    """The provider's application databag answering every CSR in the requirer's unit
    databag: ``{"certificates": "<JSON list>"}``, as ``_ProviderApplicationData.dump``
    writes it (``request_errors`` and ``capabilities`` left at their defaults, so absent)."""
    entries = [
        provider_certificate(authority, csr, not_before=not_before, not_after=not_after)
        for csr in requested_csrs(unit_databag)
    ]
    return {"certificates": json.dumps(entries)}


# --------------------------------------------------------------------------- GARM's files


def write_garm_files(directory: Path, tls: ServingTls | None) -> dict[str, str]:
    """What ``render_files`` renders for a GARM serving ``tls`` (None: plain HTTP),
    written under ``directory`` as its config dir; the files by name."""
    config = GarmConfig(
        port=9997,
        jwt_secret="jwt-Secret-0f8d2c!x",
        db_passphrase="Fw8#kq2L!vT9zR4x@pM6sD1&hJ3nB7cY",
        database=SqliteDatabase("/var/lib/garm/garm.db"),
        providers=(),
        proxy=Proxy(),
        provider_executable="/usr/local/bin/garm-provider-openstack",
        config_dir=str(directory),
        tls=tls,
    )
    files = render_files(config)
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return files
