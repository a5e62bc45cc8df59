"""GARM as the machine tier attaches it: the simulator, serving as GARM's config.toml says.

``garm --config /etc/garm/config.toml`` on a tier's machine, where ``garm`` is the
resource the tests attach (``tests.machine_tier.hook``): GARM's API and its
``/metrics`` on ``[apiserver] port``, over TLS with ``[apiserver.tls]`` when ``use_tls``;
its log in ``[logging] log_file``, made 0600 as GARM's rotating writer makes it; the
providers its ``[[provider]]`` tables name; its database. The data is the double's
(``tests.garm_double``), in memory while it runs, and kept where ``[database]`` says, as
GARM keeps its own: committed after every request that may change it and when systemd
stops the service, and read again at the next start, by whichever machine's GARM starts
on it. On sqlite, in ``[database.sqlite3] db_file`` (created at the first start, as
GARM's is); on PostgreSQL, in a table of ``[database.postgresql]``'s database, over a
real connection (psycopg2: Debian's package, on the tier's machines only), so that a
new leader's GARM finds the controller and the scalesets the old leader's made. A
database it cannot reach stops it at start, as GARM exits. It serves on loopback, where
the charm talks to it (``garm.workload.local_api``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import signal
import threading
import tomllib
from datetime import UTC, datetime
from email.message import Message
from pathlib import Path
from typing import Any, Protocol

from tests.garm_double import FIRST_PROCESS, GarmDouble

# The double's own workings, not GARM's data: made anew at every start.
_RUNTIME = frozenset(
    {"_lock", "_http", "_clock", "url", "_serve_http", "_tls", "_initial", "_store"}
)
_READS = frozenset({"GET", "HEAD"})


class Store(Protocol):
    """Where the data outlives the process."""

    def load(self) -> bytes | None: ...

    def save(self, blob: bytes) -> None: ...


class SqliteFile:
    """``db_file``, written whole and renamed into place."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def load(self) -> bytes | None:
        path = self._path
        return path.read_bytes() if path.is_file() and path.stat().st_size else None

    def save(self, blob: bytes) -> None:
        partial = self._path.with_name(f".{self._path.name}.new")
        partial.write_bytes(blob)
        partial.chmod(0o600)
        partial.replace(self._path)


class Postgresql:
    """The one row of table ``garm_simulator`` in the database ``[database.postgresql]``
    names (``tests.machine_tier.database.stored`` reads it on the server)."""

    def __init__(self, server: dict[str, Any]) -> None:
        psycopg2 = importlib.import_module("psycopg2")  # the machine's, not the host's
        self._connection = psycopg2.connect(
            host=server["hostname"],
            port=server["port"],
            user=server["username"],
            password=server["password"],
            dbname=server["database"],
            sslmode=server["sslmode"],
            connect_timeout=10,
        )
        self._connection.autocommit = True
        self._execute("CREATE TABLE IF NOT EXISTS garm_simulator (id int PRIMARY KEY, data bytea)")

    def _execute(self, statement: str, *values: object) -> list[tuple[Any, ...]]:
        with self._connection.cursor() as cursor:
            cursor.execute(statement, values)
            return cursor.fetchall() if cursor.description else []

    def load(self) -> bytes | None:
        rows = self._execute("SELECT data FROM garm_simulator WHERE id = 1")
        return bytes(rows[0][0]) if rows else None

    def save(self, blob: bytes) -> None:
        self._execute(
            "INSERT INTO garm_simulator VALUES (1, %s) ON CONFLICT (id) DO UPDATE SET data = %s",
            blob,
            blob,
        )


def store(config: dict[str, Any]) -> Store:
    """Where the data of the database ``config`` names is kept."""
    settings = config["database"]
    if settings["backend"] == "sqlite3":
        return SqliteFile(Path(settings["sqlite3"]["db_file"]))
    return Postgresql(settings["postgresql"])


class Simulator(GarmDouble):
    """The double, committing its data after every request that may change it."""

    def __init__(self, data: Store, **kwargs: Any) -> None:
        self._store = data
        super().__init__(**kwargs)
        blob = data.load()
        if blob is not None:
            self.__dict__.update(pickle.loads(blob))  # noqa: S301 (its own data)

    def commit(self) -> None:
        with self._lock:
            data = {k: v for k, v in vars(self).items() if k not in _RUNTIME}
            self._store.save(pickle.dumps(data))

    def _handle(
        self,
        method: str,
        target: str,
        headers: Message,
        raw_body: bytes,
        process: str = FIRST_PROCESS,
    ) -> Any:
        response = super()._handle(method, target, headers, raw_body, process)
        if method not in _READS:
            self.commit()
        return response


def main(argv: list[str] | None = None) -> None:
    """Serve until systemd stops the service (SIGTERM)."""
    parser = argparse.ArgumentParser(description="GARM's API, simulated, as config.toml says")
    parser.add_argument("--config", required=True, type=Path)
    config = tomllib.loads(parser.parse_args(argv).config.read_text())
    api = config["apiserver"]
    files = api.get("tls", {})
    tls = (files["certificate"], files["key"]) if api.get("use_tls") else None
    log = os.open(config["logging"]["log_file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    garm = Simulator(store(config), port=api["port"], tls=tls, initialised=False, urls_set=False)
    garm.set_providers([provider["name"] for provider in config.get("provider", [])])
    garm.set_jwt_secret(config["jwt_auth"]["secret"])
    garm.commit()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with garm:
        line = f'time={datetime.now(UTC).isoformat()} level=INFO msg="serving" url={garm.url}\n'
        os.write(log, line.encode())
        stopped.wait()
    garm.commit()


if __name__ == "__main__":
    main()
