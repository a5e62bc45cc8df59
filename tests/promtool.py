"""promtool for the alert rule and dashboard tests: where they find it, and its fetch.

The tests look for promtool on ``PATH``, then beside the Python that runs them (a tox
environment's ``bin``). ``tox -e unit`` runs ``python -m tests.promtool {envbindir}``
before the tests: when promtool is found neither way, it takes the binary from Debian's
or Ubuntu's ``prometheus`` package. The package is downloaded (``apt-get download``)
and unpacked in a scratch directory, never installed, so no Prometheus server starts
and no root is needed; only when the download fails does it refresh apt's lists, as
root or with passwordless ``sudo -n``. Run again, it finds the binary and does nothing.
Best effort: it always exits 0, saying what it did or why it could not, and the tests
that need promtool then skip and say why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "prometheus"
TIMEOUT = 600  # seconds for one apt-get call; a hung mirror must not hang the run


def find() -> str | None:
    """The promtool the tests run: on ``PATH``, else beside this Python."""
    path = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    return shutil.which("promtool", path=path)


def missing(without: str) -> str:
    """A skip reason: promtool is not found, what is left untested, and how to get it."""
    return (
        f"promtool is neither on PATH nor in {Path(sys.executable).parent}, so {without}: "
        f"`tox -e unit` fetches it there from Debian's or Ubuntu's `{PACKAGE}` package "
        "where `apt-get download` works (tox prints why it did not), or install that "
        f"package (sudo apt-get install --no-install-recommends {PACKAGE})"
    )


def _run(command: list[str], cwd: Path | None = None) -> tuple[bool, str]:
    """Run ``command``; whether it succeeded, and its last line of complaint if not."""
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"{' '.join(command)}: {error}"
    if done.returncode == 0:
        return True, ""
    said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return False, f"{' '.join(command)}: {said[-1] if said else f'exit {done.returncode}'}"


def _as_root() -> list[str] | None:
    """The prefix that runs a command as root: none for root, ``sudo -n`` if it may."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and _run(["sudo", "-n", "true"])[0]:
        return ["sudo", "-n"]
    return None


def _download(into: Path) -> str:
    """Download the package's .deb into ``into``; empty, or why it could not."""
    ok, why = _run(["apt-get", "download", PACKAGE], cwd=into)
    if ok:
        return ""
    # Lists never refreshed (a fresh container) know no package: refresh, then retry.
    prefix = _as_root()
    if prefix is None:
        return f"{why} (apt's lists not refreshed: neither root nor passwordless sudo)"
    refreshed, failed = _run([*prefix, "apt-get", "update", "-q"])
    if not refreshed:
        return f"{why}; then {failed}"
    return _run(["apt-get", "download", PACKAGE], cwd=into)[1]


def fetch(bindir: Path) -> str:
    """Put promtool into ``bindir`` unless the tests find one already; what happened."""
    found = find() or shutil.which("promtool", path=str(bindir))
    if found is not None:
        return f"promtool: using {found}"
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        return "promtool not fetched: no apt-get and dpkg-deb here (not Debian or Ubuntu)"
    bindir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=bindir.parent, prefix=".promtool-") as scratch:
        work = Path(scratch)
        why = _download(work)
        debs = sorted(work.glob(f"{PACKAGE}_*.deb"))
        if why or not debs:
            return f"promtool not fetched: {why or 'apt-get download left no .deb'}"
        ok, why = _run(["dpkg-deb", "-x", str(debs[0]), str(work / "root")])
        unpacked = work / "root" / "usr" / "bin" / "promtool"
        if not ok or not unpacked.is_file():
            return f"promtool not fetched: {why or f'{debs[0].name} holds no usr/bin/promtool'}"
        target = bindir / "promtool"
        shutil.copy2(unpacked, target)
        target.chmod(0o755)
    return f"promtool: fetched from {debs[0].name} into {target}"


def main(argv: list[str]) -> int:
    """``python -m tests.promtool BINDIR``: 0 whether or not promtool could be had."""
    if len(argv) != 1:
        print("usage: python -m tests.promtool BINDIR", file=sys.stderr)
        return 2
    said = fetch(Path(argv[0]))
    print(said if said.startswith("promtool:") else f"{said}; the tests needing it will skip")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
