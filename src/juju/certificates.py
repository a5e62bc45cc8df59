"""GARM's serving certificate from a ``tls-certificates`` provider, on ``certificates``.

The requirer library (``charmlibs.interfaces.tls_certificates``, V4) does the protocol,
in UNIT mode: each unit has its own key and certificate, so a new leader already holds
one. It asks for ``garm.tls.serving_hosts`` (external-url's host, the address runners
reach, loopback), again whenever that list changes and before expiry (a unique subject
id makes each renewal a new request). A provider that signs no IP addresses (ACME)
cannot serve this: its refusal is shown. The library's handlers raise on an answer
they cannot read; ``_GuardedRequirer`` contains that, since a hook failing at every
``leader-elected`` would block failover.
"""

from __future__ import annotations

import logging

import ops
from charmlibs.interfaces.tls_certificates import (
    CertificateRequestAttributes,
    Mode,
    ProviderCapabilities,
    TLSCertificatesError,
    TLSCertificatesRequiresV4,
)

from garm.tls import Awaited, ServingTls, is_address, serving_hosts
from juju import unit
from juju.config import ConfigError

logger = logging.getLogger(__name__)

RELATION = "certificates"
# X.509's upper bound on a common name (RFC 5280, ub-common-name).
_COMMON_NAME_LENGTH = 64


class Certificates:
    """The unit's side of the ``certificates`` relation."""

    def __init__(self, charm: ops.CharmBase, network: str):
        """``network`` is the endpoint whose address runners reach this unit at."""
        self._charm = charm
        self._network = network
        self.requirer = _GuardedRequirer(
            charm,
            RELATION,
            certificate_requests=self._requests,
            mode=Mode.UNIT,
            refresh_events=[charm.on.config_changed, charm.on.upgrade_charm],
        )

    def read(self) -> ServingTls | Awaited | None:
        """The certificate GARM is to serve; None when no provider is related."""
        relation = self._charm.model.get_relation(RELATION)
        if relation is None:
            return None
        provider = relation.app.name if relation.app else RELATION
        try:
            (request,) = self._requests(None)
            issued, key = self.requirer.get_assigned_certificate(request)
            error = self._refusal() if issued is None else ""
        except (TLSCertificatesError, ValueError, ops.ModelError) as exc:
            logger.warning("cannot read the certificate from %s: %s", provider, exc)
            return Awaited(f"Cannot read the certificate from {provider} ({RELATION})")
        if error:
            logger.warning("%s refused GARM's certificate request: %s", provider, error)
            why = f"{provider} refused GARM's certificate ({RELATION}): {error}"
            return Awaited(why, blocked=True)
        if issued is None or key is None:
            return Awaited(f"Waiting for a certificate from {provider} ({RELATION})")
        if issued.revoked:
            # The library forgets a revoked certificate but asks for none. A revocation
            # may mean the key is known to others: ask anew, with a new key.
            try:
                self.requirer.regenerate_private_key()
            except (TLSCertificatesError, ValueError, ops.ModelError) as exc:
                logger.warning("cannot ask for a new certificate: %s", exc)
            return Awaited(f"{provider} revoked GARM's certificate; waiting for a new one")
        return ServingTls(
            certificate=str(issued.certificate),
            chain=tuple(str(cert) for cert in issued.chain),
            ca=str(issued.ca),
            private_key=str(key),
        )

    def _requests(
        self, _capabilities: ProviderCapabilities | None
    ) -> list[CertificateRequestAttributes]:
        """One request: every host as a SAN, the first as the common name if it fits.

        A refused external-url names no host.
        """
        checked = unit.config(self._charm)
        external = "" if isinstance(checked, ConfigError) else checked.external_url
        hosts = serving_hosts(unit.ingress_address(self._charm.model, self._network), external)
        first = hosts[0]
        return [
            CertificateRequestAttributes(
                common_name=first if len(first) <= _COMMON_NAME_LENGTH else None,
                sans_ip=[host for host in hosts if is_address(host)],
                sans_dns=[host for host in hosts if not is_address(host)] or None,
            )
        ]

    def _refusal(self) -> str:
        """The provider's error for this unit's request, "" when there is none."""
        for request in self.requirer.get_csrs_from_requirer_relation_data():
            refused = self.requirer.get_request_error(request.certificate_signing_request)
            if refused is not None:
                return refused.error.message
        return ""


class _GuardedRequirer(TLSCertificatesRequiresV4):
    """The requirer, its (private) handlers logging what they cannot read, not raising.

    ``_configure`` raises ``TLSCertificatesError`` on a certificate or CA that is not
    PEM; ``Certificates.read`` then says what it cannot read.
    """

    def _configure(self, _: ops.EventBase | None = None) -> None:
        try:
            super()._configure(_)
        except (TLSCertificatesError, ValueError, ops.ModelError) as exc:
            logger.error("the certificates relation holds what cannot be used: %s", exc)

    def _on_secret_expired(self, event: ops.SecretExpiredEvent) -> None:
        try:
            super()._on_secret_expired(event)
        except (TLSCertificatesError, ValueError, ops.ModelError) as exc:
            logger.error("cannot renew GARM's certificate: %s", exc)
