"""The tier's PostgreSQL: one real server that the units' machines reach as a database.

It runs in a container of its own (Debian 12's ``postgresql``, cluster 15/main), not on
either unit's machine: what the fence is about is a unit cut off while the database
goes on, and a database on the old leader's machine would share that machine's fate (or
its clock, its network) with the GARM that must stop. Its only socket is a Unix one in a
host directory bound into every container that uses it (``SOCKETS``); each unit's
machine has in its place what a network gives a unit, ``ENDPOINT`` on its own loopback
(``systemd-socket-proxyd`` on a socket unit, both systemd's own), so the containers keep
their own network namespaces and each GARM its own port: two GARMs that overlap both
run, and both show.

The charm learns ``ENDPOINT`` and the credentials the way it does from a PostgreSQL
charm (``tests.postgresql``: the same user, password and database), and GARM's
``config.toml`` is what points GARM, or the simulator, at the server.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from juju.postgresql import DATABASE_NAME
from tests.nspawn import Machine
from tests.postgresql import PASSWORD, USERNAME

SOCKETS = "/srv/tier-postgresql"
ENDPOINT = "127.0.0.1:5432"
CLUSTER = "15/main"
_SOCKET = f"{SOCKETS}/.s.PGSQL.5432"
_PROXY = {
    "/etc/systemd/system/tier-postgresql.socket": (f"[Socket]\nListenStream={ENDPOINT}\n"),
    "/etc/systemd/system/tier-postgresql.service": (
        f"[Service]\nExecStart=/lib/systemd/systemd-socket-proxyd {_SOCKET}\n"
    ),
}


@dataclass(frozen=True)
class Server:
    """The server's container, and the host directory its socket is in."""

    machine: Machine
    sockets: Path


def serve(machine: Machine) -> None:
    """Start PostgreSQL in ``machine``, listening on ``SOCKETS`` alone, passwords asked
    of every user but its own superuser (on the socket, a unit's connection included)."""
    version, name = CLUSTER.split("/")
    conf = f"/etc/postgresql/{version}/{name}"
    machine.sh(
        f"chown postgres:postgres {SOCKETS}\n"
        f"printf \"listen_addresses = ''\\nunix_socket_directories = '{SOCKETS}'\\n\""
        f" > {conf}/conf.d/tier.conf\n"
        "printf 'local all postgres peer\\nlocal all all scram-sha-256\\n'"
        f" > {conf}/pg_hba.conf\n"
        f"systemctl start postgresql@{version}-{name}\n"
    )


def fresh(machine: Machine) -> None:
    """A database as a PostgreSQL charm's relation gives GARM one: new, empty, owned by
    the relation's user."""
    statements = [
        f"DROP DATABASE IF EXISTS {DATABASE_NAME} WITH (FORCE)",
        f"DROP ROLE IF EXISTS {USERNAME}",
        f"CREATE ROLE {USERNAME} LOGIN PASSWORD '{PASSWORD}'",
        f"CREATE DATABASE {DATABASE_NAME} OWNER {USERNAME}",
    ]
    script = "\n".join(
        f'runuser -u postgres -- psql -q -h {SOCKETS} -v ON_ERROR_STOP=1 -c "{s}"'
        for s in statements
    )
    machine.sh(script)


def reach(machine: Machine) -> None:
    """``ENDPOINT`` on ``machine``'s loopback leads to the server (``SOCKETS`` bound in)."""
    for path, text in _PROXY.items():
        machine.path(path).write_text(text)
    machine.sh("systemctl daemon-reload && systemctl start tier-postgresql.socket")


def stored(machine: Machine) -> bytes:
    """What the GARM simulator keeps in the database (``garm_server.Postgresql``), read on
    the server ``machine``."""
    query = "SELECT encode(data, 'base64') FROM garm_simulator WHERE id = 1"
    text = machine.sh(
        f'runuser -u postgres -- psql -h {SOCKETS} -d {DATABASE_NAME} -At -c "{query}"'
    )
    return base64.b64decode("".join(text.split()))
