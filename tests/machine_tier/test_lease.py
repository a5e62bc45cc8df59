"""GARM's lease under a real systemd: a cut-off leader's GARM stops, and stays stopped.

The leader runs GARM on PostgreSQL, its lease renewed by every pass (``juju.machine.fence``).
Then its agent is cut off: ``juju-exec`` reaches no agent, so no pass runs and nobody
renews the lease. Only systemd is left to act: the lease's timer stops GARM once the
deadline has passed, and GARM's ``ExecStartPre`` refuses every start after it, until
systemd gives up. The agent back, the next pass renews the lease and starts GARM.
"""

from __future__ import annotations

import time

import pytest

from garm import lease
from garm.config import RESTART_SECONDS, START_LIMIT_BURST
from tests.machine_tier.juju_exec import AGENT_DOWN
from tests.machine_tier.tier import hook, show
from tests.nspawn import Machine

pytestmark = pytest.mark.postgresql  # the tier's one server, a database of its own

REFUSAL = "GARM's lease has lapsed: GARM may not start here"
# The timer's period, its accuracy, and a second for each timestamp's rounding.
STOP_BOUND = lease.CHECK_SECONDS + 1 + 2
# Renewed as a pass renews it, but a few seconds long: the deadline comes soon.
SHORT_LEASE = (
    "from datetime import UTC, datetime; from garm import lease, workload;"
    "lease.renew(workload.Paths(), datetime.now(UTC), 3);"
    "print(workload.Paths().lease_file.read_text())"
)


def _count(machine: Machine, match: str, text: str) -> int:
    """How many lines of the journal (``match``: its filter) hold ``text``."""
    return int(machine.sh(f'journalctl {match} -o cat --no-pager | grep -c "{text}" || :'))


def _seconds(machine: Machine, unit: str, timestamp: str) -> float:
    text = machine.sh(f"systemctl show {unit} --timestamp=unix -P {timestamp}").strip()
    return float(text.removeprefix("@"))


def test_a_cut_off_leaders_garm_stops_by_its_lease_and_comes_back_with_the_next_pass(
    machine: Machine,
) -> None:
    hook(machine, "install")
    before = hook(machine, "relate-postgresql")
    assert show(machine, "garm", "ActiveState")["ActiveState"] == "active"
    print(
        "leader on PostgreSQL, GARM running; lease until",
        machine.sh("cat /var/lib/garm-charm/lease").strip(),
    )

    # Cut off: no more passes. Its last renewal's deadline comes in 3 s.
    machine.path(str(AGENT_DOWN)).touch()
    deadline = int(machine.run(["/usr/bin/python3", "-c", SHORT_LEASE]).stdout)
    # Until it is stopped, not stopping: is-active already fails while it deactivates, but
    # InactiveEnterTimestamp is set only once it is inactive (until then it is the
    # restart's of the move to PostgreSQL, seconds before the cut).
    until_stopped = "until systemctl show garm -P ActiveState | grep -qxE 'inactive|failed'"
    machine.sh(f'timeout 40 sh -c "{until_stopped}; do sleep 0.2; done"')
    stopped = _seconds(machine, "garm", "InactiveEnterTimestamp")
    by = machine.sh("journalctl -u garm-lease.service -o cat --no-pager | grep stopping || :")
    print(
        f"GARM stopped {stopped - deadline:+.0f} s after its lease's deadline "
        f"(bound {STOP_BOUND} s), by the lease's timer: {by.strip()!r}"
    )
    assert 0 <= stopped - deadline <= STOP_BOUND
    assert "GARM's lease has lapsed: stopping garm.service" in by

    # A start (by hand, Restart=, a boot) is refused; Restart= tries again until the
    # unit's start limit is reached, counted from the charm's last start of GARM (each
    # clears the count), and systemd gives up: no more starts.
    started = time.monotonic()
    start = machine.run(["systemctl", "start", "garm"], check=False)
    assert start.returncode != 0
    machine.sh("timeout 60 sh -c 'until systemctl -q is-failed garm; do sleep 0.5; done'")
    gave_up = time.monotonic() - started
    refusals = _count(machine, "_SYSTEMD_UNIT=garm.service", REFUSAL)
    limit = _count(machine, "-u garm", "Start request repeated too quickly")
    time.sleep(RESTART_SECONDS + 2)
    after = show(machine, "garm", "ActiveState", "NRestarts")
    print(
        f"start refused ({start.stderr.splitlines()[0]!r}); {refusals} refusals, then "
        f"systemd gave up after {gave_up:.1f} s ({limit} 'repeated too quickly'); "
        f"{RESTART_SECONDS + 2} s later: {after}, "
        f"{_count(machine, '_SYSTEMD_UNIT=garm.service', REFUSAL)} refusals"
    )
    assert 1 <= refusals <= START_LIMIT_BURST and limit == 1
    assert after["ActiveState"] == "failed"
    assert _count(machine, "_SYSTEMD_UNIT=garm.service", REFUSAL) == refusals

    # The agent back: the next pass (the reconcile timer's) renews the lease, clears
    # systemd's count and starts GARM.
    machine.path(str(AGENT_DOWN)).unlink()
    started = time.monotonic()
    status = hook(machine, "reconcile-tick")
    back = show(machine, "garm", "ActiveState")
    answer = machine.sh(
        "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9997/api/v1/controller"
    )
    renewed = int(machine.sh("cat /var/lib/garm-charm/lease")) - int(machine.sh("date +%s"))
    print(
        f"next pass: {time.monotonic() - started:.1f} s, GARM {back['ActiveState']}, "
        f"answers {answer}, lease renewed for {renewed} s; {status}"
    )
    assert back["ActiveState"] == "active" and answer == "401"
    assert status == before  # the same GARM, on the same database
    assert renewed > 60
