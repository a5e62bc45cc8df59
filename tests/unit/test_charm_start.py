"""A GARM that cannot start, through the real charm (issue #32, case 6).

systemd runs GARM as the unit the charm wrote says (``tests.machine.FakeSystemctl``):
``Restart=on-failure`` every ``RestartSec``, and it gives up once the unit's start limit
is reached. The double's GARM runs while the service does. GARM that exits at start
prints why to standard error, which systemd keeps in the journal; the pass reads it.
"""

from __future__ import annotations

from datetime import timedelta

import ops
import pytest
from ops import testing

from garm.config import START_LIMIT_BURST, START_LIMIT_SECONDS
from juju import machine as on_machine
from tests.charm_states import configurator, make_state
from tests.clock import FakeClock
from tests.databags import SOLE_UNIT
from tests.garm_double import GarmDouble
from tests.machine import Machine

IN_SYNC = ops.ActiveStatus("1 scaleset in sync")
# What GARM prints as it exits when its database cannot be reached (cobra's "Error: "
# before the error runServer returns, cmd/garm/cmd/root.go and run.go).
REFUSED = (
    "Error: creating database: error connecting to database: failed to connect to "
    "`host=10.1.2.3 user=garm database=garm`: dial error (dial tcp 10.1.2.3:5432: connect: "
    "connection refused)"
)


@pytest.fixture
def settled(ctx, world: GarmDouble, resources, machine: Machine, monkeypatch) -> testing.State:
    """One scaleset in sync; this machine's GARM is the double's, run by the fake systemd."""
    relation = configurator(SOLE_UNIT)
    state = ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0), make_state(world, resources, relation)
    )
    assert state.unit_status == IN_SYNC
    machine.systemctl.garm = world.process()
    # GARM that is not running is waited for this long after a start, not 30 s.
    monkeypatch.setattr(on_machine, "START_TIMEOUT_SECONDS", 0.3)
    return state


def test_systemd_gives_up_on_a_garm_that_cannot_start(
    settled: testing.State, machine: Machine, clock: FakeClock
) -> None:
    systemd = machine.systemctl
    systemd.fail(REFUSED)

    clock.advance(timedelta(hours=1))
    systemd.play()

    # Restart= tried a bounded number of times, then left GARM failed: not every 5 s
    # for an hour (720 tries, ~7 journal lines each).
    assert 0 < len(systemd.starts) <= START_LIMIT_BURST
    assert systemd.failed and not systemd.active
    assert systemd.starts[-1] - systemd.starts[0] < timedelta(minutes=5)


def test_a_garm_that_cannot_start_is_told_with_why_then_started_once_the_cause_is_gone(
    ctx, settled: testing.State, world: GarmDouble, machine: Machine, clock: FakeClock
) -> None:
    systemd = machine.systemctl
    systemd.fail(REFUSED)
    clock.advance(timedelta(minutes=1))
    before = len(systemd.calls)

    state = ctx.run(ctx.on.update_status(), settled)

    # The pass says why GARM does not run, from what GARM wrote; systemd had given up,
    # and the pass's own last start is less than systemd's window ago, so it starts
    # nothing; the connection string GARM quoted is not shown.
    status = state.unit_status
    assert status.name == "blocked"
    assert status.message.startswith(
        "GARM does not start: creating database: error connecting to database: "
        'failed to connect to "…": dial error'
    ), status.message
    assert len(status.message) <= 120
    assert "host=" not in status.message and "user=garm" not in status.message
    assert ["reset-failed", "garm"] not in systemd.calls[before:]
    assert not systemd.active and world.running_processes() == []

    # Restart= gave up after the pass's start too; the cause goes (the database is back)
    # where the charm cannot see it. Passes within systemd's start limit window start
    # nothing (each would undo systemd's bound) and say why; the first pass after it
    # starts GARM.
    clock.advance(timedelta(seconds=60))
    systemd.play()
    assert systemd.failed
    systemd.refusal = None
    starts = len(systemd.starts)
    state = ctx.run(ctx.on.update_status(), state)
    assert len(systemd.starts) == starts and state.unit_status.name == "blocked"
    clock.advance(timedelta(seconds=START_LIMIT_SECONDS - 60))
    calls = len(systemd.calls)

    state = ctx.run(ctx.on.update_status(), state)

    assert systemd.calls[calls:][:2] == [
        ["--quiet", "is-active", "garm"],
        ["reset-failed", "garm"],
    ]
    assert systemd.active and world.running_processes() != []
    assert state.unit_status == IN_SYNC


def test_passes_every_30_s_keep_the_starts_of_a_garm_that_cannot_start_bounded(
    ctx, settled: testing.State, machine: Machine, clock: FakeClock
) -> None:
    """The timer's passes each find GARM down: together with Restart= they start it at
    most a burst per window of systemd's start limit, not a burst per pass."""
    systemd = machine.systemctl
    systemd.fail(REFUSED)
    state = settled
    for _ in range(20):  # ten minutes of passes
        clock.advance(timedelta(seconds=30))
        systemd.play()
        state = ctx.run(ctx.on.update_status(), state)
    windows = 600 // START_LIMIT_SECONDS + 1
    assert len(systemd.starts) <= windows * START_LIMIT_BURST, len(systemd.starts)
    assert state.unit_status.message.startswith("GARM does not start: ")


def test_a_garm_that_exits_without_a_word_is_told_too(
    ctx, settled: testing.State, machine: Machine, clock: FakeClock
) -> None:
    machine.systemctl.fail("")
    clock.advance(timedelta(minutes=1))

    state = ctx.run(ctx.on.update_status(), settled)

    assert state.unit_status == ops.BlockedStatus(
        "GARM does not start: it wrote no error; see journalctl -u garm"
    )
