"""A Debian 12 machine with a real systemd in it, for the machine tier (``tox -e machine``).

What keeps GARM safe on its machine (its unit and hardening, the lease's timer and
``ExecStartPre``, the reconcile timer and the requeue, the resource check's sandbox, the
``garm`` user and the modes of its files) shows what it does only under a real systemd.
So the tier boots one: a root filesystem made once with ``debootstrap`` from Debian's
archive and kept under ``.tox/`` (a rerun boots in seconds), booted with
``systemd-nspawn --boot`` on a throw-away overlay (``--volatile=overlay``: every container
starts from the same clean tree, and what it wrote goes with it), in a network of its own
that holds only loopback. The charm, its tests and the tox environment's Python packages are
bound into it read-only. Each command runs as a child of the container's systemd
(``nsenter`` into its namespaces, then ``systemd-run --wait --pipe``), as a hook runs
under the Juju agent: with the container's capabilities, not the host's.

No systemd-machined is needed on the host (``--register=no --keep-unit``): a container is
tracked by its ``systemd-nspawn`` process and its systemd's PID, and powered off by a
signal to that systemd (``SIGRTMIN+4``, systemd(1)).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".tox" / "machine-rootfs"
SUITE = "bookworm"
MIRROR = os.environ.get("GARM_MACHINE_MIRROR", "http://deb.debian.org/debian")
# What the charm's machine needs: systemd and its bus, util-linux (the resource check's
# unshare and setpriv), Python for the charm. minbase has coreutils, mount, passwd. And
# the tier's database: PostgreSQL (run in a container of its own,
# ``tests.machine_tier.database``) and the client the GARM simulator keeps its data with.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "util-linux",
    "python3",
    "curl",
    "ca-certificates",
    "postgresql",
    "python3-psycopg2",
)
# How the tree is made beyond its packages (``rootfs``): a change there bumps it, so that
# a tree cached by an earlier way of making it is made anew.
BUILD = 2
# The host's tools, and the Debian package each comes in.
TOOLS = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "nsenter": "util-linux",
}
# Where the repository and the Python packages are, inside a container.
CODE = "/opt/garm-machine/code"
# What of the repository a container sees: the charm (ops.testing reads charmcraft.yaml
# beside src/) and the tests; not .tox, which holds the container's own tree.
SHARED = ("charmcraft.yaml", "src", "lib", "tests")
SITE = "/opt/garm-machine/site-packages"
PYTHONPATH = f"{CODE}/src:{CODE}/lib:{CODE}:{SITE}"
BOOT_SECONDS = 60


def unavailable() -> str | None:
    """Why no container can be booted here; None when one can.

    A missing tool is installed with apt-get where there is one (as on CI's fresh Debian).
    """
    if os.geteuid() != 0:
        return f"booting a container needs root; this runs as uid {os.geteuid()}"
    missing = sorted({package for tool, package in TOOLS.items() if not shutil.which(tool)})
    if missing and shutil.which("apt-get"):
        _apt_install(missing)
    missing = sorted({package for tool, package in TOOLS.items() if not shutil.which(tool)})
    if missing:
        return f"{' '.join(missing)} not installed and apt-get could not install it"
    return None


def _apt_install(packages: Sequence[str]) -> None:
    """Install ``packages`` with apt-get, its lists refreshed first if that fails."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", *packages]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
        subprocess.run(install, env=env, capture_output=True, check=False)


def rootfs() -> Path:
    """The container's root filesystem, made by ``debootstrap`` unless already cached.

    The package list and ``BUILD`` are kept beside the tree: a tree made from another
    list, or another way, is made anew. It is built aside and renamed into place, so an
    interrupted build leaves no tree.
    """
    tree, stamp = CACHE / SUITE, CACHE / f"{SUITE}.packages"
    wanted = f"{' '.join(PACKAGES)}\nbuild {BUILD}\n"
    if tree.is_dir() and stamp.is_file() and stamp.read_text() == wanted:
        return tree
    shutil.rmtree(CACHE, ignore_errors=True)
    building = CACHE / "building"
    CACHE.mkdir(parents=True)
    command = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}"]
    done = subprocess.run(
        [*command, SUITE, str(building), MIRROR], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"debootstrap failed ({done.returncode}):\n{done.stdout[-3000:]}")
    # A container has no console to log in on; its getty would only wait.
    (building / "etc/systemd/system/console-getty.service").symlink_to("/dev/null")
    # PostgreSQL runs only where the tier starts it (its own container), not at every boot.
    wants = building / "etc/systemd/system/multi-user.target.wants"
    (wants / "postgresql.service").unlink(missing_ok=True)
    building.rename(tree)
    stamp.write_text(wanted)
    return tree


def site_packages() -> Path:
    """This environment's Python packages (the charm's and the tests'), bound read-only."""
    return Path(sysconfig.get_paths()["purelib"])


@dataclass
class Machine:
    """One booted container: its ``systemd-nspawn`` process and its systemd, by PID."""

    name: str
    process: subprocess.Popen[bytes]
    console: Path
    leader: int = 0

    @classmethod
    def boot(
        cls, tree: Path, name: str, console: Path, binds: Sequence[tuple[Path, str]] = ()
    ) -> Machine:
        """Boot ``tree`` as container ``name`` and wait until its systemd has finished
        starting up; its console goes to ``console``. ``binds``: more host directories
        bound into it, writable, each at its path inside."""
        command = [
            "systemd-nspawn",
            f"--directory={tree}",
            f"--machine={name}",
            "--volatile=overlay",
            "--private-network",
            "--register=no",
            "--keep-unit",
            "--console=read-only",
            *(f"--bind-ro={REPO / part}:{CODE}/{part}" for part in SHARED),
            f"--bind-ro={site_packages()}:{SITE}",
            *(f"--bind={host}:{inside}" for host, inside in binds),
            "--boot",
        ]
        with console.open("wb") as out:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        machine = cls(name, process, console)
        try:
            machine.leader = machine._systemd()
            machine._wait_started()
        except BaseException:
            machine.stop()
            raise
        return machine

    def _systemd(self) -> int:
        """The container's PID 1 as the host sees it: the child of systemd-nspawn that
        runs systemd (before it execs systemd, the child is nspawn's own)."""
        deadline = time.monotonic() + BOOT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited: {self.console.read_text()[-2000:]}")
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit() and _parent_and_name(entry) == (
                    self.process.pid,
                    "systemd",
                ):
                    return int(entry.name)
            time.sleep(0.1)
        raise RuntimeError(f"no systemd in container {self.name} after {BOOT_SECONDS}s")

    def _wait_started(self) -> None:
        deadline, state = time.monotonic() + BOOT_SECONDS, ""
        while time.monotonic() < deadline:
            done = self._enter(["systemctl", "is-system-running", "--wait"], timeout=BOOT_SECONDS)
            state = done.stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"container {self.name} did not finish starting: {state!r}")

    def _enter(self, argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess[str]:
        command = ["nsenter", f"--target={self.leader}", "--all", *argv]
        return subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 180,
        properties: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` run by the container's systemd as a transient service, waited for.

        As root, with the repository's code and packages on ``PYTHONPATH``; its output
        is piped back. ``check``: a non-zero exit raises, with what it printed.
        """
        command = [
            "systemd-run",
            "--wait",
            "--pipe",
            "--quiet",
            "--collect",
            "--service-type=exec",
            f"--setenv=PYTHONPATH={PYTHONPATH}",
            *(f"--property={p}" for p in properties),
            "--",
            *argv,
        ]
        done = self._enter(command, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and done.returncode:
            raise AssertionError(
                f"{' '.join(argv)} in {self.name} exited {done.returncode}:\n"
                f"{done.stdout}{done.stderr}"
            )
        return done

    def sh(self, script: str, *, check: bool = True) -> str:
        """A shell script run in the container (``run``); what it printed."""
        return self.run(["/bin/sh", "-euc", script], check=check).stdout

    def path(self, inside: str) -> Path:
        """A path of the container, seen from the host (through its systemd's root)."""
        return Path(f"/proc/{self.leader}/root") / inside.lstrip("/")

    def stop(self, timeout: float = 30) -> None:
        """Power the container off; killed if it is not off within ``timeout``."""
        if self.process.poll() is None:
            self._signal(signal.SIGRTMIN + 4)  # systemd: power off
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)  # its whole PID namespace with it
                self.process.kill()
                self.process.wait()
        # Left behind where the host's /run is not systemd's tmpfs.
        shutil.rmtree(f"/run/systemd/nspawn/propagate/{self.name}", ignore_errors=True)

    def _signal(self, number: int) -> None:
        """Signal the container's systemd, or systemd-nspawn before there is one."""
        try:
            os.kill(self.leader or self.process.pid, number)
        except ProcessLookupError:
            self.process.kill()


def _parent_and_name(entry: Path) -> tuple[int, str]:
    """A process's parent's PID and its command's name, from /proc/<pid>/stat."""
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return 0, ""
    name, _, rest = stat.partition(" (")[2].rpartition(")")
    return int(rest.split()[1]), name
