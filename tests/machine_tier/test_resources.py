"""The resource check inside the machine, run by the charm's hook as Juju runs it.

What an operator may attach as ``garm``: a hostile archive (a member that climbs out of
the directory it is unpacked in, a ``garm`` that is a link to the machine's secrets), a
hostile binary (its ``--version`` tries to write root's files, to read the machine's
secrets, then hangs), and GARM's release archive. The first two are refused and leave
root's files as they were; the last is installed and GARM runs. The check runs the
binary as GARM's service would (docs/adr/0013): as ``garm``, so what that user may do
(write ``/tmp``, reach the network) it may do here too, and nothing more.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from pathlib import Path

from tests.binaries import fake_garm
from tests.machine_tier.hook import ATTACHED, SIMULATOR
from tests.machine_tier.tier import hook, show
from tests.nspawn import Machine

REFUSED = "Resource garm is not GARM: "
# Root's files the hostile archive and binary write, in the container.
ESCAPES = ("/etc/cron.d/garm-pwned", "/var/lib/garm-charm/escaped")
# Where the hostile binary copies the machine's secrets, if it can read them.
SHADOW_COPY = "/tmp/shadow-copy"  # noqa: S108
MARK = "60.424242"  # the hostile binary's sleep, found by its argument
HOSTILE = f"""
touch /var/lib/garm-charm/escaped 2>/dev/null
cat /etc/shadow >{SHADOW_COPY} 2>/dev/null
sleep {MARK} & exec sleep {MARK}"""


def _tgz(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o755
    return info


def attach(machine: Machine, data: bytes) -> None:
    """``juju attach-resource garm garm=<file>``: the unit is handed a new file."""
    path = machine.path(str(ATTACHED))
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_bytes(data)


def escaped(machine: Machine) -> str:
    return machine.sh(f"ls {' '.join(ESCAPES)} /usr/local/bin/garm 2>/dev/null || :").strip()


def test_a_hostile_archive_and_binary_are_refused_and_a_release_archive_is_installed(
    machine: Machine, tmp_path: Path
) -> None:
    attach(
        machine,
        _tgz(
            [
                (_member("../../../../etc/cron.d/garm-pwned"), b"* * * * * root id\n"),
                (_member("garm", tarfile.SYMTYPE, "/etc/shadow"), b""),
            ]
        ),
    )
    status = hook(machine, "install")
    print(f"hostile archive: {status}; written outside: {escaped(machine)!r}")
    assert status["status"] == "blocked" and status["message"].startswith(REFUSED)
    assert escaped(machine) == ""

    attach(machine, fake_garm(tmp_path / "hostile", HOSTILE).read_bytes())
    started = time.monotonic()
    status = hook(machine, "update-status")
    took = time.monotonic() - started
    left = machine.sh(f"pgrep -af {MARK} || :").strip()
    copy = machine.sh(f"stat -c '%U %s' {SHADOW_COPY} 2>/dev/null || :").strip()
    print(
        f"hostile binary: {status} after {took:.1f} s; written: {escaped(machine)!r}; "
        f"secrets copied (owner, bytes): {copy!r}; still running: {left!r}"
    )
    assert status["status"] == "blocked" and status["message"].startswith(REFUSED)
    assert "did not finish within" in status["message"]
    assert escaped(machine) == "" and left == ""
    assert copy in ("", "garm 0")  # it ran as garm, and read nothing of /etc/shadow

    release = fake_garm(tmp_path / "garm", SIMULATOR).read_bytes()
    attach(machine, _tgz([(_member("garm"), release)]))
    status = hook(machine, "update-status")
    unit = show(machine, "garm", "ActiveState")
    installed = machine.sh("sha256sum < /usr/local/bin/garm").split()[0]
    print(f"release archive: {status}; garm.service {unit['ActiveState']}")
    assert not status["message"].startswith(REFUSED)
    assert unit["ActiveState"] == "active"
    assert installed == hashlib.sha256(release).hexdigest()

    # The hostile binary, run as root rather than as the check runs it, does write to
    # root's files: the check above is what stopped it.
    hostile = machine.path("/root/hostile")
    hostile.write_bytes(fake_garm(tmp_path / "again", HOSTILE).read_bytes())
    machine.run(["/usr/bin/timeout", "2", "/bin/sh", "/root/hostile", "--version"], check=False)
    print(f"the hostile binary run as root wrote: {escaped(machine)!r}")
    assert "/var/lib/garm-charm/escaped" in escaped(machine)
