"""The reconcile timer and the requeue under a real systemd, through ``juju-exec``.

Each run goes through the stand-in ``juju-exec`` (``tests.machine_tier.juju_exec``),
which refuses what Juju 3.6's would and runs the command as the uniter does: the
charm's ``dispatch``, so each run is a real ``reconcile-tick`` hook of the charm.
"""

from __future__ import annotations

import json
import time

from garm import requeue
from tests.machine_tier.juju_exec import CALLS
from tests.machine_tier.tier import hook, logged, show
from tests.nspawn import Machine

INTERVAL = 10  # the least reconcile-interval the charm takes
# systemd's timer accuracy (AccuracySec=1s), and a second for a loaded machine.
SLACK = 2.0
ASK = (
    "import sys; from datetime import UTC, datetime; from garm import requeue, workload;"
    "requeue.keep(workload.Paths(), 'garm/0', int(sys.argv[1]), datetime.now(UTC))"
)


def calls(machine: Machine) -> list[dict]:
    """juju-exec's calls so far, each as it noted it."""
    path = machine.path(str(CALLS))
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for_calls(machine: Machine, count: int, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(calls(machine)) < count and time.monotonic() < deadline:
        time.sleep(0.25)
    return calls(machine)


def test_the_reconcile_timer_dispatches_reconcile_tick_every_interval(machine: Machine) -> None:
    hook(machine, "install", reconcile_interval=INTERVAL)
    done = wait_for_calls(machine, 3, timeout=4 * INTERVAL)
    armed = logged(machine, "garm-reconcile.timer", "Started garm-reconcile.timer")
    starts = logged(machine, "garm-reconcile.service", "Starting garm-reconcile.service")
    ends = logged(machine, "garm-reconcile.service", "Finished garm-reconcile.service")
    # systemd's record: the first run counted from the timer's start, each next one from
    # the end of the run before it.
    gaps = [starts[0] - armed[0]] + [b - a for a, b in zip(ends, starts[1:], strict=False)]
    took = ", ".join(f"{end - start:.1f}" for start, end in zip(starts, ends, strict=False))
    print(
        f"reconcile-interval {INTERVAL} s; {len(starts)} runs, each "
        f"{', '.join(f'{gap:.2f}' for gap in gaps)} s after the timer started or the "
        f"last run ended; runs took {took} s"
    )
    print(f"juju-exec called as {done[0]['argv']}, by {done[0]['unit']}")
    assert len(done) >= 3 and len(gaps) >= 3
    assert all(INTERVAL <= gap <= INTERVAL + SLACK for gap in gaps)
    assert {c["unit"] for c in done} == {"garm-reconcile.service"}
    # Each was a real reconcile-tick hook of the charm, and it passed.
    assert all(c["rc"] == 0 for c in done)
    assert all(c["argv"][0] == "garm/0" and "hooks/reconcile-tick" in c["argv"][1] for c in done)

    # The stand-in refuses what Juju 3.6's juju-exec refuses.
    for wrong in (["--bogus", "garm/0", "true"], ["garm/1", "true"], ["garm/0"]):
        refused = machine.run(["/usr/bin/juju-exec", *wrong], check=False)
        print(f"juju-exec {' '.join(wrong)}: exit {refused.returncode}, {refused.stderr.strip()}")
        assert refused.returncode == 2


def test_a_requeue_fires_once_at_its_time_and_replaces_the_earlier_ask(machine: Machine) -> None:
    hook(machine, "install", reconcile_interval=0)  # no periodic timer: only requeues
    assert show(machine, "garm-reconcile.timer", "LoadState")["LoadState"] == "not-found"

    machine.run(["/usr/bin/python3", "-c", ASK, "4"])  # a pass asks for one in 4 s
    time.sleep(1)
    machine.run(["/usr/bin/python3", "-c", ASK, "5"])  # the next pass, for one in 5 s
    pending = machine.sh("systemctl list-timers --all --no-legend 'garm-requeue-*'")
    print(f"pending after the second ask: {pending.strip()!r}")

    wait_for_calls(machine, 1, timeout=10)
    time.sleep(2)  # past both moments, and then some
    done = calls(machine)
    asked = logged(machine, "garm-requeue-*.timer", "Started garm-requeue-")
    stopped = logged(machine, "garm-requeue-*.timer", "Stopped garm-requeue-")
    fired = logged(machine, "garm-requeue-*.service", "Starting garm-requeue-")
    left = machine.sh("systemctl list-units --all --no-legend 'garm-requeue-*'").strip()
    late = [start - (asked[-1] + 5) for start in fired]
    first_stopped = [f"{at - asked[0]:.1f}" for at in stopped if at < asked[0] + 4]
    print(
        f"asked for +4 s, then {asked[-1] - asked[0]:.1f} s later for +5 s; first timer "
        f"stopped {first_stopped} s after it was made; dispatched "
        f"{len(fired)} time(s), {', '.join(f'{s:+.2f}' for s in late)} s from its moment, "
        f"by {[c['unit'] for c in done]}; units left: {left!r}"
    )
    # The first ask stopped by the second, before its moment; one pending after.
    assert len(asked) == 2 and len(first_stopped) == 1
    assert len(pending.strip().splitlines()) == 1
    assert len(fired) == len(done) == 1
    assert 0 <= late[0] <= SLACK
    assert done[0]["unit"].startswith(requeue.PREFIX) and done[0]["rc"] == 0
    assert left == ""
