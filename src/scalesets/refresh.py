"""Idle runners made before a change that new runners get, replaced one at a time.

GARM applies a new image, flavor, runner group, ``extra_specs`` or install template only
to the runners it makes afterwards, and replaces none it made before: it raises a scale
set's ``generation`` but never copies it into its runners, and a template edited in place
changes no generation at all. So the charm tells an outdated runner by time
(docs/adr/0010): its ``created_at``, which GARM stamps once when it makes the row, is
before the moment the charm noted when it wrote such a change (``Notes.changed_at``, in
the same update as the change) plus a margin, or before its template's ``updated_at``,
which only a write to that template moves.

Pure, like the planner that calls it: ``stamped`` notes a change, ``refresh`` says what a
generation's refresh comes to now. The planner decides which generations may be
refreshed at all (the current one, serving alone) and plans the removal through the one
memory of refusals, which also times the refresh's wait on GARM (``wait_key``): one
that lasts ``REFRESH_STUCK`` is put to the operator (``stuck``).
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

# What a scaleset update changes for the runners made after it: the fields that raise
# GARM's generation (docs/reference/garm-api.md §2.4) that the charm writes, and the
# template, which raises none but is the runner's install script.
RUNNER_FIELDS = frozenset(
    {"image", "flavor", "os_arch", "runner_group", "extra_specs", "template_id"}
)
# The change is noted at the pass's start, and written up to its budget (60 s) and a
# request's timeout (30 s) later; GARM's provider worker then learns it from its database
# watcher. A runner made in between may carry the old settings, so runners made up to
# this long after the note count as outdated too, and the refresh starts only then, so
# that no replacement it causes is itself taken for outdated.
REFRESH_MARGIN = timedelta(minutes=2)
# How long a refresh may wait on GARM to make its warm capacity up again (a replacement
# to boot, a removed runner to go) before the operator is asked to act: GARM gives a
# runner 20 minutes to come online (``runner_bootstrap_timeout``), checked every 5, so
# past 30 minutes with no removal possible its runners are not coming (a quota, a flavor
# or an image that fails). A wait on busy runners filling ``max_runners`` is no wait on
# GARM: it ends when their jobs do.
REFRESH_STUCK = timedelta(minutes=30)
# Runner statuses of one on its way in, and of one on its way out.
_COMING = frozenset({"pending_create", "creating"})
_GOING = frozenset({"pending_delete", "pending_force_delete", "deleting", "deleted"})


def stamped(notes: Notes, fields: Iterable[str], now: datetime) -> Notes:
    """The notes an update of ``fields`` writes.

    With the change noted at ``now`` when one of the fields is what new runners are made
    with.
    """
    return replace(notes, changed_at=now) if RUNNER_FIELDS.intersection(fields) else notes


def outdated_before(
    scaleset: ScaleSet, templates: Iterable[Template], now: datetime
) -> datetime | None:
    """Runners of ``scaleset`` made before this are outdated; None when none can be.

    The later of the noted change plus ``REFRESH_MARGIN`` and its template's last write.
    A template's ``updated_at`` further ahead than the longest back-off was not written
    by this clock (a clock that jumped) and is not believed, as a note would not be.
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

    ``progress`` tells it (``Phase.REFRESHING``, with the idle runners still outdated).
    ``removal`` is the runner to remove now; None while it waits: for the margin to end
    (``due``), for a runner on its way in or out since ``awaited``, or for GARM to make
    its warm capacity up again. ``waiting``: it waits on GARM (``wait_key``).
    """

    progress: Progress
    removal: RemoveInstance | None = None
    due: datetime | None = None
    awaited: datetime | None = None
    waiting: bool = False


def wait_key(progress: Progress) -> str:
    """The refresh's wait on GARM, in the memory of refusals' waits.

    It names how many idle runners are still outdated, so each runner refreshed starts
    a new wait: only a refresh that stops moving on is timed out, not a long one.
    """
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
    now: datetime,
) -> Refresh | None:
    """The refresh of ``scaleset``'s idle runners; None when it has nothing to refresh.

    The planner calls it only for the current generation of ``spec``, live, serving
    alone, in a family neither contested nor partly seen: a changeover's new generation
    is made as the spec says anyway. One runner at a time, the oldest first: only while
    none of its runners is on its way in (a replacement booting) or out, and only while
    it holds at least ``min_idle_runners`` idle runners, so a refresh never takes warm
    capacity below ``min_idle_runners`` - 1. Never a busy runner, nor one still booting:
    only one ``running`` and ``idle``. With ``min_idle_runners`` 0 an idle runner is
    there for a job GitHub is about to hand it: it is left to it.
    """
    logical, min_idle = spec.name, spec.min_idle_runners
    if min_idle <= 0:
        return None
    before = outdated_before(scaleset, templates, now)
    if before is None:
        return None
    runners = list(instances)
    outdated = tuple(
        sorted(
            (i for i in runners if i.is_idle and i.created_at < before),
            key=lambda i: (i.created_at, i.name),
        )
    )
    if not outdated:
        return None
    progress = Progress(logical, scaleset.name, Phase.REFRESHING, len(outdated))
    if now < before:
        return Refresh(progress, due=before)
    moving = [i for i in runners if _coming_or_going(i)]
    if moving:
        return Refresh(progress, awaited=max(_moving_since(i) for i in moving), waiting=True)
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


def _moving_since(instance: Instance) -> datetime:
    """Since when a runner is on its way: made then, or sent on its way out then."""
    return instance.updated_at if instance.status in _GOING else instance.created_at
