"""When a scale set GitHub registered late starts to listen: from the pass that saw it.

A scale set GARM holds without its GitHub id (GitHub slow at the create, a worker
re-creating it on GitHub, docs/reference/garm-api.md §2.8) opens its listener seconds
after it gets one, however old it is; its ``created_at`` and ``enabled-at`` say nothing
of that. So the charm marks it, seen unregistered, with an ``enabled-at`` ahead (believed,
within the longest back-off), and the first pass that sees it registered notes
``enabled-at`` then: the hand-over counts the listener from that note (``planner``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from garm.models import ScaleSet
from garm.refusals import LONGEST_RETRY
from scalesets.actions import UpdateScaleset
from scalesets.notes import Notes


def note(current: ScaleSet, logical: str, now: datetime) -> UpdateScaleset | None:
    """The note to write on an enabled generation about its registration; None: none."""
    notes = Notes.read(current.extended_state).believed(now)
    marked = notes.enabled_at is not None and notes.enabled_at > now
    if not current.scale_set_id and not marked:
        noted = replace(notes, enabled_at=now + LONGEST_RETRY)
    elif current.scale_set_id and marked:
        noted = replace(notes, enabled_at=now)
    else:
        return None
    return UpdateScaleset(
        current.id, current.name, {"extended_state": noted.text()}, "note", logical
    )
