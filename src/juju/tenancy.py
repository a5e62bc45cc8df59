"""Whether GARM may run on this machine now, and making it so (``juju.fence`` applied).

The fence's rules are pure (``juju.fence``); this is what a leader's pass does with
their verdict on the machine: the stamps kept in ``fence_file``, the lease renewed (``garm.lease``)
before GARM may (re)start, and GARM stopped where it may not run. ``release`` is the
other half: a unit that must not run GARM stops it, and only then lets its record go.

The fence is for a *shared* database (PostgreSQL): GARM's sqlite data cannot be shared,
and only the unit holding it may run GARM at all (``juju.lifecycle.sqlite_tenancy``).
On sqlite GARM keeps no lease, so a single unit cut off from Juju keeps serving.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from datetime import datetime

from garm import lease, workload
from juju import fence
from juju.records import RecordChange

logger = logging.getLogger(__name__)


def hold(
    paths: workload.Paths,
    unit: str,
    records: Mapping[str, str] | None,
    unseen: Collection[str] | None,
    interval: int | None,
    asked: datetime,
    now: datetime,
) -> fence.Fence:
    """The fence's verdict for this leader, acted on at once.

    ``records`` are the peer records (None: no peer relation yet), ``unseen`` this
    application's units that have not joined this unit's peer relation (None: goal-state
    cannot say), ``interval`` the
    reconcile interval (None: the config does not read; the lease already recorded is
    kept). ``asked`` is when this hook asked Juju whether this unit leads: the lease is
    counted from then, since Juju guarantees leadership for 30 s from that answer, not
    from whenever the pass gets here. May it run, the lease is renewed before GARM is
    (re)started, since GARM's unit refuses to start without one; may it not, a GARM of
    this unit's own still running stops.
    """
    unannounced = records is not None and unit not in records
    verdict = fence.decide(
        unit,
        records,
        fence.read_memory(workload.read_text(paths.fence_file)),
        unannounced and workload.is_active(),
        fence.lease_seconds(interval) if interval is not None else None,
        now,
        unseen,
    )
    workload.write_own(paths.fence_file, fence.render_memory(verdict.memory))
    if verdict.may_run:
        if not lease.holds(paths, now):
            # A lapsed lease may be why GARM is not running: that cause is gone now,
            # so the pass may start it at once (``workload.restart_due``).
            paths.start_file.unlink(missing_ok=True)
        lease.renew(paths, asked, verdict.lease)
        lease.keep(paths)
    else:
        logger.info("%s", verdict.waiting)
        if workload.stop(paths.unit_file):
            logger.warning("GARM stopped on this leader until the fence clears")
        lease.end(paths)
    return verdict


def serve_on(
    paths: workload.Paths, recorded: str | None, interval: int | None, asked: datetime
) -> int:
    """A dying leader's GARM keeps its lease until the stop hook; the lease's length.

    Juju lets no other unit lead while this one is dying, so nothing is waited for (the
    peer relation it is leaving may show its peers gone or not yet there): the lease is
    renewed for the shorter of the one its record names and the one the config asks
    for, and nothing is stamped or recorded.
    """
    leases = [
        fence.read_record(recorded),
        None if interval is None else fence.lease_seconds(interval),
    ]
    length = min((n for n in leases if n), default=fence.lease_seconds(0))
    lease.renew(paths, asked, length)
    lease.keep(paths)
    return length


def unfenced(paths: workload.Paths) -> None:
    """GARM on data no other unit can share (sqlite): no lease, no checker, no stamps."""
    lease.remove(paths)
    paths.fence_file.unlink(missing_ok=True)


def release(paths: workload.Paths, why: str) -> RecordChange:
    """No GARM on this machine any more, nor a lease for one: its record can go.

    GARM stops before anything else does, so a failure leaves the lease's checker and the
    reconcile timer in place for the retried hook; and the record goes only once systemd
    says GARM is not running (None: it stays, as does the checker).
    """
    if workload.stop(paths.unit_file):
        logger.info("%s: GARM stopped on this unit", why)
    if workload.is_active():
        logger.error("%s: GARM is still running here; its record stays", why)
        return None
    unfenced(paths)
    return "clear"
