"""The charm's metrics between hooks: a file each leader pass writes, and what serves it.

At the end of every leader pass ``publish`` renders the metrics (``metrics``) and renames
them over ``/var/lib/garm-charm/metrics/metrics``; ``garm-charm-metrics.service``, a few
lines of stdlib Python (``SERVER``) run by the machine's python3 under a transient user
that sees that directory alone, serves it at ``127.0.0.1:9099/metrics`` (docs/adr/0005).
The count of force-removals is kept beside it (root's), so the counter carries on across
hooks. Only the leader serves: ``remove`` takes the service and the file away elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from datetime import datetime
from pathlib import Path

from charmlibs import systemd

from garm import workload
from garm.config import check_unit_paths
from observe import metrics
from scalesets.reconciler import Outcome
from scalesets.spec import Settings

logger = logging.getLogger(__name__)

SERVICE = "garm-charm-metrics.service"
PORT = 9099
PYTHON = "/usr/bin/python3"
# What Prometheus' text format is served as; Prometheus 3 refuses a scrape whose
# Content-Type it does not know unless told a fallback, so no guessed type will do.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# The server, for the machine's python3 (stdlib only, run with -I). Every scrape reads
# the file afresh: the charm renames a whole new file over it, never writes in place.
SERVER = f'''\
"""Serve one file at http://127.0.0.1:PORT/metrics; installed by the garm charm.

Usage: python3 -I serve-metrics.py FILE PORT. See the charm's docs/adr/0005.
"""

import http.server
import sys

FILE, PORT = sys.argv[1], int(sys.argv[2])


class Handler(http.server.BaseHTTPRequestHandler):
    timeout = 10  # a client that sends nothing is dropped

    def do_GET(self):
        if self.path.partition("?")[0] != "/metrics":
            self.send_error(404)
            return
        try:
            with open(FILE, "rb") as file:
                body = file.read()
        except OSError:
            self.send_error(503, "no pass of the charm has written its metrics yet")
            return
        self.send_response(200)
        self.send_header("Content-Type", "{CONTENT_TYPE}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_request(self, code="-", size="-"):
        pass  # one line per scrape would fill the journal; errors are still logged


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
'''


def render_unit(server: str, metrics: str, python: str = PYTHON) -> str:
    """The unit that serves the file ``metrics`` at ``127.0.0.1:<PORT>/metrics`` (ADR 0005).

    Of ``/var/lib`` it sees only the metrics file's directory, bound read-only: not the
    file, which each pass renames a new one over. Every path put into it is checked
    rather than escaped: anything systemd would split, unquote or expand raises ValueError.
    """
    check_unit_paths(server, metrics, python)
    directory = str(Path(metrics).parent)
    lines = [
        "[Unit]",
        f"Description=Serve the garm charm's metrics at 127.0.0.1:{PORT}/metrics",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={python} -I {server} {metrics} {PORT}",
        "Restart=always",
        "RestartSec=5",
        "DynamicUser=yes",
        "TemporaryFileSystem=/var/lib:ro",
        f"BindReadOnlyPaths={directory}",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "PrivateMounts=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "RestrictAddressFamilies=AF_INET AF_UNIX",
        "IPAddressDeny=any",
        "IPAddressAllow=localhost",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "ProtectProc=invisible",
        "ProcSubset=pid",
        "RestrictNamespaces=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "MemoryDenyWriteExecute=yes",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
        "SystemCallFilter=~@privileged @resources",
        # A call the filter refuses fails, rather than killing the server.
        "SystemCallErrorNumber=EPERM",
        "UMask=0077",
        "MemoryMax=64M",
        "TasksMax=16",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def publish(
    paths: workload.Paths,
    outcome: Outcome | None,
    *,
    ended: datetime,
    duration: float,
    reconcile_interval: int,
    settings: Settings | None,
    version: str,
) -> bool:
    """Write a leader pass's metrics (``metrics.render``'s) and keep them served; True if done.

    Metrics never fail a pass: a failure is logged and leaves the last file in place,
    whose timestamp then ages into the staleness alert.
    """
    try:
        total = _count_force_removals(paths, metrics.force_removals(outcome))
        text = metrics.render(
            outcome,
            ended=ended,
            duration=duration,
            force_removals_total=total,
            reconcile_interval=reconcile_interval,
            settings=settings,
            version=version,
        )
        # 0755 for the service's user; its parent stays root's (the bind mount).
        workload.ensure_directory(paths.metrics_dir.parent, None)
        paths.metrics_dir.mkdir(mode=0o755, exist_ok=True)
        paths.metrics_dir.chmod(0o755)
        workload._write_atomic(paths.metrics_file, text.encode(), 0o644, owner=None)
        if ensure(paths):
            logger.info("charm metrics served at 127.0.0.1:%s/metrics", PORT)
    except Exception as exc:  # metrics never fail a pass
        logger.error("charm metrics not published: %s", exc)
        return False
    return True


def units(paths: workload.Paths) -> workload.Units:
    """The server and its unit on this machine; restarted, so that it runs a changed script."""
    files = (paths.metrics_server, paths.metrics_unit_file)
    return workload.Units(SERVICE, files, start="restart")


def ensure(paths: workload.Paths) -> bool:
    """Install the server and its unit, enabled and running; whether anything changed."""
    # The unit names the machine's own paths, whatever root the files are written under.
    machine = workload.Paths()
    return units(paths).install(
        (SERVER, render_unit(str(machine.metrics_server), str(machine.metrics_file)))
    )


def remove(paths: workload.Paths) -> bool:
    """Stop and disable the service, delete it and the metrics; whether it was installed.

    So that no scrape takes a unit's last file for the leader's. The force-removal count
    stays for its next lead. Files go only once systemd has done its part, so a failure
    leaves them for the next hook.
    """
    try:
        installed = units(paths).remove()
    except systemd.SystemdError as exc:
        # Left installed, so that the next hook tries again; never fails this one.
        logger.error("charm metrics service not stopped: %s", exc)
        return False
    with contextlib.suppress(OSError):  # the charm's own directory, unless not empty
        paths.metrics_server.parent.rmdir()
    shutil.rmtree(paths.metrics_dir, ignore_errors=True)
    return installed


def _count_force_removals(paths: workload.Paths, more: int) -> int:
    """Add ``more`` to the running count kept on this unit and keep it; the new total.

    An unreadable state starts again from zero: Prometheus reads that as a reset.
    """
    try:
        state = json.loads(paths.metrics_state.read_text())
    except (OSError, ValueError, RecursionError):
        state = None
    kept = state.get("force_removals_total") if isinstance(state, dict) else None
    if not isinstance(kept, int) or isinstance(kept, bool) or kept < 0:
        kept = 0
    total = kept + more
    if more or not paths.metrics_state.exists():
        workload.write_own(paths.metrics_state, json.dumps({"force_removals_total": total}) + "\n")
    return total
