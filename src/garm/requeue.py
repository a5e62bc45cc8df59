"""One extra pass at the moment the last one said it can next make progress.

The reconcile timer (``garm.timer``) runs a pass every ``reconcile-interval``: the safety
net. A changeover waits on moments it knows (a listener open, a back-off over, a drain
deadline) or expects soon (a runner to report idle); the pass names the first
(``PassResult.requeue_at``), and systemd is asked for one pass then: a transient timer
(``systemd-run --on-active``) dispatching the same ``reconcile-tick`` through juju-exec,
a hook like any other (it waits for the machine lock). No hook ever sleeps waiting.

Each pass stops the requeue still pending and asks for its own, unless the periodic
timer runs no later. Each is named by the moment it fires: a pass dispatched by
``garm-requeue-<n>.service`` runs inside that service, which systemd still holds while
the next is asked for, so a fixed name would be refused. ``RemainAfterElapse=no`` and
``--collect`` unload each timer and service once it has run, failed or not.
"""

from __future__ import annotations

import logging
import math
import subprocess
from datetime import datetime, timedelta

from charmlibs import systemd

from garm import timer, workload
from garm.refusals import Held

logger = logging.getLogger(__name__)

PREFIX = "garm-requeue-"
SYSTEMD_RUN = "/usr/bin/systemd-run"
# The shortest wait systemd-run takes (a positive whole number of seconds). It also keeps
# each requeue's name apart from that of the one whose service may run this very pass.
SOONEST_SECONDS = 1


def wake(held: tuple[Held, ...], *moments: datetime | None) -> datetime | None:
    """The first moment a pass can progress again: a held write's back-off end, or ``moments``."""
    due = [h.refusal.retry_at for h in held] + [m for m in moments if m is not None]
    return min(due, default=None)


def delay(at: datetime | None, now: datetime, periodic: datetime | None) -> int | None:
    """Whole seconds from ``now`` until the pass asked for at ``at``; None for no pass.

    Rounded up to the whole second ``systemd-run`` takes, at least ``SOONEST_SECONDS``:
    a pass that lands just before a moment asks for one at that moment. None when nothing
    waits on time or the periodic timer runs by then anyway (``periodic``: its latest
    run; None: no periodic timer).
    """
    if at is None:
        return None
    seconds = max(SOONEST_SECONDS, math.ceil((at - now) / timedelta(seconds=1)))
    if periodic is not None and now + timedelta(seconds=seconds) >= periodic:
        return None
    return seconds


def keep(paths: workload.Paths, unit_name: str, seconds: int | None, now: datetime) -> None:
    """The one pending requeue, ``seconds`` after ``now``; none when ``seconds`` is None.

    Its name is kept in ``paths.requeue_file``, so a pass with nothing to ask for costs no
    call to systemd when none is pending. A failure of systemd is logged and swallowed:
    the periodic timer is the safety net.
    """
    cancel(paths)
    if seconds is None:
        return
    name = f"{PREFIX}{int(now.timestamp()) + seconds}"
    executable, unit, command = timer.dispatch_command(unit_name, timer.TIMEOUT_SECONDS)
    try:
        # Marked first: a timer made whose mark was not written would never be stopped.
        workload.write_own(paths.requeue_file, name)
    except OSError as exc:
        logger.warning("could not note the next pass (%s): none asked for", exc)
        return
    try:
        subprocess.run(  # noqa: S603 (no shell; fixed words and a checked unit name)
            [
                SYSTEMD_RUN,
                f"--unit={name}",
                f"--on-active={seconds}s",
                "--timer-property=AccuracySec=1s",
                "--timer-property=RemainAfterElapse=no",
                "--collect",
                # Oneshot, as the periodic timer's: only then does TimeoutStartSec bound
                # the dispatch (a simple service has started once it is forked).
                "--service-type=oneshot",
                f"--property=TimeoutStartSec={timer.TIMEOUT_SECONDS}s",
                executable,
                unit,
                command,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        logger.warning("could not ask systemd for the next pass in %ss: %s", seconds, exc)
        return
    logger.debug("next pass in %ss (%s)", seconds, name)


def cancel(paths: workload.Paths) -> None:
    """Stop the requeue still pending, if one was asked for; one dispatching runs on.

    Stopped by pattern: a timer that has elapsed is unloaded by systemd and not matched,
    and stopping a timer leaves the service it started (maybe this very pass) running.
    """
    if not paths.requeue_file.exists():
        return
    try:
        systemd.service_stop(f"{PREFIX}*.timer")
    except (OSError, systemd.SystemdError) as exc:
        logger.warning("could not stop the pending requeue: %s", exc)
        return
    try:
        paths.requeue_file.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("could not forget the pending requeue (%s)", exc)
