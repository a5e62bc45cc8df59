#!/usr/bin/env python3
"""The ops shell: Juju into the pass's inputs, the pass's result into Juju.

Every event that may change what GARM should hold runs one holistic pass (``leader.run``)
over what Juju tells the hook; its result becomes the unit's status, the relation data,
the open ports and the secrets to make. The deciding happens in ``leader`` and the
packages under it; the reading of Juju in ``juju``. The architecture, and the walk of
one hook through it: ``docs/explanation/architecture.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import ops

import leader
from garm import workload
from juju import machine, secrets, telemetry, unit
from juju.certificates import Certificates
from juju.events import CONFIGURATOR, POSTGRESQL, GarmEvents, changes
from juju.peers import Peers
from juju.postgresql import GarmDatabase
from juju.records import LeaderInputs, Machine
from juju.status import Summary
from juju.view import JujuView

# The charm's own files (alert rules, dashboards) sit under src/ beside this module.
CHARM_ROOT = Path(__file__).resolve().parent.parent


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
        self.view = JujuView(self, CONFIGURATOR)
        self.peers = Peers(self, self.view, self.paths)
        self.admin_login = secrets.AdminLoginAction(self, self.view)
        # Writes the database request and tracks the provider's answer; the events it
        # would add all come inside hooks observed below, so none is observed twice.
        self.database = GarmDatabase(self)
        # Asks for this unit's certificate and renews it, before the pass observes.
        self.certificates = Certificates(self, CONFIGURATOR)
        for event in changes(self):
            framework.observe(event, self._on_change)
        framework.observe(self.on.stop, self._on_stop)
        framework.observe(self.on.remove, self._on_remove)
        framework.observe(self.on.collect_unit_status, self._on_collect_status)
        framework.observe(self.on.plan_action, self._on_plan)
        framework.observe(self.on.reconcile_action, self._on_reconcile)
        framework.observe(self.on.adopt_garm_action, self._on_adopt_garm)
        framework.observe(self.on.show_scalesets_action, self._on_show_scalesets)

    def _on_change(self, event: ops.EventBase) -> None:
        self.view.note(event)
        self._run(self._inputs(event))

    def _on_stop(self, event: ops.StopEvent) -> None:
        self.view.note(event)
        record = machine.release(self.paths, "unit stopping")  # GARM first: nothing may keep it
        self.unit.set_ports()
        self.peers.record(record)
        self._summary = Summary("maintenance", leader.BEING_REMOVED)

    def _on_remove(self, _: ops.RemoveEvent) -> None:
        machine.remove(self.paths)

    def _on_collect_status(self, event: ops.CollectStatusEvent) -> None:
        if self._summary is not None:  # else an action that changed nothing: it holds
            event.add_status(unit.status(self._summary))

    def _on_plan(self, event: ops.ActionEvent) -> None:
        self._answer(event, leader.plan(self._inputs(None)))

    def _on_show_scalesets(self, event: ops.ActionEvent) -> None:
        self._answer(event, leader.show_scalesets(self._inputs(None)))

    @staticmethod
    def _answer(event: ops.ActionEvent, answer: leader.ActionAnswer) -> None:
        if answer.failure:
            event.fail(answer.failure)
        else:
            event.set_results(dict(answer.results))

    def _on_reconcile(self, event: ops.ActionEvent) -> None:
        inputs = self._inputs(None)
        if refused := leader.refuse_action(inputs, "reconcile"):
            event.fail(refused)
            return
        event.set_results(leader.reconciled(self._run(inputs)))

    def _on_adopt_garm(self, event: ops.ActionEvent) -> None:
        answer, change = leader.adopt(self._inputs(None), str(event.params["controller-id"]))
        if not answer.failure:
            self.peers.keep_identity(change)
        self._answer(event, answer)

    def _inputs(self, event: ops.EventBase | None) -> leader.Inputs:
        """What Juju tells this hook, as the pass takes it: the leader's, read on first use."""
        lead, asked = None, self.now()  # before is-leader: GARM's lease counts from it
        if unit.leads(self.unit):
            lead = LeaderInputs(
                config=lambda: unit.config(self),
                admin=lambda: secrets.read_admin(self.model),
                internal=lambda: secrets.read_internal(self.model),
                configurators=lambda: self.view.configurators(event),
                postgresql=self.database.postgresql,
                peers=self.peers.records,
                # On the configurator relation's network: where runners reach this unit.
                address=lambda: unit.ingress_address(self.model, self.view.endpoint),
                tls=self.certificates.read,
                proxy=unit.model_proxy,
                provider_record=lambda: secrets.read_providers(self.model),
                resource=lambda name: unit.attached(self.model, name),
                read_secret=lambda uri: secrets.configurator_value(self.model, uri),
            )
        return leader.Inputs(
            unit=self.unit.name,
            machine=Machine(self.paths, self.service_user),
            now=self.now,
            asked=asked,
            dying=self.view.dying(),
            alive=self.view.alive(),
            postgresql_related=self.model.get_relation(POSTGRESQL) is not None,
            leader=lead,
        )

    def _run(self, inputs: leader.Inputs) -> leader.PassResult:
        """Run the pass, and tell Juju what it came to."""
        result = leader.run(inputs)
        if result.make_secrets:
            secrets.ensure(self.model)
        if result.workload_version is not None:
            self.unit.set_workload_version(result.workload_version)
        if result.ports is not None:
            self.unit.set_ports(*result.ports)
        self.peers.keep(result.sqlite_home, result.memory, result.chosen)
        # After the pass: GARM's configuration, which the pass placed (``juju.machine``),
        # says whether this machine's sqlite file is GARM's data.
        self.peers.note_data()
        secrets.keep_providers(self.model, result.provider_record)
        self.peers.record(result.garm_record)
        self.peers.keep_identity(result.garm_identity)
        self.view.tell(result.publish_back)
        if result.publish_telemetry:
            telemetry.publish(self, CHARM_ROOT, self.now(), result.garm_here)
        self._summary = result.summary
        return result


if __name__ == "__main__":  # pragma: nocover
    ops.main(GarmCharm)
