"""Juju states for driving the real charm through ops.testing.

Relations as the configurator and postgresql write them, the charm's secrets, and what
GARM holds after a hook.
"""

from __future__ import annotations

import dataclasses
import tomllib
import weakref

import ops
from ops import testing

from juju.secrets import ADMIN_SECRET_LABEL, INTERNAL_SECRET_LABEL
from juju.status import CUT
from tests.databags import KEY_SECRET_URI, PASSWORD_SECRET_URI
from tests.garm_double import FAKE_APP_KEY, GarmDouble
from tests.machine import Machine
from tests.postgresql import (
    PROVIDER_CONFIG,
    PROVIDER_META,
    REL_ID,
    ProviderCharm,
    provider_answers,
    seen_by_requirer,
)


def configurator(*units: dict[str, str], id: int = 1) -> testing.Relation:
    return testing.Relation(
        "garm-configurator",
        remote_app_name="garm-configurator",
        id=id,
        remote_units_data=dict(enumerate(units)),
    )


def admin_secret(garm: GarmDouble) -> testing.Secret:
    return testing.Secret(
        {"username": garm.username, "password": garm.password, "email": "admin@garm.local"},
        label=ADMIN_SECRET_LABEL,
        owner="app",
    )


CONFIGURATOR_SECRETS = [
    testing.Secret({"value": "openstack-Pa55word"}, id=PASSWORD_SECRET_URI),
    testing.Secret({"value": FAKE_APP_KEY}, id=KEY_SECRET_URI),
]


INTERNAL_SECRET = testing.Secret(
    {"jwt-secret": "J" * 40 + "wt-5ecret!", "db-passphrase": "Db-Pa55phrase-0123456789abcdefgh"},
    label=INTERNAL_SECRET_LABEL,
    owner="app",
)


def make_state(garm: GarmDouble, resources, *relations, leader=True, **kw) -> testing.State:
    port = int(garm.url.rsplit(":", 1)[1])
    return testing.State(
        leader=leader,
        config={"api-port": port, **kw.pop("config", {})},
        relations=relations,
        secrets=[
            admin_secret(garm),
            INTERNAL_SECRET,
            *kw.pop("secrets", CONFIGURATOR_SECRETS),
        ],
        resources=resources,
        **kw,
    )


def publish(state: testing.State, relation_id: int, unit: int, data):
    """The state after a configurator unit published new data, and its relation."""
    old = state.get_relation(relation_id)
    assert isinstance(old, testing.Relation)
    units = {**old.remote_units_data, unit: data}
    new = dataclasses.replace(old, remote_units_data=units)
    relations = [new if r.id == relation_id else r for r in state.relations]
    return dataclasses.replace(state, relations=relations), new


def live_names(garm: GarmDouble) -> list[str]:
    return sorted(s["name"] for s in garm.scalesets())


def tags(garm: GarmDouble) -> list[list[str]]:
    return sorted(sorted(t["name"] for t in s.get("tags", [])) for s in garm.scalesets())


def relate_postgresql(ctx, state: testing.State, endpoints: str = "db.internal:5433"):
    """The hooks of integrating postgresql until its answer arrived, and the state after."""
    database = testing.Relation("postgresql", remote_app_name="postgresql", id=REL_ID)
    state = dataclasses.replace(state, relations=[*state.relations, database])
    state = ctx.run(ctx.on.relation_created(database), state)
    request = state.get_relation(REL_ID)
    assert isinstance(request, testing.Relation)
    provider = testing.Context(ProviderCharm, meta=PROVIDER_META, config=PROVIDER_CONFIG)
    databag, granted = seen_by_requirer(provider_answers(provider, request, endpoints))
    answered = dataclasses.replace(request, remote_app_data=databag)
    relations = [r for r in state.relations if r.id != REL_ID] + [answered]
    state = dataclasses.replace(state, relations=relations, secrets=[*state.secrets, *granted])
    return ctx.run(ctx.on.relation_changed(answered, remote_unit=0), state), answered


def backend(machine: Machine) -> str:
    return tomllib.loads(machine.paths.config_file.read_text())["database"]["backend"]


def providers_in_config(machine: Machine) -> list[str]:
    config = tomllib.loads(machine.paths.config_file.read_text())
    return [p["name"] for p in config.get("provider", [])]


# Where each Context's last run began in its log (``ctx.juju_log`` keeps every run's):
# set by the unit suite's conftest around every run.
RUN_LOG_STARTS: weakref.WeakKeyDictionary[testing.Context, int] = weakref.WeakKeyDictionary()


def in_full(ctx: testing.Context, state: testing.State) -> ops.StatusBase:
    """The unit's status with its message in full.

    ``juju status`` shows a line of at most 120 characters; a longer message is cut to
    fit, ends in `` …``, and is logged whole beside it (``juju.unit.status``), as an
    operator reads it in ``juju debug-log``.
    """
    status = state.unit_status
    if not status.message.endswith(CUT):
        return ops.StatusBase.from_name(status.name, status.message)
    prefix = "Status in full: "
    run = ctx.juju_log[RUN_LOG_STARTS.get(ctx, 0) :]  # the last run's, not an earlier one's
    logged = [line.message for line in run if line.message.startswith(prefix)]
    assert logged, f"the cut status {status.message!r} is not logged in full"
    full = logged[-1].removeprefix(prefix)
    assert full.startswith(status.message.removesuffix(CUT)), (status.message, full)
    return ops.StatusBase.from_name(status.name, full)
