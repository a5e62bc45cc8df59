"""The status line for each kind of pass outcome, most pressing first."""

from __future__ import annotations

import pytest

from planner import DeleteScaleset, Phase, Progress, Skipped
from reconciler import ActionError, Outcome
from spec import Desired, HeldSpec, ScalesetSpec
from state import RelationState
from status import Summary, summarise


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
ORPHAN = Progress(None, "old-1", Phase.AWAITING_DELETION)
BAD = Skipped("u/2", "x", "invalid max_runner: must be a whole number, got 'ten'", True)
NOT_READY = Skipped("u/3", "y", "image_id not published yet")


@pytest.mark.parametrize(
    ("outcome", "state", "expected"),
    [
        (Outcome(), RELATED, Summary("active", "2 scalesets in sync")),
        (
            Outcome(progress=(DRAINING,)),
            RELATED,
            Summary("active", "Replacing scaleset ci: draining 3 runners"),
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
                "Replacing scaleset ci: draining 3 runners; "
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
                "(Replacing scaleset ci: draining 3 runners)",
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
                "Stuck: ci: GARM kept it: act (Replacing scaleset ci: draining 3 runners; "
                "Replacing scaleset ci: awaiting deletion)",
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
