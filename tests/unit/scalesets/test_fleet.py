"""The fleet at a glance (``show-scalesets``): each generation's phase, runners and counts.

Built from the planner's own plan over GARM-shaped observations, so the phases shown
are the ones the pass acts on.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import timedelta

from garm.refusals import REFUSALS_BEFORE_BLOCKED, Held, Refusal, Refusals, backoff, first_refusal
from scalesets.actions import KEPT_CAUSE
from scalesets.fleet import RESULTS_BUDGET, SERVING, STARTING, generations, results, table
from tests.plans import NOW, SETTINGS, generation, observe, retired, run, runner
from tests.specs import make_spec

OLD_SPEC = make_spec()
NEW_SPEC = make_spec(labels=("linux", "arm64"))


def _changeover(*instances, old_retired=True):
    old = generation(OLD_SPEC, 1)
    new = generation(NEW_SPEC, 2, created_at=NOW - timedelta(minutes=5))
    seen = observe(retired(old) if old_retired else old, new, instances=instances)
    return seen, run(NEW_SPEC, observed=seen), old, new


def test_a_draining_generation_and_its_serving_successor_are_both_shown():
    old = generation(OLD_SPEC, 1)
    busy = runner("garm-1", old, runner_status="active")
    idle = runner("garm-2", old, runner_status="idle")
    going = runner("garm-3", old, status="pending_delete", runner_status="terminated")
    seen, plan, old, new = _changeover(busy, idle, going)
    (current, draining) = generations(seen, plan)
    assert (current.name, current.current, current.phase) == (new.name, True, SERVING)
    assert current.labels == new.labels and current.enabled
    assert (draining.name, draining.current, draining.phase) == (old.name, False, "draining")
    assert draining.runners == {"running": 2, "pending_delete": 1}
    assert draining.busy == 1
    assert (draining.min_idle, draining.max_runners, draining.enabled) == (0, 0, False)
    assert current.logical == draining.logical == "ci"


def test_a_generation_not_live_yet_is_starting_and_its_predecessor_still_serves():
    # Created a moment ago: its listener is not up, so the old one keeps its jobs.
    old = generation(OLD_SPEC, 1)
    new = generation(NEW_SPEC, 2, created_at=NOW)
    seen = observe(old, new)
    plan = run(NEW_SPEC, observed=seen)
    rows = {g.name: g for g in generations(seen, plan)}
    assert rows[new.name].phase == STARTING
    assert rows[old.name].phase == "handing over"
    assert rows[old.name].enabled


def test_an_orphan_is_shown_with_the_logical_name_it_was_made_for():
    orphan = generation(make_spec(name="gone"), 5)
    seen = observe(retired(orphan), instances=[runner("garm-1", orphan, runner_status="active")])
    (row,) = generations(seen, run(observed=seen))
    assert (row.logical, row.current, row.phase, row.busy) == ("gone", False, "draining", 1)


def test_a_runner_stuck_past_the_deadline_is_told_on_its_generation():
    old = generation(OLD_SPEC, 1)
    stuck = runner("garm-1", old, runner_status="active")
    seen, _, old, _ = _changeover(stuck)
    late = NOW + SETTINGS.drain_deadline + timedelta(hours=2)
    plan = run(NEW_SPEC, observed=seen, now=late)
    rows = {g.name: g for g in generations(seen, plan)}
    assert rows[old.name].phase == "force-removing"


def test_a_scaleset_garm_keeps_says_what_to_do_on_its_generation():
    seen, _, old, new = _changeover()
    again = REFUSALS_BEFORE_BLOCKED
    kept = Refusal("", again, NOW + backoff(again), KEPT_CAUSE, False)
    seen = dataclasses.replace(seen, refusals=Refusals({f"delete:{old.name.lower()}": kept}))
    rows = {g.name: g for g in generations(seen, run(NEW_SPEC, observed=seen))}
    assert f"GARM kept scaleset {old.name}" in rows[old.name].stuck
    assert rows[new.name].stuck == ""
    answer = results(tuple(rows.values()), (), NOW)
    assert "delete it on GitHub" in answer[f"scaleset-{old.id}"]["stuck"]
    assert "stuck" not in answer[f"scaleset-{new.id}"]


def test_the_table_has_one_line_per_generation_and_aligned_columns():
    old = generation(OLD_SPEC, 1)
    seen, plan, old, new = _changeover(runner("garm-1", old, runner_status="active"))
    lines = table(generations(seen, plan)).splitlines()
    assert len(lines) == 3
    assert lines[0].split() == [
        "SCALESET", "GARM", "NAME", "ID", "PHASE", "ENABLED", "MIN/MAX", "RUNNERS", "BUSY"
    ]  # fmt: skip
    assert re.match(rf"ci\s+{new.name}\s+2\s+serving\s+yes\s+0/5\s+none\s+0$", lines[1])
    assert re.match(rf"ci\s+{old.name}\s+1\s+draining\s+no\s+0/0\s+1 running\s+1$", lines[2])
    assert lines[1].index(new.name) == lines[2].index(old.name) == lines[0].index("GARM")


def test_results_use_keys_juju_accepts_and_say_what_is_held_until_when():
    old = generation(OLD_SPEC, 1)
    going = runner("garm-3", old, status="pending_delete", runner_status="terminated")
    seen, plan, old, _ = _changeover(going)
    refusal = first_refusal("d", NOW, "GitHub said no", permanent=False)
    held = (Held(f"delete scaleset ci ({old.name})", refusal),)
    answer = results(generations(seen, plan), held, NOW)

    def keys(value, path=""):
        if isinstance(value, dict):
            for key, inner in value.items():
                yield f"{path}{key}"
                yield from keys(inner, f"{path}{key}.")

    for key in keys(answer):
        assert re.fullmatch(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?", key.rsplit(".", 1)[-1]), key
    assert answer["scaleset-1"]["runners"] == {"pending-delete": "1"}
    assert answer["scaleset-1"]["phase"] == "draining"
    seconds = int((refusal.retry_at - NOW).total_seconds())
    assert answer["held"] == (
        f"GARM refused to delete scaleset ci ({old.name}) (once): GitHub said no; "
        f"tried again in {seconds}s"
    )


def test_an_empty_garm_says_so():
    seen = observe()
    assert results(generations(seen, run(observed=seen)), (), NOW)["table"] == (
        "GARM holds no scaleset"
    )


def test_any_runner_status_garm_sends_is_a_key_juju_takes():
    old = generation(OLD_SPEC, 1)
    odd = [
        runner(f"garm-{i}", old, status=status)
        for i, status in enumerate(["Pending_Create", "_weird_", "", "pending-create"])
    ]
    seen, plan, old, _ = _changeover(*odd)
    answer = results(generations(seen, plan), (), NOW)
    assert answer[f"scaleset-{old.id}"]["runners"] == {
        "pending-create": "2",
        "weird": "1",
        "unknown": "1",
    }


def test_the_logical_name_is_shown_as_its_configurator_spells_it():
    spec = make_spec(name="CI")
    seen = observe(generation(spec, 1))
    (row,) = generations(seen, run(spec, observed=seen), [spec.name])
    assert row.logical == "CI"


def test_a_fleet_too_large_for_one_answer_is_told_by_its_table_cut_to_fit():
    # Juju takes about 100 KB of results; a thousand generations with runners exceed it.
    spec = make_spec()
    many = [generation(spec, i, name=f"legacy-{i:04}") for i in range(1, 1001)]
    runners = [runner(f"garm-{s.id}", s, runner_status="active") for s in many]
    seen = observe(*many, instances=runners)
    rows = generations(seen, run(spec, observed=seen))
    answer = results(rows, (), NOW)
    assert len(json.dumps(answer).encode()) <= RESULTS_BUDGET
    assert not [k for k in answer if k.startswith("scaleset-")]
    assert answer["left-out"] == "the keys of the 1000 generations: too many for one answer"
    lines = answer["table"].splitlines()
    assert lines[0].startswith("SCALESET") and re.fullmatch(r"\.\.\. and \d+ more", lines[-1])
    shown = len(lines) - 2
    assert lines[-1] == f"... and {1000 - shown} more" and shown > 100
    # A fleet that fits keeps every key.
    few = results(rows[:3], (), NOW)
    assert {k for k in few if k.startswith("scaleset-")} == {f"scaleset-{g.id}" for g in rows[:3]}
