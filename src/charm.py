#!/usr/bin/env python3
"""The ops shell: every event runs one holistic reconcile; status comes from its outcome.

Only the leader runs GARM. A pass: make sure GARM is installed, configured and running
on this machine; make sure it has its admin, URLs, GitHub credentials and orgs/repos;
then reconcile its scalesets. All the deciding happens in ``state``, ``garm_setup``,
``planner`` and ``status``; this class gathers inputs from Juju and keeps the outcome
for collect-status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import string
from datetime import UTC, datetime
from pathlib import Path

import ops

import workload
from database import GarmDatabase
from garm_client import GarmApiError, GarmClient, GarmUnreachable
from garm_config import GarmConfig, Proxy, SqliteDatabase, render_files, render_unit
from garm_setup import (
    AdminLogin,
    ControllerUrls,
    apply_setup,
    ensure_admin_and_urls,
    plan_setup,
)
from planner import Observed
from reconciler import Outcome, describe_action, observe, preview, reconcile
from state import (
    ConfigError,
    GarmInputs,
    RelationState,
    UnitProblem,
    garm_inputs,
    relation_state,
    settings_from_config,
)
from status import Summary, summarise

logger = logging.getLogger(__name__)

CONFIGURATOR = "garm-configurator"
ADMIN_SECRET_LABEL = "garm-admin-credentials"  # noqa: S105 (a label, not a secret)
INTERNAL_SECRET_LABEL = "garm-internal"  # noqa: S105 (a label, not a secret)
ADMIN_USERNAME = "admin"
ADMIN_EMAIL = "admin@garm.local"
RESOURCES = ("garm", "garm-provider-openstack")
# A whole pass stops starting writes after this long; update-status picks up the rest.
PASS_BUDGET_SECONDS = 60.0
# How long to wait for GARM to answer after a (re)start, and when it should be up.
START_TIMEOUT_SECONDS = 30.0
RUNNING_TIMEOUT_SECONDS = 5.0
STANDING_BY = "Standing by: the leader unit runs GARM"


class _NotReadyError(Exception):
    """A pass cannot go on; carries the status that says why."""

    def __init__(self, summary: Summary):
        super().__init__(summary.message)
        self.summary = summary


class GarmCharm(ops.CharmBase):
    """Runs GARM and keeps its scalesets in line with the related configurators."""

    # Where GARM lives on the machine and who runs it; tests point these at a sandbox.
    paths = workload.Paths()
    service_user = workload.USER

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self._summary: Summary | None = None
        self._outcome: Outcome | None = None
        # Writes the database request and tracks the provider's answer; the events it
        # would add all come inside hooks observed below, so none is observed twice.
        self.database = GarmDatabase(self, "postgresql")
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
        event.set_results(dataclasses.asdict(self._admin()))

    def _on_plan(self, event: ops.ActionEvent) -> None:
        if not self.unit.is_leader():
            event.fail("Run this on the leader unit: juju run garm/leader plan")
            return
        try:
            settings = settings_from_config(self.config)
        except ConfigError as exc:
            event.fail(f"Invalid config: {exc}")
            return
        state = self._relation_state(None)
        try:
            with contextlib.closing(self._client()) as client:
                planned = preview(client, state.desired, _now(), settings)
        except (GarmUnreachable, GarmApiError) as exc:
            event.fail(f"Could not read GARM: {exc}")
            return
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
        """One holistic pass: GARM on the machine, GARM's setup, then its scalesets."""
        self._outcome = None
        if not self.unit.is_leader():
            if workload.stop(self.paths.unit_file):
                logger.info("not the leader any more: GARM stopped on this unit")
            return Summary("active", STANDING_BY)
        try:
            settings = settings_from_config(self.config)
        except ConfigError as exc:
            return Summary("blocked", f"Invalid config: {exc}")
        state = self._relation_state(event)
        inputs = garm_inputs(state.units, self._read_secret)
        try:
            self._ensure_running(inputs)
            with contextlib.closing(self._client()) as client:
                problems, observed = self._ensure_setup(client, inputs)
                self._outcome = reconcile(
                    client,
                    state.desired,
                    _now(),
                    settings,
                    budget=PASS_BUDGET_SECONDS,
                    observed=observed,
                )
        except _NotReadyError as exc:
            return exc.summary
        return summarise(self._outcome, state, problems)

    def _ensure_running(self, inputs: GarmInputs) -> None:
        """Install, configure and (re)start GARM as needed, then wait for it to answer."""
        sources: dict[str, Path] = {}
        for name in RESOURCES:
            path = self._resource(name)
            if path is None:
                message = f"Attach the {name} resource: juju attach-resource garm {name}=<file>"
                raise _NotReadyError(Summary("blocked", message))
            sources[name] = path
        paths, user = self.paths, self.service_user
        workload.ensure_user()
        changed = workload.install_binary(sources["garm"], paths.binary)
        changed |= workload.install_binary(
            sources["garm-provider-openstack"], paths.provider_binary
        )
        workload.ensure_directory(paths.data_dir, user)
        # With a provider's secret unreadable, keep the last configuration rather than
        # drop that provider and strand its live scaleset.
        if inputs.providers_complete or not paths.config_file.exists():
            files = render_files(self._garm_config(inputs))
            changed |= workload.write_files(paths.config_dir, files, user)
        unit = render_unit(str(paths.binary), str(paths.config_file), str(paths.data_dir), user)
        changed |= workload.ensure_service(paths.unit_file, unit)
        if changed or not workload.is_active():
            logger.info("starting GARM (configuration or binaries changed)")
            workload.restart()
            timeout = START_TIMEOUT_SECONDS
        else:
            timeout = RUNNING_TIMEOUT_SECONDS
        if not workload.wait_until_answering(self._api_url(), timeout):
            raise _NotReadyError(Summary("waiting", "Waiting for GARM to answer on its API port"))

    def _ensure_setup(
        self, client: GarmClient, inputs: GarmInputs
    ) -> tuple[list[UnitProblem], Observed]:
        """Admin, controller URLs, credentials and orgs/repos.

        Returns the problems to report and GARM's observation, which the scaleset pass
        reuses so a pass reads each list once.
        """
        try:
            ensure_admin_and_urls(
                client, self._admin(), ControllerUrls.from_base(self._base_url())
            )
            observed = observe(client)
            actions = plan_setup(
                inputs.credentials,
                inputs.entities,
                inputs.published,
                client.list_credentials(),
                observed.entities,
                observed.scalesets,
            )
            setup = apply_setup(client, actions)
            if actions:
                observed = dataclasses.replace(
                    observed,
                    entities=(*client.list_organizations(), *client.list_repositories()),
                )
        except GarmUnreachable as exc:
            raise _NotReadyError(
                Summary("waiting", f"GARM unreachable, will retry: {exc}")
            ) from None
        except GarmApiError as exc:
            if exc.status == 401:
                raise _NotReadyError(
                    Summary("blocked", "GARM refused the admin login kept by the charm")
                ) from None
            raise _NotReadyError(
                Summary("waiting", f"GARM setup failed, will retry: {exc}")
            ) from None
        problems = [*inputs.problems, *(UnitProblem("garm", e, False) for e in setup.errors)]
        return problems, observed

    # --- inputs from Juju -----------------------------------------------------------

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

    def _resource(self, name: str) -> Path | None:
        """A resource's file, or None when it is not attached (Juju may hand an empty one)."""
        try:
            path = self.model.resources.fetch(name)
        except (ops.ModelError, NameError):
            return None
        return path if path.stat().st_size > 0 else None

    def _read_secret(self, uri: str) -> str | None:
        """The ``value`` of a configurator's secret, or None when not (yet) granted."""
        try:
            content = self.model.get_secret(id=uri).get_content(refresh=True)
        except (ops.SecretNotFoundError, ops.ModelError):
            return None
        return content.get("value")

    def _app_secret(self, label: str, make: dict[str, str]) -> dict[str, str]:
        """An application secret the leader creates once with ``make`` as its content."""
        try:
            return self.model.get_secret(label=label).get_content(refresh=True)
        except ops.SecretNotFoundError:
            self.app.add_secret(make, label=label)
            return make

    def _admin(self) -> AdminLogin:
        content = self._app_secret(
            ADMIN_SECRET_LABEL,
            {
                "username": ADMIN_USERNAME,
                "password": strong_secret(32),
                "email": ADMIN_EMAIL,
            },
        )
        return AdminLogin(content["username"], content["email"], content["password"])

    def _garm_config(self, inputs: GarmInputs) -> GarmConfig:
        # GARM wants a zxcvbn-strong JWT secret and a passphrase of exactly 32 characters
        # that must never change (it encrypts what GARM stores).
        internal = self._app_secret(
            INTERNAL_SECRET_LABEL,
            {"jwt-secret": strong_secret(64), "db-passphrase": strong_secret(32)},
        )
        return GarmConfig(
            port=self._port(),
            jwt_secret=internal["jwt-secret"],
            db_passphrase=internal["db-passphrase"],
            database=self.database.postgresql() or SqliteDatabase(str(self.paths.sqlite_file)),
            providers=inputs.providers,
            proxy=Proxy(
                os.environ.get("JUJU_CHARM_HTTP_PROXY", ""),
                os.environ.get("JUJU_CHARM_HTTPS_PROXY", ""),
                os.environ.get("JUJU_CHARM_NO_PROXY", ""),
            ),
            provider_executable=str(self.paths.provider_binary),
            config_dir=str(self.paths.config_dir),
        )

    def _port(self) -> int:
        return int(self.config["api-port"])

    def _api_url(self) -> str:
        return f"http://127.0.0.1:{self._port()}"

    def _base_url(self) -> str:
        """The URL runners reach GARM at: configured, or this unit's address."""
        configured = str(self.config.get("external-url") or "").strip()
        if configured:
            return configured
        binding = self.model.get_binding(CONFIGURATOR)
        address = binding.network.ingress_address if binding else None
        return f"http://{address or '127.0.0.1'}:{self._port()}"

    def _client(self) -> GarmClient:
        admin = self._admin()
        return GarmClient(self._api_url(), admin.username, admin.password)


def strong_secret(length: int) -> str:
    """A random secret with every character class in it.

    GARM refuses weak values (zxcvbn score 4 for the admin password, the JWT secret and
    the database passphrase); random text of this length with every class passes any
    such check.
    """
    while True:
        value = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(length))
        if all(any(c in chars for c in value) for chars in _SECRET_CLASSES):
            return value


_SECRET_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits, "!#%+-.:=@^_~")
_SECRET_ALPHABET = "".join(_SECRET_CLASSES)


def _now() -> datetime:
    return datetime.now(UTC)


if __name__ == "__main__":  # pragma: nocover
    ops.main(GarmCharm)
