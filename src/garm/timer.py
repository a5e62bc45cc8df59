"""A systemd timer that periodically dispatches the ``reconcile-tick`` event into this charm.

``update-status`` is model-wide, user-set and not meant for critical work, so the charm
keeps its own clock: ``garm-reconcile.timer`` starts the oneshot ``garm-reconcile.service``,
which runs ``juju-exec <unit> "JUJU_DISPATCH_PATH=hooks/reconcile-tick ... ./dispatch"``,
a normal hook context in which ops emits the charm's custom ``reconcile_tick``. Like
every hook it waits for the machine lock, and it also runs while the unit is dying or a
hook is in error: the handler checks leadership and liveness itself.

No ``run-one`` wrapper: a timer that elapses while its oneshot service is still
activating merges into that start job, and ``OnUnitInactiveSec=`` counts the next run
from this one's end, so runs never overlap. Never start the service synchronously from
a hook: it would wait for the machine lock that hook holds; starting the timer returns
at once.
"""

from __future__ import annotations

import logging
import re

from garm import workload
from garm.config import check_unit_paths

logger = logging.getLogger(__name__)

EVENT = "reconcile-tick"
SERVICE = "garm-reconcile.service"
TIMER = "garm-reconcile.timer"
JUJU_EXEC = "/usr/bin/juju-exec"
# A fixed cap on one run, whatever the interval. A pass stops starting writes after 60 s
# but finishes the one in flight; a (re)start of GARM waits up to 30 s for its API; and
# juju-exec first queues behind whatever hook holds the machine lock (an install or an
# upgrade can take minutes). Ten minutes leaves room for all of that, and is still short
# enough to unstick a dispatch that hangs (as one can around a charm upgrade). A cap
# longer than the interval costs nothing: runs never overlap, the next one just waits.
TIMEOUT_SECONDS = 600

# Juju's unit-name grammar: nothing in it is special to systemd (no whitespace, quotes,
# backslash, "%" or "$"). Used with fullmatch: "$" would also match before a final newline.
_UNIT_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]*[a-z][a-z0-9]*)*/(?:0|[1-9][0-9]*)")


def units(paths: workload.Paths) -> workload.Units:
    """The timer's units on this machine: the timer runs the service."""
    files = (paths.timer_service_file, paths.timer_file)
    return workload.Units(TIMER, files, stop=paths.timer_service_file)


def render_timer(
    unit_name: str, interval_seconds: int, timeout_seconds: int, juju_exec: str = JUJU_EXEC
) -> tuple[str, str]:
    """The service and the timer that dispatch ``reconcile-tick`` into ``unit_name``.

    Two timeouts, because killing the juju-exec client does not stop the hook it asked
    for: ``TimeoutStartSec=`` kills the client (a oneshot has no start timeout
    otherwise), ``/usr/bin/timeout`` the dispatched charm process. ``AccuracySec=1s``:
    systemd's default minute would swallow a short interval. Every word is checked
    rather than escaped (systemd splits, unquotes and expands ExecStart): anything
    outside a plain grammar raises ValueError.
    """
    executable, unit, command = dispatch_command(unit_name, timeout_seconds, juju_exec)
    _whole("interval", interval_seconds)
    service = [
        "[Unit]",
        f"Description=Dispatch {EVENT} to Juju unit {unit_name}",
        # A dispatch that fails fast (the agent is down) on a short interval would
        # otherwise hit the start rate limit and stop the ticks for good.
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=oneshot",
        f'ExecStart={executable} {unit} "{command}"',
        f"TimeoutStartSec={timeout_seconds}s",
    ]
    timer = [
        "[Unit]",
        f"Description=Tick {EVENT} for Juju unit {unit_name} every {interval_seconds}s",
        "",
        "[Timer]",
        f"OnActiveSec={interval_seconds}s",
        f"OnUnitInactiveSec={interval_seconds}s",
        "AccuracySec=1s",
        f"Unit={SERVICE}",
        "",
        "[Install]",
        "WantedBy=timers.target",
    ]
    return "\n".join(service) + "\n", "\n".join(timer) + "\n"


def dispatch_command(
    unit_name: str, timeout_seconds: int, juju_exec: str = JUJU_EXEC
) -> tuple[str, str, str]:
    """The command that dispatches ``reconcile-tick`` into ``unit_name``, as three words.

    Shared with ``garm.requeue``; ValueError for a word outside the grammar (``render_timer``).
    """
    if not _UNIT_NAME.fullmatch(unit_name):
        raise ValueError(f"not a Juju unit name: {unit_name!r}")
    check_unit_paths(juju_exec)
    _whole("timeout", timeout_seconds)
    command = f"JUJU_DISPATCH_PATH=hooks/{EVENT} /usr/bin/timeout {timeout_seconds} ./dispatch"
    return juju_exec, unit_name, command


def _whole(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a whole number of seconds >= 1: {value!r}")


def keep(paths: workload.Paths, unit_name: str, interval_seconds: int) -> None:
    """The timer as ``reconcile-interval`` asks: every ``interval_seconds``, or none at 0.

    Kept at every hook, and one found stopped is started, since the leader's lease is
    renewed by the passes it dispatches; an active timer re-arms with new settings on
    reload. Stopping the service from a hook is safe: a run in progress is a juju-exec
    client waiting for that hook's machine lock.
    """
    if interval_seconds:
        texts = render_timer(unit_name, interval_seconds, TIMEOUT_SECONDS)
        if units(paths).install(texts):
            logger.info("reconcile timer set to every %ss", interval_seconds)
    elif units(paths).remove():
        logger.info("reconcile timer removed (reconcile-interval is 0)")
