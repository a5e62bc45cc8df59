"""GARM's admin login token, kept on the machine from one hook to the next.

Why: every hook is a new process, and a client that logs in afresh spends a request
(``POST /auth/login``, and a bcrypt check inside GARM) on every hook, one of the few a
settled hook makes. GARM's login token is a JWT that lives ``[jwt_auth] time_to_live``,
never less than 24 hours (docs/reference/garm-api.md §1.2; the charm renders 24 h), so
one login serves the hooks of a day at the very least.

The token is GARM's admin for as long as it lives, and GARM cannot revoke it: it is kept
in a file of root's, 0600, in the charm's own directory (``workload.Paths``), written
atomically (``workload.write_own``), with the admin username it was issued to. Nothing
here logs it or puts it in an exception, and nothing else reads the file.

It is offered again while its ``exp`` is more than ``MARGIN`` away. The payload is read
without checking the signature: the charm need not trust the token (GARM checks every
one it is sent), only know when to stop offering it. Anything else counts as no token
and costs one login: no file, a file that does not read, another shape, a token that is
not a JWT or says no ``exp``, one for another username, one about to expire.

A token GARM refuses all the same (GARM restarted with another JWT secret, on another
database, the admin's password changed: GARM refuses a token once the password's
generation moved on) costs one 401: the client logs in once and retries
(``client.GarmClient``), and the new token replaces the file. When that login fails as
well the client is left with no token, and the file is deleted: no later hook offers a
token GARM refused.
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
from garm.config import JWT_CLOCK_SLACK, JWT_LIFETIME

logger = logging.getLogger(__name__)

# How long before its expiry a token is no longer offered. A hook lasts minutes at most
# (the reconcile timer gives it 600 s), so a token offered is still good when the hook
# ends; one of GARM's shortest lifetime (24 h) still serves 23 hours of hooks.
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
    """A client of GARM's admin that starts from the kept token, and keeps the one it ends with.

    Kept however the block ends, an exception included: a fresh login's token is worth
    keeping even when a later request failed, and one GARM refused must go.
    """
    token = load(path, username, now)
    ca = None if ca_file is None else str(ca_file)
    client = GarmClient(url, username, password, token=token, ca_file=ca)
    try:
        yield client
    finally:
        client.close()
        keep(path, username, client.token)


def load(path: Path, username: str, now: datetime) -> str | None:
    """The token kept for ``username``, if it is good for more than ``MARGIN`` after ``now``.

    Not one that lives longer than a token GARM issues now would (``JWT_LIFETIME``): it
    was issued before the charm shortened GARM's lifetime, and is let go.
    """
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
    if expiry - now.timestamp() > (JWT_LIFETIME + JWT_CLOCK_SLACK).total_seconds():
        return None  # issued under a longer lifetime than GARM gives now: log in afresh
    return token


def keep(path: Path, username: str, token: str | None) -> None:
    """Keep ``token`` for the next hooks, or none (None deletes the file).

    Written only when it changes, so a settled hook writes nothing. A file that cannot
    be written costs the next hook a login, never this one its end: it is logged, by the
    kind of error alone.
    """
    text = None if token is None else json.dumps({"token": token, "username": username})
    try:
        if text is None or _read(path) is None:
            path.unlink(missing_ok=True)
        if text is not None:
            workload.write_own(path, text, 0o600)
    except OSError as exc:
        logger.warning("GARM's admin token could not be kept (%s)", type(exc).__name__)


def expires(token: str) -> float | None:
    """When a JWT says it expires (``exp``, seconds since the epoch), unverified.

    None when it is no JWT, or says no finite number.
    """
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
    """The file's text; None when there is none, or it does not read as text."""
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None
