"""The main job, told as a story: the real charm against the embedded GARM (``tox -e demo``).

Every hook runs the real charm code through ops.testing on a sandboxed machine, with
GARM as the double over loopback HTTP. It first prints a legend (``LEGEND``); then,
after each hook that changes something, a ``juju status``-like line (the unit's
status), what the configurator changed, in words, and the scalesets GARM holds, each
named as the status names it: its logical name, then GARM's (GARM names are opaque
hashes), with its state (``creating`` until GitHub has registered it), labels and
runners. A status that names a scaleset GARM no longer holds is flagged. What happens
outside the charm (a job starting, finishing) is told at the time it happens, and only
once the table shows what it needs (a job starts on a runner the table shows). Exits 0
only if the story ends converged and the leaving unit deleted nothing. Until a Juju
controller is at hand, this is how to watch a label change happen without a job lost.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
import warnings
from collections.abc import Callable
from datetime import timedelta

from ops import testing
from scenario import _consistency_checker

from charm import GarmCharm
from garm.models import ScaleSet
from scalesets.actions import logical_name_of, shown_name
from tests.clock import FakeClock
from tests.databags import SECOND_UNIT
from tests.garm_double import GarmDouble
from tests.juju_events import reconcile_tick, self_departing
from tests.sandbox import charm_state, sandboxed_machine

CI = {**SECOND_UNIT, "name": "ci", "provider_name": "garm-configurator-0", "labels": "linux,x64"}
BIG = {
    **SECOND_UNIT,
    "name": "big",
    "provider_name": "garm-configurator-1",
    "labels": "linux,x64,large",
    "min_idle_runner": "1",
}
# Databag keys said in words when they change; the others by key, with their values.
WORDS = {
    "dockerhub_mirror": "Docker Hub mirror",
    "runner_http_proxy": "runner HTTP proxy",
    "pre_job_script": "pre-job script",
    "otel_collector_endpoint": "OpenTelemetry collector",
}
LEGEND = """\
How to read this: a block is printed after each hook that changes something.
  t=M:SS <hook>  garm/0 <status>: <message>
      simulated time since the story began; the Juju hook the charm just ran; the
      unit's status after it, as `juju status` shows it
  what changed: ...   the configurator's change that the hook delivered, in words
  then one row per scaleset GARM holds:
  <name> (<GARM name>)   the configurator's scaleset name, then the GARM (and GitHub)
                         name of this generation: each label change makes a new one
  creating | enabled | retired
                         creating: in GARM, not yet registered on GitHub (no jobs);
                         enabled: registered, takes jobs; retired: disabled, its
                         runners drain, then it is deleted
  [labels]               the labels GitHub matches a job's runs-on against
  runners=N busy=N       the runners GARM holds for it; of those, running a job
  template=T             its runner install template, when not GARM's default
  MISMATCH: ...          the status names a scaleset GARM does not hold (a bug)
  t=M:SS (...)           something outside the charm happens then: a job, GitHub, ...
"""
# A GARM name in a status line: ``scaleset ci (ci-24ec4a)``, or an orphan's own name.
NAMED = re.compile(r"scaleset (?:\S+ \((?P<garm>[^()\s]+)\)|(?P<alone>[^\s:()]+):)")


def changes(before: dict[int, dict[str, str]], after: dict[int, dict[str, str]]) -> list[str]:
    """What a configurator change did, in words: ``labels of ci: linux,x64 → linux,arm64``."""
    said: list[str] = []
    for unit in sorted(before.keys() | after.keys()):
        old, new = before.get(unit), after.get(unit)
        if old is None and new is not None:
            said.append(f"unit {unit} publishes {new['name']} [{new['labels']}]")
            continue
        if new is None and old is not None:
            said.append(f"unit {unit} ({old['name']}) departs")
            continue
        assert old is not None and new is not None
        name = new["name"]
        for key in sorted(old.keys() | new.keys()):
            was, now = old.get(key), new.get(key)
            if was == now:
                continue
            if key == "name":
                said.append(f"unit {unit} renames {was} → {now}")
            elif key == "labels":
                said.append(f"labels of {name}: {was} → {now}")
            elif key in WORDS:
                how = "set" if was is None else "unset" if now is None else "changed"
                said.append(f"{name}: {WORDS[key]} {how}")
            else:
                said.append(f"{key} of {name}: {was} → {now}")
    return said


def garm_name(scaleset: dict) -> str:
    """A scaleset GARM holds as the charm's status names it: logical name, then GARM's."""
    return shown_name(logical_name_of(ScaleSet.from_json(scaleset)), scaleset["name"])


def state_of(scaleset: dict) -> str:
    """``creating`` (not on GitHub yet), ``enabled`` or ``retired`` (disabled)."""
    if not scaleset.get("enabled"):
        return "retired"
    return "enabled" if scaleset.get("scale_set_id") else "creating"


class Story:
    """A garm unit, the configurator units related to it, and the GARM it runs.

    Time is simulated: GARM's workers tick every 5 s, the leader's reconcile timer fires
    every 30 s (``reconcile-interval``), and a line is printed whenever a hook changes
    the unit's status or what GARM holds.
    """

    def __init__(self, garm: GarmDouble, clock: FakeClock, state: testing.State):
        self.garm, self.clock, self.state = garm, clock, state
        self.ctx = testing.Context(GarmCharm, app_name="garm")
        self.start = clock.now
        self.shown = ""
        self.published: dict[int, dict[str, str]] = {}
        self.changed: list[str] = []
        self.mismatches: list[str] = []
        self.table: list[tuple[str, tuple[int, int]]] = []

    def units(self, note: str = "", /, **units: dict[str, str]) -> testing.Relation:
        """The configurator relation now holding exactly ``units`` (by unit number).

        What changed is said with the next hook: ``note``, or else worked out.
        """
        relation = next(
            r
            for r in self.state.relations
            if isinstance(r, testing.Relation) and r.endpoint == "garm-configurator"
        )
        data = {int(k.removeprefix("u")): v for k, v in units.items()}
        self.changed = [note] if note else changes(self.published, data)
        self.published = data
        new = dataclasses.replace(relation, remote_units_data=data)
        self.state = dataclasses.replace(self.state, relations=[new])
        return new

    def stamp(self) -> str:
        """The simulated time since the story began, ``t= 2:30``."""
        elapsed = int((self.clock.now - self.start).total_seconds())
        return f"t={elapsed // 60:>2}:{elapsed % 60:02}"

    def say(self, *lines: str) -> None:
        """Something outside the charm happens now: told with the time."""
        text = f"\n{'':>9}".join(lines)
        print(f"{self.stamp()} ({text})")

    def rows(self) -> dict[str, tuple[int, int]]:
        """The last table printed, by scaleset (as named there): (runners, busy)."""
        return dict(self.table)

    def run(self, name: str, event) -> None:
        """Run one hook and show what changed: in the configurator, status and GARM."""
        self.state = self.ctx.run(event, self.state)
        status = self.state.unit_status
        lines = [f"garm/0 {status.name}: {status.message}"]
        held = self.garm.scalesets()
        lines += self._misnamed(status.message, {s["name"] for s in held})
        templates = {t["id"]: t["name"] for t in self.garm.templates()}
        table: list[tuple[str, tuple[int, int]]] = []
        for scaleset in sorted(held, key=lambda s: s["id"]):
            runners = [i for i in self.garm.instances() if i["scale_set_id"] == scaleset["id"]]
            busy = sum(i.get("runner_status") == "active" for i in runners)
            labels = ",".join(sorted(t["name"] for t in scaleset.get("tags", [])))
            state = state_of(scaleset)
            template = templates.get(scaleset.get("template_id", 0), "")
            shown_template = "" if template == "github_linux" else f" template={template}"
            lines.append(
                f"{'':>10}{garm_name(scaleset):<18}{state:<9}[{labels}] "
                f"runners={len(runners)} busy={busy}{shown_template}"
            )
            table.append((garm_name(scaleset), (len(runners), busy)))
        shown = "\n".join(lines)
        said, self.changed = self.changed, []
        if shown != self.shown or said:
            print(f"{self.stamp()} {name:<34} {lines[0]}")
            for line in [f"{'':>10}what changed: {change}" for change in said] + lines[1:]:
                print(line)
            self.shown, self.table = shown, table

    def _misnamed(self, message: str, held: set[str]) -> list[str]:
        """Lines flagging a status that names a scaleset GARM does not hold after the hook."""
        flagged = []
        for match in NAMED.finditer(message):
            garm = match.group("garm") or match.group("alone")
            if garm not in held:
                flagged.append(f"{'':>10}MISMATCH: the status names {garm}; GARM holds no such")
        self.mismatches += flagged
        return flagged

    def wait(self, seconds: int) -> None:
        """Let time pass: GARM works every 5 s, the timer dispatches every 30 s.

        A scale set GARM created is registered on GitHub by the next 5 s step, not in
        the hook that created it: until then it is ``creating``.
        """
        for _ in range(seconds // 5):
            self.clock.advance(timedelta(seconds=5))
            for scaleset in self.garm.scalesets():
                if not scaleset.get("scale_set_id"):
                    self.garm.register(scaleset["id"])
            self.garm.tick()
            if int((self.clock.now - self.start).total_seconds()) % 30 == 0:
                self.run("reconcile-tick (timer)", reconcile_tick())

    def wait_until(self, done: Callable[[], bool], longest: int) -> bool:
        """Let time pass, 5 s at a time, until ``done()`` (or ``longest`` seconds)."""
        for _ in range(longest // 5):
            if done():
                return True
            self.wait(5)
        return done()


def main() -> int:
    """Tell the story; exit 0 only if it ends converged.

    The warnings and log level it quiets are put back after, so that it can run in a
    test's process.
    """
    checker = _consistency_checker.logger
    level = checker.level
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*has no effect in the context it was used")
        # ops.testing warns on every event Juju does not define; reconcile-tick is the charm's.
        checker.setLevel(logging.ERROR)
        try:
            return tell()
        finally:
            checker.setLevel(level)


def tell() -> int:
    """The story itself: what ``main`` returns."""
    clock = FakeClock()
    print(LEGEND)
    with sandboxed_machine(clock) as root, GarmDouble(clock=clock) as garm:
        # GitHub registers a new scale set a moment after GARM creates it (Story.wait),
        # so that the status shows it being created, as juju status does.
        garm.register_on_create = False
        garm.add_org("example-org")
        garm.add_provider("garm-configurator-0")
        garm.add_provider("garm-configurator-1")
        relation = testing.Relation("garm-configurator", remote_app_name="garm-configurator")
        story = Story(garm, clock, charm_state(garm, root))
        story.run("install", story.ctx.on.install())
        story.state = dataclasses.replace(story.state, relations=[relation])
        relation = story.units(u0=CI, u1=BIG)
        story.run(
            "garm-configurator-relation-changed",
            story.ctx.on.relation_changed(relation, remote_unit=1),
        )
        story.wait(120)

        ci = next(s for s in garm.scalesets() if "ci" in [t["name"] for t in s["tags"]])
        story.say(
            f"a workflow job asks for runs-on ci; GitHub assigns it to {garm_name(ci)},",
            "and GARM starts a runner for it",
        )
        garm.assign_jobs(ci["id"], 1)

        def idle_runners() -> list[str]:
            return [
                i["name"]
                for i in garm.instances()
                if i["scale_set_id"] == ci["id"] and i.get("runner_status") == "idle"
            ]

        # The job starts once its runner is up and the table shows it there.
        if not story.wait_until(
            lambda: bool(idle_runners()) and story.rows()[garm_name(ci)][0] > 0, 120
        ):
            print("NOT converged: GARM started no runner for the job")
            return 1
        job = idle_runners()[0]
        garm.start_job(job)
        story.say(f"the job starts on {job}, the runner GARM started on {garm_name(ci)}")
        relation = story.units(u0={**CI, "labels": "linux,arm64"}, u1=BIG)
        story.run(
            "config-changed on the configurator",
            story.ctx.on.relation_changed(relation, remote_unit=0),
        )
        story.wait(60)
        garm.finish_job(job)
        story.say(
            f"the job on {job} finishes; {garm_name(ci)} is retired, so GARM hears of it",
            "at its next check against GitHub, every 5 minutes",
        )
        story.wait(360)

        # A runner option is not a label: it is changed in place, nothing is replaced.
        before = [s["id"] for s in garm.scalesets()]
        mirrored = {**CI, "labels": "linux,arm64", "dockerhub_mirror": "https://mirror.internal"}
        relation = story.units(u0=mirrored, u1=BIG)
        story.run(
            "config-changed on the configurator",
            story.ctx.on.relation_changed(relation, remote_unit=0),
        )
        in_place = [s["id"] for s in garm.scalesets()] == before
        story.say(
            "ci's runners get the mirror from the template garm-charm-ci; "
            + ("no scaleset replaced" if in_place else "REPLACED a scaleset")
        )
        story.wait(60)

        relation = story.units(u0=mirrored)
        story.run(
            "relation-departed (unit 1)",
            story.ctx.on.relation_departed(relation, remote_unit=1, departing_unit=1),
        )
        story.wait(120)

        converged = (
            in_place
            and story.state.unit_status == testing.ActiveStatus("1 scaleset in sync")
            and len(garm.scalesets()) == 1
        )
        print("converged" if converged else "NOT converged")

        # juju remove-unit garm/0: the leader sees itself depart from each relation,
        # then -broken, stop, remove. Its view empties; nothing in GARM may go with it.
        kept = garm.scalesets()
        with self_departing("garm/0"):
            relation = story.units("garm/0 itself is being removed (juju remove-unit)")
            story.run(
                "relation-departed (garm/0 itself)",
                story.ctx.on.relation_departed(relation, remote_unit=0),
            )
        story.run("reconcile-tick (timer, not yet gone)", reconcile_tick())
        story.run("relation-broken", story.ctx.on.relation_broken(relation))
        story.run("stop", story.ctx.on.stop())
        story.run("remove", story.ctx.on.remove())
        untouched = garm.scalesets() == kept
        print("nothing deleted by the leaving unit" if untouched else "DELETED on removal")
        if story.mismatches:
            print(f"{len(story.mismatches)} status line(s) named a scaleset GARM did not hold")
        return 0 if converged and untouched else 1


if __name__ == "__main__":
    sys.exit(main())
