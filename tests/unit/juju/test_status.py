"""The status line for each kind of pass outcome, most pressing first."""

from __future__ import annotations

import dataclasses

import pytest

from garm.models import Instance, ScaleSet
from garm.refusals import Held, first_refusal
from juju.relation import RelationState
from juju.status import Summary, describe_failing, describe_progress, paused, summarise
from scalesets.actions import DeleteScaleset, Observed, Phase, Progress, Skipped
from scalesets.planner import LISTENER_STARTUP
from scalesets.reconciler import ActionError, Outcome
from scalesets.spec import Desired, HeldSpec, ScalesetSpec, Settings
from tests.specs import make_spec
from tests.wire import T0


def spec(name: str) -> ScalesetSpec:
    return ScalesetSpec(
        source=f"u/{name}",
        name=name,
        entity_kind="organization",
        entity_name="org",
        provider_name="p",
        image="i",
        flavor="f",
        os_arch="amd64",
        max_runners=1,
    )


RELATED = RelationState(True, Desired((spec("a"), spec("b"))))
HELD_DELETE = Held(
    "delete scaleset x", first_refusal("", T0, "DELETE /scalesets/1: 500", permanent=False)
)
HELD_FIELD = Held(
    "update runner_group of scaleset ci (ci-1)",
    first_refusal("d", T0, "Runner group x not found", permanent=True),
)
DRAINING = Progress("ci", "ci-1", Phase.DRAINING, 3)
ORPHAN = Progress(None, "old-1", Phase.AWAITING_DELETION, orphan=True)
BAD = Skipped("u/2", "x", "invalid max_runner: must be a whole number, got 'ten'", True)
NOT_READY = Skipped("u/3", "y", "image_id not published yet")


@pytest.mark.parametrize(
    ("outcome", "state", "expected"),
    [
        (Outcome(), RELATED, Summary("active", "2 scalesets in sync")),
        (
            Outcome(progress=(DRAINING,)),
            RELATED,
            Summary("active", "Replacing scaleset ci (ci-1): draining 3 runners"),
        ),
        (
            Outcome(progress=(Progress("ci", "", Phase.CREATING),)),
            RELATED,
            Summary("active", "Creating scaleset ci"),
        ),
        (
            Outcome(progress=(DRAINING, ORPHAN, DRAINING)),
            RELATED,
            Summary(
                "active",
                "Replacing scaleset ci (ci-1): draining 3 runners; "
                "Removing scaleset old-1: awaiting deletion; and 1 more",
            ),
        ),
        (
            Outcome(progress=(ORPHAN,)),
            RelationState(False, Desired()),
            Summary(
                "blocked",
                "Integrate with garm-configurator: juju integrate garm garm-configurator "
                "(Removing scaleset old-1: awaiting deletion)",
            ),
        ),
        (
            Outcome(skipped=(NOT_READY, BAD), unreachable="GET /scalesets: ConnectionError"),
            RELATED,
            Summary("blocked", "Fix u/2: invalid max_runner: must be a whole number, got 'ten'"),
        ),
        (
            Outcome(skipped=(NOT_READY,), unreachable="GET /scalesets: ConnectionError"),
            RELATED,
            Summary("waiting", "GARM unreachable, will retry: GET /scalesets: ConnectionError"),
        ),
        # A refused write waits out its back-off, told with how often and why.
        (
            Outcome(
                errors=(ActionError(DeleteScaleset(1, "x"), "DELETE /scalesets/1: 500"),),
                held=(HELD_DELETE,),
                progress=(DRAINING,),
            ),
            RELATED,
            Summary(
                "waiting",
                "GARM refused to delete scaleset x (once): DELETE /scalesets/1: 500; will retry "
                "(Replacing scaleset ci (ci-1): draining 3 runners)",
            ),
        ),
        # ... unless GARM says it will refuse it again (a 4xx): the operator must act.
        (
            Outcome(held=(HELD_FIELD,)),
            RELATED,
            Summary(
                "blocked",
                "Fix GARM refused to update runner_group of scaleset ci (ci-1) (once): "
                "Runner group x not found",
            ),
        ),
        # A refused read holds no write: it is told as the call it was.
        (
            Outcome(errors=(ActionError(None, "GET /templates: 500"),)),
            RELATED,
            Summary("waiting", "GARM refused 1 call: GET /templates: 500"),
        ),
        (
            Outcome(
                progress=(
                    DRAINING,
                    Progress("ci", "ci-1", Phase.AWAITING_DELETION, 0, "GARM kept it: act"),
                ),
                errors=(ActionError(DeleteScaleset(1, "x"), "refused"),),
            ),
            RELATED,
            Summary(
                "blocked",
                "Stuck: ci: GARM kept it: act (Replacing scaleset ci (ci-1): draining 3 runners; "
                "Replacing scaleset ci (ci-1): awaiting deletion)",
            ),
        ),
        # The stuck changeover says what to do, which the refusal holding it does not.
        (
            Outcome(
                progress=(
                    Progress("ci", "ci-1", Phase.AWAITING_DELETION, 0, "GARM kept it: act"),
                ),
                held=(Held("delete scaleset ci (ci-1)", first_refusal("", T0, "kept", True)),),
            ),
            RELATED,
            Summary(
                "blocked",
                "Stuck: ci: GARM kept it: act (Replacing scaleset ci (ci-1): awaiting deletion)",
            ),
        ),
        # ... and any other refusal the operator must fix is still told, after it.
        (
            Outcome(
                progress=(
                    Progress("ci", "ci-1", Phase.AWAITING_DELETION, 0, "GARM kept it: act"),
                ),
                held=(
                    Held("delete scaleset ci (ci-1)", first_refusal("", T0, "kept", True)),
                    Held(
                        "update the key of GitHub credential app-1-2",
                        first_refusal("", T0, "bad key", True),
                    ),
                ),
            ),
            RELATED,
            Summary(
                "blocked",
                "Stuck: ci: GARM kept it: act; Fix GARM refused to update the key of GitHub "
                "credential app-1-2 (once): bad key "
                "(Replacing scaleset ci (ci-1): awaiting deletion)",
            ),
        ),
        (
            Outcome(skipped=(NOT_READY,)),
            RelationState(True, Desired(held=(HeldSpec("u/3", "y", "", False),)), ("u/4",)),
            Summary(
                "waiting",
                "Waiting for u/3: image_id not published yet; u/4: no scaleset published yet",
            ),
        ),
    ],
)
def test_summary(outcome, state, expected):
    assert summarise(outcome, state, app="garm") == expected


# GARM names are opaque: two logical names sharing a prefix both show as ``ci-xxxxxx``.
@pytest.mark.parametrize(
    ("progress", "line"),
    [
        (
            Progress("ci-small", "ci-4a1b2c", Phase.DRAINING, 1),
            "Replacing scaleset ci-small (ci-4a1b2c): draining 1 runner",
        ),
        (
            Progress("ci-large", "ci-9f8e7d", Phase.AWAITING_DELETION, orphan=True),
            "Removing scaleset ci-large (ci-9f8e7d): awaiting deletion",
        ),
        (
            Progress("ci-large", "ci-9f8e7d", Phase.FORCE_REMOVING, 2, orphan=True),
            "Removing scaleset ci-large (ci-9f8e7d): force-removing 2 stuck runners",
        ),
        (
            Progress("ci-small", "ci-768c7d", Phase.CREATING),
            "Creating scaleset ci-small (ci-768c7d)",
        ),
        (Progress("ci-small", "", Phase.CREATING), "Creating scaleset ci-small"),
        (
            Progress("ci-large", "ci-24ec4a", Phase.CREATING_REPLACEMENT),
            "Replacing scaleset ci-large (ci-24ec4a): creating replacement",
        ),
        (
            Progress("ci-large", "ci-24ec4a", Phase.HANDING_OVER),
            "Replacing scaleset ci-large (ci-24ec4a): handing over",
        ),
        (
            Progress("ci-small", "ci-4a1b2c", Phase.RETIRING),
            "Replacing scaleset ci-small (ci-4a1b2c): retiring",
        ),
        (
            Progress(None, "stray", Phase.HANDING_OVER, orphan=True),
            "Removing scaleset stray: handing over",
        ),
        # No changeover: the current generation's outdated idle runners (docs/adr/0010).
        (
            Progress("ci-small", "ci-768c7d", Phase.REFRESHING, 2),
            "Refreshing scaleset ci-small (ci-768c7d): 2 idle runners made before its last change",
        ),
        (
            Progress("ci-small", "ci-768c7d", Phase.REFRESHING, 1),
            "Refreshing scaleset ci-small (ci-768c7d): 1 idle runner made before its last change",
        ),
    ],
)
def test_a_changeover_names_the_logical_scaleset_then_garms(progress, line):
    assert describe_progress(progress) == line


def test_two_changeovers_sharing_a_prefix_are_told_apart_in_one_line():
    outcome = Outcome(
        progress=(
            Progress("ci-small", "ci-4a1b2c", Phase.DRAINING, 1),
            Progress("ci-large", "ci-9f8e7d", Phase.AWAITING_DELETION, orphan=True),
        )
    )
    assert summarise(outcome, RELATED, app="garm") == Summary(
        "active",
        "Replacing scaleset ci-small (ci-4a1b2c): draining 1 runner; "
        "Removing scaleset ci-large (ci-9f8e7d): awaiting deletion",
    )


# --- runners that keep failing ----------------------------------------------------------


def garm_with(*generations: tuple[str, str, tuple[tuple[str, str], ...]]) -> Outcome:
    """An outcome whose current generations hold the given runners.

    Each generation is (logical name, GARM name, ((status, runner_status), ...)).
    """
    scalesets = tuple(
        ScaleSet(i, name, enabled=True) for i, (_, name, _) in enumerate(generations, 1)
    )
    instances = tuple(
        Instance(f"{name}-r{n}", i, status, runner_status)
        for i, (_, name, runners) in enumerate(generations, 1)
        for n, (status, runner_status) in enumerate(runners)
    )
    return Outcome(
        current=tuple((logical, name) for logical, name, _ in generations),
        observed=Observed(scalesets, instances),
    )


ERROR = ("error", "pending")
FAILED = ("running", "failed")
IDLE = ("running", "idle")
ACTIVE = ("running", "active")
PENDING = ("running", "pending")
SM = RelationState(True, Desired((spec("SM-x64"), spec("b"))))


@pytest.mark.parametrize(
    ("runners", "expected"),
    [
        ((ERROR, FAILED), "2 scalesets in sync; SM-x64 (sm-173dac): 2 runners failing"),
        ((ERROR,), "2 scalesets in sync; SM-x64 (sm-173dac): 1 runner failing"),
        ((ERROR, FAILED, PENDING), "2 scalesets in sync; SM-x64 (sm-173dac): 2 runners failing"),
        # One runner that works serves the labels: told in the metrics, not here.
        ((ERROR, FAILED, IDLE), "2 scalesets in sync"),
        ((ERROR, ACTIVE), "2 scalesets in sync"),
        # Never came online, but did not fail (yet): GARM's bootstrap timeout decides.
        ((PENDING, PENDING), "2 scalesets in sync"),
        ((), "2 scalesets in sync"),
    ],
)
def test_a_generation_whose_runners_keep_failing_is_told_while_active(runners, expected):
    outcome = garm_with(("sm-x64", "sm-173dac", runners), ("b", "b-1", (IDLE,)))

    assert summarise(outcome, SM, app="garm") == Summary("active", expected)


def test_failing_runners_are_told_after_the_changeovers():
    outcome = dataclasses.replace(garm_with(("ci", "ci-2", (ERROR, ERROR))), progress=(DRAINING,))

    assert summarise(outcome, RELATED, app="garm") == Summary(
        "active", "Replacing scaleset ci (ci-1): draining 3 runners; ci (ci-2): 2 runners failing"
    )


def test_failing_runners_are_told_beside_a_problem():
    outcome = dataclasses.replace(garm_with(("ci", "ci-2", (FAILED,))), held=(HELD_DELETE,))

    assert summarise(outcome, RELATED, app="garm") == Summary(
        "waiting",
        "GARM refused to delete scaleset x (once): DELETE /scalesets/1: 500; will retry "
        "(ci (ci-2): 1 runner failing)",
    )


def test_past_two_failing_scalesets_the_rest_are_counted():
    outcome = garm_with(*((n, f"{n}-1", (ERROR,)) for n in ("a", "b", "c")))

    assert summarise(outcome, RELATED, app="garm") == Summary(
        "active",
        "2 scalesets in sync; a (a-1): 1 runner failing; b (b-1): 1 runner failing; and 1 more",
    )


def test_a_pass_that_could_not_read_garm_tells_no_runner():
    outcome = dataclasses.replace(garm_with(("a", "a-1", (ERROR,))), observed=None)

    assert describe_failing(outcome, RELATED) == []


def test_the_hand_over_seen_on_a_real_garm_reads_failing_not_just_in_sync(passes, garm):
    """A generation whose runners never came online, handed over at the hand-over timeout."""
    old = make_spec(min_idle_runners=1)
    passes.run(old)
    for _ in range(3):
        garm.tick()
    new = make_spec(labels=("linux", "arm64"), min_idle_runners=1)
    garm.auto_report = False
    passes.run(new)
    passes.later(LISTENER_STARTUP)
    garm.tick()
    current = dict(passes.run(new).current)["ci"]
    new_id = next(s["id"] for s in garm.scalesets() if s["name"] == current)
    (runner,) = [i["name"] for i in garm.instances() if i["scale_set_id"] == new_id]
    garm.set_runner(runner, status="error")
    passes.later(Settings().handover_timeout)
    passes.run(new)
    for _ in range(2):
        passes.later()
    outcome = passes.run(new)

    assert summarise(outcome, RelationState(True, Desired((new,))), app="garm") == Summary(
        "active", f"1 scaleset in sync; ci ({current}): 1 runner failing"
    )


# --- the line `juju status` shows ---------------------------------------------------------

# The longest values real deployments give: a configurator application named at length
# (Juju's names run to about 50 characters) with a unit number in the hundreds, an org at
# GitHub's limit of 39 characters, a repository at its limit of 100, GARM's ids (UUIDs).
LONG_UNIT = "garm-configurator-for-the-platform-team-x64-large/119"
LONG_ORG = "o" * 39
LONG_REPO = f"{LONG_ORG}/{'r' * 100}"
GARM_ID = "0b5be2c2-1e9f-4bfa-9d3c-6a5e2b7c3d41"


@pytest.mark.parametrize(
    ("message", "line"),
    [
        ("1 scaleset in sync", "1 scaleset in sync"),
        ("x" * 120, "x" * 120),
        # At the last part, hint or parentheses that fits: the what and where are kept.
        (
            "Fix garm-configurator/0: organization 'example-org' is not registered in GARM "
            "after 15 minutes: check that its configurator publishes a GitHub App for it",
            "Fix garm-configurator/0: organization 'example-org' is not registered in GARM "
            "after 15 minutes …",
        ),
        (
            "Fix garm-configurator/1: invalid max_runner: must be at least 1 (Replacing "
            "scaleset ci (ci-08f883): draining 3 runners; Creating scaleset sm (sm-173dac))",
            "Fix garm-configurator/1: invalid max_runner: must be at least 1 (Replacing "
            "scaleset ci (ci-08f883) …",
        ),
        # A part that fits only early would keep the where without the what: cut at a word.
        (
            f"Fix {LONG_UNIT}: publishes both org '{LONG_ORG}' and repo '{LONG_REPO}'",
            f"Fix {LONG_UNIT}: publishes both org …",
        ),
        ("y" * 300, "y" * 118 + " …"),
    ],
)
def test_a_line_past_120_characters_is_cut_after_its_what_and_where(message: str, line: str):
    summary = Summary("blocked", message)

    assert summary.line == line
    assert len(summary.line) <= 120
    assert summary.message == message  # kept whole for the log and the reconcile answer


@pytest.mark.parametrize(
    "message",
    [
        f"GARM in PostgreSQL is {GARM_ID}, not the charm's GARM {GARM_ID} in sqlite on "
        f"{LONG_UNIT}: integrate that database again, or delete the old GARM's scale sets",
        f"Fix {LONG_UNIT}: org '{LONG_ORG}' is named by {LONG_UNIT} and {LONG_UNIT} with "
        "different GitHub Apps: give them one App, or point all but one elsewhere",
        f"Waiting for {LONG_UNIT}: no scaleset published yet; {LONG_UNIT}: no scaleset "
        "published yet; and 3 more",
        f"Stuck: {'s' * 64}: GARM has not deleted runner garm-{'r' * 12} of {'s' * 64}-abcdef",
        "a" * 118 + " bc",
        "a" * 119 + " b",
        "a;" * 100,
    ],
)
def test_every_line_fits_juju_status_and_begins_the_message(message: str):
    line = Summary("waiting", message).line

    assert len(line) <= 120
    assert line.endswith(" …")
    assert message.startswith(line.removesuffix(" …"))
    assert len(line) >= 60  # at least half the line says something


@pytest.mark.parametrize("length", range(45, 100, 3))
def test_a_cut_never_leaves_a_command_that_would_run_short(length: int):
    """``juju config <app>`` without its ``paused=false`` still runs: a hint's command is
    kept whole or left out, whatever the application's name."""
    app = "a" * length
    messages = [
        paused(T0, app).message,
        f"Integrate with garm-configurator: juju integrate {app} garm-configurator",
        f"Resource garm is not GARM: {'bad ' * (length // 4)}; attach a GARM release binary or "
        f"archive (juju attach-resource {app} garm=<file>)",
        f"GARM in PostgreSQL is {GARM_ID}, not the charm's GARM {GARM_ID}: integrate that "
        f"database again, then run: juju run {app}/leader adopt-garm controller-id={GARM_ID}",
    ]
    for message in messages:
        line = Summary("blocked", message).line
        assert len(line) <= 120
        if line != message:
            assert "juju " not in line, line
