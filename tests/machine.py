"""The machine's edge for tests: the commands the charm runs, answered by a fake.

``systemctl`` for GARM's unit and the reconcile timer, ``journalctl`` for what GARM's unit
wrote, and Juju's ``goal-state`` hook tool, whose answer a test sets to what Juju would
say about the model (``goal_state``, in the tool's JSON shape:
``{"units": {name: {"status", "since"}}, "relations": {endpoint: {app or unit: ...}}}``).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from garm import lease, requeue, timer, workload
from garm.config import SqliteDatabase

SINCE = "2026-01-01T00:00:00Z"
# systemd's defaults for what a unit does not set (systemd.service(5), systemd.unit(5)).
DEFAULT_UNIT = {
    "Restart": "no",
    "RestartSec": "100ms",
    "StartLimitIntervalSec": "10s",
    "StartLimitBurst": "5",
}
# What systemctl says when a start job fails (the lease check refused, the start limit).
JOB_FAILED = "Job for garm.service failed because the control process exited with error code."


def goal(status: str) -> dict[str, str]:
    """One entry of goal-state's answer."""
    return {"status": status, "since": SINCE}


class FakeSystemctl:
    """Stands in for subprocess.run; answers only the commands it knows.

    ``garm.service`` is played as systemd runs the unit the charm wrote (``paths``; none:
    systemd's defaults): a start either runs GARM (``active``) or fails, because the
    unit's ``ExecStartPre`` refuses (``refuses``: the start job fails) or because GARM
    exits at once (``refusal``: what GARM prints to standard error as it does). A failed
    run is started again ``RestartSec`` later under ``Restart=on-failure``, each start
    counted against ``StartLimitIntervalSec``/``StartLimitBurst``: past the burst systemd
    gives up (``failed``) and refuses every start within the window until
    ``reset-failed``. Those restarts play out on ``now``'s clock when the fake is next
    called (``play``). ``journal`` holds what the unit's own processes wrote and systemd's
    lines about it, each with its moment.
    """

    KNOWN = (
        ["daemon-reload"],
        ["enable", "garm.service"],
        ["restart", "garm"],
        ["disable", "garm.service"],
        ["stop", "garm"],
        ["--quiet", "is-active", "garm"],
        ["--quiet", "is-failed", "garm"],
        # garm.timer.keep (``workload.Units``)
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
        # workload.Units.install: whether what it installed still runs
        ["--quiet", "is-active", "garm-reconcile.timer"],
        ["--quiet", "is-active", "garm-lease.timer"],
        ["--quiet", "is-active", "garm-charm-metrics.service"],
    )
    # Units other than GARM's that ``enable --now`` (or a restart) starts and ``disable
    # --now`` stops; ``is-active`` answers for them from ``started``.
    _OTHERS = ("garm-reconcile.timer", "garm-lease.timer", "garm-charm-metrics.service")

    def __init__(
        self,
        now: Callable[[], datetime] | None = None,
        paths: workload.Paths | None = None,
        garm: Any = None,
    ) -> None:
        self.calls: list[list[str]] = []
        self.failing: set[str] = set()
        self.active = True
        # The timers and the metrics server running now (a test stops one out of band by
        # taking it away).
        self.started: set[str] = set()
        self.paths = paths
        # The GARM process of the double (``GarmDouble.process``) this machine's GARM is,
        # if any: it runs while the service does. None: the double answers regardless.
        self.garm = garm
        if garm is not None:
            self.active = False
            if garm.running:
                garm.stop()
        # What GARM prints to standard error as it exits at start; None: it starts.
        self.refusal: str | None = None
        # (when, whose, line): whose is "garm.service" for the unit's own processes,
        # "systemd" for PID 1's lines about the unit.
        self.journal: list[tuple[datetime, str, str]] = []
        # Every start of garm.service systemd tried (the charm's and Restart='s).
        self.starts: list[datetime] = []
        self.failed = False
        self._window: tuple[datetime, int] | None = None
        self._retry_at: datetime | None = None
        # What Juju says about the model; None makes the hook tool fail.
        self.goal_state: dict[str, Any] | None = {"units": {}, "relations": {}}
        # The extra pass asked for (``garm.requeue``), on ``now``'s clock: when it is
        # due, and every one asked for, as (asked at, due). ``now`` None: the real clock.
        self.now = now or (lambda: datetime.now(UTC))
        self.requeue_due: datetime | None = None
        self.requeues: list[tuple[datetime, datetime]] = []

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.play()
        if list(cmd) == ["goal-state", "--format=json"]:
            return self._goal_state(cmd, kwargs)
        if cmd[0] == workload.JOURNALCTL:
            return self._journalctl(cmd)
        if cmd[0] == requeue.SYSTEMD_RUN:
            return self._systemd_run(cmd, kwargs)
        if list(cmd) == [workload.SYSTEMCTL, "reset-failed", "garm"]:
            self.calls.append(cmd[1:])
            self.failed, self._window = False, None
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if list(cmd) == ["systemctl", "stop", f"{requeue.PREFIX}*.timer"]:
            return self._stop_requeues(cmd)
        assert cmd[0] == "systemctl" and cmd[1:] in self.KNOWN, f"unexpected command {cmd}"
        self.calls.append(cmd[1:])
        if cmd[-1] in self._OTHERS:
            return self._other(cmd, kwargs)
        failed = cmd[1] in self.failing or (cmd[-2] == "is-active" and not self.active)
        failed = failed or (cmd[-2] == "is-failed" and not self.failed)
        if cmd[1:] == ["restart", "garm"] and not failed:
            return self._restart(cmd, kwargs)
        if failed and kwargs.get("check"):
            raise subprocess.CalledProcessError(1, cmd, "", "failed")
        if cmd[1:] == ["stop", "garm"]:
            self._retry_at = None
            self._exited()  # as systemd says of a stopped service
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

    def _restart(self, cmd: list[str], kwargs: dict[str, Any]) -> subprocess.CompletedProcess:
        self._retry_at = None  # a start asked for replaces the one Restart= waits for
        if self._start(self.now()):
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if kwargs.get("check"):
            raise subprocess.CalledProcessError(1, cmd, "", JOB_FAILED)
        return subprocess.CompletedProcess(cmd, 1, "", JOB_FAILED)

    def _stop_requeues(self, cmd: list[str]) -> subprocess.CompletedProcess:
        self.calls.append(cmd[1:])
        if "stop" in self.failing:
            raise subprocess.CalledProcessError(1, cmd, "", "failed")
        self.requeue_due = None
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def play(self) -> None:
        """The starts ``Restart=`` makes up to now, each at its moment."""
        while self._retry_at is not None and self._retry_at <= self.now():
            at, self._retry_at = self._retry_at, None
            self._start(at)

    def fail(self, cause: str) -> None:
        """GARM exits now, printing ``cause``, and refuses to start with it from now on (its
        database gone, say), until ``refusal`` is None again; ``Restart=`` applies."""
        self.play()
        self.refusal = cause
        self._run_failed(self.now(), cause)

    def refuses(self, at: datetime) -> str | None:
        """What the unit's ``ExecStartPre`` prints as it refuses a start at ``at``; None: none."""
        return None

    def _start(self, at: datetime) -> bool:
        """One start of garm.service at ``at``; whether the start job succeeded."""
        unit = self._unit()
        interval, burst = _seconds(unit["StartLimitIntervalSec"]), int(unit["StartLimitBurst"])
        if interval > 0 and burst > 0:
            begin, count = self._window or (at, 0)
            if (at - begin).total_seconds() > interval:
                begin, count = at, 0
            self._window = (begin, count + 1)
            if count + 1 > burst:
                self._log(at, "systemd", "garm.service: Start request repeated too quickly.")
                self._log(at, "systemd", "garm.service: Failed with result 'start-limit-hit'.")
                self.failed = True
                self._exited()
                return False
        self.starts.append(at)
        self._log(at, "systemd", "Starting garm.service...")
        refused = self.refuses(at)
        cause = refused if refused is not None else self.refusal
        if cause is None:
            self._log(at, "systemd", "Started garm.service.")
            self.failed = False
            self._started()
            return True
        self._run_failed(at, cause)
        # Type=simple: the job is done once GARM runs; only an ExecStartPre fails it.
        return refused is None

    def _run_failed(self, at: datetime, cause: str) -> None:
        """GARM (or its ``ExecStartPre``) exited at ``at``, printing ``cause``."""
        self._log(at, "garm.service", cause)
        self._log(at, "systemd", "garm.service: Main process exited, status=1/FAILURE")
        self._log(at, "systemd", "garm.service: Failed with result 'exit-code'.")
        self._exited()
        unit = self._unit()
        if unit["Restart"] in ("on-failure", "always"):
            self._retry_at = at + timedelta(seconds=_seconds(unit["RestartSec"]))

    def _started(self) -> None:
        if self.garm is not None and self.garm.running:
            self.garm.restart()
        elif self.garm is not None:
            self.garm.start()
        self.active = True
        self._open_database()

    def _open_database(self) -> None:
        """GARM started on sqlite has its file: it opens ``[database.sqlite3] db_file`` as
        it starts, creating it if need be (so does the machine tier's simulator)."""
        config = self.paths.config_file if self.paths is not None else None
        database = workload.configured_database(config) if config is not None else None
        if isinstance(database, SqliteDatabase):
            Path(database.path).touch()

    def _exited(self) -> None:
        if self.active and self.garm is not None and self.garm.running:
            self.garm.stop()
        self.active = False

    def _unit(self) -> dict[str, str]:
        """The unit's settings the start logic reads, as written, else systemd's defaults."""
        text = workload.read_text(self.paths.unit_file) if self.paths is not None else None
        settings = dict(DEFAULT_UNIT)
        for line in (text or "").splitlines():
            key, _, value = line.partition("=")
            if key in settings:
                settings[key] = value
        return settings

    def _log(self, at: datetime, whose: str, line: str) -> None:
        self.journal.append((at, whose, line))

    def _journalctl(self, cmd: list[str]) -> subprocess.CompletedProcess[str]:
        """``journalctl _SYSTEMD_UNIT=garm.service --since=@<epoch> --output=cat ...``."""
        assert cmd[1] == "_SYSTEMD_UNIT=garm.service", cmd
        assert cmd[2].startswith("--since=@") and cmd[3:] == [
            "--output=cat",
            "--no-pager",
            "--quiet",
        ], cmd
        self.calls.append(cmd)
        since = datetime.fromtimestamp(int(cmd[2].removeprefix("--since=@")), UTC)
        own = [line for at, who, line in self.journal if who == "garm.service" and at >= since]
        return subprocess.CompletedProcess(cmd, 0, "".join(f"{line}\n" for line in own), "")

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

    GARM runs from a start until a stop or a failure (``is-active`` tells which); a start
    fails as systemd's does when the unit has the lease check as its ``ExecStartPre`` and
    that refuses (no lease, or one lapsed), with the line the check prints; and
    ``check_lease`` plays the lease's timer, which stops a GARM whose lease lapsed at the
    latest ``CHECK_SECONDS`` after it did. ``stopped_by`` says who stopped GARM last
    ("charm" or "lease"). ``garm``, when given, is the GARM process of the double
    (``GarmDouble.process``) that this machine's GARM is: started and stopped with it.
    """

    def __init__(
        self, paths: workload.Paths, now: Callable[[], datetime], garm: Any = None
    ) -> None:
        super().__init__(now, paths, garm)
        self.paths: workload.Paths = paths
        self.active = False
        self.stopped_by = ""

    @property
    def running(self) -> bool:
        """Whether GARM runs on this machine."""
        return self.active

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        done = super().__call__(cmd, **kwargs)
        if list(cmd[1:]) == ["stop", "garm"]:
            self.stopped_by = "charm"
        return done

    def refuses(self, at: datetime) -> str | None:
        checked = "ExecStartPre=" in (workload.read_text(self.paths.unit_file) or "")
        if checked and not lease.holds(self.paths, at):
            return "GARM's lease has lapsed: GARM may not start here"
        return None

    def check_lease(self) -> None:
        """The lease's timer, where it runs: GARM stopped once its lease lapsed a check ago."""
        self.play()
        if lease.TIMER not in self.started:
            return  # no checker running (sqlite: no lease; or stopped), nothing stops GARM
        late = self.now() - timedelta(seconds=lease.CHECK_SECONDS)
        if self.running and not lease.holds(self.paths, late):
            self._retry_at = None  # a stop: Restart= does not apply
            self._exited()
            self.stopped_by = "lease"


def _seconds(value: str) -> float:
    """A systemd time span as the charm's units and systemd's defaults write them."""
    for suffix, scale in (("ms", 0.001), ("min", 60.0), ("s", 1.0)):
        if value.endswith(suffix):
            return float(value.removesuffix(suffix)) * scale
    return float(value)
