"""GARM's serving certificate: checked as GARM will load it, and the CA runners get (ADR 0012).

GARM loads ``[apiserver.tls]`` with Go's ``tls.LoadX509KeyPair`` and refuses to start when
it fails (``config/config.go`` ``TLSConfig``): the certificate file's first PEM block is the
leaf, the rest its chain; the key is the leaf's. ``problem`` applies those rules and a
client's, so a certificate GARM or a runner would refuse never reaches GARM's files.
``runner_bundle`` is the controller's ``ca_cert_bundle``, which GARM hands every new runner.

Pure: PEM text in, text out. The private key is never logged nor put in a message.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

# Where GARM's TLS files sit, relative to its config dir (``workload.write_files``).
CERTIFICATE_FILE = "tls/certificate.pem"
KEY_FILE = "tls/key.pem"
# The CA the charm's own client checks GARM against.
CA_FILE = "tls/ca.pem"
# Where the charm's own client reaches GARM: on this machine, so the certificate names it.
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Awaited:
    """A certificate asked for and not usable yet: ``why``; ``blocked``: the provider refused."""

    why: str
    blocked: bool = False


@dataclass(frozen=True)
class ServingTls:
    """A certificate issued for this unit, its chain (leaf first), its CA, and the unit's key."""

    certificate: str
    chain: tuple[str, ...]
    ca: str
    private_key: str = field(repr=False)

    def above(self) -> tuple[str, ...]:
        """The chain's certificates other than the leaf, in the provider's order."""
        return tuple(pem for pem in self.chain if _normal(pem) != _normal(self.certificate))

    def certificate_file(self) -> str:
        """The file GARM serves: the leaf, then the chain's other certificates in order."""
        return "".join(_normal(pem) for pem in (self.certificate, *self.above()))

    def runner_bundle(self) -> bytes:
        """The CA bundle for runners: the CA and the chain's intermediates, once each.

        Handed out only once ``problem`` found the chain anchored at ``ca``, as runners
        trust all of it. Encoded as garm-provider-common's ``SanitizeCABundle`` stores one
        (duplicates by DER dropped, ``pem.Encode``d), so GARM's copy reads back as sent.
        """
        seen: dict[bytes, bytes] = {}
        for pem in (self.ca, *self.above()):
            try:
                cert = x509.load_pem_x509_certificate(pem.encode())
            except ValueError:
                continue  # ``problem`` refuses it before any bundle is sent
            seen.setdefault(cert.public_bytes(serialization.Encoding.DER), _pem(cert))
        return b"".join(seen.values())

    def expires(self) -> datetime | None:
        """When the leaf or a CA it is checked by stops being valid first; None if unread."""
        checked = (self.certificate, *self.above(), self.ca)
        try:
            certs = [x509.load_pem_x509_certificate(pem.encode()) for pem in checked]
        except ValueError:
            return None
        return min(cert.not_valid_after_utc for cert in certs)

    @classmethod
    def from_files(cls, certificate_file: str, key: str, ca_file: str) -> ServingTls | None:
        """The certificate GARM's files hold (as ``render_files`` wrote them); None if unread."""
        chain = tuple(_blocks(certificate_file))
        authorities = _blocks(ca_file)
        if not chain or not authorities or "PRIVATE KEY" not in key:
            return None
        return cls(chain[0], chain, authorities[0], key)


@dataclass(frozen=True)
class Readiness:
    """What GARM serves this pass (``tls``; None: plain HTTP), and what the operator is told.

    ``stop``: why the pass cannot go on (no certificate GARM may serve), ``blocked`` when
    only the operator can change that; ``refused``: told while GARM serves an older one.
    """

    tls: ServingTls | None = None
    stop: str = ""
    blocked: bool = False
    refused: str = ""


def readiness(
    asked: ServingTls | Awaited,
    served: Callable[[], ServingTls | None],
    now: datetime,
    hosts: tuple[str, ...],
) -> Readiness:
    """Whether the pass may go on over TLS: only while a valid certificate is served.

    ``asked`` is the provider's answer, ``served`` reads GARM's files. The provider's is
    served once GARM and a runner would take it (``problem``); until then the pass goes on
    with the one GARM serves while it holds for every name (a renewal outstanding, a
    refusal: then told, with its end date). With none valid, the pass stops.
    """
    if isinstance(asked, ServingTls):
        wrong = problem(asked, now, hosts)
        if wrong is None:
            return Readiness(asked)
        why, blocked = f"GARM's certificate (certificates relation): {wrong}", True
    else:
        why, blocked = asked.why, asked.blocked
    held = served()
    if held is None or problem(held, now, hosts) is not None:
        return Readiness(stop=why, blocked=blocked)
    until = held.expires()
    holds = f"; GARM serves its certificate until {until:%Y-%m-%d}" if until else ""
    return Readiness(held, refused=f"{why}{holds}" if blocked else "")


def serving_hosts(address: str | None, external_url: str) -> tuple[str, ...]:
    """Every name GARM's certificate must carry, once each.

    ``external_url``'s host and the unit's address (runners are told one) and loopback.
    """
    hosts = (urlsplit(external_url).hostname or "", address or "", LOOPBACK)
    return tuple(dict.fromkeys(host for host in hosts if host))


def runner_url(external_url: str, address: str | None, port: int, secure: bool) -> str:
    """The URL runners reach GARM at: ``external_url`` when set, else the unit's address.

    Over TLS the scheme is https whatever ``external_url`` says: GARM answers only that.
    """
    scheme = "https" if secure else "http"
    if external_url:
        parts = urlsplit(external_url)
        if not secure or parts.scheme == "https":
            return external_url
        # http's port stays the port: https would otherwise mean 443 where 80 was meant.
        netloc = parts.netloc if parts.port is not None else f"{parts.netloc}:80"
        return parts._replace(scheme=scheme, netloc=netloc).geturl()
    host = address or LOOPBACK
    if is_address(host) and ipaddress.ip_address(host).version == 6:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def plain_http_warning(url: str, app: str) -> str | None:
    """What to log when runners reach GARM at ``url`` over plain HTTP off this machine.

    ``app`` is the application's name as deployed, which the hint names.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    loopback = is_address(host) and ipaddress.ip_address(host).is_loopback
    if parts.scheme == "https" or host == "localhost" or loopback:
        return None
    return (
        f"GARM serves its API over plain HTTP at {url}: runners fetch their GitHub "
        "registration over it unencrypted. Relate a tls-certificates provider "
        f"(juju integrate {app}:certificates <provider>) to serve it over HTTPS"
    )


def is_address(host: str) -> bool:
    """Whether ``host`` is an IP address (an IP SAN) rather than a DNS name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def problem(tls: ServingTls, now: datetime, hosts: tuple[str, ...]) -> str | None:
    """Why GARM, or a runner reaching one of ``hosts``, would refuse ``tls``; None if neither.

    The rules of ``tls.LoadX509KeyPair`` (the leaf parses; the key parses and is the
    leaf's), then what a client would check: the chain in order, each issued by the
    next; the leaf anchored at the CA; each valid at ``now``; naming every host.
    """
    try:
        leaf = x509.load_pem_x509_certificate(tls.certificate.encode())
        chain = [leaf, *(x509.load_pem_x509_certificate(p.encode()) for p in tls.above())]
        anchor = x509.load_pem_x509_certificate(tls.ca.encode())
    except ValueError:
        return "a certificate in it is not PEM"
    public = _public_key(tls.private_key)
    if public is None:
        return "this unit's private key does not load"
    if public != leaf.public_key():
        return "the certificate is not for this unit's private key"
    if not _anchored(chain, anchor):
        return "its chain is out of order or not issued by its CA"
    for cert in (*chain, anchor):
        start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
        if not start <= now <= end:
            which = "it is" if cert is leaf else "a CA of its chain is"
            return f"{which} not valid now (valid {start:%Y-%m-%d} to {end:%Y-%m-%d})"
    missing = [host for host in hosts if not _names(leaf, host)]
    if missing:
        return f"it does not name {', '.join(missing)}"
    return None


@functools.lru_cache(maxsize=4)
def _public_key(private_key: str) -> PublicKeyTypes | None:
    """The public half of a PEM private key; None when it does not load.

    Loading an RSA key validates it, some 60 ms of CPU; a pass checks both the asked and the
    held certificate against this unit's one key, and a hook runs one pass, so the key is
    loaded once per hook (and once per key in the unit tests' thousands of passes).
    """
    try:
        return serialization.load_pem_private_key(private_key.encode(), None).public_key()
    except (ValueError, TypeError):
        return None


def _anchored(chain: list[x509.Certificate], anchor: x509.Certificate) -> bool:
    """Whether each certificate of ``chain`` is issued by the next, the last by ``anchor``.

    The anchor may stand in the chain itself (a provider's chain often ends with its CA).
    """
    for cert, issuer in zip(chain, [*chain[1:], anchor], strict=True):
        if cert == issuer:
            continue
        try:
            cert.verify_directly_issued_by(issuer)
        except (ValueError, TypeError, InvalidSignature):
            return False
    return True


def _names(cert: x509.Certificate, host: str) -> bool:
    """Whether ``cert``'s SANs cover ``host`` as clients match them: a ``*`` is one label."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    if is_address(host):
        return ipaddress.ip_address(host) in san.get_values_for_type(x509.IPAddress)
    wanted = host.lower().rstrip(".")
    for name in san.get_values_for_type(x509.DNSName):
        name = name.lower().rstrip(".")
        if name == wanted:
            return True
        if name.startswith("*.") and "." in wanted and wanted.split(".", 1)[1] == name[2:]:
            return True
    return False


def _normal(pem: str) -> str:
    return pem.strip() + "\n"


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _blocks(text: str) -> list[str]:
    """A PEM text's certificates in order, as written by ``cryptography``; none if unread."""
    try:
        certs = x509.load_pem_x509_certificates(text.encode())
    except ValueError:
        return []
    return [_pem(cert).decode() for cert in certs]
