#!/usr/bin/env python3
"""The ops shell: every event runs one holistic reconcile; status comes from its outcome.

Only the leader runs GARM. A pass: make sure GARM is installed, configured and running
on this machine; make sure it has its admin, URLs, GitHub credentials and orgs/repos;
then reconcile its scalesets. All the deciding happens in ``state``, ``lifecycle``,
``garm_setup``, ``planner`` and ``status``; this class gathers inputs from Juju and keeps
the outcome for collect-status.

From its first hook of being removed (a ``-departed`` whose departing unit is this one,
or goal-state saying it is dying) a unit reconciles no more: what it sees then is its
own view shrinking, not the operator's intent (``docs/adr/0002``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import ops
from cosl import JujuTopology

from garm import resources, timer, workload
from garm.client import GarmApiError, GarmClient, GarmUnreachable
from garm.config import (
    Database,
    GarmConfig,
    OpenstackProvider,
    PostgresqlDatabase,
    Proxy,
    SqliteDatabase,
    read_provider,
    render_files,
    render_unit,
)
from garm.models import ScaleSet
from garm.setup import (
    ControllerUrls,
    apply_setup,
    ensure_admin_and_urls,
    plan_setup,
)
from juju import lifecycle, secrets
from juju.config import FIRST_UNPRIVILEGED_PORT, CharmConfig, ConfigError, read_config
from juju.postgresql import GarmDatabase
from juju.relation import GarmInputs, RelationState, UnitProblem, garm_inputs
from juju.sqlite_home import PEERS, SqliteHome
from juju.status import Summary, describe_progress, summarise
from juju.view import DEBUG_SSH, JujuView
from observe import cos_agent, endpoint
from scalesets.planner import Observed
from scalesets.reconciler import Outcome, describe_action, observe, preview, reconcile
from scalesets.refusals import KEY as MEMORY_KEY
from scalesets.refusals import CreateMemory

logger = logging.getLogger(__name__)

CONFIGURATOR = "garm-configurator"
RESOURCES = ("garm", "garm-provider-openstack")
# A whole pass stops starting writes after this long; update-status picks up the rest.
PASS_BUDGET_SECONDS = 60.0
# How long to wait for GARM to answer after a (re)start, and when it should be up.
START_TIMEOUT_SECONDS = 30.0
RUNNING_TIMEOUT_SECONDS = 5.0
STANDING_BY = "Standing by: the leader unit runs GARM"
BEING_REMOVED = "Being removed: this unit changes no scaleset any more"
# The charm's own files (alert rules, dashboards) sit under src/ beside this module.
CHARM_ROOT = Path(__file__).resolve().parent.parent


class _NotReadyError(Exception):
    """A pass cannot go on; carries the status that says why."""

    def __init__(self, summary: Summary):
        super().__init__(summary.message)
        self.summary = summary


class ReconcileTickEvent(ops.EventBase):
    """The leader's reconcile timer fired (``reconcile_timer``): run a pass now."""


class GarmEvents(ops.CharmEvents):
    """Juju's events, and the one the reconcile timer dispatches with juju-exec."""

    reconcile_tick = ops.EventSource(ReconcileTickEvent)


class GarmCharm(ops.CharmBase):
    """Runs GARM and keeps its scalesets in line with the related configurators."""

    on = GarmEvents()  # type: ignore[reportIncompatibleVariableOverride]

    # Where GARM lives on the machine, who runs it and what time it is; tests point these
    # at a sandbox and at a clock they move.
    paths = workload.Paths()
    service_user = workload.USER
    now: Callable[[], datetime] = staticmethod(lambda: datetime.now(UTC))

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self._summary: Summary | None = None
        self._outcome: Outcome | None = None
        # What the leader's pass read, for its metrics (endpoint.publish).
        self._config: CharmConfig | None = None
        self._garm_version = ""
        self.view = JujuView(self, CONFIGURATOR)
        self.sqlite_home = SqliteHome(self, self.view.alive, self.paths)
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
            on.leader_settings_changed,
            on.update_status,
            on.secret_changed,
            on[CONFIGURATOR].relation_created,
            on[CONFIGURATOR].relation_joined,
            on[CONFIGURATOR].relation_changed,
            on[CONFIGURATOR].relation_departed,
            on[CONFIGURATOR].relation_broken,
            on["postgresql"].relation_joined,
            on["postgresql"].relation_changed,
            on["postgresql"].relation_departed,
            on["postgresql"].relation_broken,
            on[PEERS].relation_changed,
            on[PEERS].relation_departed,
            on[DEBUG_SSH].relation_changed,
            on[DEBUG_SSH].relation_departed,
            on[DEBUG_SSH].relation_broken,
            on[cos_agent.RELATION].relation_created,
            on[cos_agent.RELATION].relation_joined,
            on[cos_agent.RELATION].relation_changed,
            on.reconcile_tick,
        ):
            framework.observe(event, self._on_change)
        framework.observe(on.stop, self._on_stop)
        framework.observe(on.remove, self._on_remove)
        framework.observe(on.collect_unit_status, self._on_collect_status)
        framework.observe(on.get_credentials_action, self._on_get_credentials)
        framework.observe(on.plan_action, self._on_plan)
        framework.observe(on.reconcile_action, self._on_reconcile)

    # --- events ---------------------------------------------------------------------

    def _on_change(self, event: ops.EventBase) -> None:
        self.view.note(event)
        self.sqlite_home.note_data()
        self._summary = self._reconcile(event)
        self._publish_cos_agent()

    def _on_stop(self, event: ops.StopEvent) -> None:
        """The unit is going: GARM stops with it (relations were torn down before)."""
        self.view.note(event)
        timer.remove(self.paths)
        endpoint.remove(self.paths)
        self.unit.set_ports()
        if workload.stop(self.paths.unit_file):
            logger.info("unit stopping: GARM stopped")
        self._summary = Summary("maintenance", BEING_REMOVED)

    def _on_remove(self, _: ops.RemoveEvent) -> None:
        """Take GARM's configuration, secrets and data off the machine."""
        timer.remove(self.paths)
        endpoint.remove(self.paths)
        workload.stop(self.paths.unit_file)
        workload.remove(self.paths)
        logger.info("GARM's files removed from this machine")

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        if self._summary is None:
            return  # an action that changed nothing: the last status still holds
        status = {
            "active": ops.ActiveStatus,
            "maintenance": ops.MaintenanceStatus,
            "waiting": ops.WaitingStatus,
            "blocked": ops.BlockedStatus,
        }[self._summary.kind]
        event.add_status(status(self._summary.message))

    def _on_get_credentials(self, event: ops.ActionEvent) -> None:
        if not self.unit.is_leader():
            event.fail("Run this on the leader unit: juju run garm/leader get-credentials")
            return
        try:
            admin = secrets.admin_login(self.model)
        except ops.SecretNotFoundError:
            event.fail("GARM's admin login is not made yet; try again after the next hook")
            return
        event.set_results(dataclasses.asdict(admin))

    def _on_plan(self, event: ops.ActionEvent) -> None:
        if not self.unit.is_leader():
            event.fail("Run this on the leader unit: juju run garm/leader plan")
            return
        if self.view.dying():
            event.fail(BEING_REMOVED)
            return
        try:
            config = read_config(self.config)
        except ConfigError as exc:
            event.fail(f"Invalid config: {exc}")
            return
        state = self._relation_state(None, config)
        try:
            with contextlib.closing(self._client(config)) as client:
                planned = preview(
                    client,
                    state.desired,
                    self.now(),
                    config.settings,
                    self._memory(),
                    budget=PASS_BUDGET_SECONDS,
                )
        except ops.SecretNotFoundError:
            event.fail("GARM's admin login is not made yet; try again after the next hook")
            return
        except GarmUnreachable as exc:
            event.fail(f"Could not read GARM: {exc}")
            return
        except GarmApiError as exc:
            event.fail(f"Could not read GARM: {exc.cause}")
            return
        event.set_results(
            {
                "writes": str(len(planned.actions)),
                "actions": "\n".join(describe_action(a) for a in planned.actions) or "none",
                "phases": "\n".join(describe_progress(p) for p in planned.progress) or "converged",
                # What the pass would stop at: a write the charm cannot even make, or its
                # budget spent (the next pass goes on from there).
                "errors": "\n".join(e.error for e in planned.errors) or "none",
                "cut-short": "yes" if planned.cut_short else "no",
            }
        )

    def _on_reconcile(self, event: ops.ActionEvent) -> None:
        if not self.unit.is_leader():
            event.fail("Run this on the leader unit: juju run garm/leader reconcile")
            return
        if self.view.dying():
            event.fail(BEING_REMOVED)
            return
        summary = self._summary = self._reconcile(None)
        self._publish_cos_agent()
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
        if self.view.dying():
            timer.remove(self.paths)
            endpoint.remove(self.paths)
            self.unit.set_ports()
            return Summary("maintenance", BEING_REMOVED)
        if not self.unit.is_leader():
            timer.remove(self.paths)
            endpoint.remove(self.paths)
            self.unit.set_ports()
            self.unit.set_workload_version("")  # no GARM runs here
            if workload.stop(self.paths.unit_file):
                logger.info("not the leader any more: GARM stopped on this unit")
            if self.sqlite_home.crowded():
                return Summary("blocked", lifecycle.SQLITE_MULTI_UNIT)
            return Summary("active", STANDING_BY)
        started = time.monotonic()
        summary = self._lead(event)
        config = self._config
        endpoint.publish(
            self.paths,
            self._outcome,
            ended=self.now(),
            duration=time.monotonic() - started,
            reconcile_interval=config.reconcile_interval if config else 0,
            settings=config.settings if config else None,
            version=self._garm_version,
        )
        return summary

    def _lead(self, event: ops.EventBase | None) -> Summary:
        """The leader's pass, from its config on; ``_reconcile`` publishes its metrics."""
        self._config = None
        try:
            config = read_config(self.config)
        except ConfigError as exc:
            logger.error("invalid config: %s", exc)
            return Summary("blocked", f"Invalid config: {exc}")
        self._config = config
        if secrets.ensure(self.model):
            return Summary("waiting", "Secrets created; GARM is set up on the next hook")
        state = self._relation_state(event, config)
        inputs = garm_inputs(state.units, lambda uri: secrets.configurator_value(self.model, uri))
        try:
            problems = self._ensure_running(inputs, config)
            # GARM runs on this leader now: so does the timer that reconciles it, and its
            # API port is open (``juju expose`` then lets runners reach it).
            timer.keep(self.paths, self.unit.name, config.reconcile_interval)
            self.unit.set_ports(config.api_port)
            with contextlib.closing(self._client(config)) as client:
                setup_problems, observed = self._ensure_setup(
                    client, inputs, state.desired.complete, config
                )
                problems += setup_problems
                self._outcome = reconcile(
                    client,
                    state.desired,
                    self.now(),
                    config.settings,
                    budget=PASS_BUDGET_SECONDS,
                    observed=observed,
                    memory=self._memory(),
                )
            self._remember(self._outcome.memory)
        except _NotReadyError as exc:
            return exc.summary
        self.view.tell(state, self._outcome)
        return summarise(self._outcome, state, problems)

    def _publish_cos_agent(self) -> None:
        """Tell the collector on this machine what to scrape, alert on and show.

        Every unit hands it the rules and dashboards; the leader also the scrape jobs,
        with GARM's metrics token, renewed only when this pass reached GARM. A leader
        whose config cannot be read leaves what it published before.
        """
        relations = self.model.relations[cos_agent.RELATION]
        if not relations:
            return
        leader = None
        if self.unit.is_leader():
            try:
                config = read_config(self.config)
            except ConfigError:
                return
            try:
                jwt_secret = secrets.internal(self.model)["jwt-secret"]
            except (ops.ModelError, KeyError):
                jwt_secret = None
            answered = self._outcome is not None
            leader = cos_agent.LeaderGarm(
                api_port=config.api_port,
                jwt_secret=jwt_secret,
                fetch_token=(lambda: self._metrics_token(config)) if answered else None,
            )
        try:
            telemetry = cos_agent.load_telemetry(CHARM_ROOT, JujuTopology.from_charm(self))
        except Exception as exc:  # telemetry never fails a hook
            logger.error("cos-agent data not built: %s", exc)
            return
        for relation in relations:
            try:
                cos_agent.publish(relation.data[self.unit], telemetry, self.now(), leader)
            except ops.ModelError as exc:
                logger.warning("cos-agent data not published on %s: %s", relation.id, exc)

    def _metrics_token(self, config: CharmConfig) -> str:
        with contextlib.closing(self._client(config)) as client:
            return client.get_metrics_token()

    def _ensure_running(self, inputs: GarmInputs, config: CharmConfig) -> list[UnitProblem]:
        """Install, configure and (re)start GARM as needed, then wait for it to answer.

        Returns the problems with GARM's database to report.
        """
        paths, user = self.paths, self.service_user
        sources: dict[str, resources.Prepared] = {}
        for name in RESOURCES:
            path = self._resource(name)
            if path is None:
                message = f"Attach the {name} resource: juju attach-resource garm {name}=<file>"
                raise _NotReadyError(Summary("blocked", message))
            try:
                sources[name] = resources.prepare_once(name, path, paths.staging)
            except resources.ResourceError as exc:
                logger.error("%s", exc)
                raise _NotReadyError(Summary("blocked", str(exc))) from None
        self._garm_version = sources["garm"].version or ""
        self.unit.set_workload_version(self._garm_version)
        workload.ensure_user()
        changed = workload.install_binary(sources["garm"].path, paths.binary)
        changed |= workload.install_binary(
            sources["garm-provider-openstack"].path, paths.provider_binary
        )
        workload.ensure_directory(paths.data_dir, user)
        had_config = paths.config_file.exists()
        database, problems = self._database(config)
        on_sqlite = isinstance(database, SqliteDatabase)
        # A unit that never ran GARM must not start one, on sqlite or on a database that
        # is new to it, while another unit's sqlite data holds the scalesets.
        if on_sqlite or not had_config:
            tenancy = self.sqlite_home.tenancy(claim=on_sqlite)
            if not tenancy.may_run:
                raise _NotReadyError(Summary("blocked", tenancy.problem))
            if on_sqlite and tenancy.problem:
                problems.append(UnitProblem(self.unit.name, tenancy.problem, True))
        if not on_sqlite:
            self.sqlite_home.forget()
        files = render_files(self._garm_config(self._providers(inputs, config), database, config))
        changed |= workload.write_files(paths.config_dir, files, user)
        unit = render_unit(
            str(paths.binary),
            str(paths.config_file),
            str(paths.data_dir),
            user,
            privileged_port=config.api_port < FIRST_UNPRIVILEGED_PORT,
        )
        changed |= workload.ensure_service(paths.unit_file, unit)
        if changed or not workload.is_active():
            logger.info("starting GARM (configuration or binaries changed)")
            workload.restart()
            timeout = START_TIMEOUT_SECONDS
        else:
            timeout = RUNNING_TIMEOUT_SECONDS
        if not workload.wait_until_answering(_api_url(config), timeout):
            raise _NotReadyError(Summary("waiting", "Waiting for GARM to answer on its API port"))
        return problems

    def _database(self, config: CharmConfig) -> tuple[Database, list[UnitProblem]]:
        """Where GARM keeps its data, never switched on a guess.

        An empty database would make the reconciler build every scaleset again beside
        the ones GitHub already has. So an answer that cannot be read now keeps the
        database GARM uses, losing the relation while GARM is on PostgreSQL asks the
        operator, and GARM moves from sqlite only while it holds no scaleset.
        """
        current = workload.configured_database(self.paths.config_file)
        related = self.model.get_relation("postgresql") is not None
        answer = self.database.postgresql() if related else None
        if answer is not None:
            if isinstance(current, SqliteDatabase) and self._live_scalesets(config) != []:
                reason = (
                    "GARM keeps scalesets in its local sqlite database, which is not moved "
                    "to PostgreSQL: remove the postgresql relation, or the scalesets first"
                )
                return current, [UnitProblem("postgresql", reason, True)]
            return answer, []
        if isinstance(current, PostgresqlDatabase):
            if related:
                reason = "its answer cannot be read now; GARM keeps its database settings"
                return current, [UnitProblem("postgresql", reason, False)]
            reason = "GARM's data is in PostgreSQL: integrate postgresql again"
            return current, [UnitProblem("postgresql", reason, True)]
        if related and current is None:
            raise _NotReadyError(Summary("waiting", "Waiting for PostgreSQL to answer"))
        return SqliteDatabase(str(self.paths.sqlite_file)), []

    def _providers(self, inputs: GarmInputs, config: CharmConfig) -> tuple[OpenstackProvider, ...]:
        """The related units' providers, plus every earlier one a live scaleset still uses.

        A unit that departed, or whose data or secret cannot be read now, must not take
        its provider out of GARM while its scaleset drains or serves: GARM would give that
        scaleset no worker. Such a provider is kept from the files written for it before.
        """
        providers = {p.name: p for p in inputs.providers}
        files = workload.read_provider_files(self.paths.config_dir)
        earlier = {
            name.removeprefix("providers/").removesuffix(".toml")
            for name in files
            if name.endswith(".toml")
        } - set(providers)
        in_use = self._providers_in_use(config) if earlier else set()
        for name in sorted(earlier):
            kept = read_provider(name, files)
            if kept is not None and (in_use is None or name in in_use):
                providers[name] = kept
            else:
                logger.info("provider %s is no longer used: removed from GARM", name)
        return tuple(providers.values())

    def _providers_in_use(self, config: CharmConfig) -> set[str] | None:
        """Providers of GARM's scalesets, or None when GARM cannot tell (not running)."""
        live = self._live_scalesets(config)
        return None if live is None else {s.provider_name for s in live}

    def _live_scalesets(self, config: CharmConfig) -> list[ScaleSet] | None:
        """GARM's scalesets before it is reconfigured, or None when it cannot tell."""
        try:
            with contextlib.closing(self._client(config)) as client:
                return client.list_scalesets()
        except (GarmUnreachable, GarmApiError):
            return None

    def _ensure_setup(
        self, client: GarmClient, inputs: GarmInputs, complete: bool, config: CharmConfig
    ) -> tuple[list[UnitProblem], Observed]:
        """Admin, controller URLs, credentials and orgs/repos.

        Returns the problems to report and GARM's observation, which the scaleset pass
        reuses so a pass reads each list once.
        """
        try:
            ensure_admin_and_urls(
                client,
                secrets.admin_login(self.model),
                ControllerUrls.from_base(self._base_url(config)),
            )
            observed = observe(client)
            actions = plan_setup(
                inputs.credentials,
                inputs.entities,
                inputs.published,
                client.list_credentials(),
                observed.entities,
                observed.scalesets,
                complete=complete,
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
            logger.error("GARM setup failed: %s", exc)
            raise _NotReadyError(
                Summary("waiting", f"GARM setup failed, will retry: {exc.cause}")
            ) from None
        problems = [*inputs.problems, *(UnitProblem("garm", e, False) for e in setup.errors)]
        return problems, observed

    # --- inputs from Juju -----------------------------------------------------------

    def _relation_state(self, event: ops.EventBase | None, config: CharmConfig) -> RelationState:
        """What the configurators ask for, with what every runner is set up with."""
        host = urlsplit(self._base_url(config)).hostname or ""
        return self.view.relation_state(event, self.view.runner_context(host))

    def _resource(self, name: str) -> Path | None:
        """A resource's file, or None when it is not attached (Juju may hand an empty one)."""
        try:
            path = self.model.resources.fetch(name)
        except (ops.ModelError, NameError):
            return None
        return path if path.stat().st_size > 0 else None

    def _garm_config(
        self, providers: tuple[OpenstackProvider, ...], database: Database, config: CharmConfig
    ) -> GarmConfig:
        internal = secrets.internal(self.model)
        return GarmConfig(
            port=config.api_port,
            jwt_secret=internal["jwt-secret"],
            db_passphrase=internal["db-passphrase"],
            database=database,
            providers=providers,
            proxy=Proxy(
                _proxy_url(os.environ.get("JUJU_CHARM_HTTP_PROXY", "")),
                _proxy_url(os.environ.get("JUJU_CHARM_HTTPS_PROXY", "")),
                os.environ.get("JUJU_CHARM_NO_PROXY", ""),
            ),
            provider_executable=str(self.paths.provider_binary),
            config_dir=str(self.paths.config_dir),
        )

    def _base_url(self, config: CharmConfig) -> str:
        """The URL runners reach GARM at: configured, or this unit's address."""
        if config.external_url:
            return config.external_url
        binding = self.model.get_binding(CONFIGURATOR)
        address = binding.network.ingress_address if binding else None
        return f"http://{address or '127.0.0.1'}:{config.api_port}"

    def _client(self, config: CharmConfig) -> GarmClient:
        admin = secrets.admin_login(self.model)
        return GarmClient(_api_url(config), admin.username, admin.password)

    def _memory(self) -> CreateMemory:
        """What GitHub answered to creates, as the application remembers it (any leader's)."""
        relation = self.model.get_relation(PEERS)
        return CreateMemory.read(relation.data[self.app].get(MEMORY_KEY) if relation else None)

    def _remember(self, memory: CreateMemory | None) -> None:
        """Keep a pass's create answers where the next leader finds them too."""
        relation = self.model.get_relation(PEERS)
        if memory is None or relation is None:
            return
        if memory:
            relation.data[self.app][MEMORY_KEY] = memory.text()
        else:
            relation.data[self.app].pop(MEMORY_KEY, None)


def _api_url(config: CharmConfig) -> str:
    return f"http://127.0.0.1:{config.api_port}"


def _proxy_url(value: str) -> str:
    """A model proxy setting as GARM accepts it.

    GARM refuses to start on a proxy URL without a scheme (``url.ParseRequestURI``),
    which Juju allows (``10.0.0.1:3128``).
    """
    value = value.strip()
    return value if not value or "://" in value else f"http://{value}"


if __name__ == "__main__":  # pragma: nocover
    ops.main(GarmCharm)
