"""The files an operator attaches as resources, bare or as a release archive, checked.

The stand-ins are real files run for real: a shell script (the kernel runs ``#!`` files as it
runs ELF ones) carrying after its ``exit`` the Go build info a Go binary has, so every check
(archive, architecture, build info, ``--version``) meets a file as it would meet a release.
They are run as GARM's user would be (``CHECK_USER``, through setpriv): the tests that run
one skip, saying why, where that cannot be done here (``needs_setpriv``). Each test that
claims the check stops something first shows, run otherwise, that the same stand-in
does it.
"""

from __future__ import annotations

import ctypes
import gzip
import io
import os
import platform
import pwd
import secrets
import shlex
import shutil
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest

from garm import resources
from garm.resources import GoBuild, Prepared, ResourceError
from tests.archives import long_names, raw_header, tar_bytes
from tests.binaries import (
    CHECK_USER,
    PROVIDER,
    PROVIDER_MAIN,
    PROVIDER_MODULE,
    PROVIDER_REFUSAL,
    fake_garm,
    fake_program,
    fake_provider,
    go_build_info,
    require_checks,
    running_with,
)


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def tar(path: Path, members: list[tuple], mode: Literal["w:gz", "w"] = "w:gz") -> Path:
    """A release-like archive: ``tar czf garm-linux-amd64.tgz garm`` by default."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def tree(root: Path, *, skip: Path | None = None) -> dict[str, bytes | None]:
    """Every path under ``root`` (contents for files), ``skip`` and what is under it aside."""
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        out[str(path.relative_to(root))] = path.read_bytes() if path.is_file() else None
    return out


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path / "work"


@pytest.fixture
def checkable() -> None:
    require_checks()


# For the tests that run a stand-in: where it cannot be run as CHECK_USER, they skip.
needs_setpriv = pytest.mark.usefixtures("checkable")


@pytest.fixture
def garm_bytes(tmp_path: Path) -> bytes:
    return fake_garm(tmp_path / "build" / "garm").read_bytes()


def refusal(
    resource: str, source: Path, work: Path, *, timeout: float = 5.0
) -> tuple[ResourceError, float]:
    started = time.monotonic()
    with pytest.raises(ResourceError) as caught:
        resources.prepare(resource, source, work, CHECK_USER, timeout=timeout)
    return caught.value, time.monotonic() - started


# --- Both forms are accepted ---------------------------------------------------------------


@needs_setpriv
def test_a_bare_garm_binary_is_copied_into_the_work_dir_and_its_version_read(
    tmp_path: Path, work: Path
) -> None:
    source = fake_garm(tmp_path / "juju" / "garm")
    before = source.read_bytes()

    prepared = resources.prepare("garm", source, work, CHECK_USER)

    assert prepared == Prepared(work / "garm", "v0.2.1")
    assert prepared.path.read_bytes() == before
    assert stat.S_IMODE(prepared.path.stat().st_mode) == 0o755
    assert source.read_bytes() == before
    assert stat.S_IMODE(source.stat().st_mode) == 0o644  # Juju's file is left as it was
    assert sorted(os.listdir(work)) == ["garm"]


@needs_setpriv
def test_the_release_archive_is_unpacked_whatever_the_file_is_called(
    tmp_path: Path, work: Path, garm_bytes: bytes
) -> None:
    # Juju names the file after charmcraft.yaml's filename: "garm", not "garm-linux-amd64.tgz".
    source = tar(tmp_path / "juju" / "garm", [member("garm", garm_bytes)])

    prepared = resources.prepare("garm", source, work, CHECK_USER)

    assert prepared == Prepared(work / "garm", "v0.2.1")
    assert prepared.path.read_bytes() == garm_bytes
    assert stat.S_IMODE(prepared.path.stat().st_mode) == 0o755  # 0644 in the archive
    assert sorted(os.listdir(work)) == ["garm"]


@needs_setpriv
def test_an_archive_with_a_directory_and_garm_cli_beside_garm_yields_garm(
    tmp_path: Path, work: Path, garm_bytes: bytes
) -> None:
    cli = fake_garm(tmp_path / "build" / "garm-cli", main="github.com/cloudbase/garm/cmd/garm-cli")
    source = tar(
        tmp_path / "juju" / "garm",
        [
            member("garm-v0.2.1", kind=tarfile.DIRTYPE),
            member("garm-v0.2.1/garm-cli", cli.read_bytes()),
            member("garm-v0.2.1/garm", kind=tarfile.DIRTYPE),  # a directory named garm is skipped
            member("garm-v0.2.1/garm/garm", garm_bytes),
        ],
    )

    prepared = resources.prepare("garm", source, work, CHECK_USER)

    assert prepared.version == "v0.2.1"
    assert prepared.path.read_bytes() == garm_bytes


@needs_setpriv
def test_an_uncompressed_tar_is_read_too(tmp_path: Path, work: Path, garm_bytes: bytes) -> None:
    source = tar(tmp_path / "juju" / "garm", [member("garm", garm_bytes)], mode="w")

    assert resources.prepare("garm", source, work, CHECK_USER).version == "v0.2.1"


@needs_setpriv
@pytest.mark.parametrize("archived", [False, True], ids=["bare", "archive"])
def test_the_provider_is_accepted_bare_or_archived_with_its_build_version(
    tmp_path: Path, work: Path, archived: bool
) -> None:
    binary = fake_provider(tmp_path / "build" / PROVIDER)
    source = (
        tar(tmp_path / "juju" / PROVIDER, [member(PROVIDER, binary.read_bytes())])
        if archived
        else binary
    )

    assert resources.prepare(PROVIDER, source, work, CHECK_USER) == Prepared(
        work / PROVIDER, "v0.1.5"
    )


@needs_setpriv
def test_a_provider_build_without_a_stamped_version_is_accepted_without_one(
    tmp_path: Path, work: Path
) -> None:
    source = fake_provider(tmp_path / "juju" / PROVIDER, version="(devel)")

    assert resources.prepare(PROVIDER, source, work, CHECK_USER) == Prepared(work / PROVIDER, None)


@needs_setpriv
def test_a_provider_that_one_day_answers_version_is_taken_at_its_word(
    tmp_path: Path, work: Path
) -> None:
    source = fake_provider(tmp_path / "juju" / PROVIDER, body="echo v0.2.0")

    assert resources.prepare(PROVIDER, source, work, CHECK_USER).version == "v0.2.0"


@needs_setpriv
def test_preparing_again_replaces_the_binary_and_leaves_nothing_else(
    tmp_path: Path, work: Path
) -> None:
    resources.prepare("garm", fake_garm(tmp_path / "a" / "garm"), work, CHECK_USER)
    second = fake_garm(tmp_path / "b" / "garm", body="echo v0.2.2")

    assert resources.prepare("garm", second, work, CHECK_USER) == Prepared(work / "garm", "v0.2.2")
    assert sorted(os.listdir(work)) == ["garm"]


# --- The run is contained ------------------------------------------------------------------


@needs_setpriv
def test_the_binary_runs_with_a_minimal_environment_no_stdin_and_only_its_flag(
    tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GARM_COMMAND", "GetVersion")
    monkeypatch.setenv("JUJU_SECRET_THING", "hunter2")
    # The stand-in answers its version only when run as garm should be; else it says why.
    body = """
if read -r line; then echo "stdin: $line" >&2; exit 1; fi
[ "$# $1" = "1 --version" ] || { echo "arguments: $*" >&2; exit 1; }
extra=$(env | grep -v -e ^PATH= -e ^LC_ALL= -e ^PWD= -e ^SHLVL= -e ^_= -e ^OLDPWD=)
[ -z "$extra" ] || { echo "environment: $extra" >&2; exit 1; }
[ "$(pwd)" = / ] || { echo "directory: $(pwd)" >&2; exit 1; }
echo v0.2.1"""
    source = fake_garm(tmp_path / "juju" / "garm", body=body)

    assert resources.prepare("garm", source, work, CHECK_USER, timeout=5).version == "v0.2.1"


@needs_setpriv
def test_a_binary_that_hangs_is_refused_within_the_timeout_and_killed_with_its_children(
    tmp_path: Path, work: Path
) -> None:
    # A child, and the binary itself turned hostile: it clears its parent-death signal and
    # leaves the process group, so that only killing it by pid ends it. Each sleep is found
    # by its argument, from here.
    child, itself = (f"60.{secrets.randbelow(10**9):09d}" for _ in range(2))
    body = f"sleep {child} & exec setpriv --pdeathsig clear -- setsid sleep {itself}"
    source = fake_garm(tmp_path / "juju" / "garm", body=body)
    seen: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set() and len(seen) < 2:
            seen.update(token for token in (child, itself) if running_with(token))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        error, took = refusal("garm", source, work, timeout=1)
    finally:
        stop.set()
        watcher.join()

    assert "did not finish within 1s" in error.reason
    assert took < 3
    assert seen == {child, itself}, "they never ran: the test would prove nothing"
    deadline = time.monotonic() + 3
    while (running_with(child) or running_with(itself)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_with(child) == running_with(itself) == []


@needs_setpriv
@pytest.mark.parametrize("stream", ["", ">&2"], ids=["stdout", "stderr"])
def test_a_binary_that_floods_its_output_is_refused_without_reading_it_all(
    tmp_path: Path, work: Path, stream: str
) -> None:
    body = f"while :; do echo v0.2.1 {stream}; done"
    source = fake_garm(tmp_path / "juju" / "garm", body=body)

    error, took = refusal("garm", source, work, timeout=5)

    assert "printed over 64 KiB" in error.reason
    assert took < 3


def answers_only_if(conditions: dict[str, str]) -> str:
    """A stand-in's body: its version if every shell test holds, else the first that fails."""
    tests = [
        f"{test} || {{ echo 'not {name}' >&2; exit 1; }}" for name, test in conditions.items()
    ]
    return "\n".join([*tests, "echo v0.2.1"])


def unconfined(program: Path) -> subprocess.CompletedProcess[bytes]:
    """``program --version`` run as the tests run (root, where the stand-ins run)."""
    return subprocess.run(["/bin/sh", str(program), "--version"], capture_output=True, check=False)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory everyone may write in (under /tmp, 1777), as the machine's /tmp is."""
    directory = Path(tempfile.mkdtemp(prefix="garm-check-test-", dir="/tmp"))
    directory.chmod(0o1777)
    yield directory
    shutil.rmtree(directory)


@needs_setpriv
def test_the_binary_runs_as_garms_user_with_its_groups_and_no_way_to_more(
    tmp_path: Path, work: Path
) -> None:
    user = pwd.getpwnam(CHECK_USER)
    groups = ",".join(str(g) for g in sorted(set(os.getgrouplist(CHECK_USER, user.pw_gid))))
    wanted = [
        f"uid: {user.pw_uid}",
        f"euid: {user.pw_uid}",
        f"gid: {user.pw_gid}",
        f"egid: {user.pw_gid}",
        f"Supplementary groups: {groups}",  # as systemd's User= sets them (initgroups)
        "no_new_privs: 1",
        "Inheritable capabilities: [none]",
        "Ambient capabilities: [none]",
        "Capability bounding set: [none]",
    ]
    body = "dump=$(setpriv --dump)\n" + answers_only_if(
        {line: f'echo "$dump" | grep -qxF {shlex.quote(line)}' for line in wanted}
    )
    source = fake_garm(tmp_path / "juju" / "garm", body=body)
    assert unconfined(source).stderr == f"not uid: {user.pw_uid}\n".encode()  # as root

    assert resources.prepare("garm", source, work, CHECK_USER).version == "v0.2.1"


@needs_setpriv
def test_the_binary_runs_in_the_machines_namespaces_as_garm_does(
    tmp_path: Path, work: Path
) -> None:
    # No namespace and no mount is made for the check: it runs wherever GARM itself runs
    # (an LXD container that refuses them too).
    kinds = ("mnt", "net", "pid", "ipc", "uts", "user", "cgroup")
    ours = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in kinds}
    body = answers_only_if(
        {
            f"{kind} {ns}": f'[ "$(readlink /proc/self/ns/{kind})" = "{ns}" ]'
            for kind, ns in ours.items()
        }
    )
    source = fake_garm(tmp_path / "juju" / "garm", body=body)

    assert resources.prepare("garm", source, work, CHECK_USER).version == "v0.2.1"


def writes_none_of(targets: list[Path]) -> str:
    """A stand-in's body: its version if it can append to none of ``targets``."""
    return answers_only_if(
        {f"wrote {t}": f"! (echo x >> {shlex.quote(str(t))}) 2>/dev/null" for t in targets}
    )


@needs_setpriv
def test_the_binary_writes_nothing_of_roots_nor_its_own_file(
    tmp_path: Path, work: Path, shared: Path
) -> None:
    roots = shared / "roots"
    roots.write_text("kept\n")  # 0644, root's, in a directory anyone may write in
    owned = shared / "owned"
    owned.mkdir(mode=0o755)  # root's
    outside = [roots, owned / "new"]
    demo = fake_garm(tmp_path / "demo" / "garm", body=writes_none_of(outside))
    assert unconfined(demo).stderr == f"not wrote {roots}\n".encode()  # as root, it can
    roots.write_text("kept\n")
    (owned / "new").unlink(missing_ok=True)
    # And the charm's work dir and /etc: the binary knows its file only by a descriptor.
    targets = [*outside, work / "garm", work / "new", Path("/etc/garm-check-test")]
    source = fake_garm(tmp_path / "juju" / "garm", body=writes_none_of(targets))

    prepared = resources.prepare("garm", source, work, CHECK_USER)

    assert prepared.version == "v0.2.1"
    assert roots.read_text() == "kept\n"
    assert os.listdir(owned) == []
    assert sorted(os.listdir(work)) == ["garm"]
    assert prepared.path.read_bytes() == source.read_bytes()
    assert not Path("/etc/garm-check-test").exists()


@needs_setpriv
def test_a_setuid_root_program_gives_the_binary_nothing(
    tmp_path: Path, work: Path, shared: Path
) -> None:
    id_program = shutil.which("id")
    assert id_program is not None
    setuid_id = shared / "id"
    shutil.copyfile(id_program, setuid_id)
    setuid_id.chmod(0o4755)  # root's: whoever runs it is root, unless no_new_privs
    as_user = ("setpriv", f"--reuid={CHECK_USER}", f"--regid={CHECK_USER}", "--clear-groups")
    escalated = subprocess.run([*as_user, str(setuid_id), "-u"], capture_output=True, check=True)
    if escalated.stdout != b"0\n":
        pytest.skip(f"a setuid program gives nothing here anyway ({shared} is nosuid)")
    uid = pwd.getpwnam(CHECK_USER).pw_uid
    body = answers_only_if({"escalated": f'[ "$({setuid_id} -u)" = {uid} ]'})
    source = fake_garm(tmp_path / "juju" / "garm", body=body)

    assert resources.prepare("garm", source, work, CHECK_USER).version == "v0.2.1"


@needs_setpriv
def test_nothing_the_binary_started_runs_once_the_check_returns(
    tmp_path: Path, work: Path, shared: Path
) -> None:
    # A daemon as a binary would start one: out of the binary's session, its output closed,
    # orphaned at once. The binary answers only once it runs.
    token = f"60.{secrets.randbelow(10**9):09d}"
    started = shared / "started"
    daemon = f"touch {started}; exec sleep {token}"
    body = f"""(setsid sh -c {shlex.quote(daemon)} </dev/null >/dev/null 2>&1 &)
while [ ! -e {started} ]; do sleep 0.01; done
echo v0.2.1"""
    source = fake_garm(tmp_path / "juju" / "garm", body=body)

    assert resources.prepare("garm", source, work, CHECK_USER).version == "v0.2.1"

    assert started.exists(), "the daemon never ran: the test would prove nothing"
    assert running_with(token) == []
    libc = ctypes.CDLL(None)
    subreaper = ctypes.c_int(-1)
    assert libc.prctl(37, ctypes.byref(subreaper), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    assert subreaper.value == 0  # the charm adopts orphans only while a check runs


def test_where_the_charm_is_not_root_the_binary_is_not_run_and_checked_again(
    tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = tmp_path / "ran"
    source = fake_garm(tmp_path / "juju" / "garm", body=f"touch {ran}; echo v0.2.1")
    monkeypatch.setattr(resources.os, "geteuid", lambda: 1000)

    with pytest.raises(resources.UncheckedError) as caught:
        resources.prepare_once("garm", source, work, CHECK_USER)

    assert isinstance(caught.value, ResourceError)  # what the pass turns to blocked
    assert caught.value.status_line("garm") == (
        f"Resource garm cannot be checked on this machine: running it as {CHECK_USER} needs"
        " root, and the charm runs as uid 1000; an attached binary is run only as GARM's"
        " user, never as root"
    )
    assert not ran.exists()
    assert not (work / "garm.checked").exists()  # not noted: the next pass checks it again


@pytest.fixture
def tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Root, and an empty directory as the whole PATH the check runs setpriv from."""
    directory = tmp_path / "tools"
    directory.mkdir()
    monkeypatch.setattr(resources.os, "geteuid", lambda: 0)
    monkeypatch.setitem(resources.ENV, "PATH", str(directory))
    return directory


def test_without_setpriv_the_binary_is_not_run(tmp_path: Path, work: Path, tools: Path) -> None:
    ran = tmp_path / "ran"
    source = fake_garm(tmp_path / "juju" / "garm", body=f"touch {ran}; echo v0.2.1")

    with pytest.raises(resources.UncheckedError) as caught:
        resources.prepare("garm", source, work, CHECK_USER)

    assert caught.value.reason == f"setpriv (util-linux) is not found in {tools}"
    assert not ran.exists()


def test_without_the_user_the_binary_is_not_run(tmp_path: Path, work: Path, tools: Path) -> None:
    (tools / "setpriv").write_text("#!/bin/sh\nexit 99\n")
    (tools / "setpriv").chmod(0o755)

    with pytest.raises(resources.UncheckedError) as caught:
        resources.prepare("garm", fake_garm(tmp_path / "juju" / "garm"), work, "no-such-user")

    assert caught.value.reason == "there is no user no-such-user"


def test_a_kernel_that_refuses_setpriv_is_named_and_not_blamed_on_the_binary(
    tmp_path: Path, work: Path, tools: Path
) -> None:
    refused = "setpriv: setresuid failed: Operation not permitted"
    (tools / "setpriv").write_text(f"#!/bin/sh\necho '{refused}' >&2; exit 127\n")
    (tools / "setpriv").chmod(0o755)

    with pytest.raises(resources.UncheckedError) as caught:
        resources.prepare("garm", fake_garm(tmp_path / "juju" / "garm"), work, CHECK_USER)

    assert caught.value.reason == f"setpriv cannot run a program as {CHECK_USER} ({refused})"
    assert os.listdir(work) == ["garm"]  # unpacked, checked no further


# --- Wrong files are refused, naming the resource ------------------------------------------


@needs_setpriv
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("true", "`garm --version` printed nothing, not a version"),
        ("echo 'garm version v0.2.1'", "printed 'garm version v0.2.1', not a version"),
        ("echo v0.2.1; echo v0.2.2", "printed 'v0.2.1 v0.2.2', not a version"),
        ("echo 0.2.1", "printed '0.2.1', not a version"),
        ("echo 'Error: unknown flag: --version' >&2; exit 1", "exited with status 1: Error: unk"),
    ],
)
def test_a_garm_that_does_not_answer_with_its_version_is_refused(
    tmp_path: Path, work: Path, body: str, reason: str
) -> None:
    error, _ = refusal("garm", fake_garm(tmp_path / "juju" / "garm", body=body), work)

    assert error.resource == "garm"
    assert reason in error.reason


@needs_setpriv
def test_a_garm_that_crashes_is_refused_naming_the_signal(tmp_path: Path, work: Path) -> None:
    body = "kill -SEGV $$"

    error, _ = refusal("garm", fake_garm(tmp_path / "juju" / "garm", body=body), work)

    assert error.reason == "`garm --version` was killed by signal 11"


@needs_setpriv
def test_a_silent_failure_is_reported_without_a_dangling_colon(tmp_path: Path, work: Path) -> None:
    error, _ = refusal("garm", fake_garm(tmp_path / "juju" / "garm", body="exit 3"), work)

    assert error.reason == "`garm --version` exited with status 3"


@needs_setpriv
def test_the_status_line_names_the_resource_and_says_what_to_attach(
    tmp_path: Path, work: Path
) -> None:
    error, _ = refusal("garm", fake_garm(tmp_path / "juju" / "garm", body="true"), work)

    # Attached to the application as deployed, whatever its name.
    assert error.status_line("garm-ci") == (
        "Resource garm is not GARM: `garm --version` printed nothing, not a version;"
        " attach a GARM release binary or archive (juju attach-resource garm-ci garm=<file>)"
    )


@needs_setpriv
def test_binary_garbage_is_never_echoed_whole(tmp_path: Path, work: Path) -> None:
    body = r"printf 'v\000\377\033[31m'; yes x | head -c 20000 | tr -d '\n'"
    error, _ = refusal("garm", fake_garm(tmp_path / "juju" / "garm", body=body), work)

    assert "not a version" in error.reason
    assert error.status_line("garm").isprintable()
    assert len(error.reason) < 130
    assert "xxx..." in error.reason


def test_garm_cli_attached_as_garm_is_refused_before_it_runs(tmp_path: Path, work: Path) -> None:
    ran = tmp_path / "ran"
    cli = fake_garm(
        tmp_path / "juju" / "garm",
        body=f"touch {ran}; echo v0.2.1",
        main="github.com/cloudbase/garm/cmd/garm-cli",
    )

    error, _ = refusal("garm", cli, work)

    assert error.reason == "it is built from github.com/cloudbase/garm/cmd/garm-cli"
    assert not ran.exists()


def test_garm_attached_as_the_provider_is_refused(tmp_path: Path, work: Path) -> None:
    error, _ = refusal(PROVIDER, fake_garm(tmp_path / "juju" / PROVIDER), work)

    assert error.resource == PROVIDER
    assert "built from github.com/cloudbase/garm/cmd/garm" in error.reason
    line = error.status_line("garm")
    assert line.startswith(f"Resource {PROVIDER} is not {PROVIDER}: ")
    assert f"juju attach-resource garm {PROVIDER}=<file>" in line


def test_another_garm_provider_is_refused_as_the_openstack_one(tmp_path: Path, work: Path) -> None:
    lxd = "github.com/cloudbase/garm-provider-lxd"
    source = fake_program(tmp_path / "juju" / PROVIDER, PROVIDER_REFUSAL, main=lxd, module=lxd)

    error, _ = refusal(PROVIDER, source, work)

    assert error.reason == f"it is built from {lxd}"


@needs_setpriv
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("echo 'usage: whatever' >&2; exit 2", "exited with status 2 without asking for GARM_C"),
        ("echo hello", "printed 'hello' and exited 0 instead of asking for GARM_COMMAND"),
    ],
)
def test_a_provider_that_does_not_speak_garms_protocol_is_refused(
    tmp_path: Path, work: Path, body: str, reason: str
) -> None:
    error, _ = refusal(PROVIDER, fake_provider(tmp_path / "juju" / PROVIDER, body=body), work)

    assert reason in error.reason


def test_a_system_binary_that_is_not_go_is_refused(tmp_path: Path, work: Path) -> None:
    true = shutil.which("true")
    assert true is not None
    source = tmp_path / "juju" / "garm"
    source.parent.mkdir()
    shutil.copyfile(true, source)

    error, _ = refusal("garm", source, work)

    assert error.reason == "it is not a Go program (it has no Go build info)"


def test_random_bytes_are_refused(tmp_path: Path, work: Path) -> None:
    source = tmp_path / "juju" / "garm"
    source.parent.mkdir()
    source.write_bytes(b"\x00\x01" + os.urandom(4096))

    error, _ = refusal("garm", source, work)

    assert error.reason == "it is not a Go program (it has no Go build info)"


def test_a_file_the_kernel_cannot_run_is_refused(tmp_path: Path, work: Path) -> None:
    source = fake_garm(tmp_path / "juju" / "garm", head=b"\x00\x01not a program\n")

    error, _ = refusal("garm", source, work)

    assert error.reason == "it is not a program this machine can run (exec format error)"


def _elf_header(machine: int) -> bytes:
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"  # 64-bit, little-endian
    header[18:20] = machine.to_bytes(2, "little")
    return bytes(header)


def test_a_binary_for_another_architecture_is_refused_naming_both(
    tmp_path: Path, work: Path
) -> None:
    here = resources.host_arch()
    if here is None:
        pytest.skip(f"{platform.machine()} is not a Go architecture")
    other, machine = ("arm64", 183) if here != "arm64" else ("amd64", 62)
    source = fake_garm(tmp_path / "juju" / "garm", head=_elf_header(machine))

    error, _ = refusal("garm", source, work)

    assert error.reason == f"it is built for {other}, this machine is {here}"


# --- Hostile and wrong archives ------------------------------------------------------------


def _too_large_header() -> bytes:
    """A tgz whose garm claims 600 MiB and holds none of it: refused from the header."""
    info = tarfile.TarInfo("garm")
    info.size = 600 << 20
    return gzip.compress(info.tobuf(format=tarfile.GNU_FORMAT) + bytes(1024))


ARCHIVES: dict[str, tuple[Callable[[Path, bytes], Path], str]] = {
    "traversal": (
        lambda p, b: tar(p, [member("../garm", b)]),
        "the archive holds an unsafe path: ../garm",
    ),
    "traversal-after-garm": (
        lambda p, b: tar(p, [member("garm", b), member("bin/../../escaped", b)]),
        "the archive holds an unsafe path: bin/../../escaped",
    ),
    "absolute": (
        lambda p, b: tar(p, [member("/usr/local/bin/garm", b)]),
        "the archive holds an unsafe path: /usr/local/bin/garm",
    ),
    "symlink": (
        lambda p, b: tar(p, [member("garm", kind=tarfile.SYMTYPE, link="/bin/sh")]),
        "garm in the archive is a symlink, not a file",
    ),
    "hardlink": (
        lambda p, b: tar(p, [member("x", b), member("garm", kind=tarfile.LNKTYPE, link="x")]),
        "garm in the archive is a hard link, not a file",
    ),
    "device": (
        lambda p, b: tar(p, [member("garm", kind=tarfile.CHRTYPE)]),
        "garm in the archive is a device or fifo, not a file",
    ),
    "too-large": (
        lambda p, b: _write(p, _too_large_header()),
        "garm in the archive is too large",
    ),
    "without-garm": (
        lambda p, b: tar(p, [member("garm-cli", b), member("README.md", b"hi"), member("d/x")]),
        "the archive holds no garm (it holds garm-cli, README.md, x)",
    ),
    "many-without-garm": (
        lambda p, b: tar(p, [member(f"f{i}", b"") for i in range(5)]),
        "the archive holds no garm (it holds f0, f1, f2 and 2 more)",
    ),
    "empty-archive": (
        lambda p, b: tar(p, []),
        "the archive holds no garm (it is empty)",
    ),
    "two-garms": (
        lambda p, b: tar(p, [member("a/garm", b), member("b/garm", b)]),
        "the archive holds 2 files named garm",
    ),
    "too-many-members": (
        lambda p, b: tar(p, [member(f"f{i}", b"") for i in range(101)] + [member("garm", b)]),
        "the archive holds over 100 files",
    ),
    "gzip-not-tar": (
        lambda p, b: _write(p, gzip.compress(b)),
        "it is not a readable tar archive",
    ),
    "truncated": (
        lambda p, b: _write(p, _tgz_bytes(b)[:200]),
        "it is not a readable tar archive",
    ),
    "bad-crc": (
        lambda p, b: _write(p, _bad_crc(b)),
        "it is not a readable tar archive",
    ),
    "zip": (
        lambda p, b: _zip(p, b),
        "it is a zip archive (GARM zips only Windows builds)",
    ),
    "empty-file": (
        lambda p, b: _write(p, b""),
        "the file is empty",
    ),
    # 22 kB that once raised RecursionError from tarfile: a chain of GNU long names.
    "long-name-chain": (
        lambda p, b: _write(p, gzip.compress(long_names(2000) + tar_bytes(b))),
        "the archive holds a chain of extended headers",
    ),
    # One long-name header that says it is 1 GiB: refused before a byte of it is read.
    "huge-long-name": (
        lambda p, b: _write(p, gzip.compress(raw_header("././@LongLink", 1 << 30, b"L"))),
        "the archive holds an extended header too large to read",
    ),
    "huge-pax-header": (
        lambda p, b: _write(p, gzip.compress(raw_header("pax", 512 << 20, b"x"))),
        "the archive holds an extended header too large to read",
    ),
    "size-not-a-number": (
        lambda p, b: _write(p, gzip.compress(raw_header("garm", 0, b"0", field=b"0000009z"))),
        "a header's size is not a number",
    ),
}


def _bad_crc(binary: bytes) -> bytes:
    """A damaged release archive (a bad download) whose gzip CRC-32 is wrong.

    Python's gzip reports that as BadGzipFile, an OSError, when the reader reaches the
    trailer; the tar here has no end-of-archive blocks, so reading its headers does.
    """
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        info = tarfile.TarInfo("garm")
        info.size, info.mode = len(binary), 0o755
        archive.addfile(info, io.BytesIO(binary))
    raw = data.getvalue()[: 512 + (len(binary) + 511) // 512 * 512]
    packed = gzip.compress(raw)
    return packed[:-8] + bytes(b ^ 0xFF for b in packed[-8:-4]) + packed[-4:]


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _tgz_bytes(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info, payload = member("garm", data)
        archive.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def _zip(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("garm", data)
    return path


@pytest.mark.parametrize("case", ARCHIVES)
def test_a_wrong_or_hostile_archive_is_refused_and_nothing_is_written(
    tmp_path: Path, work: Path, garm_bytes: bytes, case: str
) -> None:
    build, expected = ARCHIVES[case]
    source = build(tmp_path / "juju" / "garm", garm_bytes)
    before = tree(tmp_path, skip=work)

    error, _ = refusal("garm", source, work)

    assert error.resource == "garm"
    assert expected in error.reason
    assert error.status_line("garm").startswith("Resource garm is not GARM: ")
    assert tree(tmp_path, skip=work) == before  # nothing written outside the work dir
    assert os.listdir(work) == []  # and no partial binary in it


def test_a_bare_file_over_the_size_limit_is_refused_leaving_nothing(
    tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = fake_garm(tmp_path / "juju" / "garm")
    monkeypatch.setattr(resources, "MAX_BINARY_BYTES", source.stat().st_size - 1)

    error, _ = refusal("garm", source, work)

    assert error.reason == "it is larger than 0 MiB"
    assert os.listdir(work) == []


def test_an_unknown_resource_is_a_bug_not_a_status(tmp_path: Path, work: Path) -> None:
    with pytest.raises(ValueError, match="no such resource"):
        resources.prepare("garm-cli", fake_garm(tmp_path / "garm-cli"), work, CHECK_USER)


# --- The pure parts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["v0.1.6\n", "v0.2.0-beta1", "v0.2.1-3-gabcdef0-dirty", "v0.1.5+dirty", "v0.0.0-unknown"],
)
def test_versions_garm_prints_are_read(text: str) -> None:
    assert resources.parse_version(text) == text.strip()


@pytest.mark.parametrize(
    "text",
    ["", "0.1.6", "v1.2", "garm v0.1.6", "v0.1.6\nv0.1.7", "(devel)", "v1.2.3-" + "a" * 60],
)
def test_anything_else_is_not_a_version(text: str) -> None:
    assert resources.parse_version(text) is None


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"", "empty"),
        (b"\x1f\x8b\x08\x00", "tar.gz"),
        (bytes(257) + b"ustar\x0000", "tar"),
        (b"PK\x03\x04", "zip"),
        (b"\x7fELF\x02\x01\x01", "binary"),
        (b"#!/bin/sh\n", "binary"),
    ],
)
def test_the_kind_of_a_file_is_read_from_its_content(head: bytes, kind: str) -> None:
    assert resources.content_kind(head) == kind


@pytest.mark.parametrize(
    ("head", "arch"),
    [
        (_elf_header(62), "amd64"),
        (_elf_header(183), "arm64"),
        (b"\x7fELF\x02\x02" + bytes(12) + (21).to_bytes(2, "big"), "ppc64"),
        (b"\x7fELF\x02\x01" + bytes(12) + (21).to_bytes(2, "little"), "ppc64le"),
        (_elf_header(9999), None),
        (b"\x7fELF", None),
        (b"#!/bin/sh\n" + bytes(20), None),
    ],
)
def test_the_architecture_of_an_elf_binary_is_read_from_its_header(
    head: bytes, arch: str | None
) -> None:
    assert resources.elf_arch(head) == arch


def test_the_build_info_is_found_wherever_it_lies_past_false_starts(tmp_path: Path) -> None:
    blob = go_build_info(PROVIDER_MAIN, PROVIDER_MODULE, "v0.1.5")
    # A part of the magic, and the whole magic with no module info after it.
    false_starts = b"\xff Go" + b"\xff Go buildinf:" + bytes(5000)
    for shift in range(0, 70, 7):
        path = _write(tmp_path / f"bin{shift}", os.urandom(shift) + false_starts + blob)
        assert resources.go_build(path) == GoBuild(PROVIDER_MAIN, "v0.1.5"), shift


def test_a_real_go_binary_on_this_machine_has_its_build_info_read() -> None:
    for candidate in ("kubectl", "terraform", "kpt", "docker", "go", "juju", "lxc"):
        found = shutil.which(candidate)
        build = resources.go_build(Path(found)) if found else None
        if build is not None:
            break
    else:
        pytest.skip("no Go binary on this machine")
    assert build.main_package.count("/") >= 2, build
