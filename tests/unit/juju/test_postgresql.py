"""GarmDatabase through ops.testing, against the library's own provider side.

The provider's databag and the credentials secret are never written by hand: a second
Context runs a minimal provider charm built on ``ResourceProviderEventHandler`` (what a
PostgreSQL charm on the V1 contract uses), and its output is what the requirer sees.
"""

from __future__ import annotations

import dataclasses
import json

import ops
import pytest
from dpcharmlibs.interfaces import (
    gen_hash,
)
from ops import testing

from garm.config import PostgresqlDatabase
from juju.postgresql import GarmDatabase
from tests.postgresql import (
    NEW_PASSWORD,
    PASSWORD,
    PROVIDER_CONFIG,
    PROVIDER_META,
    REL_ID,
    USERNAME,
    ProviderCharm,
    provider_answers,
    seen_by_requirer,
)

REQUIRER_META = {
    "name": "garm",
    "requires": {"postgresql": {"interface": "postgresql_client", "limit": 1}},
}


class RequirerCharm(ops.CharmBase):
    """Constructs GarmDatabase as the charm does and records what each hook sees.

    It observes what GarmCharm observes: the relation's own events and secret-changed,
    inside which the library does its work, not the library's events.
    """

    def __init__(self, framework: ops.Framework):
        super().__init__(framework)
        self.database = GarmDatabase(self)
        self.seen: list[tuple[str, PostgresqlDatabase | None]] = []
        relation = self.on["postgresql"]
        for event in (
            self.on.update_status,
            self.on.secret_changed,
            relation.relation_created,
            relation.relation_changed,
            relation.relation_broken,
        ):
            framework.observe(event, self._record)

    def _record(self, event: ops.EventBase) -> None:
        self.seen.append((event.handle.kind, self.database.postgresql()))


@pytest.fixture
def ctx() -> testing.Context[RequirerCharm]:
    return testing.Context(RequirerCharm, meta=REQUIRER_META)


@pytest.fixture
def provider() -> testing.Context[ProviderCharm]:
    return testing.Context(ProviderCharm, meta=PROVIDER_META, config=PROVIDER_CONFIG)


def run(
    ctx: testing.Context[RequirerCharm], event, state: testing.State
) -> tuple[testing.State, list[tuple[str, PostgresqlDatabase | None]]]:
    with ctx(event, state) as manager:
        out = manager.run()
        return out, manager.charm.seen


def requested(ctx: testing.Context[RequirerCharm]) -> testing.Relation:
    """The relation after relation-created on the leader: the request is in our databag."""
    relation = testing.Relation("postgresql", remote_app_name="postgresql", id=REL_ID)
    state = testing.State(leader=True, relations={relation})
    out, _ = run(ctx, ctx.on.relation_created(relation), state)
    written = out.get_relation(REL_ID)
    assert isinstance(written, testing.Relation)
    return written


def answered(
    ctx: testing.Context[RequirerCharm],
    provider: testing.Context[ProviderCharm],
    endpoints: str = "db.example:6432",
    credentials: bool = True,
) -> tuple[testing.State, list[tuple[str, PostgresqlDatabase | None]]]:
    """The requirer's relation-changed once the provider has answered."""
    request = requested(ctx)
    answer = provider_answers(provider, request, endpoints, credentials)
    databag, secrets = seen_by_requirer(answer)
    relation = dataclasses.replace(request, remote_app_data=databag)
    state = testing.State(leader=True, relations={relation}, secrets=secrets)
    return run(ctx, ctx.on.relation_changed(relation, remote_unit=0), state)


def expected(hostname: str, port: int, password: str = PASSWORD) -> PostgresqlDatabase:
    return PostgresqlDatabase(
        hostname=hostname, port=port, username=USERNAME, password=password, database="garm"
    )


def test_no_relation_means_no_postgresql(ctx):
    _, seen = run(ctx, ctx.on.update_status(), testing.State(leader=True))
    assert seen == [("update_status", None)]


def test_relation_created_writes_one_v1_request_for_garm(ctx):
    relation = testing.Relation("postgresql", remote_app_name="postgresql", id=REL_ID)
    out, seen = run(
        ctx, ctx.on.relation_created(relation), testing.State(leader=True, relations={relation})
    )
    assert seen == [("postgresql_relation_created", None)]
    databag = out.get_relation(REL_ID).local_app_data
    # Only the V1 keys: no V0 top-level "database", so a V0-only provider sees no request.
    assert set(databag) == {"version", "requests"}
    assert databag["version"] == "v1"
    (request,) = json.loads(databag["requests"])
    assert request["resource"] == "garm"
    # The provider answers under this id; the library derives it from name and salt.
    assert request["request-id"] == gen_hash("garm", request["salt"])


def test_no_answer_yet_means_no_postgresql(ctx):
    relation = requested(ctx)
    state = testing.State(leader=True, relations={relation})
    _, seen = run(ctx, ctx.on.relation_changed(relation, remote_unit=0), state)
    assert seen == [("postgresql_relation_changed", None)]


@pytest.mark.parametrize(
    ("endpoints", "hostname", "port"),
    [
        ("db.example:6432", "db.example", 6432),
        ("10.1.2.3:5432,10.1.2.4:5433", "10.1.2.3", 5432),
        ("db.example", "db.example", 5432),
        ("[2001:db8::1]:5432,[2001:db8::2]:5432", "2001:db8::1", 5432),
    ],
)
def test_answer_gives_first_endpoint_and_credentials_from_the_secret(
    ctx, provider, endpoints, hostname, port
):
    _, seen = answered(ctx, provider, endpoints)
    assert seen == [("postgresql_relation_changed", expected(hostname, port))]


def test_moved_primary_is_seen_in_relation_changed(ctx, provider):
    request = requested(ctx)
    first = provider_answers(provider, request, "10.1.2.3:5432")
    databag, secrets = seen_by_requirer(first)
    relation = dataclasses.replace(request, remote_app_data=databag)
    state = testing.State(leader=True, relations={relation}, secrets=secrets)
    before, _ = run(ctx, ctx.on.relation_changed(relation, remote_unit=0), state)

    moved = dataclasses.replace(first, config={**first.config, "endpoints": "10.1.2.4:5432"})
    databag, _ = seen_by_requirer(provider.run(provider.on.config_changed(), moved))
    relation = dataclasses.replace(before.get_relation(REL_ID), remote_app_data=databag)
    state = dataclasses.replace(before, relations={relation})
    _, seen = run(ctx, ctx.on.relation_changed(relation, remote_unit=0), state)

    assert seen == [("postgresql_relation_changed", expected("10.1.2.4", 5432))]


def test_rotated_password_is_seen_in_secret_changed(ctx, provider):
    before, _ = answered(ctx, provider)
    (secret,) = before.secrets
    # Reading it in relation-changed gave the secret our label, which is how the library
    # maps secret-changed back to this relation and request.
    assert secret.label is not None
    assert secret.label.startswith(f"postgresql.{REL_ID}.")
    rotated = dataclasses.replace(
        secret, latest_content={"username": USERNAME, "password": NEW_PASSWORD}
    )
    state = dataclasses.replace(before, secrets={rotated})
    _, seen = run(ctx, ctx.on.secret_changed(rotated), state)
    assert seen == [("secret_changed", expected("db.example", 6432, NEW_PASSWORD))]


def test_endpoints_without_credentials_mean_no_postgresql(ctx, provider):
    out, seen = answered(ctx, provider, credentials=False)
    assert not out.secrets
    assert seen
    assert all(database is None for _, database in seen)


def test_relation_broken_means_no_postgresql(ctx, provider):
    before, _ = answered(ctx, provider)
    _, seen = run(ctx, ctx.on.relation_broken(before.get_relation(REL_ID)), before)
    assert seen == [("postgresql_relation_broken", None)]


@pytest.mark.parametrize("endpoints", ["db.example:notaport", "db.example:0", ":5432"])
def test_unusable_endpoint_means_no_postgresql_and_a_warning(ctx, provider, endpoints):
    _, seen = answered(ctx, provider, endpoints)
    assert seen == [("postgresql_relation_changed", None)]
    warned = [line.message for line in ctx.juju_log if line.level == "WARNING"]
    assert any(message.startswith("Unusable answer on postgresql") for message in warned)


def test_unreadable_credentials_secret_means_no_postgresql(ctx, provider):
    before, _ = answered(ctx, provider)
    # The provider revoked or removed the secret: the databag still points at it.
    state = dataclasses.replace(before, secrets=set())
    _, seen = run(ctx, ctx.on.update_status(), state)
    assert seen == [("update_status", None)]
    assert any("Unusable answer on postgresql" in line.message for line in ctx.juju_log)


@pytest.mark.parametrize(
    "databag",
    [
        # V0 before Juju secrets, and V0 with the credentials in a secret.
        {"database": "garm", "endpoints": "db.example:5432", "username": USERNAME,
         "password": PASSWORD},
        {"database": "garm", "endpoints": "db.example:5432", "secret-user": "secret:abc"},
    ],
)  # fmt: skip
def test_legacy_v0_provider_answer_is_not_read(ctx, databag):
    """The V1 requirer reads only ``requests``; a V0-only provider never sees our request.

    A provider on the V0 library looks for a ``database`` key we do not write, so it
    cannot answer; if such a databag appeared anyway it is not mistaken for an answer.
    """
    relation = dataclasses.replace(requested(ctx), remote_app_data=databag)
    state = testing.State(leader=True, relations={relation})
    _, seen = run(ctx, ctx.on.relation_changed(relation, remote_unit=0), state)
    assert seen == [("postgresql_relation_changed", None)]


def test_password_never_reaches_the_log_or_our_databags(ctx, provider):
    before, _ = answered(ctx, provider)
    (secret,) = before.secrets
    rotated = dataclasses.replace(
        secret, latest_content={"username": USERNAME, "password": NEW_PASSWORD}
    )
    after, seen = run(
        ctx, ctx.on.secret_changed(rotated), dataclasses.replace(before, secrets={rotated})
    )
    # Both passwords were read, so each had its chance to leak.
    assert [database.password for _, database in seen if database] == [NEW_PASSWORD]
    logged = "\n".join(line.message for line in ctx.juju_log)
    assert PASSWORD not in logged
    assert NEW_PASSWORD not in logged
    relation = after.get_relation(REL_ID)
    written = json.dumps([dict(relation.local_app_data), dict(relation.local_unit_data)])
    assert PASSWORD not in written
    assert NEW_PASSWORD not in written
