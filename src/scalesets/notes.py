"""What the charm remembers about a scaleset, kept on the scaleset in GARM.

GARM never writes a scale set's ``extended_state`` itself (docs/reference/garm-api.md
§2.7), so it is where the charm keeps what a changeover needs to know across passes and
across leaders: when the drain clock started, when a generation was enabled again, when
the charm last changed what its new runners get (``docs/adr/0010``), which ``extra_specs``
the charm last set, and when it first saw each runner that should be on its way out.
Nothing of it lives on the unit, so a new leader carries on exactly where the old one
stopped (``docs/adr/0003``). What GARM refused is not noted here but in the one memory
of refusals (``garm.refusals``), whatever the write.

The text is ``key=value`` pairs joined by ``;`` in a fixed order, e.g.
``retired-at=2026-11-30T12:00:00Z;changed-at=2026-11-30T11:00:00Z;specs=1f2e3d4c5b6a``;
``seen`` holds ``runner@status@time`` entries joined by ``,``. The single ``retired-at=…`` or
``enabled-at=…`` stamp earlier versions wrote reads the same way, and the refusal counts
they kept here (``kept``, ``refused``, ``retry-at``) are ignored like any unknown key.
Unreadable values are left out (each pass logs which, once: ``unread``), and a stamp
further ahead than the longest back-off is not believed, so a hand-edited value can only
make the charm re-stamp sooner, never fail or wait forever.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from garm.models import format_time, parse_time
from garm.refusals import LONGEST_RETRY


def specs_digest(extra_specs: Any) -> str:
    """A short digest of an ``extra_specs`` document, equal for equal documents.

    Kept in the notes so a pass can tell whether a scaleset holds what the charm last
    set when GARM's list leaves ``extra_specs`` out (docs/reference/garm-api.md §2.5).
    """
    text = json.dumps(extra_specs or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Notes:
    """The charm's notes on one scaleset; every field is optional.

    ``changed_at``: when the charm last wrote a change that new runners are made with
    (image, flavor, architecture, runner group, ``extra_specs``, template): runners GARM
    made before it are outdated (``planner``'s refresh). ``seen``: when this charm first
    saw each of the
    scaleset's runners in the status it has now, for the statuses that should end; a
    runner's own ``updated_at`` will not do, for GARM re-stamps it on every retry.
    """

    retired_at: datetime | None = None
    enabled_at: datetime | None = None
    changed_at: datetime | None = None
    specs: str = ""
    seen: tuple[Seen, ...] = ()

    @classmethod
    def read(cls, extended_state: str) -> Notes:
        """Parse ``extended_state``; what cannot be read is left out."""
        values = _pairs(extended_state)
        return cls(
            retired_at=_time(values.get("retired-at")),
            enabled_at=_time(values.get("enabled-at")),
            changed_at=_time(values.get("changed-at")),
            specs=values.get("specs", "") if values.get("specs", "").isalnum() else "",
            seen=_seen(values.get("seen", "")),
        )

    def text(self) -> str:
        """The ``extended_state`` to write."""
        pairs = [
            ("retired-at", format_time(self.retired_at) if self.retired_at else ""),
            ("enabled-at", format_time(self.enabled_at) if self.enabled_at else ""),
            ("changed-at", format_time(self.changed_at) if self.changed_at else ""),
            ("specs", self.specs),
            ("seen", ",".join(f"{s.runner}@{s.status}@{format_time(s.since)}" for s in self.seen)),
        ]
        return ";".join(f"{key}={value}" for key, value in pairs if value)

    def believed(self, now: datetime) -> Notes:
        """The notes without a stamp no pass could have written by ``now``.

        Stamps are written at a pass's ``now``; one further ahead than the longest
        back-off (a clock that jumped, a hand edit, a value at the calendar's edge) would
        make a drain or a hand-over wait for it, so it is dropped and stamped afresh.
        """
        latest = now + LONGEST_RETRY
        return replace(
            self,
            retired_at=self.retired_at if _by(self.retired_at, latest) else None,
            enabled_at=self.enabled_at if _by(self.enabled_at, latest) else None,
            changed_at=self.changed_at if _by(self.changed_at, latest) else None,
            seen=tuple(s for s in self.seen if _by(s.since, latest)),
        )

    def retired(self, at: datetime) -> Notes:
        """The notes of a scaleset retired at ``at``: a fresh drain, nothing refused yet.

        What its runners are made with is unchanged, and so is when it last changed.
        """
        return Notes(retired_at=at, changed_at=self.changed_at, specs=self.specs)

    def enabled(self, at: datetime) -> Notes:
        """The notes of a generation enabled (again) at ``at``."""
        return Notes(enabled_at=at, changed_at=self.changed_at, specs=self.specs)

    def since(self, runner: str, status: str) -> datetime | None:
        """When this charm first saw ``runner`` in ``status``; None if it has not noted it."""
        return next((s.since for s in self.seen if (s.runner, s.status) == (runner, status)), None)

    def seeing(self, runners: Iterable[tuple[str, str]], now: datetime) -> Notes:
        """The notes with each (runner, status) in ``runners`` noted as seen.

        A runner noted in the same status keeps its first sight; one new, or in another
        status, is seen ``now``. Runners not in ``runners`` are forgotten, so the notes
        hold only what is still there.
        """
        seen = tuple(
            Seen(runner, status, self.since(runner, status) or now)
            for runner, status in sorted(set(runners))
            if _NOTE_WORD.fullmatch(runner) and _NOTE_WORD.fullmatch(status)
        )
        return replace(self, seen=seen)


@dataclass(frozen=True)
class Seen:
    """A runner of the scaleset, the status it was in, and when this charm first saw that."""

    runner: str
    status: str
    since: datetime


# What a runner's name or status must be to be noted: nothing the notes' syntax uses.
_NOTE_WORD = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def unread(extended_state: str) -> tuple[str, ...]:
    """The notes in ``extended_state`` whose values ``Notes.read`` leaves out, by key.

    For a log line: such a note is ignored, and written afresh when the pass needs it.
    Keys this version does not know (an earlier version's) are not counted.
    """
    notes, values = Notes.read(extended_state), _pairs(extended_state)
    entries = [e for e in values.get("seen", "").split(",") if e.strip()]
    read = {
        "retired-at": notes.retired_at is not None,
        "enabled-at": notes.enabled_at is not None,
        "changed-at": notes.changed_at is not None,
        "specs": bool(notes.specs),
        "seen": len(notes.seen) == len(entries),
    }
    return tuple(key for key, ok in read.items() if values.get(key) and not ok)


def _pairs(extended_state: str) -> dict[str, str]:
    """The ``key=value`` pairs of the notes; the first of a key repeated counts."""
    values: dict[str, str] = {}
    for pair in extended_state.split(";"):
        key, sep, value = pair.partition("=")
        if sep:
            values.setdefault(key.strip(), value.strip())
    return values


def _seen(value: str) -> tuple[Seen, ...]:
    """The ``seen`` entries that read; the others are left out."""
    entries = []
    for entry in value.split(","):
        runner, _, rest = entry.strip().partition("@")
        status, _, at = rest.partition("@")
        since = _time(at)
        if since is not None and _NOTE_WORD.fullmatch(runner) and _NOTE_WORD.fullmatch(status):
            entries.append(Seen(runner, status, since))
    return tuple(entries)


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    at = parse_time(value)
    return None if at.year == 1 else at


def _by(at: datetime | None, latest: datetime) -> bool:
    return at is not None and at <= latest
