"""GARM's metrics token: which one the leader holds, and when it asks GARM for a new one.

GARM's ``/metrics`` wants a JWT with ``read_metrics`` from ``GET /api/v1/metrics-token``
(admin only, no parameter). It lives ``[jwt_auth] time_to_live``, never under 24 hours
(``config/config.go`` clamps it), and GARM checks only its signature, ``exp`` and claim
(``auth/metrics.go``): it keeps no record, so none can be revoked. It opens nothing else.

The leader holds it in the scrape job ``cos_agent`` publishes, with a record beside it (when
it was fetched, as the token has no ``iat``, and a fingerprint of the JWT secret). It is
renewed at half its lifetime or when the JWT secret changed; one past its ``exp`` is
withdrawn. Never logged, nor put in a message, an exception or a repr
(docs/explanation/security.md, "The metrics token").
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from garm.admin_token import expires
from garm.client import GarmError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeldToken:
    """The metrics token this unit holds, and when and under which JWT secret it came."""

    token: str = field(repr=False)
    fetched_at: datetime
    secret_fingerprint: str

    def record(self) -> str:
        """What is kept about the token beside its scrape job: never the token itself."""
        return json.dumps(
            {
                "fetched-at": self.fetched_at.isoformat(),
                "jwt-secret-fingerprint": self.secret_fingerprint,
            }
        )

    @classmethod
    def from_record(cls, token: str | None, text: str | None) -> HeldToken | None:
        """The token published, with ``record``'s text; None (fetch one) when either is unread.

        An older record's ``token`` key is ignored, and the next ``record`` drops it.
        """
        if not token or not text:
            return None
        try:
            data = json.loads(text)
            fetched_at = datetime.fromisoformat(data["fetched-at"])
            fingerprint = data["jwt-secret-fingerprint"]
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        if not isinstance(fingerprint, str) or fetched_at.tzinfo is None:
            return None
        return cls(token, fetched_at, fingerprint)


@dataclass(frozen=True)
class LeaderGarm:
    """The leader's GARM, as far as this hook knows it.

    ``jwt_secret`` None (unread) or ``fetch_token`` None (GARM did not answer): the held
    token is kept as it is.
    """

    api_port: int
    jwt_secret: str | None = field(default=None, repr=False)
    fetch_token: Callable[[], str] | None = field(default=None, repr=False)
    # Whether GARM serves HTTPS (a certificate from the certificates relation).
    https: bool = False
    # The CA (PEM) GARM's certificate is checked by then, as the charm's own client does.
    ca: str = ""


def secret_fingerprint(jwt_secret: str) -> str:
    """A short digest that tells one JWT secret from another and reveals nothing of it."""
    return hashlib.sha256(b"garm-jwt-secret\0" + jwt_secret.encode()).hexdigest()[:16]


def token_expiry(token: str) -> datetime | None:
    """A JWT's ``exp`` (``garm.admin_token.expires``) as a moment; None when it has none."""
    seconds = expires(token)
    try:
        return None if seconds is None else datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def renewal_due(held: HeldToken | None, now: datetime, fingerprint: str) -> str | None:
    """Why a new metrics token is needed now, or None to keep ``held``.

    Half its lifetime passed (the other half is left to retry in), or another JWT secret.
    """
    if held is None:
        return "no metrics token held"
    if held.secret_fingerprint != fingerprint:
        return "GARM's JWT secret changed"
    expires = token_expiry(held.token)
    if expires is None:
        return "the metrics token has no expiry"
    lifetime = expires - held.fetched_at
    if now >= expires or now >= held.fetched_at + lifetime / 2:
        return "half the metrics token's lifetime has passed"
    return None


def renewed(held: HeldToken | None, now: datetime, leader: LeaderGarm) -> HeldToken | None:
    """The token to hold from now: ``held``, or a new one when due and GARM can be asked.

    A failed fetch is logged and keeps ``held`` until it expires; the next hook tries again.
    """
    if leader.jwt_secret is None or leader.fetch_token is None:
        return _unexpired(held, now)
    fingerprint = secret_fingerprint(leader.jwt_secret)
    why = renewal_due(held, now, fingerprint)
    if why is None:
        return held
    try:
        token = leader.fetch_token()
    except Exception as exc:  # telemetry never fails a hook
        # A GarmError's text names the route and GARM's error, never a token; of anything
        # else (the admin login unreadable, a transport error) only its kind is told, as
        # its text is not known to be free of what was sent.
        told = exc if isinstance(exc, GarmError) else type(exc).__name__
        logger.warning("GARM's metrics token not renewed (%s): %s", why, told)
        return _unexpired(held, now)
    logger.info("GARM's metrics token renewed: %s", why)
    return HeldToken(token, now, fingerprint)


def _unexpired(held: HeldToken | None, now: datetime) -> HeldToken | None:
    """``held`` unless its ``exp`` has passed: GARM refuses it then, so it is not kept."""
    if held is None:
        return None
    expires = token_expiry(held.token)
    if expires is not None and now >= expires:
        logger.warning("GARM's metrics token expired before it was renewed: it is withdrawn")
        return None
    return held
