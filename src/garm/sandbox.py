"""Run a program the charm was handed, to check it, where it can do no harm: the sandbox.

An attached resource is the operator's file, and it is run before it is trusted
(``garm.resources``). The charm is root; the program must not be. It runs:

* as nobody (65534:65534), with no supplementary groups, ``no_new_privs`` (a setuid
  binary or file capabilities give it nothing), empty inheritable and bounding capability
  sets: ``setpriv(1)`` [1];
* in new mount, network, PID, IPC and UTS namespaces: ``unshare(1)`` [2]. The new network
  namespace holds only a loopback interface, down [3]: no address, no route, not even the
  machine's own loopback or its abstract unix sockets, which belong to a network
  namespace [3]. Mounts made in the private mount namespace never reach the machine
  [4]. The program is the PID namespace's init, so when it ends, or is killed, every
  process it started is killed with it [5];
* on a root of its own, read-only: a small tmpfs holding read-only binds (``nosuid``,
  ``nodev``) of ``/usr`` and ``/etc`` (the dynamic loader's cache; nothing there the
  user nobody could not read anyway), the ``/bin``-like links or directories, and the
  program itself at ``/check/<name>``, then remounted read-only [6]. ``/dev`` holds only
  ``null``, ``zero``, ``full``, ``random`` and ``urandom``, bound read-only (a device is
  still read and written through a read-only mount; a shell's ``&`` opens /dev/null).
  The only thing it can write is a private 8 MiB ``/tmp`` (``noexec``), gone with the
  namespace. There is no ``/proc``, ``/sys``, ``/home``, ``/root``, ``/var`` or ``/run``:
  nothing of Juju's or GARM's state is there to read. It is entered by ``chroot(8)``: the
  machine's mounts stay in the namespace, out of reach of a process without
  CAP_SYS_CHROOT that holds no descriptor of them [7] (``pivot_root`` would remove them,
  but unmounting the old root needs a ``/proc`` that is not there);
* with only ``ENV`` as its environment, stdin from /dev/null, its output bounded and its
  time too: past the deadline everything is killed (``_kill``).

The setup runs as root inside the new namespaces, as a fixed ``sh`` script (``_SCRIPT``;
the paths are its arguments, never part of it), then drops privileges once for ``true``
as a trial, says ``READY`` on stdout and only then ``exec``s the program. Whatever fails
before ``READY`` is the sandbox's (``Unavailable``), whatever after is the program's. When
the sandbox cannot be made (not root, a tool missing, the kernel refusing a namespace or
a mount), nothing is run: the caller refuses rather than run the program as root.

Why these tools: util-linux (``unshare``, ``setpriv``), ``mount`` and coreutils are on
every Ubuntu machine, need no daemon, and run the same in a test as on a unit.
``systemd-run`` with ``DynamicUser=``, ``PrivateNetwork=`` and ``ProtectSystem=strict``
would do as much, but only where systemd is PID 1 (not in the unit tests), with the
answer read back through the journal; bubblewrap is not installed by default.

[1] https://man7.org/linux/man-pages/man1/setpriv.1.html
[2] https://man7.org/linux/man-pages/man1/unshare.1.html
[3] https://man7.org/linux/man-pages/man7/network_namespaces.7.html
[4] https://man7.org/linux/man-pages/man7/mount_namespaces.7.html
[5] https://man7.org/linux/man-pages/man7/pid_namespaces.7.html
[6] https://man7.org/linux/man-pages/man8/mount.8.html (``-o remount,bind,ro``)
[7] https://man7.org/linux/man-pages/man2/chroot.2.html
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# The user the program runs as: nobody and nogroup on Ubuntu and Debian, by number so that
# no name is looked up.
NOBODY = 65534
# The whole environment of the setup and of the program: nothing of the charm's (secrets,
# JUJU_*, or a GARM_COMMAND that would make a provider act).
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
# What the sandbox is made with, beside coreutils.
TOOLS = ("unshare", "setpriv", "mount", "chroot", "sh")
# What the setup prints once the sandbox is made, before the program runs.
READY = b"sandbox ready\n"
# How long unshare may take to reap a killed sandbox, whose processes the kernel ends.
_REAPED_WITHIN = 5.0

_NAMESPACES = ("--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child")
# The privileges dropped, last. A change of user clears the parent-death signal that
# unshare's --kill-child set (prctl(2), PR_SET_PDEATHSIG): setpriv sets it again.
DROP = (
    "setpriv",
    f"--reuid={NOBODY}",
    f"--regid={NOBODY}",
    "--clear-groups",
    "--no-new-privs",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--pdeathsig=SIGKILL",
    "--",
)
_SCRIPT = f"""set -eu
root=$1 program=$2 name=$3
shift 3
ro() {{ mount --bind "$1" "$2"; mount -o remount,bind,ro,nosuid,nodev "$2"; }}
mount -t tmpfs -o size=1m,nr_inodes=64,mode=0755,nosuid,nodev sandbox "$root"
cd "$root"
mkdir usr etc dev tmp check
for top in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$top" ]; then ln -s "$(readlink "/$top")" "$top"
  elif [ -d "/$top" ]; then mkdir "$top"; ro "/$top" "$top"
  fi
done
ro /usr usr
ro /etc etc
for node in null zero full random urandom; do
  : > "dev/$node"
  mount --bind "/dev/$node" "dev/$node"
  mount -o remount,bind,ro,nosuid "dev/$node"
done
: > "check/$name"
ro "$program" "check/$name"
mount -t tmpfs -o size=8m,nr_inodes=1024,mode=1777,nosuid,nodev,noexec tmp tmp
mount -o remount,bind,ro,nosuid,nodev "$root"
chroot "$root" {" ".join(DROP)} true
printf '{READY.decode().strip()}\\n'
exec chroot "$root" {" ".join(DROP)} "/check/$name" "$@"
"""

Overrun = Literal["time", "output"]


@dataclass(frozen=True)
class Run:
    """How the program ended: its exit status (negative: killed by that signal), its output."""

    status: int
    stdout: bytes
    stderr: bytes


class Unavailable(Exception):  # noqa: N818 (a state of the machine, not a bug)
    """The sandbox cannot be made here, so the program was not run; ``str()`` says why."""


class Exceeded(Exception):  # noqa: N818 (the program's doing)
    """The program ran past its time or printed past its bound, and was killed."""


def command(program: Path, root: Path, args: Sequence[str]) -> list[str]:
    """The command that runs ``program args`` in the sandbox; ``root`` is an empty directory.

    ``root`` is the mount point of the sandbox's root, in its mount namespace only: on the
    machine it stays empty. ``program`` must be absolute; inside it is ``/check/<name>``.
    """
    if not program.is_absolute() or program.name in ("", ".", ".."):
        raise ValueError(f"not a program's absolute path: {program}")
    return [
        "unshare",
        *_NAMESPACES,
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        _SCRIPT,
        "sandbox",
        str(root),
        str(program),
        program.name,
        *args,
    ]


def unavailable() -> str | None:
    """Why the sandbox cannot be made here, before trying; None when it may be."""
    if os.geteuid() != 0:
        return f"the sandbox needs root, and this runs as uid {os.geteuid()}"
    missing = [tool for tool in TOOLS if shutil.which(tool, path=ENV["PATH"]) is None]
    if missing:
        return f"the sandbox needs {', '.join(missing)}, not found in {ENV['PATH']}"
    return None


def run(program: Path, args: Sequence[str], *, timeout: float, max_output: int) -> Run:
    """Run ``program args`` in the sandbox, killed past ``timeout`` seconds or ``max_output``.

    The mount point is a fresh directory beside ``program`` (the charm's own, root-only),
    removed afterwards. Raises Unavailable when the sandbox cannot be made (nothing was
    run), Exceeded when the program overran a bound.
    """
    reason = unavailable()
    if reason is not None:
        raise Unavailable(reason)
    program = program.absolute()
    try:
        root = Path(tempfile.mkdtemp(prefix=".sandbox-", dir=program.parent))
    except OSError as exc:
        raise Unavailable(f"the sandbox's mount point cannot be made ({exc.strerror})") from None
    try:
        return _contain(command(program, root, args), timeout, max_output)
    finally:
        with contextlib.suppress(OSError):
            root.rmdir()


def _contain(argv: list[str], timeout: float, max_output: int) -> Run:
    """Run the sandbox's command and judge how it went (see the module doc)."""
    try:
        process = subprocess.Popen(  # noqa: S603 (no shell of the caller's; a fixed script)
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            env=dict(ENV),
        )
    except OSError as exc:
        raise Unavailable(f"unshare cannot be run ({exc.strerror})") from None
    with process:
        stdout, stderr, overrun = _collect(process, time.monotonic() + timeout, max_output)
        if overrun is not None:
            _kill(process)
    if not stdout.startswith(READY):
        if overrun == "time":
            raise Unavailable(f"the sandbox was not ready within {timeout:g}s")
        said = stderr.decode("utf-8", "replace").strip() or f"status {process.returncode}"
        raise Unavailable(f"the sandbox could not be made ({said})")
    if overrun == "time":
        raise Exceeded(f"did not finish within {timeout:g}s")
    if overrun == "output":
        raise Exceeded(f"printed over {max_output >> 10} KiB")
    return Run(process.returncode, stdout[len(READY) :], stderr)


def _collect(
    process: subprocess.Popen[bytes], deadline: float, max_output: int
) -> tuple[bytes, bytes, Overrun | None]:
    """Both outputs of ``process`` until it exits or overruns the deadline or the bound.

    The pipes end when every process of the sandbox has ended: the namespace's init is the
    program, whose end ends them all.
    """
    assert process.stdout is not None and process.stderr is not None  # noqa: S101 (PIPE)
    streams = (process.stdout.fileno(), process.stderr.fileno())
    outputs = {fd: bytearray() for fd in streams}
    bounds = {streams[0]: len(READY) + max_output, streams[1]: max_output}
    overrun: Overrun | None = None
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and overrun is None:
            left = deadline - time.monotonic()
            if left <= 0:
                overrun = "time"
                break
            for key, _events in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                outputs[key.fd] += chunk
                if len(outputs[key.fd]) > bounds[key.fd]:
                    overrun = "output"
                    break
    if overrun is None:
        try:
            process.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            overrun = "time"
    return bytes(outputs[streams[0]]), bytes(outputs[streams[1]]), overrun


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill the sandbox's init, and return once every process in the sandbox is gone.

    The init is killed by its pid, not left to the parent-death signal, which the program
    may clear for itself. unshare is stopped first, so that it cannot reap its child while
    that child is looked for (a reaped pid may be another process's by the time it is
    killed). It is then let go on: it reaps the init and exits. The init's exit waits until
    the kernel has killed and reaped every other process of its namespace [5], so when
    unshare is gone nothing the program started is left. Killing unshare instead would
    return at once, with the namespace's last processes still exiting. Its output is no
    longer read: a word it writes about its child's end into a full pipe ends it
    (SIGPIPE), rather than blocking it. One that does not exit within ``_REAPED_WITHIN``
    is killed, as is one with no child (it has not forked yet).
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGSTOP)
    children = _children(process.pid)
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGCONT if children else signal.SIGKILL)
    try:
        process.wait(timeout=_REAPED_WITHIN)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, from /proc/<pid>/stat (proc(5))."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found
