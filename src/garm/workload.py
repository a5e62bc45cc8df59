"""GARM on this machine: its binaries, user, files and service, and nothing of Juju.

Idempotent verbs; each "ensure"/"install"/"write" says whether it changed anything, so the
caller knows when GARM must restart. The system is reached through charmlibs (systemd,
passwd) but for the two commands it has no verb for (``SYSTEMCTL``, ``JOURNALCTL``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import requests
from charmlibs import passwd, systemd

from garm.client import trust_only
from garm.config import (
    START_LIMIT_SECONDS,
    Database,
    PostgresqlDatabase,
    read_database,
    serves_tls,
)
from garm.tls import CA_FILE, CERTIFICATE_FILE, KEY_FILE, LOOPBACK, ServingTls

logger = logging.getLogger(__name__)

SERVICE = "garm"
USER = "garm"
SYSTEMCTL = "/usr/bin/systemctl"
JOURNALCTL = "/usr/bin/journalctl"
# What GARM writes to standard error as it exits at start (``start_failure``): its command
# line framework's ``Error: …`` (cobra), a Go panic or a runtime fatal error.
_FATAL = ("Error: ", "panic: ", "fatal error: ")
# Configuration values a start error may quote: quoted text, a URL's user and password, a
# password given as key=value. Shown as an ellipsis.
_QUOTED = re.compile(r'"[^"]*"?|`[^`]*`?')
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")
_PASSWORD = re.compile(r"(?i)(password|passphrase|secret|token)=\S*")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The longest cause ``start_failure`` gives: the status line's ``GARM does not start: ``
# and it stay within 120 characters.
CAUSE_LENGTH = 99
NO_CAUSE = "it wrote no error; see journalctl -u garm"

_CHUNK = 1 << 20
# A written file's name, relative to its directory: plain components only, so no key can
# climb out with "..", start at "/", or collide with a temporary ".name.*" file.
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$")
# Files under these are owned by this module: one per provider, and GARM's TLS files, so a
# provider or a certificate that is gone must not leave its credentials behind.
_PRUNED_DIRS = ("providers", "tls")


class Paths:
    """Where GARM lives, below ``root`` so that tests can use a temporary directory."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self.binary = root / "usr/local/bin/garm"
        # The garm-provider-openstack binary GARM executes.
        self.provider_binary = root / "usr/local/bin/garm-provider-openstack"
        # config.toml and the providers' files (0700: they hold secrets).
        self.config_dir = root / "etc/garm"
        self.config_file = self.config_dir / "config.toml"
        # GARM's home and the only place it may write (0700).
        self.data_dir = root / "var/lib/garm"
        # GARM's sqlite database, when no PostgreSQL is related.
        self.sqlite_file = self.data_dir / "garm.db"
        # GARM's logs (systemd makes it for GARM: ``config.LOG_DIRECTORY``).
        self.log_dir = root / "var/log/garm"
        systemd_dir = root / "etc/systemd/system"
        self.unit_file = systemd_dir / "garm.service"
        # The oneshot unit that dispatches ``reconcile-tick``, and its timer (``timer``).
        self.timer_service_file = systemd_dir / "garm-reconcile.service"
        self.timer_file = systemd_dir / "garm-reconcile.timer"
        # The oneshot unit that stops GARM once its lease lapsed, and its timer (``lease``).
        self.lease_service_file = systemd_dir / "garm-lease.service"
        self.lease_timer_file = systemd_dir / "garm-lease.timer"
        # The charm's own files: root's alone (0700, ``ensure_directory``). Nothing but
        # root reads in it: the lease script runs as root (``+``), the metrics service
        # sees its one directory through systemd's bind mount, and an attached binary is
        # checked through a descriptor the charm opened (``garm.resources``).
        self.charm_dir = root / "var/lib/garm-charm"
        # Where the resources are unpacked and checked before install.
        self.staging = self.charm_dir / "resources"
        # The charm's metrics server (``observe.endpoint``): its unit; its script, outside
        # /var/lib, which the service cannot see; the one directory it sees, holding the
        # metrics alone; and the running count of force-removals (root's; not served).
        self.metrics_unit_file = systemd_dir / "garm-charm-metrics.service"
        self.metrics_server = root / "usr/local/lib/garm-charm/serve-metrics.py"
        self.metrics_dir = self.charm_dir / "metrics"
        self.metrics_file = self.metrics_dir / "metrics"
        self.metrics_state = self.charm_dir / "metrics-state.json"
        # GARM's lease: until when it may run here, and the script that enforces it.
        self.lease_file = self.charm_dir / "lease"
        self.lease_script = self.charm_dir / "garm-lease"
        # When this leader first saw each other unit's GARM record (``juju.fence``).
        self.fence_file = self.charm_dir / "fence.json"
        # GARM's admin login token, kept across hooks (``garm.admin_token``; 0600).
        self.admin_token_file = self.charm_dir / "admin-token.json"
        # The transient timer of the one extra pass asked for, if any (``garm.requeue``).
        self.requeue_file = self.charm_dir / "requeue"
        # When a pass last started GARM (seconds since the epoch): ``restart``'s pace.
        self.start_file = self.charm_dir / "garm-started"

    @property
    def service(self) -> Units:
        """GARM's own unit: enabled only, as ``juju.machine`` starts it when it should."""
        return Units(self.unit_file.name, (self.unit_file,), start=None)


@dataclass(frozen=True)
class Units:
    """Files that systemd runs, written and enabled as one.

    GARM's service, the timers (``garm.timer``, ``garm.lease``) and the metrics server
    (``observe.endpoint``) each name theirs here, so that one way writes and enables them
    all; GARM's is started and stopped by its owner (``juju.machine``: ``run``,
    ``release``).
    """

    # The unit: ``enable --now`` keeps it running; "restart": ``enable`` then ``restart``,
    # so that a running service reads a changed script; None: ``enable`` alone, for GARM's.
    # ``disable --now`` removes it (``remove``).
    unit: str
    # Written in this order (0644, atomically). The last marks the set installed; if
    # systemd fails, the first is deleted, so the next ``install`` tries again.
    files: tuple[Path, ...]
    start: Literal["now", "restart"] | None = "now"
    # A timer's service, stopped on removal if its file is there: a run in progress.
    stop: Path | None = None

    def install(self, texts: Sequence[str]) -> bool:
        """Write the files whose ``texts`` differ, then enable the unit; whether it changed.

        Nothing to do when none differs and the unit is active or its owner's to start;
        one stopped out of band (``systemctl stop``, a failed start) is started again, as
        the fence relies on the lease's and the reconcile timers running.
        """
        wanted = zip(self.files, texts, strict=True)
        stale = [(path, text) for path, text in wanted if read_text(path) != text]
        if not stale and (self.start is None or systemd.service_running(self.unit)):
            return False
        if not stale:
            logger.warning("%s was not running: started again", self.unit)
        for path, text in stale:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(path, text.encode(), 0o644, owner=None)
        try:
            systemd.daemon_reload()
            systemd.service_enable(*(("--now",) if self.start == "now" else ()), self.unit)
            if self.start == "restart":
                systemd.service_restart(self.unit)
        except BaseException:
            self.files[0].unlink(missing_ok=True)
            raise
        return True

    def remove(self) -> bool:
        """Stop and disable the unit, then delete its files; whether it was installed.

        Files go only after systemd has done its part (a failure leaves them for the
        retried hook), and systemd is not asked about a set whose last file is missing:
        it was never started, and systemctl fails on a unit it cannot find.
        """
        installed = self.files[-1].exists()
        if installed:
            systemd.service_disable("--now", self.unit)
            if self.stop is not None and self.stop.exists():
                systemd.service_stop(self.stop.name)
        for path in reversed(self.files):
            path.unlink(missing_ok=True)
        if installed:
            systemd.daemon_reload()
        return installed


def write_own(path: Path, text: str, mode: int = 0o600) -> bool:
    """Write a file of the charm's own (root's; 0700 for a script) in a directory of root's."""
    ensure_directory(path.parent, None)
    return _ensure_file(path, text.encode(), mode, None)


def read_text(path: Path) -> str | None:
    """A file's text; None when there is no such file."""
    return path.read_text() if path.is_file() else None


def install_binary(source: Path, target: Path) -> bool:
    """Install ``source`` as ``target``, root's and 0755, unless it is already there so.

    Anything else there (another mode, a link, another owner) is replaced. Renamed into
    place: a running GARM keeps its old inode and never sees a half-written binary
    (writing over a running executable fails anyway).
    """
    same = target.is_file() and _sha256(target) == _sha256(source)
    if same and stat.S_IMODE(target.stat().st_mode) == 0o755:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as src:
        _write_atomic(target, src.read(), 0o755, owner=None)
    return True


def ensure_user() -> None:
    """Create GARM's system user: no login shell, home in the data directory.

    The home is not created here (useradd would fill it from /etc/skel); the charm makes
    the data directory with ``ensure_directory``.
    """
    passwd.add_user(  # noqa: S604 (a login shell that refuses logins)
        USER,
        shell="/usr/sbin/nologin",
        system_user=True,
        home_dir=str(Paths().data_dir),
        create_home=False,
    )


def ensure_directory(path: Path, owner: str | None) -> bool:
    """Make ``path`` a 0700 directory owned by ``owner`` (None: the charm, root).

    Missing parents are made with the default mode, so a directory of the charm's own is
    made with this, not as a parent of another (``Paths.charm_dir``).
    """
    changed = False
    if not path.is_dir():
        path.mkdir(mode=0o700, parents=True)
        changed = True
    info = path.stat()
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
        changed = True
    if owner is None:
        return changed
    uid, gid = _ids(owner)
    if (info.st_uid, info.st_gid) != (uid, gid):
        os.chown(path, uid, gid)
        changed = True
    return changed


def write_files(directory: Path, files: dict[str, str], owner: str) -> bool:
    """Make ``directory`` hold exactly ``files`` (0600, owned by ``owner``).

    Only files that differ are rewritten, each atomically, so GARM never reads a partial
    config. Files under ``providers/`` and ``tls/`` that are not in ``files`` are removed:
    a provider dropped, or the certificate gone with its relation.
    """
    for name in files:
        if not _FILE_NAME.match(name):
            raise ValueError(f"not a plain relative file name: {name!r}")
    owner_ids = _ids(owner)
    changed = ensure_directory(directory, owner)
    for name, text in sorted(files.items()):
        path = directory / name
        for parent in reversed(path.relative_to(directory).parents[:-1]):
            changed |= ensure_directory(directory / parent, owner)
        changed |= _ensure_file(path, text.encode(), 0o600, owner_ids)
    wanted = {directory / name for name in files}
    for pruned in (directory / name for name in _PRUNED_DIRS):
        for path in sorted(pruned.rglob("*")) if pruned.is_dir() else ():
            if path.is_file() and path not in wanted:
                path.unlink()
                changed = True
    return changed


def configured_database(config_file: Path) -> Database | None:
    """The database GARM's configuration on this machine names; None if none is written."""
    return read_database(config_file.read_text()) if config_file.exists() else None


def on_postgresql(config_file: Path, related: bool) -> bool:
    """Whether GARM's data is, or is to be, in PostgreSQL: the one test of a shared database.

    On it the fence holds and no unit holds the data.
    """
    return related or isinstance(configured_database(config_file), PostgresqlDatabase)


def local_api(paths: Paths, port: int) -> tuple[str, Path | None]:
    """Where the charm reaches GARM on this machine, as GARM is configured there now.

    Its URL on loopback, and the CA its certificate is checked against (None: GARM
    serves plain HTTP). What is written decides, not what is wanted: before a pass
    rewrites GARM's files it talks to GARM as GARM still serves, after it as GARM will.
    """
    config = paths.config_file
    if config.exists() and serves_tls(config.read_text()):
        return f"https://{LOOPBACK}:{port}", paths.config_dir / CA_FILE
    return f"http://{LOOPBACK}:{port}", None


def served_tls(paths: Paths) -> ServingTls | None:
    """The certificate GARM's files on this machine hold, None when there is none to read."""
    names = (CERTIFICATE_FILE, KEY_FILE, CA_FILE)
    texts = [read_text(paths.config_dir / name) for name in names]
    if None in texts:
        return None
    return ServingTls.from_files(*(text or "" for text in texts))


def read_provider_files(config_dir: Path) -> dict[str, str]:
    """The provider files written earlier, by their name relative to ``config_dir``."""
    directory = config_dir / "providers"
    if not directory.is_dir():
        return {}
    return {f"providers/{path.name}": path.read_text() for path in directory.iterdir()}


def last_start(paths: Paths) -> datetime | None:
    """When a pass last started GARM (``restart``); None: not since its cause went."""
    text = (read_text(paths.start_file) or "").strip()
    return datetime.fromtimestamp(int(text), UTC) if text.isascii() and text.isdigit() else None


def restart_due(paths: Paths, now: datetime) -> bool:
    """Whether a pass may start a GARM that is not running, its cause unknown to it.

    systemd gives up on a GARM that keeps failing (``config.START_LIMIT_BURST`` starts
    within ``START_LIMIT_SECONDS``); a pass that cleared that count every time would undo
    the bound. So it clears it for a cause it cannot see go (GARM's database back, say)
    once that window has passed since it last did; for a change of its own (files,
    binaries, the lease) the caller clears it at once.
    """
    last = last_start(paths)
    return last is None or (now - last).total_seconds() >= START_LIMIT_SECONDS


def restart(paths: Paths, now: datetime, *, clear: bool) -> bool:
    """Restart GARM, so it reads its configuration and binaries again; whether it started.

    Once systemd gave up it refuses every start within its start limit's window: ``clear``
    runs ``reset-failed`` first and notes the moment for ``restart_due``; without it the
    start counts against systemd's bound like any of ``Restart=``'s. Why a start failed
    (GARM's lease check refused it, say) is in the journal (``start_failure``).
    """
    if clear:
        write_own(paths.start_file, f"{int(now.timestamp())}\n")
        try:
            subprocess.run(  # noqa: S603 (no shell; fixed words)
                [SYSTEMCTL, "reset-failed", SERVICE], capture_output=True, check=False, timeout=30
            )
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("systemd's count of GARM's starts could not be cleared: %s", exc)
    try:
        systemd.service_restart(SERVICE)
    except systemd.SystemdError as exc:
        logger.warning("systemd could not start GARM: %s", exc)
        return False
    return True


def gave_up() -> bool:
    """Whether systemd has given up on GARM (``failed``: its start limit hit, say)."""
    return systemd.service_failed(SERVICE)


def start_failure(since: datetime) -> str:
    """Why GARM is not running, from what it wrote to standard error since ``since``.

    With a log file set, what reaches the journal from ``garm.service``'s own processes is
    what GARM prints as it exits at start (``Error: …``, a panic) and its lease check's
    refusal (``ExecStartPre``). The last such error is shown, or the last line, with what
    could be a configuration value (quoted text, a URL's credentials, ``password=…``) cut
    out and bounded to ``CAUSE_LENGTH``: it goes to the status.
    """
    command = [
        JOURNALCTL,
        f"_SYSTEMD_UNIT={SERVICE}.service",
        f"--since=@{int(since.timestamp())}",
        "--output=cat",
        "--no-pager",
        "--quiet",
    ]
    try:
        done = subprocess.run(  # noqa: S603 (no shell; fixed words and a number)
            command, capture_output=True, text=True, errors="replace", check=False, timeout=30
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.error("GARM does not start; its journal could not be read: %s", exc)
        return NO_CAUSE
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith(_FATAL)]
    last = (fatal or lines or [""])[-1].removeprefix(_FATAL[0])
    cause = _PASSWORD.sub(r"\1=…", _USERINFO.sub("…@", _QUOTED.sub('"…"', last)))
    cause = _UNPRINTABLE.sub(" ", cause).strip() or NO_CAUSE
    cause = cause if len(cause) <= CAUSE_LENGTH else cause[: CAUSE_LENGTH - 1] + "…"
    logger.error("GARM does not start: %s", cause)
    return cause


def stop(unit_path: Path) -> bool:
    """Stop and disable GARM if it was ever set up here; whether it was.

    Only the leader runs GARM: a second one would manage the same scale sets on GitHub. A
    GARM running without its unit file (a failed reload deletes it, ``Units.install``) is
    stopped too: whether it runs is ``is_active``'s to say, not this file's.
    """
    there = unit_path.exists()
    if there:
        systemd.service_disable(unit_path.name)
    if there or is_active():
        systemd.service_stop(SERVICE)
    # Gone until this unit leads again, so later hooks have nothing to stop.
    unit_path.unlink(missing_ok=True)
    return there


def remove(paths: Paths) -> None:
    """Delete GARM's binaries, configuration (secrets included) and data from the machine.

    Run at the ``remove`` hook, after GARM was stopped: all of it is the charm's own, the
    configuration holds the OpenStack passwords and GARM's passphrase, the charm's
    directory its admin token. The timers' units go too, as a backstop: ``Units.remove``
    stops and disables them first.
    """
    for directory in (paths.config_dir, paths.data_dir, paths.charm_dir, paths.log_dir):
        shutil.rmtree(directory, ignore_errors=True)
    for path in (
        paths.binary,
        paths.provider_binary,
        paths.unit_file,
        paths.timer_service_file,
        paths.timer_file,
        paths.lease_service_file,
        paths.lease_timer_file,
    ):
        path.unlink(missing_ok=True)


def is_active() -> bool:
    """Whether systemd reports GARM as running."""
    return systemd.service_running(SERVICE)


def wait_until_answering(
    url: str, timeout: float, interval: float = 0.5, *, ca_file: Path | None = None
) -> bool:
    """Poll GARM at ``url`` until it answers HTTP at all, for at most about ``timeout`` s.

    Any status counts: before first-run GARM answers 409, without a token 401. Only a
    failed connection means it is not listening yet. Over HTTPS, GARM is checked
    against ``ca_file``: a GARM still serving an older certificate is not answering yet.
    """
    deadline = time.monotonic() + timeout
    with requests.Session() as session:
        # A proxy from the environment would answer (502) for a GARM that is down.
        session.trust_env = False
        if ca_file is not None:
            trust_only(session, str(ca_file))
        while True:
            remaining = deadline - time.monotonic()
            try:
                session.get(f"{url}/api/v1/controller", timeout=max(remaining, interval))
            except requests.RequestException:
                if remaining <= interval:
                    return False
                time.sleep(interval)
            else:
                return True


def _ensure_file(path: Path, data: bytes, mode: int, owner: tuple[int, int] | None) -> bool:
    """Write ``path`` unless it holds ``data`` with ``mode`` and ``owner`` (None: whoever's)."""
    if path.is_file():
        info = path.stat()
        if (
            owner in (None, (info.st_uid, info.st_gid))
            and stat.S_IMODE(info.st_mode) == mode
            and path.read_bytes() == data
        ):
            return False
    _write_atomic(path, data, mode, owner=owner)
    return True


def _write_atomic(path: Path, data: bytes, mode: int, owner: tuple[int, int] | None) -> None:
    """Write ``data`` beside ``path``, then rename it over ``path``: never seen half-written.

    Mode and owner are set before the rename, so the file is never seen with wrong ones.
    """
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), mode)
            if owner is not None:
                os.fchown(file.fileno(), *owner)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _ids(user: str) -> tuple[int, int]:
    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid
