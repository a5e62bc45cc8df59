"""GARM's admin login token, kept on the machine from one hook to the next.

Otherwise every hook logs in afresh (``POST /auth/login``, a bcrypt check in GARM); a
token lives ``[jwt_auth] time_to_live``, at least 24 hours (docs/reference/garm-api.md
§1.2). It is GARM's admin until then and cannot be revoked: kept in root's 0600 file in
the charm's directory (``workload.Paths``), with the username it was issued to, never
logged. Offered while its unverified ``exp`` is more than ``MARGIN`` away (GARM checks
the signature); anything else costs one login. One GARM refuses all the same costs one
401 and a login (``client.GarmClient``); if that fails too, the file is deleted.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

from garm import workload
from garm.client import GarmClient

logger = logging.getLogger(__name__)

# How long before its expiry a token is no longer offered: a hook lasts minutes at most.
MARGIN = timedelta(hours=1)


@contextlib.contextmanager
def admin_client(
    path: Path,
    url: str,
    username: str,
    password: str,
    now: datetime,
    *,
    ca_file: Path | None,
) -> Iterator[GarmClient]:
    """A client of GARM's admin from the kept token, keeping the one it ends with, whatever."""
    token = load(path, username, now)
    ca = None if ca_file is None else str(ca_file)
    client = GarmClient(url, username, password, token=token, ca_file=ca)
    try:
        yield client
    finally:
        client.close()
        keep(path, username, client.token)


def load(path: Path, username: str, now: datetime) -> str | None:
    """The token kept for ``username``, if good for more than ``MARGIN`` after ``now``."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("username") != username:
        return None
    token = data.get("token")
    if not isinstance(token, str) or not token:
        return None
    expiry = expires(token)
    if expiry is None or expiry - now.timestamp() <= MARGIN.total_seconds():
        return None
    return token


def keep(path: Path, username: str, token: str | None) -> None:
    """Keep ``token`` for the next hooks (None deletes the file); a failure is only logged."""
    text = None if token is None else json.dumps({"token": token, "username": username})
    try:
        if text is None or _read(path) is None:
            path.unlink(missing_ok=True)
        if text is not None:
            workload.write_own(path, text, 0o600)
    except OSError as exc:
        logger.warning("GARM's admin token could not be kept (%s)", type(exc).__name__)


def expires(token: str) -> float | None:
    """When a JWT says it expires (``exp``, epoch seconds), unverified; None if it says none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, RecursionError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    try:
        seconds = float(exp)
    except OverflowError:  # an integer past any float
        return None
    return seconds if math.isfinite(seconds) else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None
