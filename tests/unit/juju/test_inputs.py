"""The leader's inputs as a hook reads them from Juju: on first use, once, never raising."""

from __future__ import annotations

import pytest
from ops import testing

from charm import GarmCharm
from juju.config import CharmConfig, ConfigError
from juju.records import LeaderInputs
from tests.charm_states import make_state

pytestmark = pytest.mark.usefixtures("machine")


def reads(manager) -> LeaderInputs:
    charm: GarmCharm = manager.charm
    leader = charm._inputs(None).leader
    assert leader is not None
    return leader


def test_an_option_juju_leaves_out_reads_as_its_charmcraft_yaml_default(ctx, world, resources):
    state = make_state(world, resources, config={"external-url": "https://garm.example"})
    with ctx(ctx.on.update_status(), state) as manager:
        backend = manager.charm.model._backend
        given = backend.config_get()
        del given["external-url"]
        backend.config_get = lambda: given  # as some Juju does for an option set to ""
        config = reads(manager).config
        manager.run()
    assert isinstance(config, CharmConfig)
    assert config.external_url == ""
    assert config.api_port == int(world.url.rsplit(":", 1)[1])  # Juju's value wins


def test_a_bad_option_is_an_answer_not_an_error(ctx, world, resources):
    state = make_state(world, resources, config={"reconcile-interval": 5})
    with ctx(ctx.on.update_status(), state) as manager:
        config = reads(manager).config
        manager.run()
    assert isinstance(config, ConfigError)
    assert str(config) == "reconcile-interval: must be 0 or 10-3600"


def test_each_answer_is_read_once(ctx, world, resources):
    with ctx(ctx.on.update_status(), make_state(world, resources)) as manager:
        given = reads(manager)
        assert given.config is given.config
        assert given.configurators is given.configurators
        assert given.admin is not None and given.admin is given.admin
        manager.run()


def test_the_charms_secrets_read_as_none_until_they_exist(ctx, world, resources):
    state = testing.State(leader=True, resources=resources)
    with ctx(ctx.on.update_status(), state) as manager:
        given = reads(manager)
        assert (given.admin, given.internal) == (None, None)
        manager.run()
