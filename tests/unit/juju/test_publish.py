"""What the leader publishes back to each garm-configurator application (issue #11, item 6).

Relation states are parsed from configurator databags as the real configurator writes
them; outcomes are either whole passes against the GARM double or built as the planner
builds them. ``current`` is what the pass's last plan knows of each logical scaleset's
current generation (its GARM name), which the charm hands in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta

import pytest
from charms.garm_machine.v0.garm_configurator import GarmAppData

from juju.publish import published, unit_states, write
from juju.relation import RelationState, relation_state
from scalesets.actions import DeleteScaleset, Phase, Progress, Skipped
from scalesets.naming import generation_name, spec_key
from scalesets.planner import LISTENER_STARTUP
from scalesets.reconciler import ActionError, Outcome, reconcile
from scalesets.spec import Settings
from tests.databags import (
    EXAMPLE_UNIT,
    KEY_SECRET_URI,
    PASSWORD_SECRET_URI,
    SECOND_UNIT,
    SOLE_UNIT,
    follower,
)
from tests.garm_double import CONSOLIDATION_INTERVAL
from tests.passes import Passes

CFG0, CFG1, CFG2 = "garm-configurator/0", "garm-configurator/1", "garm-configurator/2"
BIG0 = "big-cfg/0"
RELATION, BIG_RELATION = 3, 7
ONE = {RELATION: "garm-configurator"}
SETTINGS = Settings()


def state_of(*units: tuple[str, dict[str, str]]) -> RelationState:
    return relation_state(True, units, app="garm")


def as_planned(state: RelationState, *progress: Progress, skipped=()) -> Outcome:
    """An outcome as the planner reports a pass: the held units are skipped first."""
    held = tuple(Skipped(h.source, h.name, h.reason, h.blocking) for h in state.desired.held)
    return Outcome(progress=progress, skipped=held + tuple(skipped))


def entries(data: Mapping[str, str]) -> dict[str, dict[str, str]]:
    return json.loads(data["scalesets"])


def one(state: RelationState, outcome: Outcome, current=None, relations=ONE) -> dict:
    result = published(state, outcome, current or {}, relations)
    assert result is not None
    return entries(result[RELATION])


# --- each phase, from a whole pass ----------------------------------------------------


def pass_over(passes: Passes, state: RelationState) -> Outcome:
    return reconcile(passes.client, state.desired, passes.clock.now, SETTINGS)


def current_name(state: RelationState) -> str:
    (spec,) = state.desired.specs
    return generation_name(spec_key(spec), 0, SETTINGS.name_budget)


def test_a_label_change_is_published_from_serving_through_replacing_back_to_serving(passes, garm):
    first = state_of((CFG0, SOLE_UNIT))
    outcome = pass_over(passes, first)
    old = current_name(first)
    assert one(first, outcome, {"sm-x64": old}) == {
        CFG0: {"name": "sm-x64", "phase": "serving", "scaleset": old}
    }

    passes.later()
    (listed,) = garm.scalesets()
    busy = garm.add_runner(listed["id"], runner_status="active")
    second = state_of((CFG0, {**SOLE_UNIT, "labels": "self-hosted,linux,arm64"}))
    new = current_name(second)
    outcome = pass_over(passes, second)
    assert one(second, outcome, {"sm-x64": new}) == {
        CFG0: {
            "name": "sm-x64",
            "phase": "replacing",
            "scaleset": new,
            "replaced": old,
            "draining": "1",
            "message": "handing over",
        }
    }

    passes.later(LISTENER_STARTUP)
    outcome = pass_over(passes, second)
    assert one(second, outcome, {"sm-x64": new})[CFG0] == {
        "name": "sm-x64",
        "phase": "replacing",
        "scaleset": new,
        "replaced": old,
        "draining": "1",
        "message": "draining 1 runner",
    }

    # Retired, the old scaleset hears of the job's end at GARM's next consolidation.
    garm.finish_job(busy)
    passes.later(CONSOLIDATION_INTERVAL)
    passes.later(timedelta(seconds=5))
    outcome = pass_over(passes, second)
    assert [type(a) for a in outcome.done] == [DeleteScaleset]
    assert outcome.progress == ()
    assert one(second, outcome, {"sm-x64": new}) == {
        CFG0: {"name": "sm-x64", "phase": "serving", "scaleset": new}
    }


def test_a_provider_garm_has_not_registered_yet_is_waiting(passes):
    state = state_of((CFG1, SECOND_UNIT))
    assert one(state, pass_over(passes, state)) == {
        CFG1: {
            "name": "sm-x64",
            "phase": "waiting",
            "message": "provider 'garm-configurator-1' is not registered in GARM yet",
        }
    }


def test_a_duplicate_name_holds_the_application_that_came_second(passes):
    first = state_of((CFG0, SOLE_UNIT))
    pass_over(passes, first)
    garm_name = current_name(first)
    other = {**SOLE_UNIT, "provider_name": "big-cfg-0"}
    state = state_of((CFG0, SOLE_UNIT), (BIG0, other))
    result = published(
        state,
        pass_over(passes, state),
        {"sm-x64": garm_name},
        {RELATION: "garm-configurator", BIG_RELATION: "big-cfg"},
    )
    assert result is not None
    assert entries(result[RELATION]) == {
        CFG0: {"name": "sm-x64", "phase": "serving", "scaleset": garm_name}
    }
    # The other application hears why, and not the name of a scaleset that is not its.
    assert entries(result[BIG_RELATION]) == {
        BIG0: {
            "name": "sm-x64",
            "phase": "held",
            "message": "duplicate scaleset name 'sm-x64', already published by " + CFG0,
        }
    }


# --- each phase, from the planner's progress and skipped --------------------------------

STATE = state_of((CFG0, EXAMPLE_UNIT))
NEW, OLD = "lg-x64-3f2a1c", "lg-x64-9b8c7d"
STUCK = (
    f"GARM refused 5 times to remove runners of {OLD} past the drain deadline "
    "(a job still running?): end the job, or raise drain-deadline-minutes"
)


def replacing(runners: int, message: str, **more: str) -> dict[str, str]:
    return {"phase": "replacing", "draining": str(runners), "message": message, **more}


@pytest.mark.parametrize(
    ("progress", "current", "expected"),
    [
        pytest.param((), {}, {"phase": "creating"}, id="nothing live, nothing planned"),
        pytest.param(
            (Progress("lg-x64", "", Phase.CREATING),), {}, {"phase": "creating"}, id="creating"
        ),
        pytest.param(
            (Progress("lg-x64", NEW, Phase.CREATING),),
            {"lg-x64": NEW},
            {"phase": "creating", "scaleset": NEW},
            id="created, not on GitHub yet",
        ),
        pytest.param((), {"lg-x64": NEW}, {"phase": "serving", "scaleset": NEW}, id="serving"),
        pytest.param(
            (Progress("lg-x64", OLD, Phase.CREATING_REPLACEMENT, 2),),
            {},
            replacing(2, "creating replacement", replaced=OLD),
            id="replacement not created yet",
        ),
        pytest.param(
            (Progress("lg-x64", OLD, Phase.CREATING_REPLACEMENT, 2),),
            {"lg-x64": NEW},
            replacing(2, "creating replacement", scaleset=NEW, replaced=OLD),
            id="replacement created, not on GitHub yet",
        ),
        pytest.param(
            (Progress("lg-x64", OLD, Phase.HANDING_OVER, 4),),
            {"lg-x64": NEW},
            replacing(4, "handing over", scaleset=NEW, replaced=OLD),
            id="handing over",
        ),
        pytest.param(
            (Progress("lg-x64", OLD, Phase.RETIRING, 3),),
            {"lg-x64": NEW},
            replacing(3, "retiring", scaleset=NEW, replaced=OLD),
            id="retiring",
        ),
        pytest.param(
            (Progress("lg-x64", OLD, Phase.DRAINING, 3),),
            {"lg-x64": NEW},
            replacing(3, "draining 3 runners", scaleset=NEW, replaced=OLD),
            id="draining",
        ),
        pytest.param(
            (Progress("lg-x64", OLD, Phase.AWAITING_DELETION),),
            {"lg-x64": NEW},
            replacing(0, "awaiting deletion", scaleset=NEW, replaced=OLD),
            id="awaiting deletion",
        ),
        pytest.param(
            (Progress("lg-x64", OLD, Phase.FORCE_REMOVING, 1, STUCK),),
            {"lg-x64": NEW},
            replacing(1, f"stuck: {STUCK}", scaleset=NEW, replaced=OLD),
            id="stuck",
        ),
        pytest.param(
            (
                Progress("lg-x86", "lg-x86-5d4e3f", Phase.DRAINING, 2, orphan=True),
                Progress(None, "by-hand", Phase.AWAITING_DELETION, orphan=True),
            ),
            {"lg-x64": NEW},
            {"phase": "serving", "scaleset": NEW},
            id="an orphan is no unit's",
        ),
        pytest.param(
            # The planner claims every scaleset of a published name, so an orphan made for
            # it should not occur; were it to, it is still no unit's own changeover.
            (Progress("lg-x64", "lg-x64-5d4e3f", Phase.DRAINING, 2, orphan=True),),
            {"lg-x64": NEW},
            {"phase": "serving", "scaleset": NEW},
            id="an orphan made for the same name",
        ),
        pytest.param(
            # No changeover: the generation serves, its outdated idle runners replaced.
            (Progress("lg-x64", NEW, Phase.REFRESHING, 2),),
            {"lg-x64": NEW},
            {"phase": "serving", "scaleset": NEW, "message": "refreshing 2 idle runners"},
            id="refreshing",
        ),
        pytest.param(
            (Progress("LG-X64", OLD, Phase.DRAINING, 1),),
            {"lg-x64": NEW},
            replacing(1, "draining 1 runner", scaleset=NEW, replaced=OLD),
            id="names compared without case",
        ),
    ],
)
def test_the_phase_of_a_logical_scaleset(progress, current, expected):
    assert one(STATE, as_planned(STATE, *progress), current) == {
        CFG0: {"name": "lg-x64", **expected}
    }


@pytest.mark.parametrize(
    ("skipped", "expected"),
    [
        pytest.param(
            Skipped(CFG0, "lg-x64", "organization 'example-org' is not registered in GARM yet"),
            {
                "phase": "waiting",
                "message": "organization 'example-org' is not registered in GARM yet",
            },
            id="org not registered",
        ),
        pytest.param(
            Skipped(CFG0, "lg-x64", "its create was refused (once): quota exceeded", False),
            {"phase": "waiting", "message": "its create was refused (once): quota exceeded"},
            id="create refused, retried",
        ),
        pytest.param(
            Skipped(
                CFG0, "lg-x64", "every candidate scaleset name is taken in GARM or on GitHub", True
            ),
            {
                "phase": "held",
                "message": "every candidate scaleset name is taken in GARM or on GitHub",
            },
            id="no name left",
        ),
    ],
)
def test_a_scaleset_left_out_of_the_pass_is_waiting_or_held_and_names_no_scaleset(
    skipped, expected
):
    outcome = as_planned(STATE, skipped=(skipped,))
    assert one(STATE, outcome, {"lg-x64": NEW}) == {CFG0: {"name": "lg-x64", **expected}}


def test_of_several_reasons_to_leave_a_scaleset_out_the_operators_is_published():
    state = state_of((CFG0, SOLE_UNIT), (CFG1, follower(CFG1, SOLE_UNIT)))
    waiting = Skipped(CFG0, "sm-x64", "its create was refused (once): quota exceeded")
    held = Skipped(CFG1, "sm-x64", "every candidate scaleset name is taken", True)
    for skipped in ((waiting, held), (held, waiting)):
        published_ = one(state, as_planned(state, skipped=skipped))
        assert {e["phase"] for e in published_.values()} == {"held"}
        assert {e["message"] for e in published_.values()} == {held.reason}


def test_a_unit_with_invalid_data_is_held_with_the_reason_and_its_neighbours_go_on():
    state = state_of(
        (CFG0, {**SOLE_UNIT, "max_runner": "ten"}),
        (CFG1, follower(CFG1, SOLE_UNIT, image=False)),
        (CFG2, {"ingress-address": "10.1.2.5"}),
    )
    assert one(state, as_planned(state)) == {
        CFG0: {
            "name": "sm-x64",
            "phase": "held",
            "message": "invalid max_runner: must be a whole number, got 'ten'",
        },
        # The other unit of the application has no image: its own reason, not the first's.
        CFG1: {"name": "sm-x64", "phase": "waiting", "message": "image_id not published yet"},
        # CFG2 published no scaleset yet: nothing of it exists, nothing to say.
    }


def test_a_unit_whose_name_is_unusable_is_held_without_a_name():
    state = state_of((CFG0, {**SOLE_UNIT, "name": "no spaces allowed"}))
    (entry,) = one(state, as_planned(state)).values()
    assert entry["phase"] == "held"
    assert "name" not in entry
    assert entry["message"].startswith("invalid name: ")


def test_every_unit_of_an_application_publishing_one_name_reads_the_same_scaleset():
    # Only the leader of a configurator application publishes its provider and image:
    # its followers' scaleset is the one the leader's data defines.
    state = state_of(
        (CFG0, SOLE_UNIT),
        (CFG1, follower(CFG1, SOLE_UNIT)),
        (CFG2, follower(CFG2, SOLE_UNIT, image=False)),
    )
    progress = Progress("sm-x64", OLD, Phase.DRAINING, 2)
    published_ = one(state, as_planned(state, progress), {"sm-x64": NEW})
    assert list(published_) == [CFG0, CFG1, CFG2]
    assert all(entry == published_[CFG0] for entry in published_.values())
    assert published_[CFG0]["phase"] == "replacing"


def test_each_relation_lists_only_its_own_applications_units():
    state = state_of(
        (CFG0, EXAMPLE_UNIT),
        (CFG1, follower(CFG1, EXAMPLE_UNIT)),
        (BIG0, {**SOLE_UNIT, "provider_name": "big-cfg-0"}),
    )
    result = published(
        state,
        as_planned(state, Progress("sm-x64", "", Phase.CREATING)),
        {"lg-x64": NEW},
        {RELATION: "garm-configurator", BIG_RELATION: "big-cfg", 9: "idle-cfg"},
    )
    assert result is not None
    assert sorted(result) == [RELATION, BIG_RELATION, 9]
    assert list(entries(result[RELATION])) == [CFG0, CFG1]
    assert entries(result[BIG_RELATION]) == {BIG0: {"name": "sm-x64", "phase": "creating"}}
    # A related application with no unit seen: an empty picture, still versioned.
    assert result[9] == {"version": "1", "scalesets": "{}"}


def test_the_databag_is_two_string_keys_of_strings_and_reads_back_whole():
    state = state_of((CFG0, EXAMPLE_UNIT), (BIG0, {**SOLE_UNIT, "provider_name": "big-cfg-0"}))
    outcome = as_planned(state, Progress("lg-x64", OLD, Phase.DRAINING, 3))
    result = published(state, outcome, {"lg-x64": NEW}, {1: "garm-configurator", 2: "big-cfg"})
    assert result is not None
    for data in result.values():
        assert set(data) == {"version", "scalesets"}
        assert all(isinstance(v, str) for v in data.values())
        for entry in entries(data).values():
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in entry.items())
        assert GarmAppData.from_databag(data).to_databag() == data
    assert GarmAppData.from_databag(result[1]).for_unit(CFG0).draining == 3  # type: ignore[union-attr]


def test_no_secret_reaches_the_published_data():
    password, key_text = "hunter2-plaintext", "-----BEGIN RSA PRIVATE KEY-----"
    secrets = [PASSWORD_SECRET_URI, KEY_SECRET_URI, password, "pa55word", key_text]
    state = state_of(
        (CFG0, {**EXAMPLE_UNIT, "openstack_password": password}),
        (CFG1, {**follower(CFG1, EXAMPLE_UNIT), "runner_http_proxy": "http://u:pa55word@sq:3128"}),
        (CFG2, {**follower(CFG2, EXAMPLE_UNIT), "openstack_password": f"{password}\n{key_text}"}),
    )
    outcome = as_planned(state, Progress("lg-x64", OLD, Phase.DRAINING, 1))
    result = published(state, outcome, {"lg-x64": NEW}, ONE)
    assert result is not None
    text = json.dumps(result)
    assert entries(result[RELATION])[CFG1]["phase"] == "held"
    assert entries(result[RELATION])[CFG2]["phase"] == "held"
    for secret in secrets:
        assert secret not in text


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(Outcome(unreachable="GET /scalesets: ConnectionError"), id="unreachable"),
        pytest.param(
            Outcome(progress=(Progress("lg-x64", OLD, Phase.DRAINING, 1),), unreachable="gone"),
            id="unreachable mid-pass",
        ),
        pytest.param(
            Outcome(errors=(ActionError(None, "GET /scalesets: 500"),)), id="read refused"
        ),
    ],
)
def test_a_pass_that_did_not_read_garm_publishes_nothing(outcome):
    assert published(STATE, outcome, {"lg-x64": NEW}, ONE) is None


def test_a_refused_write_still_publishes_what_the_pass_saw():
    outcome = Outcome(
        progress=(Progress("lg-x64", OLD, Phase.AWAITING_DELETION),),
        errors=(ActionError(DeleteScaleset(4, OLD), "DELETE /scalesets/4: 500"),),
    )
    assert one(STATE, outcome, {"lg-x64": NEW})[CFG0]["phase"] == "replacing"


def test_unit_states_lists_units_in_unit_order():
    units = [
        (f"garm-configurator/{n}", follower(f"garm-configurator/{n}", SOLE_UNIT)) for n in (10, 2)
    ]
    state = state_of((CFG0, SOLE_UNIT), *units)
    assert list(unit_states(state, as_planned(state), {})) == [
        CFG0,
        "garm-configurator/2",
        "garm-configurator/10",
    ]


class Recording(dict):
    """A databag that records what is written to it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sets: list[str] = []

    def __setitem__(self, key, value):
        self.sets.append(key)
        super().__setitem__(key, value)


def test_write_sets_only_what_changed():
    result = published(STATE, as_planned(STATE), {"lg-x64": NEW}, ONE)
    assert result is not None
    databag = Recording({"ingress-address": "10.1.2.9"})
    assert write(databag, result[RELATION]) is True
    assert sorted(databag.sets) == ["scalesets", "version"]
    assert databag["ingress-address"] == "10.1.2.9"

    again = Recording(databag)
    assert write(again, result[RELATION]) is False
    assert again.sets == []

    moving = published(
        STATE, as_planned(STATE, Progress("lg-x64", OLD, Phase.DRAINING, 1)), {}, ONE
    )
    assert moving is not None
    assert write(again, moving[RELATION]) is True
    assert again.sets == ["scalesets"]
