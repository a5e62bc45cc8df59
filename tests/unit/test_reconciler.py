"""Whole passes over real HTTP against the GARM double: observe, plan, apply, fold."""

from __future__ import annotations

from datetime import timedelta

import pytest

from garm_client import GarmClient
from naming import generation_name, spec_key
from planner import CreateScaleset, DeleteScaleset, Phase, UpdateScaleset
from reconciler import Outcome, preview, reconcile
from spec import Desired, ScalesetSpec, Settings
from tests.clock import FakeClock
from tests.garm_double import GarmDouble

PROVIDER = "garm-configurator-0"
SETTINGS = Settings()


def make_spec(name="ci", labels=("linux", "x64"), source="garm-configurator/0", **kw):
    values = {
        "source": source,
        "name": name,
        "entity_kind": "organization",
        "entity_name": "example-org",
        "provider_name": PROVIDER,
        "image": "image-uuid",
        "flavor": "m1.small",
        "os_arch": "amd64",
        "max_runners": 5,
        "labels": labels,
    }
    values.update(kw)
    return ScalesetSpec(**values)


@pytest.fixture
def client(garm: GarmDouble):
    garm.add_provider(PROVIDER)
    garm.add_org("example-org")
    c = GarmClient(garm.url, garm.username, garm.password, timeout=(1.0, 2.0))
    yield c
    c.close()


class Passes:
    """Runs passes and measures each one's requests on the double."""

    def __init__(self, garm: GarmDouble, client: GarmClient, clock: FakeClock):
        self.garm, self.client, self.clock = garm, client, clock

    def run(self, *specs: ScalesetSpec, settings: Settings = SETTINGS) -> Outcome:
        start = len(self.garm.requests)
        outcome = reconcile(self.client, Desired(tuple(specs)), self.clock.now, settings)
        self.last = [r for r in self.garm.requests[start:] if r.path != "/auth/login"]
        return outcome

    @property
    def reads(self) -> int:
        return sum(r.method == "GET" for r in self.last)

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.last if r.method != "GET"]


@pytest.fixture
def passes(garm, client, clock) -> Passes:
    return Passes(garm, client, clock)


def live(garm: GarmDouble) -> dict[str, dict]:
    return {s["name"]: s for s in garm.scalesets()}


def test_first_pass_creates_and_second_pass_writes_nothing(passes, garm):
    spec = make_spec()
    outcome = passes.run(spec)
    assert outcome.ok
    assert [type(a) for a in outcome.done] == [CreateScaleset]
    (created,) = garm.scalesets()
    assert created["name"] == generation_name(spec_key(spec), 0, 10)
    assert created["enabled"] is True
    assert sorted(t["name"] for t in created["tags"]) == ["ci", "linux", "x64"]
    assert outcome.progress == ()

    again = passes.run(spec)
    assert again.done == ()
    assert passes.writes == []


def test_label_change_with_nothing_running_completes_in_one_pass(passes, garm):
    passes.run(make_spec())
    (old,) = garm.scalesets()
    outcome = passes.run(make_spec(labels=("linux", "arm64")))
    assert [type(a) for a in outcome.done] == [CreateScaleset, UpdateScaleset, DeleteScaleset]
    assert [m for m, _ in passes.writes] == ["POST", "PUT", "DELETE"]
    # Deleted is only "requested" until observed: the pass says so.
    assert [p.phase for p in outcome.progress] == [Phase.AWAITING_DELETION]
    assert old["name"] not in live(garm)

    settled = passes.run(make_spec(labels=("linux", "arm64")))
    assert settled.progress == ()
    assert passes.writes == []


def test_label_change_waits_for_the_busy_runner_then_deletes(passes, garm):
    passes.run(make_spec())
    (old,) = garm.scalesets()
    busy = garm.add_runner(old["id"], runner_status="active")
    new_spec = make_spec(labels=("linux", "arm64"))

    outcome = passes.run(new_spec)
    assert [p.describe() for p in outcome.progress] == ["draining 1 runner"]
    retired = live(garm)[old["name"]]
    assert "enabled" not in retired
    assert "max_runners" not in retired
    assert retired["extended_state"].startswith("retired-at=")

    assert passes.run(new_spec).done == ()  # still draining: nothing to write

    garm.finish_job(busy)
    garm.tick()
    outcome = passes.run(new_spec)
    assert [type(a) for a in outcome.done] == [DeleteScaleset]
    assert passes.run(new_spec).progress == ()
    assert [s["name"] for s in garm.scalesets()] == [generation_name(spec_key(new_spec), 0, 10)]


def test_warm_capacity_is_handed_over_only_once_the_replacement_has_an_idle_runner(passes, garm):
    passes.run(make_spec(min_idle_runners=1))
    garm.tick()
    garm.tick()
    new_spec = make_spec(labels=("linux", "arm64"), min_idle_runners=1)

    outcome = passes.run(new_spec)
    assert [p.phase for p in outcome.progress] == [Phase.HANDING_OVER]
    assert sum(s.get("enabled", False) for s in garm.scalesets()) == 2

    garm.tick()  # the replacement boots a runner
    assert passes.run(new_spec).progress[0].phase is Phase.HANDING_OVER
    garm.tick()  # ... which becomes idle
    outcome = passes.run(new_spec)
    assert [type(a) for a in outcome.done] == [UpdateScaleset]
    assert outcome.progress[0].describe() == "draining 1 runner"


def test_delete_answered_200_but_kept_is_retried_until_observed_gone(passes, garm):
    passes.run(make_spec())
    garm.delete_keeps_record = True
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)
    assert len(garm.scalesets()) == 2
    outcome = passes.run(new_spec)
    assert [p.phase for p in outcome.progress] == [Phase.AWAITING_DELETION]
    assert passes.writes == [("DELETE", passes.writes[0][1])]

    garm.delete_keeps_record = False
    passes.run(new_spec)
    assert passes.run(new_spec).progress == ()
    assert len(garm.scalesets()) == 1


def test_drain_deadline_force_removes_stuck_runners_then_deletes(passes, garm, clock):
    passes.run(make_spec())
    (old,) = garm.scalesets()
    stuck = garm.add_runner(old["id"], runner_status="active")
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)

    clock.advance(SETTINGS.drain_deadline - timedelta(seconds=1))
    assert passes.run(new_spec).done == ()
    assert garm.removals == []

    clock.advance(timedelta(seconds=1))
    outcome = passes.run(new_spec)
    assert outcome.progress[0].describe() == "force-removing 1 stuck runner"
    assert [(name, force) for name, _, _, force in garm.removals] == [(stuck, True)]
    garm.tick()
    passes.run(new_spec)
    assert [s["name"] for s in garm.scalesets()] == [generation_name(spec_key(new_spec), 0, 10)]


def test_an_api_error_on_one_scaleset_does_not_stop_the_others(passes, garm):
    passes.run(make_spec(name="a", source="u/0"), make_spec(name="b", source="u/1"))
    a, b = sorted(garm.scalesets(), key=lambda s: s["id"])
    garm.inject("PUT", rf"/scalesets/{a['id']}", status=500, times=5)

    outcome = passes.run(
        make_spec(name="a", source="u/0", max_runners=9),
        make_spec(name="b", source="u/1", max_runners=9),
    )
    assert not outcome.ok
    assert [e.action.scaleset_id for e in outcome.errors] == [a["id"]]  # type: ignore[union-attr]
    assert live(garm)[b["name"]]["max_runners"] == 9
    assert live(garm)[a["name"]]["max_runners"] == 5


def test_an_api_error_does_not_stop_the_orphan_sweep(passes, garm):
    passes.run(make_spec(name="a", source="u/0"), make_spec(name="b", source="u/1"))
    a = next(s for s in garm.scalesets() if "a" in [t["name"] for t in s["tags"]])
    garm.inject("PUT", rf"/scalesets/{a['id']}", status=500, times=5)
    outcome = passes.run(make_spec(name="a", source="u/0", max_runners=9))
    assert len(outcome.errors) == 1
    assert [(m, p) for m, p in passes.writes if m == "DELETE"] != []


def test_unreachable_garm_aborts_the_pass_and_writes_nothing(passes, garm):
    garm.inject("GET", r"/instances", drop=True)
    outcome = passes.run(make_spec())
    assert outcome.unreachable is not None
    assert outcome.done == ()
    assert passes.writes == []


def test_garm_going_away_mid_pass_stops_writing_and_the_next_pass_resumes(passes, garm):
    passes.run(make_spec())
    new_spec = make_spec(labels=("linux", "arm64"))
    garm.inject("PUT", r"/scalesets/\d+", drop=True)
    outcome = passes.run(new_spec)
    assert outcome.unreachable is not None
    assert [m for m, _ in passes.writes] == ["POST", "PUT"]  # nothing after the drop
    assert sum(s.get("enabled", False) for s in garm.scalesets()) == 2  # no gap

    passes.run(new_spec)
    assert passes.run(new_spec).progress == ()
    assert len(garm.scalesets()) == 1


def test_a_create_whose_answer_is_lost_is_adopted_not_repeated(passes, garm):
    garm.inject("POST", r"/organizations/.+/scalesets", drop_after=True)
    assert passes.run(make_spec()).unreachable is not None
    assert len(garm.scalesets()) == 1
    outcome = passes.run(make_spec())
    assert outcome.done == ()
    assert len(garm.scalesets()) == 1


@pytest.mark.parametrize("count", [1, 25])
def test_observation_is_a_constant_number_of_list_calls(passes, count):
    specs = [make_spec(name=f"s{i}", source=f"u/{i:03}") for i in range(count)]
    passes.run(*specs)
    passes.run(*specs)
    assert passes.writes == []
    assert passes.reads == 5  # scalesets, instances, providers, organizations, repositories


def test_preview_plans_without_writing(garm, client, clock):
    plan = preview(client, Desired((make_spec(),)), clock.now, SETTINGS)
    assert [type(a) for a in plan.actions] == [CreateScaleset]
    assert garm.writes() == []


def test_a_runner_reaped_before_its_force_removal_is_not_an_error(passes, garm, clock):
    passes.run(make_spec())
    (old,) = garm.scalesets()
    garm.add_runner(old["id"], runner_status="active")
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)
    clock.advance(SETTINGS.drain_deadline)
    garm.inject("DELETE", r"/instances/[^/]+/?", status=404, error="Not Found")
    outcome = passes.run(new_spec)
    assert outcome.ok
    assert outcome.progress[0].describe() == "force-removing 1 stuck runner"
