"""GARM's serving certificate from a ``tls-certificates`` provider, on ``certificates``.

The interface's requirer library (``charmlibs.interfaces.tls_certificates``, V4) does the
protocol: each unit makes its own private key (kept in a Juju secret only that unit can
read), puts its certificate request in its unit databag, watches the provider's answer
and asks again before the certificate expires or when what it asks for changes. UNIT
mode: whichever unit leads serves GARM's API with its own certificate, so a new leader
already holds one.

What is asked for is ``garm.tls.serving_hosts``: external-url's host, the unit's
address on the configurator relation's network (where runners reach it) and loopback
(where the charm's own client does). The library asks again whenever that list changes
(it re-reads it at every event it handles, and at ``config-changed`` and
``upgrade-charm``), and before the certificate expires: each request carries a unique
identifier in its subject (the library's default), so a renewal is a new request the
provider answers, not the same bytes it already answered. A provider that signs no IP
addresses (an ACME one) cannot serve this: its refusal is shown.

The library's own handlers raise on a provider's answer they cannot read; the charm
contains that (``_GuardedRequirer``), since a hook that fails on every
``leader-elected`` would keep a failover from ever happening.

The pass never sees ops: it gets ``read()``'s answer, a ``garm.tls.ServingTls``, an
``Awaited`` saying what is missing, or None without the relation.
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
            error = self._refusal(issued is None)
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
            self._rekey()
            return Awaited(f"{provider} revoked GARM's certificate; waiting for a new one")
        return ServingTls(
            certificate=str(issued.certificate),
            chain=tuple(str(cert) for cert in issued.chain),
            ca=str(issued.ca),
            private_key=str(key),
        )

    def hosts(self) -> tuple[str, ...]:
        """The names this unit's certificate is asked for.

        ``external-url`` as the charm's config check takes it: one it refuses (the pass
        says why) names nothing here, so that a typo cannot fail the library's hooks.
        """
        checked = unit.config(self._charm)
        external = "" if isinstance(checked, ConfigError) else checked.external_url
        return serving_hosts(unit.ingress_address(self._charm.model, self._network), external)

    def _requests(
        self, _capabilities: ProviderCapabilities | None
    ) -> list[CertificateRequestAttributes]:
        """One request: every host as a SAN, the first as the common name if it fits."""
        hosts = self.hosts()
        first = hosts[0]
        return [
            CertificateRequestAttributes(
                common_name=first if len(first) <= _COMMON_NAME_LENGTH else None,
                sans_ip=[host for host in hosts if is_address(host)],
                sans_dns=[host for host in hosts if not is_address(host)] or None,
            )
        ]

    def _refusal(self, unanswered: bool) -> str:
        """The provider's error for this unit's request, "" when there is none."""
        if not unanswered:
            return ""
        for request in self.requirer.get_csrs_from_requirer_relation_data():
            refused = self.requirer.get_request_error(request.certificate_signing_request)
            if refused is not None:
                return refused.error.message
        return ""

    def _rekey(self) -> None:
        try:
            self.requirer.regenerate_private_key()
        except (TLSCertificatesError, ValueError, ops.ModelError) as exc:
            logger.warning("cannot ask for a new certificate: %s", exc)


class _GuardedRequirer(TLSCertificatesRequiresV4):
    """The interface's requirer, whose handlers log what they cannot read, not raise it.

    The library reads the provider's databag in its own handlers (``_configure``, on
    relation-created and -changed, leader-elected and the refresh events) and raises
    ``TLSCertificatesError`` on a certificate or CA that is not PEM. The charm's rule is
    that no relation data raises out of a hook; the pass then says what it cannot read
    (``Certificates.read``). These are the library's own (private) handlers, wrapped.
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
