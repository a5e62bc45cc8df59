"""Turn the files attached as the ``garm`` and ``garm-provider-openstack`` resources into binaries.

What is accepted and checked, and the status a wrong file gives, is docs/reference/files.md
(Binaries); how the file is run, ADR 0013. A release archive (each project's
``scripts/make-release.sh``) is a gzip'ed tar holding the one binary ``<name>`` at its top
level; Juju names the file after the resource whatever was attached, hence ``content_kind``.
The Go build info (``go version -m``, kept by ``-s -w``) names the main package, which tells
GARM (``.../cmd/garm``) from garm-cli and the OpenStack provider from GARM's others.

- ``garm --version`` prints ``appdefaults.Version`` and exits 0: GARM's workload version, set
  by releases from ``git describe --tags --match='v[0-9]*'`` (``v0.2.1``, ``v0.2.0-beta1``;
  unset: ``v0.0.0-unknown``).
- garm-provider-openstack has no version flag: it takes its command from ``GARM_COMMAND``
  (garm-provider-common's execution protocol) and, run without it, exits non-zero saying
  ``missing GARM_COMMAND``, as required here. Its ``GetVersion`` command authenticates with
  OpenStack first, which needs credentials no unit has when it installs, so its version is its
  build info's ``mod`` line when the build stamped one (Go >= 1.24, a tagged checkout), else None.
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
import logging
import mmap
import os
import platform
import pwd
import re
import selectors
import shutil
import subprocess
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from signal import SIGKILL
from typing import IO, BinaryIO, Literal

logger = logging.getLogger(__name__)

# The largest binary accepted, bare or in an archive (GARM's is about 50 MiB).
MAX_BINARY_BYTES = 512 << 20
# A release archive holds one file; these bound what a hostile one can make us read.
MAX_ARCHIVE_MEMBERS = 100
MAX_ARCHIVE_BYTES = 1 << 30
# GNU long names and pax headers before one member: a release needs a couple, each short.
MAX_EXTENSION_HEADERS = 4
MAX_EXTENSION_BYTES = 64 << 10
# What ``--version`` may print before it is cut off and refused.
MAX_OUTPUT_BYTES = 64 << 10
DEFAULT_TIMEOUT = 10.0
# The run's whole environment: nothing of the charm's (secrets, JUJU_*, a GARM_COMMAND).
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
_REAPED_WITHIN = 5.0
# prctl(2): the charm adopts its descendants' orphans while a run lasts.
_PR_SET, _PR_GET = 36, 37  # PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER
# Output echoed into a status line is cut to this many characters.
SHOWN_CHARS = 80
# ``git describe --tags`` of a v-tag, as GARM and its providers stamp their builds.
_VERSION = re.compile(r"v\d+\.\d+\.\d+(?:[-+][0-9A-Za-z][0-9A-Za-z.+-]*)?")
_MAX_VERSION_CHARS = 64
# garm-provider-common's refusal when run without its command (execution/*/execution.go).
_PROVIDER_REFUSAL = "missing GARM_COMMAND"
_CHUNK = 1 << 20
_HEAD_BYTES = 512
# Go's build info: this magic, a 32-byte header, then (Go >= 1.18) the inline Go version and
# module info, whose text starts "path\t<main package>\nmod\t<main module>\t<version>\t".
_BUILDINFO_MAGIC = b"\xff Go buildinf:"
_BUILDINFO_WINDOW = 4096
_MODINFO = re.compile(rb"path\t([^\t\n]{1,256})\nmod\t([^\t\n]{1,256})\t([^\t\n]{0,128})")
# ELF e_machine values of the architectures Go builds for, by GOARCH name.
_ELF_MACHINES = {3: "386", 40: "arm", 62: "amd64", 183: "arm64", 22: "s390x", 243: "riscv64"}
_EM_PPC64 = 21
# platform.machine() names that are not GOARCH names already.
_MACHINES = {"x86_64": "amd64", "aarch64": "arm64", "i386": "386", "i686": "386"}
_MACHINES |= {"armv7l": "arm", "armv8l": "arm"}


Kind = Literal["empty", "tar.gz", "tar", "zip", "binary"]


class ResourceError(Exception):
    """An attached resource is not the binary it should be; ``status_line`` tells the operator.

    The checks raise it with the reason alone; ``prepare`` names the resource.
    """

    resource = ""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def __str__(self) -> str:
        return f"Resource {self.resource}: {self.reason}"

    def status_line(self, app: str) -> str:
        """The blocked status: what is wrong, and how to attach the right file to ``app``."""
        resource = self.resource
        product = _SPECS[resource].product
        return (
            f"Resource {resource} is not {product}: {self.reason}; attach a {product} release"
            f" binary or archive (juju attach-resource {app} {resource}=<file>)"
        )


class UncheckedError(ResourceError):
    """Not run, as it cannot be run as GARM's user here: not the file's fault, so none is asked."""

    def status_line(self, app: str) -> str:
        """The blocked status: no other file is asked of ``app``'s operator."""
        return (
            f"Resource {self.resource} cannot be checked on this machine: {self.reason};"
            " an attached binary is run only as GARM's user, never as root"
        )


@dataclass(frozen=True)
class Prepared:
    """A checked binary (install ``path``, the file checked, not Juju's) and its version."""

    path: Path
    version: str | None


@dataclass(frozen=True)
class GoBuild:
    """What a Go binary's build info says about it."""

    main_package: str
    module_version: str


Overrun = Literal["time", "output"]


@dataclass(frozen=True)
class _Answer:
    """How a run ended: exit status (negative: killed by that signal), or cut off (overrun)."""

    status: int
    stdout: str
    stderr: str
    overrun: Overrun | None


@dataclass(frozen=True)
class _Spec:
    """What one resource must be."""

    product: str
    main_suffix: str
    version_of: Callable[[_Answer, GoBuild], str | None]


def prepare(
    resource: str, source: Path, work_dir: Path, user: str, *, timeout: float = DEFAULT_TIMEOUT
) -> Prepared:
    """The binary to install for ``resource`` (its name too) from the file Juju handed, checked.

    ``work_dir`` is private to the charm and not noexec: the candidate is written and run
    there, as ``user``, GARM's. Raises ResourceError (UncheckedError when it cannot be run);
    file system errors are not the operator's file at fault, and propagate.
    """
    if resource not in _SPECS:  # not one of the charm's: a bug in the caller, not a status
        raise ValueError(f"no such resource: {resource!r}")
    spec = _SPECS[resource]
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    binary = work_dir / resource
    try:
        _unpack(source, binary)
        return Prepared(binary, _verify(spec, binary, user, timeout))
    except ResourceError as exc:
        exc.resource = resource
        raise


def prepare_once(resource: str, source: Path, work_dir: Path, user: str) -> Prepared:
    """``prepare``, done again only when Juju hands a different file (every pass asks).

    The resource file's size and modification time, which change with every revision Juju
    stores, are noted beside the binary; a refusal is not, so a bad file is checked again.
    """
    stat = source.stat()
    seen = f"{stat.st_size} {stat.st_mtime_ns}"
    note = work_dir / f"{resource}.checked"
    binary = work_dir / resource
    with contextlib.suppress(OSError, ValueError):
        noted, _, version = note.read_text().partition("\n")
        if noted == seen and binary.is_file():
            return Prepared(binary, version or None)
    note.unlink(missing_ok=True)
    prepared = prepare(resource, source, work_dir, user)
    note.write_text(f"{seen}\n{prepared.version or ''}")
    return prepared


def _unpack(source: Path, target: Path) -> None:
    """Copy ``source``, a bare binary or a release archive, to ``target`` (0755).

    From an archive only the one regular file of ``target``'s name is written, to ``target``,
    never to an archive path. A bare file is copied too: Juju's is not the charm's to chmod.
    """
    with source.open("rb") as file:
        kind = content_kind(file.read(_HEAD_BYTES))
        file.seek(0)
        if kind == "empty":
            raise ResourceError("the file is empty")
        if kind == "zip":
            raise ResourceError("it is a zip archive (GARM zips only Windows builds)")
        if kind == "binary":
            _copy_bounded(file, target)
        else:
            _extract(file, "r:gz" if kind == "tar.gz" else "r:", target)


def _verify(spec: _Spec, binary: Path, user: str, timeout: float) -> str | None:
    """Check ``binary`` is the program ``spec`` says (module doc); its version."""
    with binary.open("rb") as file:
        head = file.read(_HEAD_BYTES)
    built, here = elf_arch(head), host_arch()
    if built is not None and here is not None and built != here:
        raise ResourceError(f"it is built for {built}, this machine is {here}")
    build = go_build(binary)
    if build is None:
        raise ResourceError("it is not a Go program (it has no Go build info)")
    if not build.main_package.endswith(spec.main_suffix):
        raise ResourceError(f"it is built from {_shown(build.main_package)}")
    # Not left to exec: setpriv's execvp(3) hands a file the kernel refuses to /bin/sh.
    if not head.startswith((b"\x7fELF", b"#!")):
        raise ResourceError("it is not a program this machine can run (exec format error)")
    return spec.version_of(_run_version(binary, user, timeout), build)


def content_kind(head: bytes) -> Kind:
    """What a resource file is, from its first bytes (tar's magic is at offset 257).

    Anything else is a ``"binary"`` candidate, whatever its format: ``_verify`` decides.
    """
    if not head:
        return "empty"
    if head.startswith(b"\x1f\x8b"):
        return "tar.gz"
    if head[257:262] == b"ustar":
        return "tar"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    return "binary"


def elf_arch(head: bytes) -> str | None:
    """The GOARCH an ELF header is built for; None when not ELF or an architecture not known."""
    if len(head) < 20 or not head.startswith(b"\x7fELF") or head[5] not in (1, 2):
        return None
    machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    if machine == _EM_PPC64:
        return "ppc64le" if head[5] == 1 else "ppc64"
    return _ELF_MACHINES.get(machine)


def host_arch() -> str | None:
    """The GOARCH name of the machine this runs on; None when not one of Go's."""
    machine = platform.machine().lower()
    arch = _MACHINES.get(machine, machine)
    return arch if arch in {*_ELF_MACHINES.values(), "ppc64le"} else None


def parse_version(text: str) -> str | None:
    """The version in ``--version``'s output when that output is exactly one version."""
    line = text.strip()
    if len(line) <= _MAX_VERSION_CHARS and _VERSION.fullmatch(line):
        return line
    return None


def go_build(binary: Path) -> GoBuild | None:
    """The main package and module version from a Go binary's build info; None without it.

    Found by its magic anywhere in the file (mapped, never read whole), so this needs no
    ELF parsing and reads the same in a test's stand-in.
    """
    with binary.open("rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return None  # an empty file cannot be mapped
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            offset = data.find(_BUILDINFO_MAGIC)
            while offset != -1:
                start = offset + len(_BUILDINFO_MAGIC)
                found = _MODINFO.search(data, start, start + _BUILDINFO_WINDOW)
                if found:
                    main, _module, version = (g.decode("utf-8", "replace") for g in found.groups())
                    return GoBuild(main_package=main, module_version=version)
                offset = data.find(_BUILDINFO_MAGIC, offset + 1)
    return None


def _run_version(binary: Path, user: str, timeout: float) -> _Answer:
    """Run ``binary --version`` as ``user`` (``_drop``), through a descriptor the charm opened.

    setpriv is tried on ``true`` first, so its own failure is never taken for the binary's.
    """
    drop = _drop(user)
    trial = _run([*drop, "true"], (), timeout)
    if trial.overrun is not None or trial.status != 0:
        said = _shown(trial.stderr) or f"status {trial.status}"
        raise UncheckedError(f"setpriv cannot run a program as {user} ({said})")
    with binary.open("rb") as program:
        descriptor = program.fileno()
        answer = _run([*drop, f"/proc/self/fd/{descriptor}", "--version"], (descriptor,), timeout)
    if answer.overrun == "time":
        raise ResourceError(f"`--version` did not finish within {timeout:g}s")
    if answer.overrun == "output":
        raise ResourceError(f"`--version` printed over {MAX_OUTPUT_BYTES >> 10} KiB")
    return answer


def _drop(user: str) -> list[str]:
    """The command that runs what follows it as ``user``, as systemd's ``User=`` does (ADR 0013).

    UncheckedError when the charm is not root, setpriv is missing or ``user`` is.
    """
    if os.geteuid() != 0:
        raise UncheckedError(
            f"running it as {user} needs root, and the charm runs as uid {os.geteuid()}"
        )
    if shutil.which("setpriv", path=ENV["PATH"]) is None:
        raise UncheckedError(f"setpriv (util-linux) is not found in {ENV['PATH']}")
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise UncheckedError(f"there is no user {user}") from None
    return [
        "setpriv",
        f"--reuid={entry.pw_uid}",
        f"--regid={entry.pw_gid}",
        "--init-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--pdeathsig=SIGKILL",
        "--",
    ]


def _run(argv: list[str], descriptors: tuple[int, ...], timeout: float) -> _Answer:
    """Run ``argv`` to its end, or kill it at the time or the output bound; how it ended.

    The charm is its descendants' subreaper meanwhile, so whatever it leaves behind, even in
    a session of its own, is handed to the charm and killed (``_reap``) before this returns.
    """
    known = _children()
    previous = _subreaper(1)
    try:
        try:
            process = subprocess.Popen(  # noqa: S603 (no shell; setpriv, then what the check runs)
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/",
                env=dict(ENV),
                pass_fds=descriptors,
            )
        except OSError as exc:
            raise UncheckedError(f"setpriv cannot be run ({exc.strerror})") from None
        with process:  # on leaving: its pipes closed, it reaped
            try:
                stdout, stderr, overrun = _collect(process, time.monotonic() + timeout)
            finally:
                process.kill()  # a no-op once it has ended
    finally:
        _reap(known)
        _subreaper(previous)
    out, err = (output.decode("utf-8", "replace") for output in (stdout, stderr))
    return _Answer(process.returncode, out, err, overrun)


def _collect(
    process: subprocess.Popen[bytes], deadline: float
) -> tuple[bytes, bytes, Overrun | None]:
    """Both outputs of ``process`` until it and all that hold them open end, or an overrun."""
    assert process.stdout is not None and process.stderr is not None  # noqa: S101 (PIPE)
    streams = (process.stdout.fileno(), process.stderr.fileno())
    outputs = {fd: bytearray() for fd in streams}
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
                if len(outputs[key.fd]) > MAX_OUTPUT_BYTES:
                    overrun = "output"
                    break
    if overrun is None:
        try:
            process.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            overrun = "time"
    return bytes(outputs[streams[0]]), bytes(outputs[streams[1]]), overrun


def _reap(known: set[int]) -> None:
    """Kill and reap the charm's children but ``known``: what a run left behind, adopted.

    Round after round, as each dead one's children are handed over in turn. Only unreaped
    children are signalled, so no pid taken over can be; given up on after _REAPED_WITHIN.
    """
    deadline = time.monotonic() + _REAPED_WITHIN
    while left := _children() - known:
        if time.monotonic() > deadline:
            logger.warning("a checked binary left %d processes that are still running", len(left))
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, SIGKILL)
        for pid in left:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _children() -> set[int]:
    """The charm's own child processes, from /proc/<pid>/stat (proc(5))."""
    charm, found = os.getpid(), set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(entry.path, "stat").read_bytes()
                if int(stat.rsplit(b")", 1)[1].split()[1]) == charm:
                    found.add(int(entry.name))
    return found


def _subreaper(value: int) -> int:
    """Make the charm its descendants' subreaper (1) or not (0); what it was before."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = ctypes.c_int()
    for option, argument in ((_PR_GET, ctypes.byref(before)), (_PR_SET, value)):
        if libc.prctl(option, argument, 0, 0, 0) != 0:
            raise UncheckedError(f"prctl refused ({os.strerror(ctypes.get_errno())})")
    return before.value


def _garm_version(answer: _Answer, _build: GoBuild) -> str:
    """GARM's version: ``--version`` prints it alone and exits 0."""
    if answer.status != 0:
        raise ResourceError(f"`garm --version` {_exit(answer)}{_saying(answer)}")
    version = parse_version(answer.stdout)
    if version is None:
        raise ResourceError(f"`garm --version` printed {_printed(answer.stdout)}, not a version")
    return version


def _provider_version(answer: _Answer, build: GoBuild) -> str | None:
    """The provider's version: it must refuse to run without GARM_COMMAND, as all releases do.

    A provider that one day answers ``--version`` with a version and exit 0 is taken at its
    word: its build info already says it is garm-provider-openstack.
    """
    if answer.status == 0:
        version = parse_version(answer.stdout)
        if version is None:
            raise ResourceError(
                f"it printed {_printed(answer.stdout)} and exited 0 instead of asking for"
                f" GARM_COMMAND"
            )
        return version
    if _PROVIDER_REFUSAL not in answer.stderr:
        raise ResourceError(f"it {_exit(answer)} without asking for GARM_COMMAND{_saying(answer)}")
    return parse_version(build.module_version)


_SPECS = {
    "garm": _Spec("GARM", "/cmd/garm", _garm_version),
    "garm-provider-openstack": _Spec(
        "garm-provider-openstack", "/garm-provider-openstack", _provider_version
    ),
}


# The charm's resources, by their names in charmcraft.yaml.
NAMES = tuple(_SPECS)


def _extract(file: BinaryIO, mode: Literal["r:gz", "r:"], target: Path) -> None:
    """Write the archive's one file named as ``target`` to it; refuse anything unsafe."""
    try:
        _check_headers(file, compressed=mode == "r:gz")
        file.seek(0)
        with tarfile.open(fileobj=file, mode=mode) as archive:
            member = _find_member(archive, target.name)
            data = archive.extractfile(member)
            assert data is not None  # noqa: S101 (a regular file always has data)
            _copy_bounded(data, target)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        # BadGzipFile (a CRC or length mismatch) is an OSError; others of those, from
        # writing the target, are not the operator's file at fault and propagate.
        raise ResourceError(f"it is not a readable tar archive ({_shown(str(exc))})") from None


_BLOCK = 512
# Where a ustar header keeps the member's size and type (POSIX.1-1988 / GNU tar).
_SIZE = slice(124, 136)
_TYPE = 156
_EXTENSIONS = frozenset(b"LKxg")  # GNU long name and link; pax per-file and global


def _check_headers(file: BinaryIO, *, compressed: bool) -> None:
    """Walk the archive's headers without tarfile, refusing what it would choke on.

    tarfile reads a GNU long-name or pax header whole and the next header by recursion, so
    a chain of them raises RecursionError and a huge one is read before any check. Here the
    counts and sizes are bounded first, the data skipped; tarfile then reads what passes.
    """
    stream: gzip.GzipFile | BinaryIO = gzip.GzipFile(fileobj=file) if compressed else file
    headers = extensions = 0
    total = 0
    while True:
        header = stream.read(_BLOCK)
        if len(header) < _BLOCK or not header.strip(b"\0"):
            return  # end of archive (or a short one, which tarfile then refuses)
        headers += 1
        if headers > MAX_ARCHIVE_MEMBERS * (MAX_EXTENSION_HEADERS + 1):
            raise ResourceError(f"the archive holds over {MAX_ARCHIVE_MEMBERS} files")
        size = _header_size(header)
        if header[_TYPE] in _EXTENSIONS:
            extensions += 1
            if extensions > MAX_EXTENSION_HEADERS:
                raise ResourceError("the archive holds a chain of extended headers")
            if size > MAX_EXTENSION_BYTES:
                raise ResourceError("the archive holds an extended header too large to read")
        else:
            extensions = 0
        total += size
        if size > MAX_BINARY_BYTES or total > MAX_ARCHIVE_BYTES:
            name = PurePosixPath(header[:100].split(b"\0")[0].decode(errors="replace")).name
            raise ResourceError(f"{_shown(name)} in the archive is too large")
        stream.seek(-(-size // _BLOCK) * _BLOCK, os.SEEK_CUR)  # past the end: the end


def _header_size(header: bytes) -> int:
    """A header's size field: octal digits, or GNU's base-256 for large files."""
    field = header[_SIZE]
    if field[0] & 0x80:  # base-256: the rest of the field, big-endian
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    digits = field.rstrip(b"\0 ").lstrip(b" ")
    if not digits:
        return 0
    if not all(48 <= c <= 55 for c in digits):  # 0-7
        raise ResourceError("it is not a readable tar archive (a header's size is not a number)")
    return int(digits, 8)


def _find_member(archive: tarfile.TarFile, binary: str) -> tarfile.TarInfo:
    """The one regular file in ``archive`` whose base name is ``binary``.

    Each header is checked as tarfile reads it (a pax header may give a member another size
    than ``_check_headers`` saw), and one a release never has refuses the whole archive.
    """
    found: list[tarfile.TarInfo] = []
    others: list[str] = []
    total = 0
    for count, member in enumerate(archive, start=1):
        path = PurePosixPath(member.name)
        if count > MAX_ARCHIVE_MEMBERS:
            raise ResourceError(f"the archive holds over {MAX_ARCHIVE_MEMBERS} files")
        if path.is_absolute() or ".." in path.parts:
            raise ResourceError(f"the archive holds an unsafe path: {_shown(member.name)}")
        total += member.size
        if member.size > MAX_BINARY_BYTES or total > MAX_ARCHIVE_BYTES:
            raise ResourceError(f"{_shown(path.name)} in the archive is too large")
        if member.isdir():
            continue
        if path.name != binary:
            others.append(path.name)
        elif member.isreg():
            found.append(member)
        else:
            raise ResourceError(f"{binary} in the archive is {_member_kind(member)}, not a file")
    if not found:
        raise ResourceError(f"the archive holds no {binary} ({_holds(others)})")
    if len(found) > 1:
        raise ResourceError(f"the archive holds {len(found)} files named {binary}")
    return found[0]


# What a member of the binary's name is when it is not a regular file, for the status line.
_NOT_FILES = (
    (tarfile.TarInfo.issym, "a symlink"),
    (tarfile.TarInfo.islnk, "a hard link"),
    (tarfile.TarInfo.isdev, "a device or fifo"),
)


def _member_kind(member: tarfile.TarInfo) -> str:
    return next((kind for test, kind in _NOT_FILES if test(member)), "not a regular file")


def _holds(names: list[str]) -> str:
    """What an archive holds: a few names, then how many more."""
    if not names:
        return "it is empty"
    shown = ", ".join(_shown(name, 24) for name in names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"it holds {shown}{more}"


def _copy_bounded(source: IO[bytes], target: Path) -> None:
    """Write ``source`` to ``target`` (0755) whole or not at all, refusing it when too big."""
    descriptor, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    temporary = Path(name)
    try:
        written = 0
        with os.fdopen(descriptor, "wb") as out:
            while chunk := source.read(_CHUNK):
                written += len(chunk)
                if written > MAX_BINARY_BYTES:
                    raise ResourceError(f"it is larger than {MAX_BINARY_BYTES >> 20} MiB")
                out.write(chunk)
        temporary.chmod(0o755)
        temporary.replace(target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _exit(answer: _Answer) -> str:
    """How a run ended, as a phrase."""
    if answer.status < 0:
        return f"was killed by signal {-answer.status}"
    return f"exited with status {answer.status}"


def _saying(answer: _Answer) -> str:
    """``": <what it said>"`` (stderr first, where Go programs log), or nothing."""
    shown = _shown(answer.stderr or answer.stdout)
    return f": {shown}" if shown else ""


def _printed(text: str) -> str:
    """What a run printed, quoted and cut, or that it printed nothing."""
    shown = _shown(text)
    return f"'{shown}'" if shown else "nothing"


def _shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` fit for a status line: printable, one line, at most ``limit`` characters."""
    printable = "".join(c if c.isprintable() else " " for c in text)
    line = " ".join(printable.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
