"""The one extra pass: when it is asked for, and how systemd is asked.

``delay`` is a table; ``keep`` and ``cancel`` run on a temporary root with subprocess.run
replaced by FakeSystemctl, which checks the ``systemd-run`` words it is given. What
systemd makes of the transient units is checked by ``systemd-analyze verify`` on the
same settings written as unit files (no systemd bus here to run ``systemd-run`` for real).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from garm import requeue, timer
from garm.workload import Paths
from scalesets.planner import LISTENER_STARTUP
from tests.clock import FakeClock
from tests.machine import FakeSystemctl

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("at", "periodic", "expected"),
    [
        (None, NOW + 30 * S, None),  # nothing waits on time
        (NOW + 10 * S, NOW + 30 * S, 10),
        (NOW + 9.2 * S, NOW + 30 * S, 10),  # rounded up: never before its moment
        (NOW + 30 * S, NOW + 30 * S, None),  # the periodic timer comes by then anyway
        (NOW + 29.5 * S, NOW + 30 * S, None),  # as it does by the whole second after
        (NOW + 28 * S, NOW + 30 * S, 28),  # close before it: the moment, not the timer's
        (NOW + 45 * S, NOW + 30 * S, None),
        (NOW + 2 * S, NOW + 30 * S, 2),  # a moment just ahead: no floor pushes it back
        (NOW + 0.1 * S, NOW + 30 * S, 1),  # never at once: the soonest systemd takes
        (NOW - 60 * S, NOW + 30 * S, requeue.SOONEST_SECONDS),  # already due
        (NOW + 400 * S, None, 400),  # no periodic timer (reconcile-interval 0)
    ],
)
def test_delay(at, periodic, expected) -> None:
    assert requeue.delay(at, NOW, periodic) == expected


@pytest.mark.parametrize("tenths", range(50, 80))
def test_a_pass_just_before_the_listener_moment_asks_for_the_next_at_it(tenths: int) -> None:
    """A timer's pass 5 to 8 s after a new generation's create (issue #32, case 9): the
    planner waits for the listener 8 s after the create, and the next pass comes then,
    within the whole second systemd counts in, not 3 s after the pass (11 s at worst)."""
    created = NOW
    moment = created + LISTENER_STARTUP
    passed = created + tenths * S / 10

    seconds = requeue.delay(moment, passed, passed + 30 * S)

    assert seconds is not None
    assert moment <= passed + seconds * S < moment + S


@pytest.fixture
def systemctl(monkeypatch: pytest.MonkeyPatch) -> FakeSystemctl:
    fake = FakeSystemctl(FakeClock(NOW))
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


def test_keep_asks_for_one_transient_timer_that_dispatches_the_tick(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)

    requeue.keep(paths, "garm/0", 10, NOW)

    name = f"{requeue.PREFIX}{int(NOW.timestamp()) + 10}"
    assert systemctl.calls == [["systemd-run", name, "10s"]]
    assert systemctl.requeue_due == NOW + 10 * S
    assert paths.requeue_file.read_text() == name


def test_each_pass_replaces_the_pending_one(tmp_path: Path, systemctl: FakeSystemctl) -> None:
    paths = Paths(tmp_path)
    requeue.keep(paths, "garm/0", 10, NOW)

    requeue.keep(paths, "garm/0", 4, NOW + 2 * S)

    stop = ["stop", f"{requeue.PREFIX}*.timer"]
    second = f"{requeue.PREFIX}{int(NOW.timestamp()) + 6}"
    assert systemctl.calls[1:] == [stop, ["systemd-run", second, "4s"]]
    assert systemctl.requeue_due == NOW + 4 * S  # the fake's clock did not move


def test_nothing_to_ask_for_and_nothing_pending_calls_nothing(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    requeue.keep(Paths(tmp_path), "garm/0", None, NOW)
    requeue.cancel(Paths(tmp_path))

    assert systemctl.calls == []


def test_nothing_to_ask_for_stops_the_pending_one(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    requeue.keep(paths, "garm/0", 10, NOW)

    requeue.keep(paths, "garm/0", None, NOW)

    assert systemctl.calls[-1] == ["stop", f"{requeue.PREFIX}*.timer"]
    assert systemctl.requeue_due is None
    assert not paths.requeue_file.exists()


def test_systemd_failing_is_logged_and_the_hook_goes_on(
    tmp_path: Path, systemctl: FakeSystemctl, caplog: pytest.LogCaptureFixture
) -> None:
    paths = Paths(tmp_path)
    systemctl.failing.add("systemd-run")

    with caplog.at_level(logging.WARNING):
        requeue.keep(paths, "garm/0", 10, NOW)

    assert "could not ask systemd for the next pass in 10s" in caplog.text
    # Marked all the same: the next pass stops whatever may be there, then forgets it.
    systemctl.failing.clear()
    requeue.keep(paths, "garm/0", None, NOW)
    assert systemctl.calls[-1] == ["stop", f"{requeue.PREFIX}*.timer"]
    assert not paths.requeue_file.exists()


def test_a_failed_stop_keeps_the_mark_for_the_next_pass(
    tmp_path: Path, systemctl: FakeSystemctl, caplog: pytest.LogCaptureFixture
) -> None:
    paths = Paths(tmp_path)
    requeue.keep(paths, "garm/0", 10, NOW)
    systemctl.failing.add("stop")

    with caplog.at_level(logging.WARNING):
        requeue.cancel(paths)

    assert "could not stop the pending requeue" in caplog.text
    assert paths.requeue_file.exists()


def test_a_unit_name_systemd_would_misread_is_refused_before_anything_runs(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    with pytest.raises(ValueError, match="not a Juju unit name"):
        requeue.keep(Paths(tmp_path), "garm/0 --now", 10, NOW)

    assert [c for c in systemctl.calls if c[0] == "systemd-run"] == []


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_transient_units_settings(tmp_path: Path) -> None:
    """What ``keep`` passes to systemd-run, written as the unit files it makes."""
    executable, unit, command = timer.dispatch_command(
        "garm/0", timer.TIMEOUT_SECONDS, "/bin/true"
    )
    name = f"{requeue.PREFIX}1793534410"
    (tmp_path / f"{name}.service").write_text(
        "[Service]\n"
        "Type=oneshot\n"
        f'ExecStart={executable} {unit} "{command}"\n'
        f"TimeoutStartSec={timer.TIMEOUT_SECONDS}s\n"
    )
    (tmp_path / f"{name}.timer").write_text(
        "[Timer]\nOnActiveSec=10s\nAccuracySec=1s\nRemainAfterElapse=no\n"
    )

    result = subprocess.run(
        ["systemd-analyze", "verify", *(str(p) for p in sorted(tmp_path.iterdir()))],
        capture_output=True,
        text=True,
        check=False,
    )

    assert (result.returncode, result.stderr) == (0, "")
