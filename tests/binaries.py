"""Stand-ins for GARM's release binaries, run for real by the charm's checks.

A shell script (the kernel runs ``#!`` files as it runs ELF ones) carrying, after its
``exit``, the Go build info a Go binary has: every check the charm makes on a resource
(archive, architecture, build info, ``--version``) meets a file as it would meet a release.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest

from garm import resources

GARM_MAIN = "github.com/cloudbase/garm/cmd/garm"
GARM_MODULE = "github.com/cloudbase/garm"
PROVIDER = "garm-provider-openstack"
PROVIDER_MAIN = PROVIDER_MODULE = "github.com/cloudbase/garm-provider-openstack"
# The user the tests have the checks run stand-ins as, standing for GARM's: one every Debian
# and Ubuntu machine has (base-passwd), neither root nor nobody.
CHECK_USER = "daemon"
# What every garm-provider-openstack release writes to stderr when run without GARM_COMMAND.
PROVIDER_REFUSAL = (
    "echo '2026/08/01 12:00:00 failed to validate execution environment: missing GARM_COMMAND'"
    " >&2; exit 1"
)
# runtime/debug's modinfo sentinels, around the build info text.
_SENTINEL_START = bytes.fromhex("3077af0c9274080241e1c107e6d618e6")
_SENTINEL_END = bytes.fromhex("f932433186182072008242104116d8f2")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def go_build_info(main: str, module: str, version: str) -> bytes:
    """The build info section of a Go >= 1.18 binary (``go version -m`` reads this)."""
    header = b"\xff Go buildinf:" + b"\x08\x02" + bytes(16)
    text = (
        f"path\t{main}\nmod\t{module}\t{version}\t\ndep\tgithub.com/spf13/cobra\tv1.9.1\th1:x=\n"
    )
    modinfo = _SENTINEL_START + text.encode() + _SENTINEL_END
    go = b"go1.25.0"
    return header + _uvarint(len(go)) + go + _uvarint(len(modinfo)) + modinfo


def fake_program(
    path: Path,
    body: str,
    *,
    main: str = GARM_MAIN,
    module: str = GARM_MODULE,
    version: str = "v0.2.1",
    head: bytes = b"#!/bin/sh\n",
) -> Path:
    """A runnable stand-in for a Go binary: ``body`` runs, the build info follows its exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = go_build_info(main, module, version)
    path.write_bytes(head + body.encode() + b"\nexit\n" + os.urandom(256) + blob)
    path.chmod(0o644)  # as Juju may hand it: the charm must not rely on it being executable
    return path


def fake_garm(
    path: Path, body: str = "echo v0.2.1", *, main: str = GARM_MAIN, head: bytes = b"#!/bin/sh\n"
) -> Path:
    return fake_program(path, body, main=main, head=head)


def fake_provider(path: Path, body: str = PROVIDER_REFUSAL, version: str = "v0.1.5") -> Path:
    return fake_program(path, body, main=PROVIDER_MAIN, module=PROVIDER_MODULE, version=version)


def running_with(argument: str) -> list[int]:
    """The pids of the machine's processes with ``argument`` among their arguments.

    How a test tells whether something a checked binary started still runs.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                arguments = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argument.encode() in arguments:
                found.append(int(entry.name))
    return found


@functools.cache
def checks_missing() -> str | None:
    """Why the checks (``garm.resources``) cannot run a stand-in as CHECK_USER here; None
    when they can.

    Asked of the machine by checking a stand-in, once: the charm must be root, and setpriv
    there and allowed to drop what it drops.
    """
    with tempfile.TemporaryDirectory() as directory:
        source = fake_garm(Path(directory) / "juju" / "garm")
        try:
            resources.prepare("garm", source, Path(directory) / "work", CHECK_USER)
        except resources.UncheckedError as exc:
            return exc.reason
    return None


def require_checks() -> None:
    """Skip the calling test, saying why, where the checks cannot run a stand-in."""
    reason = checks_missing()
    if reason is not None:
        pytest.skip(f"the checks cannot run a stand-in as {CHECK_USER} here: {reason}")
