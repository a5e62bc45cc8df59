"""The metrics endpoint: its unit as systemd reads it, its server over HTTP, its verbs.

The verbs run on a temporary root with subprocess.run replaced by a FakeSystemctl that
also knows this service's commands; the server runs for real, as a subprocess of the
machine's python3 on a free loopback port.
"""

from __future__ import annotations

import http.client
import json
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from charmlibs import systemd

from garm import workload
from garm.workload import Paths
from observe import endpoint
from observe.endpoint import CONTENT_TYPE, PORT, SERVER, SERVICE, publish, render_unit
from scalesets.actions import RemoveInstance
from scalesets.reconciler import Outcome
from scalesets.spec import Settings
from tests.machine import FakeSystemctl
from tests.systemd_units import directives
from tests.wire import T0

MACHINE = Paths()
UNIT = render_unit(str(MACHINE.metrics_server), str(MACHINE.metrics_file))
INSTALL = [["daemon-reload"], ["enable", SERVICE], ["restart", SERVICE]]
REMOVE = [["disable", "--now", SERVICE], ["daemon-reload"]]
# What every later pass asks: whether the server still runs.
RUNNING = ["--quiet", "is-active", SERVICE]


class Systemctl(FakeSystemctl):
    """The charm's fake systemctl, knowing this service's commands too."""

    KNOWN = (
        *FakeSystemctl.KNOWN,
        ["enable", SERVICE],
        ["restart", SERVICE],
        ["disable", "--now", SERVICE],
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- the unit -----------------------------------------------------------------------------


def test_the_service_runs_the_server_on_the_metrics_file_and_port() -> None:
    service = directives(UNIT)["Service"]

    assert shlex.split(service["ExecStart"][0]) == [
        "/usr/bin/python3",
        "-I",
        "/usr/local/lib/garm-charm/serve-metrics.py",
        "/var/lib/garm-charm/metrics/metrics",
        "9099",
    ]
    assert service["Restart"] == ["always"]
    assert directives(UNIT)["Unit"]["StartLimitIntervalSec"] == ["0"]
    assert directives(UNIT)["Install"] == {"WantedBy": ["multi-user.target"]}
    assert PORT == 9099


def test_the_service_sees_only_the_metrics_directory_and_loopback() -> None:
    service = directives(UNIT)["Service"]

    assert service["DynamicUser"] == ["yes"]
    assert service["CapabilityBoundingSet"] == [""]
    assert service["ProtectSystem"] == ["strict"]
    # /var/lib holds GARM's data and Juju's agents: the service sees only its directory,
    # bound whole because each pass renames a new file into it.
    assert service["TemporaryFileSystem"] == ["/var/lib:ro"]
    assert service["BindReadOnlyPaths"] == ["/var/lib/garm-charm/metrics"]
    assert service["IPAddressDeny"] == ["any"]
    assert service["IPAddressAllow"] == ["localhost"]
    assert service["RestrictAddressFamilies"] == ["AF_INET AF_UNIX"]
    # Loopback of the machine's own network: a private one no collector could reach.
    assert "PrivateNetwork" not in service
    assert service["ProtectHome"] == ["yes"]
    # The server script lies outside what the temporary /var/lib hides.
    assert not str(MACHINE.metrics_server).startswith("/var/lib/")


@pytest.mark.parametrize(
    ("server", "metrics"),
    [
        ("serve.py", "/m/metrics"),
        ("/s/serve.py", "m/metrics"),
        ("/s/serve py", "/m/metrics"),
        ("/s/%n.py", "/m/metrics"),
        ("/s/serve.py", "/m/$HOME"),
        ("/s/serve.py", "/m/metrics\nExecStartPre=/bin/sh"),
        ("/s/serve.py", '/m/"metrics'),
    ],
)
def test_paths_systemd_would_split_or_expand_are_refused(server: str, metrics: str) -> None:
    with pytest.raises(ValueError, match="absolute path"):
        render_unit(server, metrics)


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True, check=False)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_every_line_of_the_unit(tmp_path: Path) -> None:
    # verify checks that ExecStart's binary exists: the machine's python3 must.
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    (tmp_path / SERVICE).write_text(
        render_unit(str(MACHINE.metrics_server), str(MACHINE.metrics_file), python=python)
    )

    result = _analyze("verify", str(tmp_path / SERVICE))

    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_rates_the_service_well_hardened(tmp_path: Path) -> None:
    (tmp_path / SERVICE).write_text(UNIT)
    if _analyze("security", "--help").stdout.find("--offline") < 0:
        pytest.skip("systemd-analyze security cannot read a unit file offline")

    result = _analyze(
        "security", "--offline=yes", "--threshold=20", "--no-pager", str(tmp_path / SERVICE)
    )

    assert result.returncode == 0, result.stdout[-300:]


# --- the server, over HTTP --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(port: int, path: str = "/metrics") -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def _start(script: Path, metrics: Path) -> tuple[subprocess.Popen[bytes], int] | None:
    """The server on a port free a moment ago; None when another process took it first
    (pytest-xdist's other worker makes connections too), so that the caller tries another.

    What it sees is a port taken by a connection or a bound socket. A port another server
    listens on in between is not told apart: the connect reaches that server.
    """
    port = _free_port()
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    process = subprocess.Popen(
        [python, "-I", str(script), str(metrics), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            if process.poll() is not None:
                _, err = process.communicate()
                assert b"Address already in use" in err, err
                return None
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.05)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """The server, as the unit runs it, on a free port; yields its file and port."""
    script = tmp_path / "serve-metrics.py"
    script.write_text(SERVER)
    metrics = tmp_path / "metrics" / "metrics"
    metrics.parent.mkdir()
    started = None
    for _ in range(5):
        if started := _start(script, metrics):
            break
    assert started is not None, "no free port in 5 tries"
    process, port = started
    try:
        yield metrics, port
    finally:
        process.terminate()
        _, err = process.communicate(timeout=5)
    # No line per request reaches the journal (errors may: a 503 says why).
    assert b"HTTP/1." not in err, err


def test_the_server_serves_the_file_as_prometheus_text(served: tuple[Path, int]) -> None:
    metrics, port = served
    text = "# HELP x X.\n# TYPE x gauge\nx 1\n"
    workload._write_atomic(metrics, text.encode(), 0o644, owner=None)

    assert _get(port) == (200, CONTENT_TYPE, text.encode())
    assert _get(port, "/metrics?name[]=x")[0] == 200


def test_the_server_serves_each_new_file_the_charm_renames_in(served: tuple[Path, int]) -> None:
    metrics, port = served
    for value in range(3):
        workload._write_atomic(metrics, f"x {value}\n".encode(), 0o644, owner=None)
        assert _get(port)[2] == f"x {value}\n".encode()


def test_the_server_answers_503_until_a_pass_writes_the_file(served: tuple[Path, int]) -> None:
    _, port = served

    assert _get(port)[0] == 503


@pytest.mark.parametrize("path", ["/", "/metrics/", "/metrics.txt", "/../metrics", "/state"])
def test_the_server_serves_nothing_else(served: tuple[Path, int], path: str) -> None:
    metrics, port = served
    metrics.write_text("x 1\n")
    (metrics.parent / "state").write_text("{}")

    assert _get(port, path)[0] == 404


def test_the_server_listens_on_loopback_only() -> None:
    assert '("127.0.0.1", PORT)' in SERVER
    compile(SERVER, "serve-metrics.py", "exec")  # python3 -I runs it as it is


# --- ensure, remove, publish ------------------------------------------------------------


@pytest.fixture
def systemctl(monkeypatch: pytest.MonkeyPatch) -> Systemctl:
    fake = Systemctl()
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


def test_ensure_installs_the_server_and_unit_then_starts_it(
    tmp_path: Path, systemctl: Systemctl
) -> None:
    paths = Paths(tmp_path)

    assert endpoint.ensure(paths) is True

    assert paths.metrics_server.read_text() == SERVER
    assert paths.metrics_unit_file.read_text() == UNIT  # the machine's paths, whatever the root
    assert mode(paths.metrics_server) == mode(paths.metrics_unit_file) == 0o644
    assert systemctl.calls == INSTALL


def test_ensure_with_nothing_changed_only_asks_whether_it_runs(
    tmp_path: Path, systemctl: Systemctl
) -> None:
    paths = Paths(tmp_path)
    endpoint.ensure(paths)
    systemctl.calls.clear()

    assert endpoint.ensure(paths) is False
    assert systemctl.calls == [RUNNING]


def test_ensure_starts_a_server_stopped_out_of_band(tmp_path: Path, systemctl: Systemctl) -> None:
    paths = Paths(tmp_path)
    endpoint.ensure(paths)
    systemctl.started.discard(SERVICE)
    systemctl.calls.clear()

    assert endpoint.ensure(paths) is True
    assert systemctl.calls == [RUNNING, *INSTALL]


def test_ensure_restarts_a_server_whose_script_changed(
    tmp_path: Path, systemctl: Systemctl
) -> None:
    paths = Paths(tmp_path)
    endpoint.ensure(paths)
    Paths(tmp_path).metrics_server.write_text("# an older charm's server\n")
    systemctl.calls.clear()

    assert endpoint.ensure(paths) is True
    assert systemctl.calls == INSTALL


@pytest.mark.parametrize("failing", ["daemon-reload", "enable", "restart"])
def test_ensure_retried_after_systemd_failed_does_it_all_again(
    tmp_path: Path, systemctl: Systemctl, failing: str
) -> None:
    paths = Paths(tmp_path)
    systemctl.failing.add(failing)

    with pytest.raises(systemd.SystemdError):
        endpoint.ensure(paths)

    assert paths.metrics_unit_file.exists()  # so that remove still finds the service
    systemctl.failing.clear()
    systemctl.calls.clear()
    assert endpoint.ensure(paths) is True
    assert systemctl.calls == INSTALL


# A pass's facts other than its outcome, as the charm hands them over.
_PASS = {
    "ended": T0,
    "duration": 1.0,
    "reconcile_interval": 30,
    "settings": Settings(),
    "version": "v1",
}


def test_remove_stops_and_disables_then_deletes_all_but_the_count(
    tmp_path: Path, systemctl: Systemctl
) -> None:
    paths = Paths(tmp_path)
    outcome = Outcome(done=(RemoveInstance("r", 1, "ci-1"),))
    publish(paths, outcome, **_PASS)
    systemctl.calls.clear()

    assert endpoint.remove(paths) is True

    assert systemctl.calls == REMOVE
    assert not paths.metrics_unit_file.exists() and not paths.metrics_server.exists()
    assert not paths.metrics_dir.exists()
    assert json.loads(paths.metrics_state.read_text()) == {"force_removals_total": 1}
    systemctl.calls.clear()
    assert endpoint.remove(paths) is False
    assert systemctl.calls == []


def test_remove_that_failed_leaves_the_unit_for_the_retry(
    tmp_path: Path, systemctl: Systemctl
) -> None:
    paths = Paths(tmp_path)
    endpoint.ensure(paths)
    systemctl.failing.add("disable")

    # Never out of the hook: said, and left for the next hook to retry.
    assert endpoint.remove(paths) is False

    assert Paths(tmp_path).metrics_unit_file.exists()
    systemctl.failing.clear()
    systemctl.calls.clear()
    assert endpoint.remove(paths) is True
    assert systemctl.calls == REMOVE


def test_publish_writes_the_metrics_for_the_service_and_keeps_the_count(
    tmp_path: Path, systemctl: Systemctl
) -> None:
    paths = Paths(tmp_path)
    removed = Outcome(done=(RemoveInstance("a", 1, "ci-1"), RemoveInstance("b", 1, "ci-1")))
    totals = []
    for outcome in (removed, None, Outcome(), removed):
        assert publish(paths, outcome, **_PASS)
        text = paths.metrics_file.read_text()
        totals.append(next(ln for ln in text.splitlines() if ln.startswith("garm_charm_force")))

    assert totals == [f"garm_charm_force_removals_total {n}" for n in (2, 2, 2, 4)]
    assert f"garm_charm_last_pass_timestamp_seconds {int(T0.timestamp())}" in text
    assert mode(paths.metrics_file) == 0o644 and mode(paths.metrics_dir) == 0o755
    assert sorted(p.name for p in paths.metrics_dir.iterdir()) == ["metrics"]  # nothing else
    assert mode(paths.metrics_state) == 0o600
    assert json.loads(paths.metrics_state.read_text()) == {"force_removals_total": 4}
    # Installed once: the later passes found it installed and running.
    assert systemctl.calls == [*INSTALL, RUNNING, RUNNING, RUNNING]


@pytest.mark.parametrize("state", ["", "{", "[]", '{"force_removals_total": -3}', '{"x": 1}'])
def test_an_unreadable_count_starts_again_from_zero(
    tmp_path: Path, systemctl: Systemctl, state: str
) -> None:
    paths = Paths(tmp_path)
    paths.metrics_state.parent.mkdir(parents=True)
    paths.metrics_state.write_text(state)

    publish(paths, Outcome(done=(RemoveInstance("a", 1, "ci-1"),)), **_PASS)

    assert json.loads(paths.metrics_state.read_text()) == {"force_removals_total": 1}


def test_publish_never_fails_the_pass_but_says_it_did_not_publish(
    tmp_path: Path, systemctl: Systemctl, caplog: pytest.LogCaptureFixture
) -> None:
    paths = Paths(tmp_path)
    systemctl.failing.add("restart")

    assert publish(paths, Outcome(), **_PASS) is False

    assert "charm metrics not published" in caplog.text
    assert paths.metrics_file.exists()  # written; the service is retried on the next pass
    systemctl.failing.clear()
    assert publish(paths, Outcome(), **_PASS) is True


def test_publish_that_cannot_write_leaves_the_last_file(
    tmp_path: Path, systemctl: Systemctl, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = Paths(tmp_path)
    publish(paths, Outcome(), **_PASS)
    before = paths.metrics_file.read_text()

    def full(path: Path, *_: object, **__: object) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(workload, "_write_atomic", full)

    assert publish(paths, None, **{**_PASS, "duration": 9.0}) is False
    assert paths.metrics_file.read_text() == before  # its timestamp ages: the alert's cue


def test_after_remove_and_workload_remove_nothing_of_the_endpoint_is_left(
    tmp_path: Path, systemctl: Systemctl
) -> None:
    paths = Paths(tmp_path)
    publish(paths, Outcome(done=(RemoveInstance("a", 1, "ci-1"),)), **_PASS)

    endpoint.remove(paths)
    workload.remove(paths)

    left = [
        paths.metrics_unit_file,
        paths.metrics_server.parent,
        paths.metrics_dir,
        paths.metrics_state,
    ]
    assert [p for p in left if p.exists()] == []
