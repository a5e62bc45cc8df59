"""GARM's metrics token: which one the leader holds, and when it asks GARM for a new one.

GARM's ``/metrics`` wants a metrics token (a JWT with ``read_metrics``, from ``GET
/api/v1/metrics-token``; lifetime ``[jwt_auth] time_to_live``; signed with the JWT
secret, so a new secret voids it). Only the leader holds one. It is renewed once half its
lifetime has passed or the JWT secret changed; ``cos_agent`` keeps it in the collector's
databag. The token grants reading GARM's metrics and nothing else (GARM's API refuses
it: it names no user). It is never logged: nothing here puts it in a message, an
exception or a repr.

Pure but for the one call the leader's GARM makes (``LeaderGarm.fetch_token``): the
leader's pass builds a ``LeaderGarm`` without knowing the collector's databag.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from garm.client import GarmError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeldToken:
    """The metrics token this unit holds, and when and under which JWT secret it came."""

    token: str = field(repr=False)
    fetched_at: datetime
    secret_fingerprint: str

    def to_json(self) -> str:
        """The form kept in the databag under ``TOKEN_KEY``."""
        return json.dumps(
            {
                "token": self.token,
                "fetched-at": self.fetched_at.isoformat(),
                "jwt-secret-fingerprint": self.secret_fingerprint,
            }
        )

    @classmethod
    def from_json(cls, text: str | None) -> HeldToken | None:
        """Back from ``to_json``; None when absent or unreadable (a new one is fetched)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            held = cls(
                data["token"],
                datetime.fromisoformat(data["fetched-at"]),
                data["jwt-secret-fingerprint"],
            )
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        if not isinstance(held.token, str) or not isinstance(held.secret_fingerprint, str):
            return None
        if held.fetched_at.tzinfo is None:
            return None
        return held


@dataclass(frozen=True)
class LeaderGarm:
    """The leader's GARM, as far as this hook knows it.

    ``jwt_secret`` is None when it cannot be read now, and ``fetch_token`` None when GARM
    did not answer this hook: either way the held token is kept as it is.
    """

    api_port: int
    jwt_secret: str | None = field(default=None, repr=False)
    fetch_token: Callable[[], str] | None = field(default=None, repr=False)


def secret_fingerprint(jwt_secret: str) -> str:
    """A short digest that tells one JWT secret from another and reveals nothing of it."""
    return hashlib.sha256(b"garm-jwt-secret\0" + jwt_secret.encode()).hexdigest()[:16]


def token_expiry(token: str) -> datetime | None:
    """The ``exp`` of a JWT, read without verifying it; None when it has none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    segment = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        payload = json.loads(base64.urlsafe_b64decode(segment))
    except (ValueError, binascii.Error, RecursionError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    try:
        return datetime.fromtimestamp(exp, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def renewal_due(held: HeldToken | None, now: datetime, fingerprint: str) -> str | None:
    """Why a new metrics token is needed now, or None to keep ``held``.

    A token is renewed once half its lifetime (from when it was fetched to its ``exp``)
    has passed, which leaves the other half to retry in, and at once when GARM's JWT
    secret is not the one it was signed with.
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

    A failed fetch keeps ``held`` (it may still be good) and is logged; the next hook
    tries again.
    """
    if leader.jwt_secret is None or leader.fetch_token is None:
        return held
    fingerprint = secret_fingerprint(leader.jwt_secret)
    why = renewal_due(held, now, fingerprint)
    if why is None:
        return held
    try:
        token = leader.fetch_token()
    except GarmError as exc:
        # GarmError texts name the route and GARM's error, never a token.
        logger.warning("GARM's metrics token not renewed (%s): %s", why, exc)
        return held
    except Exception as exc:  # telemetry never fails a hook
        # Anything else (the admin login unreadable, a transport error): its kind only,
        # as its text is not known to be free of what was sent.
        logger.warning("GARM's metrics token not renewed (%s): %s", why, type(exc).__name__)
        return held
    logger.info("GARM's metrics token renewed: %s", why)
    return HeldToken(token, now, fingerprint)
