"""GARM as the machine tier attaches it: the simulator, serving as GARM's config.toml says.

``garm --config /etc/garm/config.toml`` on a tier's machine, where ``garm`` is the
resource the tests attach (``tests.machine_tier.resources``): GARM's API and its
``/metrics`` on ``[apiserver] port``, over TLS with ``[apiserver.tls]`` when ``use_tls``;
its log in ``[logging] log_file``, made 0600 as GARM's rotating writer makes it; its
database. The data is the double's (``tests.garm_double``), in memory while it runs;
as GARM's database outlives GARM, it is kept when systemd stops the service and read
again at the next start: in ``[database.sqlite3] db_file``, or, for a PostgreSQL
database, in a file named after it in ``DATABASES``. It serves on loopback, where the
charm talks to it (``garm.workload.local_api``).
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import threading
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from tests.garm_double import GarmDouble

# The double's own workings, not GARM's data: made anew at every start.
_RUNTIME = frozenset({"_lock", "_http", "_clock", "url", "_serve_http", "_tls", "_initial"})
# The PostgreSQL server's files: where the tier binds one directory of the host into
# each machine that shares the database (in GARM's data directory, the one place the
# unit lets GARM write).
DATABASES = Path("/var/lib/garm/postgresql")


def database(config: dict) -> Path:
    """Where the data of the database ``config`` names is kept between runs."""
    settings = config["database"]
    if settings["backend"] == "sqlite3":
        return Path(settings["sqlite3"]["db_file"])
    server = settings["postgresql"]
    DATABASES.mkdir(exist_ok=True)
    return DATABASES / f"{server['hostname']}-{server['port']}-{server['database']}"


def _load(garm: GarmDouble, path: Path) -> None:
    if path.is_file() and path.stat().st_size:
        garm.__dict__.update(pickle.loads(path.read_bytes()))  # noqa: S301 (its own file)


def _save(garm: GarmDouble, path: Path) -> None:
    with garm._lock:
        data = {key: value for key, value in vars(garm).items() if key not in _RUNTIME}
        blob = pickle.dumps(data)
    partial = path.with_name(f".{path.name}.new")
    partial.write_bytes(blob)
    partial.chmod(0o600)
    partial.replace(path)


def main(argv: list[str] | None = None) -> None:
    """Serve until systemd stops the service (SIGTERM)."""
    parser = argparse.ArgumentParser(description="GARM's API, simulated, as config.toml says")
    parser.add_argument("--config", required=True, type=Path)
    config = tomllib.loads(parser.parse_args(argv).config.read_text())
    api = config["apiserver"]
    files = api.get("tls", {})
    tls = (files["certificate"], files["key"]) if api.get("use_tls") else None
    log = os.open(config["logging"]["log_file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    data = database(config)
    garm = GarmDouble(port=api["port"], tls=tls, initialised=False, urls_set=False)
    _load(garm, data)
    garm.set_jwt_secret(config["jwt_auth"]["secret"])
    _save(garm, data)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with garm:
        line = f'time={datetime.now(UTC).isoformat()} level=INFO msg="serving" url={garm.url}\n'
        os.write(log, line.encode())
        stopped.wait()
    _save(garm, data)


if __name__ == "__main__":
    main()
