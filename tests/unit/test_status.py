"""The status line for each kind of pass outcome, most pressing first."""

from __future__ import annotations

import pytest

from planner import DeleteScaleset, Phase, Progress, Skipped
from reconciler import ActionError, Outcome
from spec import Desired, HeldSpec, ScalesetSpec
from state import RelationState
from status import Summary, describe_progress, summarise


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
        (
            Outcome(
                errors=(ActionError(DeleteScaleset(1, "x"), "DELETE /scalesets/1: 500"),),
                progress=(DRAINING,),
            ),
            RELATED,
            Summary(
                "waiting",
                "GARM refused 1 call: DELETE /scalesets/1: 500 "
                "(Replacing scaleset ci (ci-1): draining 3 runners)",
            ),
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
    assert summarise(outcome, state) == expected


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
    assert summarise(outcome, RELATED) == Summary(
        "active",
        "Replacing scaleset ci-small (ci-4a1b2c): draining 1 runner; "
        "Removing scaleset ci-large (ci-9f8e7d): awaiting deletion",
    )
