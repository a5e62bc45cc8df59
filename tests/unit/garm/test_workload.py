"""The workload verbs on a temporary root, with systemctl and useradd faked at the edge."""

from __future__ import annotations

import os
import pwd
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from charmlibs import passwd, systemd

from garm import workload
from garm.config import START_LIMIT_SECONDS
from garm.workload import Paths
from tests.machine import FakeSystemctl

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

ME = pwd.getpwuid(os.getuid()).pw_name
PROVIDER_FILES = {
    "config.toml": "[default]\n",
    "providers/a-0.toml": 'cloud = "a-0"\n',
    "providers/a-0-clouds.yaml": '{"clouds": {}}\n',
}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_paths_live_under_the_root(tmp_path: Path) -> None:
    paths = Paths(tmp_path)

    assert paths.binary == tmp_path / "usr/local/bin/garm"
    assert paths.provider_binary == tmp_path / "usr/local/bin/garm-provider-openstack"
    assert paths.config_file == tmp_path / "etc/garm/config.toml"
    assert paths.sqlite_file == tmp_path / "var/lib/garm/garm.db"
    assert paths.unit_file == tmp_path / "etc/systemd/system/garm.service"
    assert Paths().data_dir == Path("/var/lib/garm")


# --- install_binary ---------------------------------------------------------------------


@pytest.fixture
def resource(tmp_path: Path) -> Path:
    source = tmp_path / "resources" / "garm"
    source.parent.mkdir()
    source.write_bytes(b"\x7fELF v1")
    return source


def test_install_binary_copies_executable(tmp_path: Path, resource: Path) -> None:
    target = Paths(tmp_path).binary

    assert workload.install_binary(resource, target) is True

    assert target.read_bytes() == b"\x7fELF v1"
    assert mode(target) == 0o755


def test_install_binary_leaves_an_identical_binary_alone(tmp_path: Path, resource: Path) -> None:
    target = Paths(tmp_path).binary
    workload.install_binary(resource, target)
    before = target.stat()

    assert workload.install_binary(resource, target) is False

    after = target.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_install_binary_replaces_a_changed_binary_by_rename(
    tmp_path: Path, resource: Path
) -> None:
    target = Paths(tmp_path).binary
    workload.install_binary(resource, target)
    inode = target.stat().st_ino
    resource.write_bytes(b"\x7fELF v2")

    assert workload.install_binary(resource, target) is True

    assert target.read_bytes() == b"\x7fELF v2"
    assert target.stat().st_ino != inode  # a running GARM keeps the old file
    assert mode(target) == 0o755
    assert sorted(p.name for p in target.parent.iterdir()) == ["garm"]


def test_install_binary_restores_the_mode_of_an_identical_binary(
    tmp_path: Path, resource: Path
) -> None:
    target = Paths(tmp_path).binary
    workload.install_binary(resource, target)
    target.chmod(0o644)

    assert workload.install_binary(resource, target) is True
    assert mode(target) == 0o755


# --- write_files ------------------------------------------------------------------------


def test_write_files_writes_private_files_in_private_dirs(tmp_path: Path) -> None:
    directory = Paths(tmp_path).config_dir

    assert workload.write_files(directory, PROVIDER_FILES, ME) is True

    assert {
        str(path.relative_to(directory)): path.read_text()
        for path in directory.rglob("*")
        if path.is_file()
    } == PROVIDER_FILES
    assert mode(directory) == mode(directory / "providers") == 0o700
    assert {mode(directory / name) for name in PROVIDER_FILES} == {0o600}


def test_write_files_twice_changes_nothing(tmp_path: Path) -> None:
    directory = Paths(tmp_path).config_dir
    workload.write_files(directory, PROVIDER_FILES, ME)
    inodes = {name: (directory / name).stat().st_ino for name in PROVIDER_FILES}

    assert workload.write_files(directory, PROVIDER_FILES, ME) is False

    assert {name: (directory / name).stat().st_ino for name in PROVIDER_FILES} == inodes


def test_write_files_rewrites_only_what_changed(tmp_path: Path) -> None:
    directory = Paths(tmp_path).config_dir
    workload.write_files(directory, PROVIDER_FILES, ME)
    untouched = (directory / "config.toml").stat().st_ino

    changed = {**PROVIDER_FILES, "providers/a-0.toml": 'cloud = "b"\n'}
    assert workload.write_files(directory, changed, ME) is True

    assert (directory / "providers/a-0.toml").read_text() == 'cloud = "b"\n'
    assert (directory / "config.toml").stat().st_ino == untouched


def test_write_files_restores_modes(tmp_path: Path) -> None:
    directory = Paths(tmp_path).config_dir
    workload.write_files(directory, PROVIDER_FILES, ME)
    (directory / "config.toml").chmod(0o644)
    (directory / "providers").chmod(0o755)

    assert workload.write_files(directory, PROVIDER_FILES, ME) is True

    assert mode(directory / "config.toml") == 0o600
    assert mode(directory / "providers") == 0o700


def test_write_files_removes_files_of_providers_no_longer_rendered(tmp_path: Path) -> None:
    directory = Paths(tmp_path).config_dir
    workload.write_files(directory, PROVIDER_FILES, ME)
    (directory / "providers" / ".a-0.toml.tmp123").write_text("left by a crash")

    assert workload.write_files(directory, {"config.toml": "[default]\n"}, ME) is True

    assert list((directory / "providers").iterdir()) == []
    assert (directory / "config.toml").exists()


@pytest.mark.parametrize(
    "name",
    ["../escape", "/etc/passwd", "providers/../../escape", ".hidden", "", "a//b", "providers/"],
)
def test_write_files_refuses_names_that_are_not_plain(tmp_path: Path, name: str) -> None:
    directory = Paths(tmp_path).config_dir

    with pytest.raises(ValueError):
        workload.write_files(directory, {**PROVIDER_FILES, name: "x"}, ME)

    assert not directory.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files away needs root")
def test_write_files_gives_everything_to_the_owner(tmp_path: Path) -> None:
    directory = Paths(tmp_path).config_dir
    nobody = pwd.getpwnam("nobody")

    workload.write_files(directory, PROVIDER_FILES, "nobody")

    owners = {
        (path.stat().st_uid, path.stat().st_gid) for path in [directory, *directory.rglob("*")]
    }
    assert owners == {(nobody.pw_uid, nobody.pw_gid)}
    assert workload.write_files(directory, PROVIDER_FILES, "nobody") is False


def test_ensure_directory_creates_a_private_directory_once(tmp_path: Path) -> None:
    data_dir = Paths(tmp_path).data_dir

    assert workload.ensure_directory(data_dir, ME) is True
    assert mode(data_dir) == 0o700
    assert workload.ensure_directory(data_dir, ME) is False


def test_the_charms_own_directory_is_roots_alone_whoever_made_it_first(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    # Made earlier as the parent of another directory: the default mode, 0755.
    paths.staging.mkdir(mode=0o700, parents=True)
    assert mode(paths.charm_dir) == 0o755

    assert workload.ensure_directory(paths.charm_dir, None) is True
    assert mode(paths.charm_dir) == 0o700
    assert workload.ensure_directory(paths.charm_dir, None) is False
    # Every file of the charm's own is written into it as it should be.
    paths.charm_dir.chmod(0o755)
    workload.write_own(paths.lease_file, "1\n")
    assert mode(paths.charm_dir) == 0o700


# --- the system edge: useradd and systemctl ---------------------------------------------


def test_ensure_user_asks_for_a_system_user_without_login(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(passwd, "add_user", lambda *a, **kw: calls.append((a, kw)))

    workload.ensure_user()

    assert calls == [
        (
            ("garm",),
            {
                "shell": "/usr/sbin/nologin",
                "system_user": True,
                "home_dir": "/var/lib/garm",
                "create_home": False,
            },
        )
    ]


@pytest.fixture
def systemctl(monkeypatch: pytest.MonkeyPatch) -> FakeSystemctl:
    fake = FakeSystemctl()
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


def test_garms_service_installs_reloads_and_enables(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    unit = paths.unit_file

    assert paths.service.install(["[Service]\n"]) is True

    assert unit.read_text() == "[Service]\n"
    assert mode(unit) == 0o644
    assert systemctl.calls == [["daemon-reload"], ["enable", "garm.service"]]


def test_garms_service_with_the_same_unit_calls_nothing(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    paths.service.install(["[Service]\n"])
    systemctl.calls.clear()

    assert paths.service.install(["[Service]\n"]) is False
    assert systemctl.calls == []

    assert paths.service.install(["[Service]\nType=simple\n"]) is True
    assert systemctl.calls == [["daemon-reload"], ["enable", "garm.service"]]


def test_garms_service_retried_after_a_failed_reload_reloads_again(
    tmp_path: Path, systemctl: FakeSystemctl
) -> None:
    paths = Paths(tmp_path)
    systemctl.failing.add("daemon-reload")

    with pytest.raises(systemd.SystemdError):
        paths.service.install(["[Service]\n"])

    systemctl.failing.clear()
    systemctl.calls.clear()
    assert paths.service.install(["[Service]\n"]) is True
    assert systemctl.calls == [["daemon-reload"], ["enable", "garm.service"]]


def test_restart_and_is_active(systemctl: FakeSystemctl, tmp_path: Path) -> None:
    assert workload.restart(Paths(tmp_path), START, clear=True) is True
    assert workload.is_active() is True
    systemctl.active = False
    assert workload.is_active() is False

    assert systemctl.calls == [
        ["reset-failed", "garm"],
        ["restart", "garm"],
        ["--quiet", "is-active", "garm"],
        ["--quiet", "is-active", "garm"],
    ]


# --- wait_until_answering ---------------------------------------------------------------


class Answer401(BaseHTTPRequestHandler):
    """GARM before login: every API call is refused, but refused over HTTP."""

    def do_GET(self) -> None:
        assert isinstance(self.server, RecordingServer)
        self.server.paths.append(self.path)
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class RecordingServer(ThreadingHTTPServer):
    """A loopback server that remembers the paths it was asked for."""

    def __init__(self, bind_and_activate: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), Answer401, bind_and_activate)
        self.paths: list[str] = []


def serve(server: RecordingServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def answering() -> Iterator[tuple[str, RecordingServer]]:
    server = RecordingServer()
    for url in serve(server):
        yield url, server


@pytest.fixture
def closed_url() -> Iterator[str]:
    """A loopback port that is bound but not listening: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_wait_until_answering_accepts_any_http_answer(
    answering: tuple[str, RecordingServer],
) -> None:
    url, server = answering

    assert workload.wait_until_answering(url, timeout=5) is True
    assert server.paths == ["/api/v1/controller"]


def test_wait_until_answering_gives_up_within_the_bound(closed_url: str) -> None:
    started = time.monotonic()

    assert workload.wait_until_answering(closed_url, timeout=1, interval=0.1) is False

    assert 0.9 <= time.monotonic() - started < 2


def test_wait_until_answering_waits_for_a_late_start() -> None:
    server = RecordingServer(bind_and_activate=False)
    try:
        server.server_bind()  # holds the port; connections are refused until listen()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        timer = threading.Timer(0.3, server.server_activate)
        timer.start()
        result: list[bool] = []
        waiter = threading.Thread(
            target=lambda: result.append(workload.wait_until_answering(url, 5, 0.05))
        )
        waiter.start()
        timer.join()
        for _ in serve(server):
            waiter.join()
    finally:
        server.server_close()

    assert result == [True]


def test_wait_until_answering_ignores_proxies_from_the_environment(
    answering: tuple[str, RecordingServer],
    closed_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy_url, proxy = answering
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, proxy_url)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)

    assert workload.wait_until_answering(closed_url, timeout=0.3, interval=0.1) is False
    assert proxy.paths == []


def test_restart_clears_systemds_count_first_and_says_whether_it_started(
    systemctl: FakeSystemctl, tmp_path: Path
) -> None:
    systemctl.failing.add("restart")
    paths = Paths(tmp_path)

    assert workload.restart(paths, START, clear=True) is False  # told, not raised

    assert systemctl.calls == [["reset-failed", "garm"], ["restart", "garm"]]
    assert workload.last_start(paths) == START
    systemctl.calls.clear()
    later = START + timedelta(seconds=30)
    assert workload.restart(paths, later, clear=False) is False
    assert systemctl.calls == [["restart", "garm"]]  # counted against systemd's bound
    assert workload.last_start(paths) == START


def test_a_start_whose_cause_the_pass_cannot_see_waits_out_systemds_window(
    tmp_path: Path,
) -> None:
    paths = Paths(tmp_path)
    assert workload.restart_due(paths, START)  # never started: due
    paths.start_file.parent.mkdir(parents=True)
    paths.start_file.write_text(f"{int(START.timestamp())}\n")
    window = timedelta(seconds=START_LIMIT_SECONDS)
    assert not workload.restart_due(paths, START + window - timedelta(seconds=1))
    assert workload.restart_due(paths, START + window)
    paths.start_file.write_text("not a time")
    assert workload.restart_due(paths, START)  # unreadable: as never started


# --- why GARM does not start -------------------------------------------------------------


def journal(systemctl: FakeSystemctl, *lines: str, at: datetime = START) -> None:
    for line in lines:
        systemctl.journal.append((at, "garm.service", line))


def test_start_failure_is_garms_error_from_its_journal(systemctl: FakeSystemctl) -> None:
    journal(systemctl, "Error: old cause", at=START - timedelta(minutes=5))
    systemctl.journal.append((START, "systemd", "garm.service: Failed with result 'exit-code'."))
    journal(
        systemctl,
        "Error: creating database: failed to connect to database: connection refused",
    )

    assert workload.start_failure(START) == (
        "creating database: failed to connect to database: connection refused"
    )
    assert systemctl.calls[-1][:3] == [
        workload.JOURNALCTL,
        "_SYSTEMD_UNIT=garm.service",
        f"--since=@{int(START.timestamp())}",
    ]


def test_start_failure_prefers_the_error_to_what_follows_it(systemctl: FakeSystemctl) -> None:
    journal(systemctl, "panic: runtime error: index out of range", "goroutine 1 [running]:")
    assert workload.start_failure(START) == "panic: runtime error: index out of range"
    journal(systemctl, "GARM's lease has lapsed: GARM may not start here")
    assert workload.start_failure(START) == "panic: runtime error: index out of range"


def test_start_failure_without_an_error_is_the_last_line_or_says_so(
    systemctl: FakeSystemctl,
) -> None:
    assert workload.start_failure(START) == workload.NO_CAUSE
    journal(systemctl, "GARM's lease has lapsed: GARM may not start here")
    assert workload.start_failure(START) == "GARM's lease has lapsed: GARM may not start here"


@pytest.mark.parametrize(
    ("line", "secret"),
    [
        (
            "Error: fetching config: failed to validate proxy settings: invalid http_proxy: "
            'parse "http://user:S3cret@proxy:3128": invalid port',
            "S3cret",
        ),
        ("Error: dial http://admin:S3cret@db.example:5432: refused", "S3cret"),
        ("Error: connecting: host=db user=garm password=S3cret dbname=garm", "S3cret"),
        ("Error: toml: line 3 (last key `database.passphrase`): `S3cret`", "S3cret"),
        ("Error: bad value \x1b[31mS3cret", "\x1b"),
    ],
)
def test_start_failure_shows_no_configuration_value(
    systemctl: FakeSystemctl, line: str, secret: str
) -> None:
    journal(systemctl, line)

    cause = workload.start_failure(START)

    assert secret not in cause
    assert cause.startswith(line.removeprefix("Error: ")[:10])


def test_start_failure_is_bounded_for_the_status(systemctl: FakeSystemctl) -> None:
    journal(systemctl, "Error: " + "x" * 500)
    cause = workload.start_failure(START)
    assert len(cause) == workload.CAUSE_LENGTH and cause.endswith("…")
    assert len(f"GARM does not start: {cause}") <= 120
