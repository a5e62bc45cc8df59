"""The reconcile timer: its units as text and as systemd reads them, and its verbs.

The verbs run on a temporary root with subprocess.run replaced by FakeSystemctl, which
refuses any systemctl command the charm's tests do not know about.
"""

from __future__ import annotations

import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from charmlibs import systemd

from garm import timer, workload
from garm.timer import SERVICE, TIMER, render_timer
from garm.workload import Paths
from juju.machine import START_TIMEOUT_SECONDS
from leader import PASS_BUDGET_SECONDS
from tests.machine import FakeSystemctl
from tests.systemd_units import directives

INSTALL = [["daemon-reload"], ["enable", "--now", TIMER]]
REMOVE = [["disable", "--now", TIMER], ["stop", SERVICE], ["daemon-reload"]]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- rendering --------------------------------------------------------------------------


def test_the_service_dispatches_the_event_through_juju_exec_with_two_timeouts() -> None:
    service = directives(render_timer("garm/0", 30, 600)[0])

    assert service["Service"] == {
        "Type": ["oneshot"],
        "ExecStart": [
            '/usr/bin/juju-exec garm/0 "JUJU_DISPATCH_PATH=hooks/reconcile-tick'
            ' /usr/bin/timeout 600 ./dispatch"'
        ],
        "TimeoutStartSec": ["600s"],
    }
    assert "garm/0" in service["Unit"]["Description"][0]
    assert service["Unit"]["StartLimitIntervalSec"] == ["0"]
    assert "Install" not in service  # only ever started by its timer


def test_exec_start_is_three_words_with_nothing_for_systemd_to_expand() -> None:
    line = directives(render_timer("garm-k8s/12", 30, 45, "/bin/true")[0])["Service"]
    words = shlex.split(line["ExecStart"][0])

    assert words == [
        "/bin/true",
        "garm-k8s/12",
        "JUJU_DISPATCH_PATH=hooks/reconcile-tick /usr/bin/timeout 45 ./dispatch",
    ]
    assert not any(c in line["ExecStart"][0] for c in "%$\\'")


def test_the_timer_counts_each_interval_from_the_end_of_the_last_run() -> None:
    timer = directives(render_timer("garm/3", 30, 600)[1])

    assert timer["Timer"] == {
        "OnActiveSec": ["30s"],
        "OnUnitInactiveSec": ["30s"],
        "AccuracySec": ["1s"],
        "Unit": [SERVICE],
    }
    assert timer["Install"] == {"WantedBy": ["timers.target"]}
    assert "garm/3" in timer["Unit"]["Description"][0]


@pytest.mark.parametrize("name", ["garm/0", "garm-k8s/12", "a1-b2c/7", "g/1000"])
def test_juju_unit_names_are_accepted(name: str) -> None:
    assert f" {name} " in render_timer(name, 1, 1)[0]


@pytest.mark.parametrize(
    "name",
    [
        "",
        "garm",
        "garm/",
        "garm/01",
        "garm/-1",
        "garm/0/1",
        "Garm/0",
        "garm-1/0",
        "-garm/0",
        "../garm/0",
        "garm/0 ",
        "ga rm/0",
        "garm/%n",
        "garm/$HOME",
        "garm/${X}",
        'garm/"0',
        "garm/'0",
        "garm/\\0",
        "garm/0\n",
        "garm/0\nExecStartPre=/bin/sh",
    ],
)
def test_names_systemd_would_split_or_expand_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="unit name"):
        render_timer(name, 30, 600)


@pytest.mark.parametrize(
    "path", ["juju-exec", "-/usr/bin/juju-exec", "/usr/bin/juju exec", "/x/%n", "/x/$y", "/x\n"]
)
def test_a_juju_exec_path_systemd_would_misread_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="absolute path"):
        render_timer("garm/0", 30, 600, path)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "30"])
def test_intervals_and_timeouts_must_be_whole_positive_seconds(bad: object) -> None:
    with pytest.raises(ValueError, match="interval"):
        render_timer("garm/0", bad, 600)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        render_timer("garm/0", 30, bad)  # type: ignore[arg-type]


def test_the_default_timeout_outlasts_a_pass_and_a_garm_start() -> None:
    assert timer.TIMEOUT_SECONDS >= 2 * (PASS_BUDGET_SECONDS + START_TIMEOUT_SECONDS)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize(("interval", "timeout"), [(1, 1), (30, 600), (3600, 600)])
def test_systemd_accepts_every_line_of_both_units(
    tmp_path: Path, interval: int, timeout: int
) -> None:
    # verify checks that ExecStart's binary exists, so point it at one that does.
    service, timer_text = render_timer("garm/0", interval, timeout, juju_exec="/bin/true")
    (tmp_path / SERVICE).write_text(service)
    (tmp_path / TIMER).write_text(timer_text)

    result = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / SERVICE), str(tmp_path / TIMER)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert (result.returncode, result.stderr) == (0, "")


def test_the_paths_name_the_units_the_verbs_start(tmp_path: Path) -> None:
    paths = Paths(tmp_path)

    assert paths.timer_service_file == tmp_path / "etc/systemd/system" / SERVICE
    assert paths.timer_file == tmp_path / "etc/systemd/system" / TIMER


# --- ensure and remove ------------------------------------------------------------------

UNITS = render_timer("garm/0", 30, 600)


@pytest.fixture
def systemctl(monkeypatch: pytest.MonkeyPatch) -> FakeSystemctl:
    fake = FakeSystemctl()
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


def test_ensure_writes_both_units_then_reloads_and_starts_the_timer(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)

    assert timer.units(paths).install(UNITS) is True

    assert paths.timer_service_file.read_text() == UNITS[0]
    assert paths.timer_file.read_text() == UNITS[1]
    assert mode(paths.timer_service_file) == mode(paths.timer_file) == 0o644
    assert sorted(p.name for p in paths.timer_file.parent.iterdir()) == [SERVICE, TIMER]
    assert systemctl.calls == INSTALL


def test_ensure_with_the_same_units_writes_nothing_and_only_asks_if_the_timer_runs(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    timer.units(paths).install(UNITS)
    files = (paths.timer_service_file, paths.timer_file)
    before = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in files]
    systemctl.calls.clear()

    assert timer.units(paths).install(UNITS) is False

    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in files] == before
    assert systemctl.calls == [["--quiet", "is-active", TIMER]]


def test_ensure_starts_a_timer_stopped_out_of_band_though_its_files_are_the_same(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    """The leader's lease is renewed by the passes the timer dispatches: a timer someone
    stopped (``systemctl stop garm-reconcile.timer``) is started again by the next pass."""
    paths = Paths(tmp_path)
    timer.units(paths).install(UNITS)
    systemctl.started.discard(TIMER)  # stopped out of band
    systemctl.calls.clear()

    assert timer.units(paths).install(UNITS) is True

    assert TIMER in systemctl.started
    assert systemctl.calls == [["--quiet", "is-active", TIMER], *INSTALL]


def test_ensure_rewrites_only_the_unit_that_changed(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    timer.units(paths).install(UNITS)
    service_inode = paths.timer_service_file.stat().st_ino
    systemctl.calls.clear()
    faster = render_timer("garm/0", 10, 600)

    assert timer.units(paths).install(faster) is True

    assert paths.timer_file.read_text() == faster[1]
    assert paths.timer_service_file.stat().st_ino == service_inode
    assert systemctl.calls == INSTALL


@pytest.mark.parametrize("failing", ["daemon-reload", "enable"])
def test_ensure_retried_after_systemd_failed_does_it_all_again(
    tmp_path: Path, systemctl: FakeSystemctl, failing: str
) -> None:
    paths = Paths(tmp_path)
    systemctl.failing.add(failing)

    with pytest.raises(systemd.SystemdError):
        timer.units(paths).install(UNITS)

    assert paths.timer_file.exists()  # so that remove still finds the timer
    systemctl.failing.clear()
    systemctl.calls.clear()
    assert timer.units(paths).install(UNITS) is True
    assert systemctl.calls == INSTALL
    assert paths.timer_service_file.read_text() == UNITS[0]


def test_remove_stops_and_disables_then_deletes_and_reloads(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    timer.units(paths).install(UNITS)
    systemctl.calls.clear()

    assert timer.units(paths).remove() is True

    assert systemctl.calls == REMOVE
    assert not paths.timer_file.exists() and not paths.timer_service_file.exists()
    systemctl.calls.clear()
    assert timer.units(paths).remove() is False
    assert systemctl.calls == []


def test_remove_with_nothing_installed_calls_nothing(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    assert timer.units(Paths(tmp_path)).remove() is False
    assert systemctl.calls == []


def test_remove_after_a_failed_ensure_skips_the_service_systemd_never_saw(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    systemctl.failing.add("daemon-reload")
    with pytest.raises(systemd.SystemdError):
        timer.units(paths).install(UNITS)
    systemctl.failing.clear()
    systemctl.calls.clear()

    assert timer.units(paths).remove() is True

    assert systemctl.calls == [["disable", "--now", TIMER], ["daemon-reload"]]
    assert not paths.timer_file.exists()


def test_remove_that_failed_leaves_the_units_for_the_retry(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    timer.units(paths).install(UNITS)
    systemctl.failing.add("stop")

    with pytest.raises(systemd.SystemdError):
        timer.units(paths).remove()

    assert paths.timer_file.exists() and paths.timer_service_file.exists()
    systemctl.failing.clear()
    systemctl.calls.clear()
    assert timer.units(paths).remove() is True
    assert systemctl.calls == REMOVE


def test_workload_remove_deletes_the_timer_units_too(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    timer.units(paths).install(UNITS)

    workload.remove(paths)

    assert not paths.timer_file.exists() and not paths.timer_service_file.exists()
