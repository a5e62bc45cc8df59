"""The main job, told as a story against the embedded GARM double (``tox -e demo``).

Runs the real reconciler over real HTTP, one pass per "hook", and prints after each a
``juju status``-like line (the unit's status and the scalesets GARM holds). Exits 0 only
if the story ends converged. Until a Juju controller is at hand, this is how to watch a
label change happen without a job lost.
"""

from __future__ import annotations

import sys
from datetime import timedelta

from garm_client import GarmClient
from reconciler import Outcome, reconcile
from spec import Desired, ScalesetSpec, Settings
from state import RelationState
from status import summarise
from tests.clock import FakeClock
from tests.garm_double import GarmDouble

SETTINGS = Settings()


class Story:
    """A GARM double, a clock, and the units of garm-configurator currently related."""

    def __init__(self, garm: GarmDouble, clock: FakeClock):
        self.garm = garm
        self.clock = clock
        self.units: dict[str, ScalesetSpec] = {}
        self.client = GarmClient(garm.url, garm.username, garm.password)
        self.hook = 0

    def publish(self, unit: str, name: str, labels: tuple[str, ...], min_idle: int = 0):
        provider = unit.replace("/", "-")
        self.garm.add_provider(provider)
        self.units[unit] = ScalesetSpec(
            source=unit,
            name=name,
            entity_kind="organization",
            entity_name="example-org",
            provider_name=provider,
            image="ubuntu-24.04",
            flavor="m1.small",
            os_arch="amd64",
            max_runners=4,
            min_idle_runners=min_idle,
            labels=labels,
        )

    def pass_(self, event: str) -> Outcome:
        self.hook += 1
        self.garm.tick()
        desired = Desired(tuple(self.units.values()))
        outcome = reconcile(self.client, desired, self.clock.now, SETTINGS)
        summary = summarise(outcome, RelationState(True, desired))
        print(f"hook {self.hook:>2} {event:<34} garm/0 {summary.kind}: {summary.message}")
        for scaleset in sorted(self.garm.scalesets(), key=lambda s: s["id"]):
            runners = [i for i in self.garm.instances() if i["scale_set_id"] == scaleset["id"]]
            busy = sum(i.get("runner_status") == "active" for i in runners)
            labels = ",".join(sorted(t["name"] for t in scaleset.get("tags", [])))
            state = "enabled " if scaleset.get("enabled") else "retired "
            print(
                f"{'':>8}{scaleset['name']:<12}{state}[{labels}] "
                f"runners={len(runners)} busy={busy}"
            )
        return outcome

    def converged(self) -> bool:
        outcome = reconcile(
            self.client, Desired(tuple(self.units.values())), self.clock.now, SETTINGS
        )
        return outcome.ok and not outcome.progress and not outcome.done


def main() -> int:
    """Tell the story; exit 0 only if it ends converged."""
    clock = FakeClock()
    with GarmDouble(clock=clock) as garm:
        garm.add_org("example-org")
        story = Story(garm, clock)
        story.pass_("install")
        story.publish("garm-configurator/0", "ci", ("linux", "x64"))
        story.publish("garm-configurator-big/0", "big", ("linux", "x64", "large"), min_idle=1)
        story.pass_("garm-configurator-relation-changed")
        story.pass_("update-status")

        ci = next(s for s in garm.scalesets() if "ci" in [t["name"] for t in s["tags"]])
        job = garm.add_runner(ci["id"], runner_status="active")
        print(f"{'':>8}(a job starts on runner {job})")
        story.publish("garm-configurator/0", "ci", ("linux", "arm64"))
        story.pass_("config-changed (labels)")
        story.clock.advance(timedelta(minutes=5))
        story.pass_("update-status")

        garm.finish_job(job)
        print(f"{'':>8}(the job on {job} finishes)")
        story.clock.advance(timedelta(minutes=5))
        story.pass_("update-status")
        story.pass_("update-status")

        del story.units["garm-configurator-big/0"]
        story.pass_("garm-configurator-relation-departed")
        story.clock.advance(timedelta(minutes=5))
        story.pass_("update-status")
        story.pass_("update-status")

        ok = story.converged() and len(garm.scalesets()) == 1
        print("converged" if ok else "NOT converged")
        story.client.close()
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
