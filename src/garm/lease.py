"""GARM's lease on this machine: a deadline the leader renews and systemd enforces.

A unit whose agent cannot run hooks never gets the hook that would stop its GARM; the
lease stops it by itself. Each leader pass writes a deadline (``lease_file``: seconds
since the epoch, nothing secret); ``garm-lease.timer`` runs a script every
``CHECK_SECONDS`` that stops ``garm.service`` once it has passed, and ``garm.service``
runs the same script as its ``ExecStartPre=`` (as root), so a lapsed GARM cannot start
again, by ``Restart=`` or at boot. The deadline is this machine's own clock plus the
lease's length: no two machines' clocks are ever compared (``docs/adr/0009``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from garm import workload
from garm.config import check_unit_paths

logger = logging.getLogger(__name__)

SERVICE = "garm-lease.service"
TIMER = "garm-lease.timer"
CHECK_SECONDS = 10


def units(paths: workload.Paths) -> workload.Units:
    """The checker's units on this machine (its script is ``paths.lease_script``)."""
    return workload.Units(TIMER, (paths.lease_service_file, paths.lease_timer_file))


def render(lease_file: str, script_file: str) -> tuple[str, str, str]:
    """The lease's script, service and timer: ``check`` exits 1 once lapsed, ``enforce`` stops it.

    The deadline is read as digits only: anything else (a torn write, a hand edit) reads
    as lapsed, so a lease that cannot be read never keeps GARM running.
    """
    check_unit_paths(lease_file, script_file)
    script = "\n".join(
        [
            "#!/bin/sh",
            "# GARM's lease (written by the garm-machine charm's leader passes): exit 0",
            "# while it holds. 'enforce' stops GARM once it has lapsed.",
            "set -eu",
            f"deadline=$(cat '{lease_file}' 2>/dev/null || true)",
            'case "$deadline" in',
            "    '' | *[!0-9]*) deadline=0 ;;",
            "esac",
            'if [ "$(date +%s)" -lt "$deadline" ]; then',
            "    exit 0",
            "fi",
            'if [ "${1:-check}" = enforce ]; then',
            "    if systemctl --quiet is-active garm.service; then",
            '        echo "GARM\'s lease has lapsed: stopping garm.service"',
            "        systemctl stop --no-block garm.service",
            "    fi",
            "    exit 0",
            "fi",
            'echo "GARM\'s lease has lapsed: GARM may not start here" >&2',
            "exit 1",
        ]
    )
    service = "\n".join(
        [
            "[Unit]",
            "Description=Stop GARM once its lease from the Juju leader has lapsed",
            "StartLimitIntervalSec=0",
            "",
            "[Service]",
            "Type=oneshot",
            f"ExecStart={script_file} enforce",
            "TimeoutStartSec=30s",
        ]
    )
    timer = "\n".join(
        [
            "[Unit]",
            f"Description=Check GARM's lease every {CHECK_SECONDS}s",
            "",
            "[Timer]",
            f"OnActiveSec={CHECK_SECONDS}s",
            f"OnUnitActiveSec={CHECK_SECONDS}s",
            "AccuracySec=1s",
            f"Unit={SERVICE}",
            "",
            "[Install]",
            "WantedBy=timers.target",
        ]
    )
    return script + "\n", service + "\n", timer + "\n"


def renew(paths: workload.Paths, now: datetime, seconds: int) -> None:
    """GARM may run here until ``seconds`` from ``now`` (this machine's wall clock)."""
    deadline = int((now + timedelta(seconds=seconds)).timestamp())
    workload.write_own(paths.lease_file, f"{deadline}\n")


def holds(paths: workload.Paths, now: datetime) -> bool:
    """Whether this machine's lease has not lapsed (read as the script reads it)."""
    try:
        text = paths.lease_file.read_text().strip()
    except OSError:
        return False
    return text.isascii() and text.isdigit() and now.timestamp() < int(text)


def end(paths: workload.Paths) -> None:
    """The lease ends now: GARM here may not start again until a leader renews it."""
    paths.lease_file.unlink(missing_ok=True)


def keep(paths: workload.Paths) -> bool:
    """The script and units installed and the timer running; whether anything changed.

    At every leader pass: a checker stopped out of band would leave a cut-off leader's
    GARM running past its lease.
    """
    script, *texts = render(str(paths.lease_file), str(paths.lease_script))
    changed = workload.write_own(paths.lease_script, script, 0o700)
    changed = units(paths).install(texts) or changed
    if changed:
        logger.info("GARM's lease is checked every %ss", CHECK_SECONDS)
    return changed


def remove(paths: workload.Paths) -> bool:
    """The checker stopped and gone (GARM is stopped first); whether it was installed."""
    there = units(paths).remove()
    paths.lease_script.unlink(missing_ok=True)
    end(paths)
    return there
