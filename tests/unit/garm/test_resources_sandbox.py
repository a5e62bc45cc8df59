"""The sandbox an attached binary is checked in: nobody, no network, a read-only root.

Two kinds of tests. The command, the refusals and the runner's judgement run anywhere:
the refusals with the machine's answers replaced (not root, a tool missing, a kernel that
refuses a namespace, faked by stand-in tools on the sandbox's PATH). The rest run the real
sandbox on real stand-ins (``tests/binaries``) and skip, saying why, where it cannot be
made (not root, namespaces refused); each that claims the sandbox stops something first
shows, unconfined, that the same stand-in does it.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from garm import resources, sandbox
from tests.binaries import fake_garm, fake_program, require_sandbox, running_with

PYTHON = Path("/usr/bin/python3")


@pytest.fixture
def sandboxed() -> None:
    require_sandbox()


needs_sandbox = pytest.mark.usefixtures("sandboxed")
needs_python = pytest.mark.skipif(
    not PYTHON.exists(), reason=f"no {PYTHON} for the stand-in's probe (the sandbox's /usr)"
)


def stand_in(directory: Path, body: str) -> Path:
    """A stand-in for a checked binary, as ``resources.unpack`` leaves one: 0755, root's."""
    program = fake_program(directory / "garm", body)
    program.chmod(0o755)
    return program


def probe(directory: Path, code: str) -> Path:
    """A stand-in that runs ``code`` with the machine's Python (there in the sandbox's /usr)."""
    return stand_in(directory, f"exec {PYTHON} -c {shlex.quote(code)}")


def sandboxed_run(program: Path, *, timeout: float = 10, max_output: int = 1 << 16) -> str:
    """What ``program --version`` printed in the sandbox; it must exit 0."""
    run = sandbox.run(program, ("--version",), timeout=timeout, max_output=max_output)
    assert run.status == 0, run
    return run.stdout.decode()


def unconfined(program: Path, *prefix: str) -> str:
    """What ``program --version`` printed run as the tests run, or after ``prefix``."""
    done = subprocess.run(
        [*prefix, str(program), "--version"], capture_output=True, timeout=10, check=True
    )
    return done.stdout.decode()


@pytest.fixture
def machine_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Root, and a directory of stand-in tools as the sandbox's whole PATH; returns it."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in sandbox.TOOLS:
        fake_tool(tools, tool, "exit 99")
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    monkeypatch.setitem(sandbox.ENV, "PATH", str(tools))
    return tools


def fake_tool(tools: Path, name: str, body: str) -> None:
    path = tools / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


# --- The command: runs anywhere -----------------------------------------------------------


def test_the_command_is_unshare_running_a_fixed_script_given_the_paths_as_arguments() -> None:
    argv = sandbox.command(Path("/var/lib/x/garm"), Path("/var/lib/x/.sandbox-1"), ["--version"])
    other = sandbox.command(Path("/srv/$(reboot)/garm"), Path("/r"), ["a b"])

    assert argv[0] == "unshare"
    separator = argv.index("--")
    assert set(argv[1:separator]) == {
        "--mount",
        "--net",
        "--pid",
        "--ipc",
        "--uts",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
    }
    assert argv[separator + 1 : separator + 3] == ["sh", "-c"]
    assert argv[separator + 4 :] == [
        "sandbox",
        "/var/lib/x/.sandbox-1",
        "/var/lib/x/garm",
        "garm",
        "--version",
    ]
    assert other[separator + 3] == argv[separator + 3]  # the script is the same whatever the paths
    assert other[separator + 5 :] == ["/r", "/srv/$(reboot)/garm", "garm", "a b"]


def test_the_script_drops_to_nobody_last_after_a_trial_and_the_ready_line() -> None:
    argv = sandbox.command(Path("/p/garm"), Path("/r"), [])
    script = argv[argv.index("-c") + 1]
    lines = script.strip().splitlines()
    drop = " ".join(sandbox.DROP)

    assert lines[0] == "set -eu"  # any step that fails stops it, before READY
    assert lines[-3:] == [
        f'chroot "$root" {drop} true',
        "printf 'sandbox ready\\n'",
        f'exec chroot "$root" {drop} "/check/$name" "$@"',
    ]
    assert sandbox.DROP[:-1] == (
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--pdeathsig=SIGKILL",
    )
    binds = [line for line in script.splitlines() if "mount --bind" in line]
    remounts = [line for line in script.splitlines() if "remount,bind,ro" in line]
    assert len(remounts) == len(binds) + 1  # every bind, and the root, made read-only


@pytest.mark.parametrize("path", ["garm", "/", "relative/garm"])
def test_a_path_that_is_not_a_programs_absolute_one_is_a_bug(path: str) -> None:
    with pytest.raises(ValueError, match="not a program's absolute path"):
        sandbox.command(Path(path), Path("/r"), [])


# --- When it cannot be made, nothing runs: runs anywhere ----------------------------------


def test_where_the_charm_is_not_root_the_binary_is_not_run_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = tmp_path / "ran"
    program = stand_in(tmp_path / "bin", f"touch {ran}; echo v0.2.1")
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)

    with pytest.raises(sandbox.Unavailable) as caught:
        sandbox.run(program, ("--version",), timeout=5, max_output=1024)

    assert str(caught.value) == "the sandbox needs root, and this runs as uid 1000"
    assert not ran.exists()
    assert unconfined(program) == "v0.2.1\n" and ran.exists()  # it would have, run at all


def test_an_unsandboxable_resource_blocks_as_unchecked_and_is_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = fake_garm(tmp_path / "juju" / "garm")
    work = tmp_path / "work"
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)

    with pytest.raises(resources.UncheckedError) as caught:
        resources.prepare_once("garm", source, work)

    assert isinstance(caught.value, resources.ResourceError)  # what the pass turns to blocked
    assert str(caught.value) == (
        "Resource garm cannot be checked on this machine: the sandbox needs root, and this"
        " runs as uid 1000; an attached binary is run only as nobody without network on a"
        " read-only root, never as root"
    )
    assert not (work / "garm.checked").exists()  # not noted: the next pass checks it again


def test_a_missing_tool_is_named(machine_answers: Path) -> None:
    (machine_answers / "setpriv").unlink()
    (machine_answers / "chroot").unlink()

    assert sandbox.unavailable() == (
        f"the sandbox needs setpriv, chroot, not found in {machine_answers}"
    )


def test_a_kernel_that_refuses_a_namespace_is_named_and_not_blamed_on_the_binary(
    tmp_path: Path, machine_answers: Path
) -> None:
    refusal = "unshare: unshare failed: Operation not permitted"
    fake_tool(machine_answers, "unshare", f"echo '{refusal}' >&2; exit 1")
    source = fake_garm(tmp_path / "juju" / "garm")

    with pytest.raises(resources.UncheckedError) as caught:
        resources.prepare("garm", source, tmp_path / "work")

    assert caught.value.reason == f"the sandbox could not be made ({refusal})"
    assert os.listdir(tmp_path / "work") == ["garm"]  # its mount point is removed


def test_a_sandbox_not_ready_in_time_is_its_own_fault_and_is_killed(
    tmp_path: Path, machine_answers: Path
) -> None:
    token = f"30.{secrets.randbelow(10**9):09d}"
    fake_tool(machine_answers, "unshare", f"exec /bin/sleep {token}")
    started = time.monotonic()

    with pytest.raises(sandbox.Unavailable, match=r"^the sandbox was not ready within 0.3s$"):
        sandbox.run(stand_in(tmp_path, "echo v0.2.1"), (), timeout=0.3, max_output=1024)

    assert time.monotonic() - started < 3
    assert running_with(token) == []


def test_what_follows_the_ready_line_is_the_programs(
    tmp_path: Path, machine_answers: Path
) -> None:
    fake_tool(
        machine_answers, "unshare", "printf 'sandbox ready\\nv0.2.1\\n'; echo hm >&2; exit 3"
    )

    run = sandbox.run(stand_in(tmp_path, ""), ("--version",), timeout=5, max_output=1024)

    assert run == sandbox.Run(3, b"v0.2.1\n", b"hm\n")


@pytest.mark.parametrize("stream", ["", ">&2"])
def test_output_past_the_bound_is_refused_and_killed(
    tmp_path: Path, machine_answers: Path, stream: str
) -> None:
    fake_tool(machine_answers, "unshare", f"printf 'sandbox ready\\n'; exec /usr/bin/yes {stream}")
    started = time.monotonic()

    with pytest.raises(sandbox.Exceeded, match=r"^printed over 1 KiB$"):
        sandbox.run(stand_in(tmp_path, ""), (), timeout=5, max_output=1024)

    assert time.monotonic() - started < 3


# --- The real sandbox: needs root and namespaces ------------------------------------------


@needs_sandbox
def test_the_binary_runs_as_nobody_without_groups_capabilities_or_new_privileges(
    tmp_path: Path,
) -> None:
    program = stand_in(tmp_path, "exec setpriv --dump")

    assert "uid: 0" in unconfined(program).splitlines()  # run as the charm is: root
    dump = sandboxed_run(program).splitlines()

    assert {
        "uid: 65534",
        "euid: 65534",
        "gid: 65534",
        "egid: 65534",
        "Supplementary groups: [none]",
        "no_new_privs: 1",
        "Inheritable capabilities: [none]",
        "Ambient capabilities: [none]",
        "Capability bounding set: [none]",
    } <= set(dump), dump
    assert not any(line.startswith(("Effective", "Permitted")) for line in dump), dump


# Tries the machine's loopback TCP and an abstract unix socket, and lists the interfaces.
_NETWORK_PROBE = """
import errno, socket, sys
def attempt(family, address):
    try:
        with socket.socket(family) as s:
            s.settimeout(2)
            s.connect(address)
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
print(attempt(socket.AF_INET, ("127.0.0.1", PORT)))
print(attempt(socket.AF_UNIX, NAME))
print(" ".join(sorted(name for _, name in socket.if_nameindex())))
"""


@pytest.fixture
def listeners() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A TCP listener on the machine's loopback and an abstract unix one, as a service has."""
    tcp = socket.create_server(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(f"\0garm-sandbox-test-{secrets.token_hex(8)}")
    unix.listen()
    for listener in (tcp, unix):
        listener.settimeout(0.2)
    yield tcp, unix
    tcp.close()
    unix.close()


def accepted(listener: socket.socket) -> bool:
    try:
        listener.accept()[0].close()
    except TimeoutError:
        return False
    return True


@needs_sandbox
@needs_python
def test_the_binary_reaches_no_network_not_even_the_machines_loopback(
    tmp_path: Path, listeners: tuple[socket.socket, socket.socket]
) -> None:
    tcp, unix = listeners
    code = _NETWORK_PROBE.replace("PORT", str(tcp.getsockname()[1])).replace(
        "NAME", repr(unix.getsockname())
    )
    program = probe(tmp_path, code)

    assert unconfined(program).splitlines()[:2] == ["connected", "connected"]
    assert accepted(tcp) and accepted(unix)  # the probe does connect, where it can
    tcp_attempt, unix_attempt, interfaces = sandboxed_run(program).splitlines()

    assert tcp_attempt in ("ENETUNREACH", "ECONNREFUSED")
    assert unix_attempt == "ECONNREFUSED"
    assert interfaces == "lo"  # a namespace of its own: its loopback, down
    assert not accepted(tcp) and not accepted(unix)


# The sandbox's own /tmp, not the machine's.
_INSIDE_TMP = "/tmp/x"  # noqa: S108
# Says whether its /tmp file is there already, tries to write each path, lists the root.
_FILES_PROBE = f"""
import errno, os
print("{_INSIDE_TMP}-before", os.path.exists("{_INSIDE_TMP}"))
for path in PATHS:
    try:
        with open(path, "a") as f:
            f.write("x")
        print(path, "written")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
print("/", " ".join(sorted(os.listdir("/"))))
"""


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory nobody may read and write in on the machine (under /tmp, 1777)."""
    directory = Path(tempfile.mkdtemp(prefix="garm-sandbox-test-", dir="/tmp"))
    directory.chmod(0o1777)
    yield directory
    shutil.rmtree(directory)


@needs_sandbox
@needs_python
def test_the_binary_writes_nothing_but_its_own_tmp_which_does_not_last(shared: Path) -> None:
    outside = shared / "written-from-the-sandbox"
    targets = [outside, "/x", "/etc/x", "/usr/x", "/dev/x", "/check/garm", _INSIDE_TMP]
    program = probe(shared, _FILES_PROBE.replace("PATHS", repr([str(t) for t in targets])))
    nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")

    assert f"{outside} written" in unconfined(program, *nobody).splitlines()  # as nobody, it can
    outside.unlink()
    first = dict(line.split(" ", 1) for line in sandboxed_run(program).splitlines())
    again = dict(line.split(" ", 1) for line in sandboxed_run(program).splitlines())

    assert first.pop(f"{_INSIDE_TMP}-before") == "False"
    assert first.pop(_INSIDE_TMP) == "written"
    assert first.pop(str(outside)) == "ENOENT"  # the machine's file system is not there
    root = set(first.pop("/").split())
    assert first == {  # read-only, whatever the permissions; itself read-only to nobody
        "/x": "EROFS",
        "/etc/x": "EROFS",
        "/usr/x": "EROFS",
        "/dev/x": "EROFS",
        "/check/garm": "EACCES",
    }
    assert {"usr", "etc", "dev", "tmp", "check"} <= root
    assert not root & {"proc", "sys", "home", "root", "var", "run", "srv", "mnt", "snap"}
    assert not outside.exists()
    assert again[f"{_INSIDE_TMP}-before"] == "False"  # a fresh /tmp: the first run's is gone
    assert stat.S_IMODE(program.stat().st_mode) == 0o755 and program.read_bytes().startswith(b"#!")


@needs_sandbox
def test_the_binary_is_killed_at_the_timeout_with_all_it_started(tmp_path: Path) -> None:
    child, itself = (f"60.{secrets.randbelow(10**9):09d}" for _ in range(2))
    program = stand_in(tmp_path, f"sleep {child} & exec setsid sleep {itself}")
    started = time.monotonic()

    with pytest.raises(sandbox.Exceeded, match=r"^did not finish within 0.5s$"):
        sandbox.run(program, ("--version",), timeout=0.5, max_output=1024)

    assert time.monotonic() - started < 2
    assert running_with(child) == running_with(itself) == []  # gone already, not killed later


@needs_sandbox
@needs_python
def test_a_killed_sandbox_is_empty_once_the_run_returns(tmp_path: Path) -> None:
    """The kernel kills the rest of a PID namespace when its init dies, and takes its time
    with a process that has much memory to free; the run must not return before. Killing
    unshare rather than letting it reap its init returned while this one was exiting."""
    token = f"60.{secrets.randbelow(10**9):09d}"
    hoard = f"{PYTHON} -c 'import time; b = bytearray(512 << 20); time.sleep(60)' {token}"
    program = stand_in(tmp_path, f"{hoard} & exec sleep 60")
    seen: list[int] = []

    def find() -> None:
        deadline = time.monotonic() + 2.5
        while not seen and time.monotonic() < deadline:
            seen.extend(running_with(token))
            time.sleep(0.02)

    finder = threading.Thread(target=find)
    finder.start()
    with pytest.raises(sandbox.Exceeded, match=r"^did not finish within 3s$"):
        sandbox.run(program, ("--version",), timeout=3, max_output=1024)
    finder.join()

    assert seen, "the stand-in's child never ran"
    assert [pid for pid in seen if Path(f"/proc/{pid}").exists()] == []


@needs_sandbox
@pytest.mark.parametrize("stream", ["", ">&2"])
def test_huge_output_is_cut_at_the_bound(tmp_path: Path, stream: str) -> None:
    program = stand_in(tmp_path, f"exec /usr/bin/yes {stream}")
    started = time.monotonic()

    with pytest.raises(sandbox.Exceeded, match=r"^printed over 64 KiB$"):
        sandbox.run(program, ("--version",), timeout=10, max_output=64 << 10)

    assert time.monotonic() - started < 3


@needs_sandbox
def test_a_setup_that_fails_for_real_is_the_sandboxs_and_runs_nothing(tmp_path: Path) -> None:
    program = tmp_path / "garm"  # gone before the sandbox binds it

    with pytest.raises(sandbox.Unavailable, match=r"^the sandbox could not be made \(mount: "):
        sandbox.run(program, ("--version",), timeout=5, max_output=1024)


@needs_sandbox
def test_nothing_is_left_on_the_machine(tmp_path: Path) -> None:
    mounts = Path("/proc/self/mountinfo").read_text()
    program = stand_in(tmp_path / "work", "echo v0.2.1")

    assert sandboxed_run(program) == "v0.2.1\n"

    assert os.listdir(program.parent) == ["garm"]  # the mount point is removed
    assert Path("/proc/self/mountinfo").read_text() == mounts  # no mount reached the machine


def test_a_program_the_kernel_would_hand_to_sh_is_refused_before_it_runs(tmp_path: Path) -> None:
    # Runs anywhere: refused from its header. Run, the kernel would refuse it (ENOEXEC) and
    # setpriv's execvp(3) would then hand it to /bin/sh as a script.
    source = fake_garm(tmp_path / "juju" / "garm", head=b"echo pwned; exit 0\n")

    with pytest.raises(resources.ResourceError) as caught:
        resources.prepare("garm", source, tmp_path / "work")

    assert caught.value.reason == "it is not a program this machine can run (exec format error)"
