"""The machine's edge for tests: the commands the charm runs, answered by a fake.

``systemctl`` for GARM's unit and the reconcile timer, and Juju's ``goal-state`` hook
tool, whose answer a test sets to what Juju would say about the model (``goal_state``, in
the tool's JSON shape:
``{"units": {name: {"status", "since"}}, "relations": {endpoint: {app or unit: ...}}}``).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from garm import lease, requeue, timer, workload

SINCE = "2026-01-01T00:00:00Z"


def goal(status: str) -> dict[str, str]:
    """One entry of goal-state's answer."""
    return {"status": status, "since": SINCE}


class FakeSystemctl:
    """Stands in for subprocess.run; answers only the commands it knows."""

    KNOWN = (
        ["daemon-reload"],
        ["enable", "garm.service"],
        ["restart", "garm"],
        ["disable", "garm.service"],
        ["stop", "garm"],
        ["--quiet", "is-active", "garm"],
        # garm.timer.ensure and garm.timer.remove
        ["enable", "--now", "garm-reconcile.timer"],
        ["disable", "--now", "garm-reconcile.timer"],
        ["stop", "garm-reconcile.service"],
        # garm.lease.keep and garm.lease.remove
        ["enable", "--now", "garm-lease.timer"],
        ["disable", "--now", "garm-lease.timer"],
        # observe.endpoint.ensure and observe.endpoint.remove
        ["enable", "garm-charm-metrics.service"],
        ["restart", "garm-charm-metrics.service"],
        ["disable", "--now", "garm-charm-metrics.service"],
        # workload.install_units: whether what it installed still runs
        ["--quiet", "is-active", "garm-reconcile.timer"],
        ["--quiet", "is-active", "garm-lease.timer"],
        ["--quiet", "is-active", "garm-charm-metrics.service"],
    )
    # Units other than GARM's that ``enable --now`` (or a restart) starts and ``disable
    # --now`` stops; ``is-active`` answers for them from ``started``.
    _OTHERS = ("garm-reconcile.timer", "garm-lease.timer", "garm-charm-metrics.service")

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.failing: set[str] = set()
        self.active = True
        # The timers and the metrics server running now (a test stops one out of band by
        # taking it away).
        self.started: set[str] = set()
        # What Juju says about the model; None makes the hook tool fail.
        self.goal_state: dict[str, Any] | None = {"units": {}, "relations": {}}
        # The extra pass asked for (``garm.requeue``), on ``now``'s clock: when it is
        # due, and every one asked for, as (asked at, due). ``now`` None: the real clock.
        self.now = now or (lambda: datetime.now(UTC))
        self.requeue_due: datetime | None = None
        self.requeues: list[tuple[datetime, datetime]] = []

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if list(cmd) == ["goal-state", "--format=json"]:
            return self._goal_state(cmd, kwargs)
        if cmd[0] == requeue.SYSTEMD_RUN:
            return self._systemd_run(cmd, kwargs)
        if list(cmd) == ["systemctl", "stop", f"{requeue.PREFIX}*.timer"]:
            self.calls.append(cmd[1:])
            if "stop" in self.failing:
                raise subprocess.CalledProcessError(1, cmd, "", "failed")
            self.requeue_due = None
            return subprocess.CompletedProcess(cmd, 0, "", "")
        assert cmd[0] == "systemctl" and cmd[1:] in self.KNOWN, f"unexpected command {cmd}"
        self.calls.append(cmd[1:])
        if cmd[-1] in self._OTHERS:
            return self._other(cmd, kwargs)
        failed = cmd[1] in self.failing or (cmd[-2] == "is-active" and not self.active)
        if failed and kwargs.get("check"):
            raise subprocess.CalledProcessError(1, cmd, "", "failed")
        if cmd[1:] == ["stop", "garm"]:
            self.active = False  # as systemd says of a stopped service
        elif cmd[1:] == ["restart", "garm"]:
            self.active = True
        return subprocess.CompletedProcess(cmd, 3 if failed else 0, "", "")

    def _other(self, cmd: list[str], kwargs: dict[str, Any]) -> subprocess.CompletedProcess:
        """A timer's or the metrics server's command: started, stopped or asked about."""
        name, verb = cmd[-1], cmd[1]
        failed = verb in self.failing or (verb == "--quiet" and name not in self.started)
        if failed and kwargs.get("check"):
            raise subprocess.CalledProcessError(1, cmd, "", "failed")
        if not failed and (cmd[1:3] == ["enable", "--now"] or verb == "restart"):
            self.started.add(name)
        elif not failed and cmd[1:3] == ["disable", "--now"]:
            self.started.discard(name)
        return subprocess.CompletedProcess(cmd, 3 if failed else 0, "", "")

    def fire_requeue(self) -> bool:
        """The requeue's timer elapsed (the caller runs its pass): whether one was due."""
        due, self.requeue_due = self.requeue_due, None
        return due is not None and due <= self.now()

    def _systemd_run(self, cmd: list[str], kwargs: dict[str, Any]) -> subprocess.CompletedProcess:
        """``systemd-run --on-active=Ns ... juju-exec <unit> "<dispatch>"``, as requeue asks."""
        options: dict[str, list[str]] = {}
        for arg in cmd[1:-3]:
            key, _, value = arg.removeprefix("--").partition("=")
            options.setdefault(key, []).append(value)
        ((unit,), (active,)) = options["unit"], options["on-active"]
        assert cmd[-3] == timer.JUJU_EXEC and "hooks/reconcile-tick" in cmd[-1], cmd
        assert unit.startswith(requeue.PREFIX) and "collect" in options, cmd
        assert "RemainAfterElapse=no" in options["timer-property"], cmd
        assert options["service-type"] == ["oneshot"], cmd
        self.calls.append(["systemd-run", unit, active])
        if "systemd-run" in self.failing:
            raise subprocess.CalledProcessError(1, cmd, "", "failed")
        asked = self.now()
        self.requeue_due = asked + timedelta(seconds=int(active.removesuffix("s")))
        self.requeues.append((asked, self.requeue_due))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def _goal_state(self, cmd: list[str], kwargs: dict[str, Any]) -> subprocess.CompletedProcess:
        if self.goal_state is None:
            if kwargs.get("check"):
                raise subprocess.CalledProcessError(1, cmd, "", "ERROR goal-state failed")
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR goal-state failed")
        return subprocess.CompletedProcess(cmd, 0, json.dumps(self.goal_state), "")


@dataclasses.dataclass
class Machine:
    """A unit's machine, sandboxed: files under a temporary root, its commands faked."""

    paths: workload.Paths
    systemctl: FakeSystemctl
    users: list[str]


APP = "garm-configurator"


def goal_state(
    *remote_units: str,
    me: str = "garm/0",
    status: str = "active",
    dying: tuple[str, ...] = (),
):
    """goal-state's answer: this unit, and the configurator units the controller knows.

    As Juju gives it: the related application with the relation's status, each of its
    units with its workload status, or ``dying`` once its removal began.
    """
    relation = {APP: goal("joined"), **{u: goal("active") for u in remote_units}}
    relation.update({u: goal("dying") for u in dying})
    return {"units": {me: goal(status)}, "relations": {APP: relation}}


class LeasedSystemd(FakeSystemctl):
    """systemd on one machine as GARM's lease makes it behave (``garm.lease``).

    GARM runs from a ``restart`` until a ``stop`` (``is-active`` tells which); the
    restart fails as systemd's does when the unit has the lease check as its
    ``ExecStartPre`` and that refuses (no lease, or one lapsed); and ``check_lease``
    plays the lease's timer, which stops a GARM whose lease lapsed at the latest
    ``CHECK_SECONDS`` after it did. ``stopped_by``
    says who stopped GARM last ("charm" or "lease"). ``garm``, when given, is the GARM
    process of the double (``GarmDouble.process``) that this machine's GARM is: started
    and stopped with it.
    """

    def __init__(
        self, paths: workload.Paths, now: Callable[[], datetime], garm: Any = None
    ) -> None:
        super().__init__()
        self.paths = paths
        self.now = now
        self.garm = garm
        self.running = False
        self.stopped_by = ""
        if garm is not None and garm.running:
            garm.stop()

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        args = list(cmd[1:])
        checked = "ExecStartPre=" in (workload.read_text(self.paths.unit_file) or "")
        if args == ["restart", "garm"] and checked and not lease.holds(self.paths, self.now()):
            self.calls.append(args)
            error = "Job for garm.service failed because the control process exited"
            raise subprocess.CalledProcessError(1, cmd, "", error)
        self.active = self.running
        done = super().__call__(cmd, **kwargs)
        if args == ["restart", "garm"]:
            self.running = True
            if self.garm is not None and self.garm.running:
                self.garm.restart()
            elif self.garm is not None:
                self.garm.start()
        elif args == ["stop", "garm"]:
            self._stopped("charm")
        return done

    def check_lease(self) -> None:
        """The lease's timer, where it runs: GARM stopped once its lease lapsed a check ago."""
        if lease.TIMER not in self.started:
            return  # no checker running (sqlite: no lease; or stopped), nothing stops GARM
        late = self.now() - timedelta(seconds=lease.CHECK_SECONDS)
        if self.running and not lease.holds(self.paths, late):
            self._stopped("lease")

    def _stopped(self, by: str) -> None:
        if self.running and self.garm is not None:
            self.garm.stop()
        self.running, self.stopped_by = False, by
