#!/usr/bin/env python3
"""The ops shell: every event runs one holistic reconcile; status comes from its outcome.

Only the leader talks to GARM. All the deciding happens in ``state`` (what is asked for),
``planner`` (what to do) and ``status`` (what to say); this class gathers inputs from
Juju, runs a pass, and keeps the outcome for collect-status.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from datetime import datetime, timezone
from pathlib import Path

import ops

from garm_client import GarmClient
from reconciler import Outcome, describe_action, preview, reconcile
from spec import Settings
from state import ConfigError, RelationState, relation_state, settings_from_config
from status import Summary, summarise

logger = logging.getLogger(__name__)

CONFIGURATOR = "garm-configurator"
ADMIN_SECRET_LABEL = "garm-admin-credentials"  # noqa: S105 (a label, not a secret)
ADMIN_USERNAME = "admin"
ADMIN_EMAIL = "admin@garm.local"
RESOURCES = ("garm", "garm-provider-openstack")
# A whole pass stops starting writes after this long; update-status picks up the rest.
PASS_BUDGET_SECONDS = 60.0
STANDING_BY = "Standing by: the leader unit runs GARM"


class GarmCharm(ops.CharmBase):
    """Runs GARM and keeps its scalesets in line with the related configurators."""

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self._summary: Summary | None = None
        self._outcome: Outcome | None = None
        on = self.on
        for event in (
            on.install,
            on.start,
            on.upgrade_charm,
            on.config_changed,
            on.leader_elected,
            on.update_status,
            on.secret_changed,
            on[CONFIGURATOR].relation_joined,
            on[CONFIGURATOR].relation_changed,
            on[CONFIGURATOR].relation_departed,
            on[CONFIGURATOR].relation_broken,
            on["postgresql"].relation_joined,
            on["postgresql"].relation_changed,
            on["postgresql"].relation_broken,
        ):
            framework.observe(event, self._on_change)
        framework.observe(on.collect_unit_status, self._on_collect_status)
        framework.observe(on.get_credentials_action, self._on_get_credentials)
        framework.observe(on.plan_action, self._on_plan)
        framework.observe(on.reconcile_action, self._on_reconcile)

    # --- events ---------------------------------------------------------------------

    def _on_change(self, event: ops.EventBase) -> None:
        self._summary = self._reconcile(event)

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        if self._summary is None:
            return  # an action that changed nothing: the last status still holds
        status = {
            "active": ops.ActiveStatus,
            "waiting": ops.WaitingStatus,
            "blocked": ops.BlockedStatus,
        }[self._summary.kind]
        event.add_status(status(self._summary.message))

    def _on_get_credentials(self, event: ops.ActionEvent) -> None:
        if not self.unit.is_leader():
            event.fail("Run this on the leader unit: juju run garm/leader get-credentials")
            return
        event.set_results(self._admin_credentials())

    def _on_plan(self, event: ops.ActionEvent) -> None:
        ready = self._ready(None)
        if isinstance(ready, Summary):
            event.fail(ready.message)
            return
        client, state, settings = ready
        with contextlib.closing(client):
            planned = preview(client, state.desired, _now(), settings)
        event.set_results(
            {
                "writes": str(len(planned.actions)),
                "actions": "\n".join(describe_action(a) for a in planned.actions) or "none",
                "phases": "\n".join(
                    f"{p.logical_name or p.scaleset}: {p.describe()}" for p in planned.progress
                )
                or "converged",
            }
        )

    def _on_reconcile(self, event: ops.ActionEvent) -> None:
        summary = self._summary = self._reconcile(None)
        done = self._outcome.done if self._outcome else ()
        event.set_results(
            {
                "status": f"{summary.kind}: {summary.message}",
                "done": "\n".join(describe_action(a) for a in done) or "none",
            }
        )

    # --- the pass -------------------------------------------------------------------

    def _reconcile(self, event: ops.EventBase | None) -> Summary:
        """One holistic pass: gather inputs, reconcile GARM, say what happened."""
        self._outcome = None
        ready = self._ready(event)
        if isinstance(ready, Summary):
            return ready
        client, state, settings = ready
        with contextlib.closing(client):
            self._outcome = reconcile(
                client, state.desired, _now(), settings, budget=PASS_BUDGET_SECONDS
            )
        return summarise(self._outcome, state)

    def _ready(
        self, event: ops.EventBase | None
    ) -> tuple[GarmClient, RelationState, Settings] | Summary:
        """Everything a pass needs, or the status saying why it cannot run."""
        if not self.unit.is_leader():
            return Summary("active", STANDING_BY)
        missing = [name for name in RESOURCES if not self._has_resource(name)]
        if missing:
            name = missing[0]
            return Summary(
                "blocked", f"Attach the {name} resource: juju attach-resource garm {name}=<file>"
            )
        try:
            settings = settings_from_config(self.config)
        except ConfigError as exc:
            return Summary("blocked", f"Invalid config: {exc}")
        credentials = self._admin_credentials()
        client = GarmClient(
            f"http://127.0.0.1:{self.config['api-port']}",
            credentials["username"],
            credentials["password"],
        )
        return client, self._relation_state(event), settings

    def _relation_state(self, event: ops.EventBase | None) -> RelationState:
        """Every configurator unit's databag, in a stable order, minus what is leaving."""
        gone_relation = event.relation.id if isinstance(event, ops.RelationBrokenEvent) else None
        gone_unit = event.departing_unit if isinstance(event, ops.RelationDepartedEvent) else None
        relations = [
            r
            for r in sorted(self.model.relations[CONFIGURATOR], key=lambda r: r.id)
            if r.id != gone_relation
        ]
        units = [
            (unit.name, dict(relation.data[unit]))
            for relation in relations
            for unit in sorted(relation.units, key=lambda u: u.name)
            if unit != gone_unit
        ]
        return relation_state(bool(relations), units)

    def _has_resource(self, name: str) -> bool:
        try:
            path = self.model.resources.fetch(name)
        except (ops.ModelError, NameError):
            return False
        return Path(path).stat().st_size > 0

    def _admin_credentials(self) -> dict[str, str]:
        """GARM's admin login, kept in an application secret the leader creates once."""
        try:
            return self.model.get_secret(label=ADMIN_SECRET_LABEL).get_content(refresh=True)
        except ops.SecretNotFoundError:
            content = {
                "username": ADMIN_USERNAME,
                "password": secrets.token_urlsafe(24),
                "email": ADMIN_EMAIL,
            }
            self.app.add_secret(content, label=ADMIN_SECRET_LABEL)
            return content


def _now() -> datetime:
    return datetime.now(timezone.utc)


if __name__ == "__main__":  # pragma: nocover
    ops.main(GarmCharm)
