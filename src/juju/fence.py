"""One GARM at a time: when the leader may start GARM, with other units' GARMs fenced.

Juju grants one leader at a time, but a deposed leader keeps its GARM until its next
hook, and one whose agent cannot run hooks keeps it for ever; two GARMs on one database
delete each other's runners. So every unit that may run GARM records it, with its
lease's length, in its peer data (``RECORD_KEY``) until its GARM has stopped; systemd
ends a lapsed lease without the agent (``garm.lease``); and a leader starts GARM only
once its own record is committed and every other record has gone, left, or been
waited out, not knowing counting as "another GARM may run". The rules, and why:
``docs/explanation/one-garm-at-a-time.md`` and ``docs/adr/0009``.

Pure: the charm hands in the peer records as read at the hook's start, what this
machine remembers, and the clock; it acts on the verdict.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from garm.lease import CHECK_SECONDS

RECORD_KEY = "garm-running"
# Beyond systemd's check of the lease (``garm.lease.CHECK_SECONDS``): a check that starts
# late, and the time ``systemctl stop`` takes to stop GARM.
MARGIN_SECONDS = 30
# With the timer off, passes come only from hooks: update-status every 5 minutes by default.
PACE_WITHOUT_TIMER = 300
# A record that cannot be read is waited for as the longest lease any config can make.
LONGEST_LEASE = 3 * 3600 + 120
# What a lease holds beyond its three passes: a long hook and a slow pass.
SLACK_SECONDS = 120
# Who is waited for when goal-state cannot say which units the application has.
UNKNOWN = "a unit goal-state could not list"


def lease_seconds(reconcile_interval: int) -> int:
    """How long one renewal keeps GARM running: three passes' pace and two minutes more.

    Passes are ``reconcile-interval`` apart unless the machine lock holds one back: the
    slack absorbs a long hook and a slow pass before a healthy leader's GARM is stopped.
    """
    pace = reconcile_interval or PACE_WITHOUT_TIMER
    return 3 * pace + SLACK_SECONDS


def pace(lease: int) -> int:
    """How far apart passes must come to keep a lease of ``lease`` seconds.

    ``lease_seconds`` backwards, so a lease outlasts the pass after next by two minutes.
    Right after ``reconcile-interval`` is raised the lease (``decide``: the shorter of the
    recorded and the wanted one) and so the pace stay the old ones for one more pass.
    """
    return max((lease - SLACK_SECONDS) // 3, 1)


def read_record(value: str | None) -> int | None:
    """A unit's lease length from its record; the longest for one that does not read."""
    if value is None:
        return None
    whole = value.isascii() and value.isdigit()  # "²" is a digit int() refuses
    return int(value) if whole and 0 < int(value) <= LONGEST_LEASE else LONGEST_LEASE


@dataclass(frozen=True)
class Stamp:
    """When this leader first saw a unit's record saying ``lease`` seconds."""

    lease: int
    seen: datetime


@dataclass(frozen=True)
class Memory:
    """What this machine remembers while it leads (a unit that does not lead forgets it).

    ``last``: its last leader pass; ``stamps``: when it first saw each other unit's record.
    """

    last: datetime | None = None
    stamps: Mapping[str, Stamp] = field(default_factory=dict)


@dataclass(frozen=True)
class Fence:
    """What the leader may do about GARM in this pass.

    ``may_run``: with a lease of ``lease`` seconds renewed now. Otherwise ``waiting``
    says for whom (a status line) and ``until`` when at the latest (None: not a matter of
    time). ``record``: the lease length to write to this unit's record (None: leave it).
    """

    may_run: bool
    lease: int = 0
    record: int | None = None
    waiting: str = ""
    until: datetime | None = None
    memory: Memory = field(default_factory=Memory)


def decide(
    me: str,
    records: Mapping[str, str] | None,
    memory: Memory,
    running_here: bool,
    wanted_lease: int | None,
    now: datetime,
    unseen: Collection[str] | None = (),
) -> Fence:
    """Whether this leader may run GARM now, and what to write and remember.

    ``records``: every peer unit's, this one's included, as committed before this hook
    (None: no peer relation yet, as in the install hook: no other unit to fence against
    unless ``unseen`` names one). ``memory``'s stamps count only if its last pass was
    less than this unit's lease ago: over a longer gap leadership may have been lost and
    regained unseen. ``running_here``: GARM is active here now (one started earlier stays
    running while its record is written if nobody else holds one). ``unseen``: live
    units not yet joined to the peer relation, each waited for as the longest lease
    (None: goal-state could not say; see ``_unseen``). ``wanted_lease``: the config's
    (None: it does not read, and the recorded lease goes on).
    """
    own = read_record((records or {}).get(me))
    if wanted_lease is None:  # the config does not read: the lease recorded goes on
        wanted_lease = own or lease_seconds(0)
    # Another unit could have led (and started GARM) only after waiting out the lease this
    # unit's record names: its stamps hold while its last pass is less than that ago.
    gap = timedelta(seconds=own or wanted_lease)
    continuous = memory.last is not None and memory.last <= now < memory.last + gap
    kept = memory.stamps if continuous else {}
    assumed = _unseen(unseen, kept, records, continuous)
    if records is None and not assumed:
        return Fence(True, wanted_lease, memory=Memory(now))
    records = records or {}
    record = wanted_lease if own != wanted_lease else None
    new_stamps: dict[str, Stamp] = {}
    waits: list[tuple[datetime, str, bool]] = []
    others = {**assumed, **records}
    for unit, value in sorted(others.items()):
        lease = read_record(value)
        if unit == me or lease is None:
            continue
        earlier = kept.get(unit)
        stamp = earlier if earlier is not None and earlier.lease == lease else Stamp(lease, now)
        new_stamps[unit] = stamp
        ends = stamp.seen + timedelta(seconds=lease + CHECK_SECONDS + MARGIN_SECONDS)
        if now < ends:
            waits.append((ends, unit, unit not in records))
    remembered = Memory(now, new_stamps)
    if waits:
        ends, unit, joining = max(waits)
        left = _duration(ends - now)
        if unit == UNKNOWN:
            waiting = f"Waiting for goal-state to list this application's units ({left} at most)"
        elif joining:
            waiting = f"Waiting for {unit} to join the peer relation ({left} at most)"
        else:
            waiting = f"Waiting for {unit} to stop its GARM (its lease ends in {left} at most)"
        return Fence(False, record=record, waiting=waiting, until=ends, memory=remembered)
    if own is None and not running_here:
        waiting = "Telling the other units GARM starts here; it starts at the next pass"
        return Fence(False, record=record, waiting=waiting, memory=remembered)
    lease = wanted_lease if own is None else min(own, wanted_lease)
    return Fence(True, lease, record, memory=remembered)


def _unseen(
    unseen: Collection[str] | None,
    kept: Mapping[str, Stamp],
    records: Mapping[str, str] | None,
    continuous: bool,
) -> dict[str, str]:
    """Whom to wait for beyond the records, with the record each is taken to hold.

    An unjoined unit holds a record that cannot be read ("?": the longest lease). Without
    goal-state's list (None), a leader that has led without a gap goes on as it knew
    (each unit it stamped taken to hold that lease, so an ended wait stays ended); any
    other waits for ``UNKNOWN``.
    """
    if unseen is not None:
        return dict.fromkeys(unseen, "?")
    if not continuous:
        return {UNKNOWN: "?"}
    return {unit: str(stamp.lease) for unit, stamp in kept.items() if unit not in (records or {})}


def _duration(left: timedelta) -> str:
    seconds = max(int(left.total_seconds() + 0.999), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {seconds:02d}s"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def read_memory(text: str | None) -> Memory:
    """What ``render_memory`` wrote; anything unreadable is forgotten (waited for anew)."""
    try:
        raw = json.loads(text or "{}")
        stamps = {
            str(unit): Stamp(int(entry["lease"]), datetime.fromisoformat(entry["seen"]))
            for unit, entry in raw["stamps"].items()
        }
        last = datetime.fromisoformat(raw["last"])
        times = [last, *(s.seen for s in stamps.values())]
        if any(t.tzinfo is None for t in times):  # not what render_memory writes
            return Memory()
        return Memory(last, stamps)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return Memory()


def render_memory(memory: Memory) -> str:
    """The memory as this machine keeps it."""
    stamps = {
        u: {"lease": s.lease, "seen": s.seen.isoformat()} for u, s in sorted(memory.stamps.items())
    }
    last = memory.last.isoformat() if memory.last else None
    return json.dumps({"last": last, "stamps": stamps}, sort_keys=True)
