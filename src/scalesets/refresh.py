"""Idle runners made before a change that new runners get, replaced one at a time.

GARM applies a new image, flavor, runner group, ``extra_specs`` or template only to
runners it makes afterwards, and marks none outdated. So the charm tells them by time
(docs/adr/0010): ``created_at`` before the change it noted (``Notes.changed_at``) plus
a margin, or before the template's ``updated_at``. Pure; the planner picks what may
refresh and times its wait on GARM (``wait_key``) in the memory of refusals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from garm.models import Instance, ScaleSet, Template
from garm.refusals import LONGEST_RETRY
from scalesets.actions import Phase, Progress, RemoveInstance
from scalesets.notes import Notes
from scalesets.spec import ScalesetSpec
from scalesets.wake import Wake

# What an update changes for new runners: the fields that raise GARM's generation
# (docs/reference/garm-api.md §2.4) the charm writes, and the install template.
RUNNER_FIELDS = frozenset(
    {"image", "flavor", "os_arch", "runner_group", "extra_specs", "template_id"}
)
# Noted at the pass's start, written up to 90 s later, then learnt by GARM's worker: runners
# made this long after the note are outdated too, and the refresh waits until then.
REFRESH_MARGIN = timedelta(minutes=2)
# How long a refresh may wait on GARM to make up its warm capacity before the operator is
# asked: GARM gives a runner 20 minutes to come online, checked every 5. Busy runners
# filling ``max_runners`` are no wait on GARM.
REFRESH_STUCK = timedelta(minutes=30)
# Runner statuses of one on its way in, and of one on its way out.
_COMING = frozenset({"pending_create", "creating"})
_GOING = frozenset({"pending_delete", "pending_force_delete", "deleting", "deleted"})


def stamped(notes: Notes, fields: Iterable[str], now: datetime) -> Notes:
    """The notes an update of ``fields`` writes: the change noted if new runners get it."""
    return replace(notes, changed_at=now) if RUNNER_FIELDS.intersection(fields) else notes


def outdated_before(
    scaleset: ScaleSet, templates: Iterable[Template], now: datetime
) -> datetime | None:
    """Runners made before this are outdated; None when none can be.

    The later of the noted change plus the margin and the template's last write (not
    believed past the longest back-off, as a note would not be).
    """
    moments = []
    changed = Notes.read(scaleset.extended_state).believed(now).changed_at
    if changed is not None:
        moments.append(changed + REFRESH_MARGIN)
    template = next((t for t in templates if t.id == scaleset.template_id), None)
    written = template.updated_at if template is not None else None
    if written is not None and written.year > 1 and written <= now + LONGEST_RETRY:
        moments.append(written)
    return max(moments, default=None)


@dataclass(frozen=True)
class Refresh:
    """What refreshing one generation comes to now.

    ``removal``: the runner to remove now; None while it waits (on GARM when ``waiting``:
    ``wait_key``).
    """

    progress: Progress
    removal: RemoveInstance | None = None
    waiting: bool = False


def wait_key(progress: Progress) -> str:
    """The refresh's wait on GARM; by the count left, so only a refresh that stalls times out."""
    return f"refresh:{progress.scaleset.lower()}:{progress.runners}"


def stuck(scaleset: ScaleSet, min_idle: int) -> str:
    """What the operator reads of a refresh that waited ``REFRESH_STUCK`` on GARM."""
    return (
        f"GARM has not made {scaleset.name} up to {min_idle} idle runners in 30 minutes "
        "of its refresh: check its provider (quota, flavor, image) in "
        "/var/log/garm/garm.log, or set refresh-idle-runners=false"
    )


def refresh(
    spec: ScalesetSpec,
    scaleset: ScaleSet,
    instances: Iterable[Instance],
    templates: Iterable[Template],
    wake: Wake,
) -> Refresh | None:
    """The refresh of ``scaleset``'s idle runners; None when it has nothing to refresh.

    One idle runner at a time, oldest first, while none is on its way in or out and at
    least ``min_idle_runners`` are idle: warm capacity never drops below one less. With
    ``min_idle_runners`` 0 an idle runner awaits a job GitHub is handing it: left alone.
    What it waits for, it tells ``wake``.
    """
    logical, min_idle, now = spec.name, spec.min_idle_runners, wake.now
    if min_idle <= 0:
        return None
    before = outdated_before(scaleset, templates, now)
    if before is None:
        return None
    runners = list(instances)
    outdated = sorted(
        (i for i in runners if i.is_idle and i.created_at < before),
        key=lambda i: (i.created_at, i.name),
    )
    if not outdated:
        return None
    progress = Progress(logical, scaleset.name, Phase.REFRESHING, len(outdated))
    if now < before:
        wake.due(before)
        return Refresh(progress)
    moving = [i for i in runners if _coming_or_going(i)]
    if moving:
        # Since it was made, or sent on its way out.
        wake.expected(max(i.updated_at if i.status in _GOING else i.created_at for i in moving))
        return Refresh(progress, waiting=True)
    if sum(i.is_idle for i in runners) < min_idle:
        busy = all(i.is_idle or i.runner_status == "active" for i in runners)
        return Refresh(progress, waiting=not (busy and len(runners) >= spec.max_runners))
    removal = RemoveInstance(outdated[0].name, scaleset.id, scaleset.name, logical, force=False)
    return Refresh(progress, removal)


def _coming_or_going(instance: Instance) -> bool:
    """A runner GARM is making, one yet to report, or one on its way out."""
    if instance.status in _COMING or instance.status in _GOING:
        return True
    return instance.runner_status in ("pending", "installing") and instance.status != "error"
