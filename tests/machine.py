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
from typing import Any

from garm import workload

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
        # observe.endpoint.ensure and observe.endpoint.remove
        ["enable", "garm-charm-metrics.service"],
        ["restart", "garm-charm-metrics.service"],
        ["disable", "--now", "garm-charm-metrics.service"],
    )

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.failing: set[str] = set()
        self.active = True
        # What Juju says about the model; None makes the hook tool fail.
        self.goal_state: dict[str, Any] | None = {"units": {}, "relations": {}}

    def __call__(self, cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if list(cmd) == ["goal-state", "--format=json"]:
            return self._goal_state(cmd, kwargs)
        assert cmd[0] == "systemctl" and cmd[1:] in self.KNOWN, f"unexpected command {cmd}"
        self.calls.append(cmd[1:])
        failed = cmd[1] in self.failing or (cmd[-2] == "is-active" and not self.active)
        if failed and kwargs.get("check"):
            raise subprocess.CalledProcessError(1, cmd, "", "failed")
        return subprocess.CompletedProcess(cmd, 3 if failed else 0, "", "")

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
