"""What the charm remembers about a scaleset, kept on the scaleset in GARM.

GARM never writes a scale set's ``extended_state`` (docs/reference/garm-api.md §2.7), so
the charm keeps there what a changeover needs across passes and leaders (docs/adr/0003):
when the drain started, when a generation was enabled again, when new runners' settings
last changed (docs/adr/0010), the ``extra_specs`` last set, when each outgoing runner
was first seen. Refusals are kept elsewhere (``garm.refusals``).

``key=value`` pairs joined by ``;``, e.g. ``retired-at=2026-11-30T12:00:00Z;specs=1f2e3d``;
``seen`` holds ``runner@status@time`` entries joined by ``,``. Unknown keys (earlier
versions' ``kept``, ``refused``, ``retry-at``) and unreadable values are ignored
(``unread``), and a stamp past the longest back-off is not believed: a hand edit can
only make the charm re-stamp sooner.
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
    """A short digest of ``extra_specs``, for when GARM's list leaves them out (§2.5).

    None of none, so the notes of a scaleset without ``extra_specs`` stay empty.
    """
    if not extra_specs:
        return ""
    text = json.dumps(extra_specs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Notes:
    """The charm's notes on one scaleset; every field is optional.

    ``changed_at``: the last change new runners are made with (``refresh``). ``seen``:
    when each runner was first seen in a status that should end (GARM re-stamps a
    runner's ``updated_at`` on every retry).
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
        """The notes without a stamp further ahead than the longest back-off (re-stamped)."""
        latest = now + LONGEST_RETRY
        return replace(
            self,
            retired_at=self.retired_at if _by(self.retired_at, latest) else None,
            enabled_at=self.enabled_at if _by(self.enabled_at, latest) else None,
            changed_at=self.changed_at if _by(self.changed_at, latest) else None,
            seen=tuple(s for s in self.seen if _by(s.since, latest)),
        )

    def retired(self, at: datetime) -> Notes:
        """The notes of a scaleset retired at ``at``: a fresh drain, its settings kept."""
        return Notes(retired_at=at, changed_at=self.changed_at, specs=self.specs)

    def enabled(self, at: datetime) -> Notes:
        """The notes of a generation enabled (again) at ``at``."""
        return Notes(enabled_at=at, changed_at=self.changed_at, specs=self.specs)

    def since(self, runner: str, status: str) -> datetime | None:
        """When this charm first saw ``runner`` in ``status``; None if it has not noted it."""
        return next((s.since for s in self.seen if (s.runner, s.status) == (runner, status)), None)

    def seeing(self, runners: Iterable[tuple[str, str]], now: datetime) -> Notes:
        """The notes seeing just ``runners``: one in the same status keeps its first sight."""
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
    """The known keys in ``extended_state`` whose values ``Notes.read`` leaves out."""
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
