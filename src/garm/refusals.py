"""What GARM refused, remembered so that no refused write is re-sent on every pass.

One memory for every write to GARM (``garm.writes``), by a key naming what it writes
(``create:ci``, ``update:ci-24ec4a:runner_group``) and a digest of what it asks for. A
refusal is held back on one schedule (``backoff``); the operator is asked to act once it
is ``blocked`` (a 4xx, which GARM or GitHub will answer alike again, or
``REFUSALS_BEFORE_BLOCKED`` in a row). It is forgotten when GARM accepts the write, and
holds nothing once the write asks for something else (the operator fixed it). ADR 0003.

A wait is a write GARM took but has not carried out (a force-removal it undid, an org it
does not have): the memory keeps when each was first seen (``waits``); one lasting too
long (``overdue``) is put to the operator (ADR 0003, 4).

It lives in the peer relation's application databag, so a new leader goes on with the
same back-off instead of asking GitHub again at once. Names GitHub answered "already
exists" for are remembered for an hour, so a create does not walk them every pass. Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from garm.models import format_time, parse_time

# The peer relation's application databag key.
KEY = "refusals"
# A refused write's wait doubles from the first, never longer than the last: a cause that
# goes away is noticed within the hour.
FIRST_RETRY = timedelta(minutes=1)
LONGEST_RETRY = timedelta(hours=1)
# After this many refusals in a row the operator is asked to act (the retries go on).
REFUSALS_BEFORE_BLOCKED = 3


def backoff(refusals: int) -> timedelta:
    """The wait after the ``refusals``-th refusal in a row (1 → one minute, capped)."""
    if refusals < 1:
        return timedelta(0)
    # Capped before the power grows: a count read from the databag may be anything.
    doublings = min(refusals - 1, 12)
    return min(FIRST_RETRY * (2**doublings), LONGEST_RETRY)


def believed_wait(until: datetime | None, now: datetime) -> bool:
    """Whether something must still wait until ``until``, as written by a back-off.

    A time further ahead than the longest back-off (a clock that jumped, a hand edit) is
    not believed, so nothing waits forever.
    """
    return until is not None and now < until <= now + LONGEST_RETRY


def digest(asked: Any) -> str:
    """A short digest of what a write asks for, equal for equal requests."""
    text = json.dumps(asked, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def request_digest(body: Mapping[str, Any]) -> str:
    """What a create asks for, without the generation name (which moves on when taken)."""
    return digest({k: v for k, v in body.items() if k != "name"})


def is_permanent(status: int) -> bool:
    """Whether GARM's answer says the same request will be refused again (a 4xx)."""
    return 400 <= status < 500


@dataclass(frozen=True)
class Refusal:
    """The last refusals of one write, in a row; ``permanent``: a 4xx, told at once."""

    digest: str
    refusals: int
    retry_at: datetime
    cause: str
    permanent: bool

    @property
    def blocked(self) -> bool:
        """Whether the operator must act for this write to go through."""
        return self.permanent or self.refusals >= REFUSALS_BEFORE_BLOCKED

    @property
    def times(self) -> str:
        """How often it was refused, as a status line says it."""
        return "once" if self.refusals == 1 else f"{self.refusals} times"


def first_refusal(digest: str, now: datetime, cause: str, permanent: bool) -> Refusal:
    """The first refusal of a request, as ``Refusals.refused`` notes it."""
    return Refusal(digest, 1, now + backoff(1), cause, permanent)


@dataclass(frozen=True)
class Held:
    """A write GARM refused before (as the operator reads it), held back by ``refusal``."""

    write: str
    refusal: Refusal

    def describe(self) -> str:
        """``GARM refused to <write> (<n times>): <cause>``."""
        return f"GARM refused to {self.write} ({self.refusal.times}): {self.refusal.cause}"


@dataclass(frozen=True)
class Refusals:
    """What GARM refused, by write key; names GitHub holds, until when; waits, since when."""

    refusals: Mapping[str, Refusal] = field(default_factory=dict)
    taken: Mapping[str, datetime] = field(default_factory=dict)
    waits: Mapping[str, datetime] = field(default_factory=dict)

    def holding(self, key: str, asked: str, now: datetime) -> Refusal | None:
        """The refusal that holds this write back now: same request, back-off not over."""
        refusal = self.refusals.get(key)
        if refusal is None or refusal.digest != asked or not believed_wait(refusal.retry_at, now):
            return None
        return refusal

    def refused(
        self, key: str, asked: str, now: datetime, cause: str, permanent: bool
    ) -> Refusals:
        """The memory with one more refusal of this write (the first of a new request)."""
        earlier = self.refusals.get(key)
        count = earlier.refusals + 1 if earlier is not None and earlier.digest == asked else 1
        refusal = Refusal(asked, count, now + backoff(count), cause, permanent)
        return replace(self, refusals={**self.refusals, key: refusal})

    def accepted(self, key: str) -> Refusals:
        """The memory without this write's refusals: GARM took it."""
        if key not in self.refusals:
            return self
        return replace(self, refusals={k: r for k, r in self.refusals.items() if k != key})

    def due_now(self, now: datetime, which: Callable[[str], bool]) -> Refusals:
        """The memory with the writes ``which`` picks due again at ``now``, counts kept.

        For a cause that may be gone: GARM's access to GitHub changed.
        """
        return replace(
            self,
            refusals={
                k: replace(r, retry_at=min(r.retry_at, now)) if which(k) else r
                for k, r in self.refusals.items()
            },
        )

    def taking(self, name: str, now: datetime) -> Refusals:
        """The memory with ``name`` held by GitHub for the longest back-off."""
        return replace(self, taken={**self.taken, name: now + LONGEST_RETRY})

    def taken_now(self, now: datetime) -> frozenset[str]:
        """The names still known to be taken; a time too far ahead is not believed."""
        return frozenset(n for n, until in self.taken.items() if believed_wait(until, now))

    def waiting(self, keys: Iterable[str], now: datetime, *, over: bool = True) -> Refusals:
        """The memory with the waits a pass saw: first seen when noted, else ``now``.

        With ``over`` the pass looked at everything that could wait: one it no longer saw
        is over and forgotten. Otherwise (a family held, the view partial) one it did not
        name may be one it did not look at: its clock stands.
        """
        kept = {} if over else dict(self.waits)
        waits = kept | {key: self.since(key, now) for key in keys}
        return self if waits == self.waits else replace(self, waits=waits)

    def without_wait(self, key: str) -> Refusals:
        """The memory with the wait ``key`` over: seen again, it starts afresh."""
        if key not in self.waits:
            return self
        return replace(self, waits={k: at for k, at in self.waits.items() if k != key})

    def since(self, key: str, now: datetime) -> datetime:
        """When the wait ``key`` was first seen; ``now`` if unnoted or too far ahead to believe."""
        since = self.waits.get(key)
        return since if since is not None and since <= now + LONGEST_RETRY else now

    def overdue(self, key: str, deadline: timedelta, now: datetime) -> bool:
        """Whether the wait ``key`` has lasted its ``deadline``: the operator is asked to act."""
        return now - self.since(key, now) >= deadline

    def current(self, now: datetime) -> Refusals:
        """Only what still matters.

        A refusal not renewed within the longest back-off after its retry is of a write
        nobody asks for any more.
        """
        return Refusals(
            {k: r for k, r in self.refusals.items() if now - r.retry_at <= LONGEST_RETRY},
            {name: until for name, until in self.taken.items() if believed_wait(until, now)},
            self.waits,
        )

    @classmethod
    def read(cls, text: str | None) -> Refusals:
        """Parse the databag value; anything unreadable is dropped (the write is retried)."""
        data = _json_object(text)
        return cls(
            _read_refusals(data.get("refusals")),
            _read_taken(data.get("taken")),
            _read_taken(data.get("waits")),
        )

    def text(self) -> str:
        """The databag value, stable for equal contents so an unchanged memory writes nothing."""
        return json.dumps(
            {
                "refusals": {
                    key: {
                        "digest": r.digest,
                        "refusals": r.refusals,
                        "retry-at": format_time(r.retry_at),
                        "cause": r.cause,
                        "permanent": r.permanent,
                    }
                    for key, r in sorted(self.refusals.items())
                },
                "taken": {name: format_time(at) for name, at in sorted(self.taken.items())},
                **(
                    {"waits": {k: format_time(at) for k, at in sorted(self.waits.items())}}
                    if self.waits
                    else {}
                ),
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    def __bool__(self) -> bool:
        return bool(self.refusals or self.taken or self.waits)


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        data = json.loads(text or "{}")
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_refusals(data: object) -> dict[str, Refusal]:
    refusals: dict[str, Refusal] = {}
    for key, item in (data if isinstance(data, dict) else {}).items():
        if not isinstance(item, dict):
            continue
        retry_at = parse_time(item.get("retry-at"))
        count = item.get("refusals")
        if retry_at.year == 1 or not isinstance(count, int) or isinstance(count, bool):
            continue
        refusals[str(key)] = Refusal(
            digest=str(item.get("digest", "")),
            refusals=min(max(count, 1), 1 << 20),
            retry_at=retry_at,
            cause=str(item.get("cause", "")),
            permanent=item.get("permanent") is True,
        )
    return refusals


def _read_taken(data: object) -> dict[str, datetime]:
    return {
        str(name): at
        for name, until in (data if isinstance(data, dict) else {}).items()
        if (at := parse_time(until)).year != 1
    }
