"""The charm's metrics text: every family of the contract, parsed back, from real passes.

Outcomes come from whole passes against the GARM double (``tests/passes.py``); the text
is read back with a strict parser of the text format written here (prometheus_client is
not a dependency of the charm), and with prometheus_client's own when it is installed.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from garm.models import Instance, ScaleSet
from garm.refusals import REFUSALS_BEFORE_BLOCKED, Refusals, backoff, first_refusal
from observe.metrics import PHASES, RUNNER_STATUSES, force_removals, render, scalesets_by_phase
from scalesets.actions import KEPT_CAUSE, Observed, Phase, Progress, RemoveInstance
from scalesets.notes import Notes
from scalesets.planner import LISTENER_STARTUP
from scalesets.reconciler import Outcome
from scalesets.spec import Settings
from tests.changeovers import retired_with_a_busy_runner
from tests.garm_double import CONSOLIDATION_INTERVAL
from tests.metrics_text import (
    Family,
    checked,
    parse,
)
from tests.passes import SETTINGS, Passes
from tests.specs import make_spec
from tests.wire import T0

# --- a strict reader of the text format (0.0.4) ---------------------------------------


# --- passes against the GARM double ---------------------------------------------------


# A pass's facts other than its outcome, as the charm hands them over.
PASS = {
    "ended": T0,
    "duration": 1.25,
    "force_removals_total": 0,
    "reconcile_interval": 30,
    "settings": SETTINGS,
    "version": "v0.1.6",
}


def text_of(outcome: Outcome | None, **facts: object) -> str:
    return render(outcome, **{**PASS, **facts})  # type: ignore[arg-type]


def metrics(passes: Passes, outcome: Outcome | None = None, **facts: object) -> dict[str, Family]:
    """The metrics of the last pass run, or of ``outcome``, ending now."""
    return checked(
        text_of(passes.outcome if outcome is None else outcome, ended=passes.clock.now, **facts)
    )


def phases(families: dict[str, Family]) -> dict[str, float]:
    return {p: n for p, n in families["garm_charm_scalesets"].by("phase").items() if n}


def test_a_settled_scaleset_is_serving_with_its_runners_by_status(passes, garm, clock):
    spec = make_spec(name="CI-Small", min_idle_runners=2)
    passes.run(spec)
    for _ in range(3):
        garm.tick()  # made, booted, reported idle
    passes.later()
    outcome = passes.run(spec)

    families = metrics(passes, duration=0.4567, reconcile_interval=45, version="V0.1.6")

    assert outcome.ok and outcome.done == ()
    assert families["garm_charm_scalesets"].by("phase") == {p: (p == "serving") for p in PHASES}
    runners = families["garm_charm_runners"]
    assert {dict(k)["scaleset"] for k in runners.samples} == {"ci-small"}
    assert runners.by("status") == {s: 2 * (s == "idle") for s in RUNNER_STATUSES}
    assert families["garm_charm_runners_failing"].samples == {
        frozenset({("scaleset", "ci-small")}): 0
    }
    single = {
        name: family.value()
        for name, family in families.items()
        if not any(family.samples.keys() - {frozenset()})
    }
    assert single == {
        "garm_charm_changeover_oldest_seconds": 0,
        "garm_charm_runners_draining": 0,
        "garm_charm_deletes_kept": 0,
        "garm_charm_force_removals_total": 0,
        "garm_charm_last_pass_timestamp_seconds": clock.now.timestamp(),
        "garm_charm_last_pass_duration_seconds": 0.457,
        "garm_charm_last_pass_ok": 1,
        "garm_charm_reconcile_interval_seconds": 45,
        "garm_charm_drain_deadline_seconds": 7 * 3600,
        "garm_charm_handover_timeout_seconds": 30 * 60,
    }
    assert families["garm_charm_info"].samples == {frozenset({("version", "v0.1.6")}): 1}


def test_a_changeover_draining_a_busy_runner_tells_its_phase_and_age(passes, garm, clock):
    old, busy, new_spec = retired_with_a_busy_runner(passes, garm)
    retired_at = Notes.read(
        {s["name"]: s for s in garm.scalesets()}[old["name"]]["extended_state"]
    ).retired_at
    assert retired_at == clock.now

    passes.later(timedelta(minutes=20))
    passes.run(new_spec)
    families = metrics(passes)

    assert phases(families) == {"draining": 1}
    assert families["garm_charm_runners_draining"].value() == 1
    assert families["garm_charm_changeover_oldest_seconds"].value() == 20 * 60
    # The name's runners are the serving generation's: the busy one drains elsewhere.
    assert families["garm_charm_runners"].by("status") == dict.fromkeys(RUNNER_STATUSES, 0)

    garm.finish_job(busy)
    passes.later(CONSOLIDATION_INTERVAL)
    passes.later(timedelta(seconds=5))
    passes.run(new_spec)
    families = metrics(passes)
    assert phases(families) == {"serving": 1}
    assert families["garm_charm_runners_draining"].value() == 0
    assert families["garm_charm_changeover_oldest_seconds"].value() == 0


def test_each_pass_counts_the_force_removals_garm_accepted(passes, garm, clock):
    _, stuck, new_spec = retired_with_a_busy_runner(passes, garm)
    clock.advance(SETTINGS.drain_deadline)
    garm.set_runner(stuck, runner_status="idle")  # its job ended without GARM hearing

    outcome = passes.run(new_spec)

    assert force_removals(outcome) == 1 == sum(isinstance(a, RemoveInstance) for a in outcome.done)
    assert phases(metrics(passes, force_removals_total=1)) == {"force_removing": 1}
    assert metrics(passes, force_removals_total=1)["garm_charm_force_removals_total"].value() == 1
    garm.tick()
    assert force_removals(passes.run(new_spec)) == 0


def test_a_scaleset_refreshing_its_idle_runners_is_serving_and_forces_nothing():
    # No changeover (docs/adr/0010): counted serving, its removals no force-removals.
    refresh = RemoveInstance("garm-r0", 1, "ci-24ec4a", "ci", force=False)
    outcome = Outcome(
        progress=(Progress("ci", "ci-24ec4a", Phase.REFRESHING, 2),),
        done=(refresh,),
        current=(("ci", "ci-24ec4a"),),
    )
    counts = scalesets_by_phase(outcome)
    assert {k: v for k, v in counts.items() if v} == {"serving": 1}
    assert force_removals(outcome) == 0


def test_kept_deletes_are_counted_and_a_stuck_one_is_blocked(passes, garm):
    passes.run(make_spec())
    passes.later()
    garm.delete_keeps_record = True
    new_spec = make_spec(labels=("linux", "arm64"))
    passes.run(new_spec)
    passes.later(LISTENER_STARTUP)

    passes.run(new_spec)
    families = metrics(passes)
    assert families["garm_charm_deletes_kept"].value() == 1
    assert phases(families) == {"awaiting_deletion": 1}
    assert families["garm_charm_last_pass_ok"].value() == 1  # GARM answered 200

    for kept in range(1, REFUSALS_BEFORE_BLOCKED):
        passes.later(backoff(kept))
        passes.run(new_spec)
    families = metrics(passes)
    assert families["garm_charm_deletes_kept"].value() == 1
    assert phases(families) == {"blocked": 1}


def test_a_generation_handed_over_with_failing_runners_shows_them(passes, garm):
    """The case seen on a real GARM: runners that never came online, handed over anyway."""
    passes.run(make_spec(min_idle_runners=1))
    for _ in range(3):
        garm.tick()
    new_spec = make_spec(labels=("linux", "arm64"), min_idle_runners=2)
    garm.auto_report = False
    passes.run(new_spec)
    passes.later(LISTENER_STARTUP)
    garm.tick()  # the new generation's runners are made ...
    current = dict(passes.run(new_spec).current)["ci"]
    new_id = next(s["id"] for s in garm.scalesets() if s["name"] == current)
    failing = [i["name"] for i in garm.instances() if i["scale_set_id"] == new_id]
    for name in failing:
        garm.set_runner(name, status="error", runner_status="failed")
    passes.later(Settings().handover_timeout)
    passes.run(new_spec)  # handed over at the timeout: the old generation is retired
    for _ in range(2):
        passes.later()  # GARM scales its idle runner down, then reaps it
    outcome = passes.run(new_spec)

    families = metrics(passes)

    assert outcome.progress == () and len(garm.scalesets()) == 1
    assert phases(families) == {"serving": 1}
    assert len(failing) == 2
    assert families["garm_charm_runners_failing"].by("scaleset") == {"ci": 2}
    assert families["garm_charm_runners"].by("status")["failed"] == 2
    assert families["garm_charm_runners"].by("status")["idle"] == 0
    (runners,) = outcome.runners
    assert (runners.scaleset, runners.failing, runners.working) == (current, 2, 0)
    assert runners.keeps_failing


# --- outcomes that read nothing -------------------------------------------------------


@pytest.mark.parametrize(
    "outcome",
    [
        None,  # the pass stopped before reconciling (GARM not answering, say)
        Outcome(unreachable="GET /scalesets: ConnectionError"),
        Outcome(errors=()),  # a pass handed no observation: nothing is known of GARM
    ],
)
def test_without_an_observation_nothing_is_told_of_scalesets_and_the_pass_failed(outcome):
    text = text_of(
        outcome, duration=61.0, force_removals_total=7, reconcile_interval=0, version=""
    )

    families = checked(text, observed=False)

    assert families["garm_charm_last_pass_ok"].value() == 0
    assert families["garm_charm_force_removals_total"].value() == 7
    assert families["garm_charm_last_pass_timestamp_seconds"].value() == T0.timestamp()
    assert families["garm_charm_reconcile_interval_seconds"].value() == 0
    assert families["garm_charm_info"].by("version") == {"unknown": 1}


def test_a_pass_cut_off_mid_way_tells_what_it_saw_and_failed(passes):
    passes.run(make_spec())
    outcome = passes.run(make_spec(labels=("linux", "arm64")))
    broken = Outcome(
        outcome.progress, current=outcome.current, observed=outcome.observed, unreachable="x"
    )

    families = metrics(passes, broken)

    assert families["garm_charm_last_pass_ok"].value() == 0
    assert phases(families) == {"handing_over": 1}


# --- phases, told from hand-made outcomes -----------------------------------------------


def test_each_changeover_is_counted_once_blocked_over_its_phase_orphans_included():
    outcome = Outcome(
        progress=(
            Progress("a", "a-1", Phase.CREATING_REPLACEMENT),
            Progress("b", "", Phase.CREATING),
            Progress("c", "c-1", Phase.HANDING_OVER),
            Progress("d", "d-1", Phase.RETIRING),
            Progress("e", "e-1", Phase.DRAINING, 3),
            Progress("f", "f-1", Phase.FORCE_REMOVING, 1, "GARM refused 3 times"),
            Progress(None, "old", Phase.AWAITING_DELETION, orphan=True),
            Progress("g", "g-1", Phase.AWAITING_DELETION, orphan=True),
        ),
        current=tuple((n, f"{n}-2") for n in "abcdefgh"),
        observed=Observed(),
    )

    assert scalesets_by_phase(outcome) == {
        "serving": 2,  # g (an orphan of its name is not the name) and h
        "creating": 2,
        "handing_over": 1,
        "retiring": 1,
        "draining": 1,
        "awaiting_deletion": 2,
        "force_removing": 0,
        "blocked": 1,
    }


def test_only_retired_scalesets_age_a_changeover_and_hold_draining_runners():
    stamp = "retired-at=2026-11-30T10:00:00Z"
    observed = Observed(
        scalesets=(
            ScaleSet(1, "ci-1", enabled=False, extended_state=stamp),
            ScaleSet(2, "ci-2", enabled=True, extended_state="enabled-at=2026-11-30T09:00:00Z"),
            # Found enabled again by hand: not draining, whatever its old stamp says.
            ScaleSet(3, "x-1", enabled=True, extended_state="retired-at=2026-11-30T08:00:00Z"),
            ScaleSet(4, "y-1", enabled=False, extended_state="retired-at=2026-11-30T11:00:00Z"),
        ),
        instances=(
            Instance("r1", 1, "running", "active"),
            Instance("r2", 2, "running", "idle"),
            Instance("r3", 3, "running", "idle"),
            Instance("r4", 1, "pending_delete", "terminated"),
        ),
        # What GARM refused, as the memory keeps it: the deletes of two of them it kept,
        # and one it refused outright (no scaleset kept behind a 200).
        refusals=Refusals(
            {
                "delete:ci-1": first_refusal("", T0, KEPT_CAUSE, permanent=False),
                "delete:y-1": first_refusal("", T0, KEPT_CAUSE, permanent=False),
                "delete:gone": first_refusal("", T0, KEPT_CAUSE, permanent=False),
                "delete:ci-2": first_refusal("", T0, "scale set is busy", permanent=True),
            }
        ),
    )
    outcome = Outcome(current=(("ci", "ci-2"),), observed=observed)
    now = T0.replace(year=2026, month=11, day=30, hour=12, minute=0, second=0)

    families = checked(text_of(outcome, ended=now))

    assert families["garm_charm_changeover_oldest_seconds"].value() == 2 * 3600
    assert families["garm_charm_runners_draining"].value() == 2
    assert families["garm_charm_deletes_kept"].value() == 2  # of those GARM still lists
    assert families["garm_charm_runners"].by("status")["idle"] == 1


def test_a_runner_status_garm_adds_or_leaves_empty_is_still_told():
    observed = Observed(
        scalesets=(ScaleSet(1, "ci-1", enabled=True),),
        instances=(
            Instance("r1", 1, "creating", ""),
            Instance("r2", 1, "running", "Offline"),
            Instance("r3", 1, "error", "installing"),
        ),
    )
    outcome = Outcome(current=(("ci", "ci-1"),), observed=observed)

    families = checked(text_of(outcome))

    by_status = families["garm_charm_runners"].by("status")
    assert by_status == {
        **dict.fromkeys(RUNNER_STATUSES, 0),
        "unknown": 1,
        "offline": 1,
        "installing": 1,
    }
    assert families["garm_charm_runners_failing"].value(scaleset="ci") == 1


def test_the_changeover_limits_are_told_as_configured_and_left_out_when_unknown():
    settings = Settings(handover_timeout=timedelta(minutes=5), drain_deadline=timedelta(0))

    families = checked(text_of(None, settings=settings), observed=False)
    assert families["garm_charm_drain_deadline_seconds"].value() == 0
    assert families["garm_charm_handover_timeout_seconds"].value() == 300

    unknown = parse(text_of(None, settings=None))  # the config could not be read
    assert "garm_charm_drain_deadline_seconds" not in unknown
    assert "garm_charm_handover_timeout_seconds" not in unknown


def test_label_values_are_escaped():
    text = text_of(None, version='v1"\\\n')

    assert 'garm_charm_info{version="v1\\"\\\\\\n"} 1' in text.splitlines()
    assert checked(text, observed=False)["garm_charm_info"].by("version") == {'v1"\\\n': 1}


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_value_prometheus_could_not_alert_on_is_refused(bad):
    with pytest.raises(ValueError, match="metric value"):
        text_of(None, duration=bad)


def test_prometheus_client_reads_the_same_families(passes, garm):
    parser = pytest.importorskip("prometheus_client.parser")
    _, _, new_spec = retired_with_a_busy_runner(passes, garm)
    text = text_of(passes.run(new_spec), ended=passes.clock.now, force_removals_total=3)

    theirs = {
        # prometheus_client names a counter without its _total, as OpenMetrics does.
        (f.name + "_total" if f.type == "counter" else f.name): (
            f.type,
            {(s.name, frozenset(s.labels.items())): s.value for s in f.samples},
        )
        for f in parser.text_string_to_metric_families(text)
    }
    ours = {
        name: (f.kind, {(name, labels): v for labels, v in f.samples.items()})
        for name, f in checked(text).items()
    }
    assert theirs == ours
