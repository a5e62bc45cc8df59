"""The charm's own Juju secrets, and reading the ones configurators grant it.

Application secrets, made by the leader: GARM's admin login; its JWT secret and
database passphrase (which must never change); and the providers GARM is configured
with (``garm.providers``), for the next leader: an OpenStack password has no place in
relation data.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import string

import ops

from garm.providers import Recorded, read_record, record_text
from garm.setup import NO_ADMIN_YET, AdminLogin
from juju.records import InternalSecrets
from juju.status import refuse_action
from juju.unit import leads
from juju.view import JujuView

logger = logging.getLogger(__name__)

ADMIN_SECRET_LABEL = "garm-admin-credentials"  # noqa: S105 (a label, not a secret)
INTERNAL_SECRET_LABEL = "garm-internal"  # noqa: S105 (a label, not a secret)
PROVIDERS_SECRET_LABEL = "garm-providers"  # noqa: S105 (a label, not a secret)
PROVIDERS_KEY = "providers"


class AdminLoginAction(ops.Object):
    """The ``get-credentials`` action: GARM's admin login, in its output alone (never logged)."""

    def __init__(self, charm: ops.CharmBase, view: JujuView):
        super().__init__(charm, "admin-login")
        self._view = view
        charm.framework.observe(charm.on.get_credentials_action, self._on_get_credentials)

    def _on_get_credentials(self, event: ops.ActionEvent) -> None:
        app, dying = self.model.app.name, self._view.dying()
        if refused := refuse_action(leads(self.model.unit), dying, "get-credentials", app):
            event.fail(refused)
        elif (admin := read_admin(self.model)) is None:
            event.fail(NO_ADMIN_YET)
        else:
            event.set_results(dataclasses.asdict(admin))


def ensure(model: ops.Model) -> bool:
    """Create the charm's own secrets if missing; True when any was just created.

    Juju stores a secret only when the hook that adds it succeeds, so one made in this
    hook is not used in it: had the hook failed after GARM took it, the next would make
    another that GARM refuses for good.
    """

    def admin() -> dict[str, str]:
        return {"username": "admin", "password": strong_secret(32), "email": "admin@garm.local"}

    def internal() -> dict[str, str]:
        # A zxcvbn-strong JWT secret; a passphrase of exactly 32 characters that must never
        # change (it encrypts what GARM stores).
        return {"jwt-secret": strong_secret(64), "db-passphrase": strong_secret(32)}

    created = False
    for label, make in ((ADMIN_SECRET_LABEL, admin), (INTERNAL_SECRET_LABEL, internal)):
        try:
            model.get_secret(label=label)
        except ops.SecretNotFoundError:
            model.app.add_secret(make(), label=label)
            created = True
    return created


def read_admin(model: ops.Model) -> AdminLogin | None:
    """GARM's admin login, or None while it cannot be read (``ensure`` has not made it)."""
    try:
        content = model.get_secret(label=ADMIN_SECRET_LABEL).get_content(refresh=True)
        return AdminLogin(content["username"], content["email"], content["password"])
    except (ops.ModelError, KeyError):
        return None


def read_internal(model: ops.Model) -> InternalSecrets | None:
    """GARM's JWT secret and database passphrase, or None while they cannot be read."""
    try:
        content = model.get_secret(label=INTERNAL_SECRET_LABEL).get_content(refresh=True)
        return InternalSecrets(content["jwt-secret"], content["db-passphrase"])
    except (ops.ModelError, KeyError):
        return None


def read_providers(model: ops.Model) -> tuple[Recorded, ...] | None:
    """The providers a leader last configured GARM with; None before any did, or unreadable."""
    try:
        content = model.get_secret(label=PROVIDERS_SECRET_LABEL).get_content(refresh=True)
    except ops.ModelError:  # SecretNotFoundError included: no leader recorded any yet
        return None
    record = read_record(content.get(PROVIDERS_KEY, ""))
    if record is None:
        logger.warning("the record of GARM's providers does not read: it is written over")
    return record


def keep_providers(model: ops.Model, record: tuple[Recorded, ...] | None) -> None:
    """Write the record of GARM's providers, a new revision; None leaves it as it is.

    Asked only on a change, so a settled pass makes no revision. One Juju refuses
    (before Juju 3.6.9 a secret holds at most 8 KiB, some twenty providers) is logged,
    not failing every hook: a new leader then keeps the record before and what it sees.
    """
    if record is None:
        return
    content = {PROVIDERS_KEY: record_text(record)}
    try:
        try:
            model.get_secret(label=PROVIDERS_SECRET_LABEL).set_content(content)
        except ops.SecretNotFoundError:
            model.app.add_secret(content, label=PROVIDERS_SECRET_LABEL)
    except ops.ModelError as exc:
        logger.error("the record of GARM's providers could not be written: %s", exc)


def configurator_value(model: ops.Model, uri: str) -> str | None:
    """The ``value`` of a configurator's secret, or None when not (yet) granted."""
    try:
        content = model.get_secret(id=uri).get_content(refresh=True)
    except (ops.SecretNotFoundError, ops.ModelError):
        return None
    return content.get("value")


def strong_secret(length: int) -> str:
    """A random secret with every character class in it: GARM wants zxcvbn score 4."""
    while True:
        value = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(length))
        if all(any(c in chars for c in value) for chars in _SECRET_CLASSES):
            return value


_SECRET_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits, "!#%+-.:=@^_~")
_SECRET_ALPHABET = "".join(_SECRET_CLASSES)
