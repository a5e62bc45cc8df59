"""GARM as the machine tier attaches it: the simulator, serving as GARM's config.toml says.

``garm --config /etc/garm/config.toml`` on a tier's machine, where ``garm`` is the
resource the tests attach (``tests.machine_tier.resources``): GARM's API and its
``/metrics`` on ``[apiserver] port``, over TLS with ``[apiserver.tls]`` when ``use_tls``;
its log in ``[logging] log_file``, made 0600 as GARM's rotating writer makes it; its
sqlite file in ``[database.sqlite3] db_file``. The data is the double's
(``tests.garm_double``), in memory: every start is a GARM whose first run is due. It
serves on loopback, where the charm talks to it (``garm.workload.local_api``).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from tests.garm_double import GarmDouble


def main(argv: list[str] | None = None) -> None:
    """Serve until systemd stops the service (SIGTERM)."""
    parser = argparse.ArgumentParser(description="GARM's API, simulated, as config.toml says")
    parser.add_argument("--config", required=True, type=Path)
    config = tomllib.loads(parser.parse_args(argv).config.read_text())
    api = config["apiserver"]
    files = api.get("tls", {})
    tls = (files["certificate"], files["key"]) if api.get("use_tls") else None
    log = os.open(config["logging"]["log_file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sqlite = config["database"].get("sqlite3")
    if sqlite is not None:
        os.close(os.open(sqlite["db_file"], os.O_WRONLY | os.O_CREAT, 0o600))
    garm = GarmDouble(port=api["port"], tls=tls, initialised=False, urls_set=False)
    garm.set_jwt_secret(config["jwt_auth"]["secret"])
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with garm:
        line = f'time={datetime.now(UTC).isoformat()} level=INFO msg="serving" url={garm.url}\n'
        os.write(log, line.encode())
        stopped.wait()


if __name__ == "__main__":
    main()
