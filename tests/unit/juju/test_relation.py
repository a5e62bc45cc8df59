"""Relation data into typed state: one rule per test, hostile values included."""

from __future__ import annotations

import base64
import json

import pytest
from charms.garm_machine.v0.garm_configurator import ConfiguratorUnitData, DatabagError

from juju.lifecycle import View
from juju.relation import relation_state, spec_from_unit
from runners.options import DebugSsh, Proxy, RunnerContext, RunnerOptions
from runners.proxy import PRE_INSTALL_NAME, aproxy_script
from runners.scripts import install_blocks
from scalesets.spec import HeldSpec, ScalesetSpec
from tests.databags import EXAMPLE_UNIT, SECOND_UNIT, follower

CFG0, CFG1 = "garm-configurator/0", "garm-configurator/1"


def parse(**changes: str | None) -> ConfiguratorUnitData:
    data = {**SECOND_UNIT, **changes}
    return ConfiguratorUnitData.from_databag({k: v for k, v in data.items() if v is not None})


def test_the_contract_example_parses_into_the_spec_it_describes():
    runner = RunnerContext(garm_host="10.1.2.9")
    spec = spec_from_unit(
        "garm-configurator/0", ConfiguratorUnitData.from_databag(EXAMPLE_UNIT), runner
    )
    script = "#!/bin/bash\napt-get install -y jq"
    proxy = Proxy("http://squid.internal:3128", ("80", "443"), ("10.0.0.0/8", "192.168.0.0/16"))
    options = RunnerOptions(
        dockerhub_mirror="https://registry-mirror.internal:5000",
        proxy=proxy,
        otel_endpoint="http://otel.internal:4317",
        pre_job_script='echo "job ${GITHUB_JOB} starting"',
    )
    assert spec == ScalesetSpec(
        source="garm-configurator/0",
        name="lg-x64",
        entity_kind="organization",
        entity_name="example-org",
        provider_name="garm-configurator-0",
        image="5b1f0b1e-2d0c-4a53-9d0e-6f3f0c2d9a71",
        flavor="m1.large",
        os_arch="amd64",
        max_runners=10,
        min_idle_runners=1,
        labels=("self-hosted", "linux", "x64", "large"),
        runner_group="Default",
        extra_specs={
            "disable_updates": True,
            "pre_install_scripts": {
                # The charm's proxy script sorts first: it runs before the configurator's.
                PRE_INSTALL_NAME: b64(aproxy_script(proxy, "10.1.2.9")),
                "pre_install.sh": b64(script),
            },
        },
        template_blocks=install_blocks(options, None),
    )
    assert list(spec.extra_specs["pre_install_scripts"]) == [PRE_INSTALL_NAME, "pre_install.sh"]


# The keys garm-provider-openstack's extra_specs schema lists; it sets
# additionalProperties false, so a runner of a scaleset with any other key never boots.
OPENSTACK_EXTRA_SPECS = {
    "security_groups",
    "network_id",
    "storage_backend",
    "boot_from_volume",
    "boot_disk_size",
    "use_config_drive",
    "enable_boot_debug",
    "allowed_image_owners",
    "image_visibility",
    "disable_updates",
    "extra_packages",
    "runner_install_template",
    "extra_context",
    "pre_install_scripts",
}


def test_extra_specs_hold_only_keys_the_openstack_provider_accepts():
    spec = spec_from_unit("garm-configurator/0", ConfiguratorUnitData.from_databag(EXAMPLE_UNIT))
    assert spec.extra_specs
    assert set(spec.extra_specs) <= OPENSTACK_EXTRA_SPECS


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_unit_without_runner_options_needs_no_template_and_no_proxy():
    spec = spec_from_unit(CFG0, parse())
    assert spec.template_blocks == ""
    assert "disable_updates" not in spec.extra_specs


def test_debug_ssh_alone_gives_every_scaleset_a_template():
    server = DebugSsh("tmate.internal", 10022, "SHA256:rsa", "SHA256:ed")
    spec = spec_from_unit(CFG0, parse(), RunnerContext(debug_ssh=server))
    assert spec.template_blocks == install_blocks(RunnerOptions(), server)
    assert "TMATE_SERVER_HOST=tmate.internal" in spec.template_blocks


PROXIED = {**SECOND_UNIT, "runner_http_proxy": "http://squid.internal:3128"}


@pytest.mark.parametrize("name", ["00-aproxy.sh", "0-setup.sh", "00-0.sh", "00-A.sh", "00-_x"])
def test_behind_a_proxy_no_configurator_script_may_run_before_the_charms(name):
    data = {**PROXIED, "pre_install_scripts": json.dumps({name: "echo mine"})}
    state = relation_state(True, [(CFG1, data)], app="garm")
    [held] = state.desired.held
    assert held.source == CFG1
    assert held.reason.startswith(f"invalid pre_install_scripts: {name!r} would run before")


@pytest.mark.parametrize("name", ["pre_install.sh", "01-setup.sh", "00-b.sh"])
def test_scripts_that_sort_after_the_charms_run_after_it(name):
    data = {**PROXIED, "pre_install_scripts": json.dumps({name: "echo mine"})}
    [spec] = relation_state(True, [(CFG1, data)], app="garm").desired.specs
    assert list(spec.extra_specs["pre_install_scripts"]) == [PRE_INSTALL_NAME, name]


def test_without_a_proxy_a_script_may_have_any_name():
    data = {**SECOND_UNIT, "pre_install_scripts": json.dumps({"00-aproxy.sh": "echo mine"})}
    [spec] = relation_state(True, [(CFG1, data)], app="garm").desired.specs
    assert list(spec.extra_specs["pre_install_scripts"]) == ["00-aproxy.sh"]


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("runner_http_proxy", "squid.internal:3128", "http(s) URL"),
        ("runner_http_proxy", "http://user:secret@squid:3128", "credentials"),
        ("runner_http_proxy", "user:secret@squid.internal:3128", "credentials"),
        ("runner_http_proxy", "socks5://u:secret@squid:1080", "credentials"),
        ("runner_http_proxy", "socks5://squid:1080", "http(s) URL"),
        ("runner_http_proxy", "http://squid:secret", "is not a URL"),
        ("dockerhub_mirror", "https://mirror.internal/$(id)'", "not a URL"),
        ("otel_collector_endpoint", "http://{{ .CallbackToken }}", "not a URL"),
        ("dockerhub_mirror", "https://mirror:0", "port 0"),
        ("dockerhub_mirror", "https://user:secret@mirror", "credentials"),
        ("otel_collector_endpoint", "http://otel:4317/?token=secret", "query"),
        ("dockerhub_mirror", "https://mirror/#frag", "fragment"),
        ("dockerhub_mirror", "https://mirror/v2/library", "no path"),
        ("aproxy_redirect_ports", "80,70000", "not a port"),
        ("aproxy_redirect_ports", "443-80", "ascending"),
        ("aproxy_exclude_addresses", "10.0.0.0/8,fe80::1", "IPv4"),
        ("aproxy_exclude_addresses", "10.0.0.0/33", "IPv4"),
    ],
)
def test_a_bad_runner_option_holds_the_unit_naming_the_key(key, value, why):
    data = {**SECOND_UNIT, "runner_http_proxy": "http://squid.internal:3128", key: value}
    state = relation_state(True, [(CFG1, data)], app="garm")
    assert state.desired.specs == ()
    [held] = state.desired.held
    assert (held.source, held.name, held.blocking) == (CFG1, "sm-x64", True)
    assert held.reason.startswith(f"invalid {key}:")
    assert why in held.reason
    # No refused URL is repeated back: a proxy URL may carry a password.
    if not key.startswith("aproxy_"):
        assert value not in held.reason
    assert "secret" not in held.reason


def test_redirect_ports_and_exclusions_mean_nothing_without_a_proxy():
    spec = spec_from_unit(
        CFG0, parse(aproxy_redirect_ports="8080", aproxy_exclude_addresses="10.0.0.0/8")
    )
    assert spec.extra_specs == {}


def test_a_repository_unit_targets_the_repository():
    spec = spec_from_unit("u/0", parse(org=None, repo="owner/name"))
    assert (spec.entity_kind, spec.entity_name) == ("repository", "owner/name")


def test_render_then_parse_is_the_same_model():
    parsed = ConfiguratorUnitData.from_databag(EXAMPLE_UNIT)
    assert ConfiguratorUnitData.from_databag(parsed.to_databag()) == parsed


def test_render_writes_strings_only_and_leaves_unset_keys_out():
    rendered = parse().to_databag()
    assert all(isinstance(v, str) for v in rendered.values())
    assert "repo" not in rendered
    assert rendered["labels"] == "self-hosted,linux,x64"
    assert rendered["max_runner"] == "2"


def test_labels_are_split_trimmed_and_empties_dropped():
    assert parse(labels=" a , b,,c ,").labels == ("a", "b", "c")


def test_blank_optional_values_are_absent():
    assert parse(runner_group="   ").runner_group == "Default"
    assert parse(labels="").labels == ()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": None}, "name: missing"),
        ({"name": "a/b"}, "name: 'a/b' is not a scaleset name"),
        ({"name": "a,b"}, "name: 'a,b' is not a scaleset name"),
        ({"name": "x" * 65}, "name: 'xxx"),
        ({"name": "ci\nrm -rf /"}, "name: contains a newline or control character"),
        ({"name": "ünï"}, "name: 'ünï' is not a scaleset name"),
        ({"name": "-ci"}, "name: '-ci' is not a scaleset name"),
        ({"provider_name": None}, "provider_name: missing"),
        ({"flavor": None}, "flavor: missing"),
        ({"flavor": "m1\x00"}, "flavor: contains a newline or control character"),
        ({"os_arch": "sparc"}, "os_arch: 'sparc' is not one of amd64, arm64, i386, arm"),
        ({"max_runner": None}, "max_runner: missing"),
        ({"max_runner": "ten"}, "max_runner: must be a whole number, got 'ten'"),
        ({"max_runner": "-1"}, "max_runner: must be a whole number, got '-1'"),
        ({"max_runner": "1e3"}, "max_runner: must be a whole number, got '1e3'"),
        ({"max_runner": "0"}, "max_runner: must be at least 1"),
        ({"max_runner": "99999"}, "max_runner: must be at most 1000, got 99999"),
        ({"max_runner": "٣"}, "max_runner: must be a whole number, got '٣'"),
        ({"min_idle_runner": "3"}, "min_idle_runner: 3 is above max_runner 2"),
        ({"min_idle_runner": "1.5"}, "min_idle_runner: must be a whole number, got '1.5'"),
        ({"org": None}, "org: one of org or repo is required"),
        ({"repo": "o/r"}, "org: org and repo are mutually exclusive"),
        ({"org": "bad org"}, "org: 'bad org' is not a GitHub organisation name"),
        ({"org": None, "repo": "noslash"}, "repo: 'noslash' is not owner/name"),
        ({"labels": "ok,has space"}, "labels: 'has space' is not a label"),
        ({"labels": "ok,$(reboot)"}, "labels: '$(reboot)' is not a label"),
        ({"labels": ",".join(f"l{i}" for i in range(33))}, "labels: more than 32 labels"),
        ({"pre_install_scripts": "{not json"}, "pre_install_scripts: not valid JSON"),
        ({"pre_install_scripts": '["a"]'}, "pre_install_scripts: must be a JSON object"),
        ({"pre_install_scripts": '{"a.sh": 1}'}, "pre_install_scripts: must be a JSON object"),
        ({"pre_install_scripts": '{"../x": "y"}'}, "pre_install_scripts: '../x' is not a valid"),
        ({"pre_install_scripts": '{"a": "' + "x" * 70000 + '"}'}, "pre_install_scripts: larger"),
        ({"runner_group": "g\nh"}, "runner_group: contains a newline or control character"),
    ],
)
def test_hostile_values_are_refused_with_the_key_and_rule(changes, message):
    with pytest.raises(DatabagError) as caught:
        parse(**changes)
    assert str(caught.value).startswith(message)


def test_bad_unit_is_held_by_name_and_the_others_proceed():
    bad = {**SECOND_UNIT, "max_runner": "ten"}
    state = relation_state(True, [(CFG0, EXAMPLE_UNIT), (CFG1, bad)], app="garm")
    assert [s.name for s in state.desired.specs] == ["lg-x64"]
    assert state.desired.held == (
        HeldSpec(CFG1, "sm-x64", "invalid max_runner: must be a whole number, got 'ten'"),
    )


@pytest.mark.parametrize("name", ["ci!", "a/b", "   "])
def test_bad_unit_with_an_unusable_name_is_held_without_one(name):
    state = relation_state(True, [(CFG1, {**SECOND_UNIT, "name": name})], app="garm")
    (held,) = state.desired.held
    assert held.name == ""


def test_unit_without_image_is_not_ready_rather_than_gone():
    phase_a = {k: v for k, v in SECOND_UNIT.items() if k != "image_id"}
    state = relation_state(True, [(CFG1, phase_a)], app="garm")
    assert state.desired.specs == ()
    assert state.desired.held == (
        HeldSpec(CFG1, "sm-x64", "image_id not published yet", blocking=False),
    )


def test_followers_waiting_for_their_image_are_no_news_once_the_leader_defines_it():
    followers = [(f"garm-configurator/{n}", False) for n in (1, 2)]
    units = [(CFG0, EXAMPLE_UNIT)] + [
        (unit, follower(unit, EXAMPLE_UNIT, image=image)) for unit, image in followers
    ]
    state = relation_state(True, units, app="garm")
    assert [s.source for s in state.desired.specs] == [CFG0]
    assert state.desired.held == ()


def test_an_application_still_waiting_for_its_image_is_reported_once():
    units = [(f"garm-configurator/{n}", None) for n in range(3)]
    state = relation_state(
        True, [(unit, follower(unit, SECOND_UNIT, image=False)) for unit, _ in units], app="garm"
    )
    assert state.desired.held == (
        HeldSpec(CFG0, "sm-x64", "image_id not published yet", blocking=False),
    )


@pytest.mark.parametrize("provider", ["garm-configurator-0", "garm-configurator-7", "cfg"])
def test_a_unit_naming_another_units_provider_is_refused_and_defines_nothing(provider):
    foreign = {**EXAMPLE_UNIT, "provider_name": provider, "openstack_username": "intruder"}
    state = relation_state(True, [(CFG0, EXAMPLE_UNIT), (CFG1, foreign)], app="garm")
    assert [s.source for s in state.desired.specs] == [CFG0]
    (held,) = state.desired.held
    assert (held.source, held.blocking) == (CFG1, True)
    assert held.reason.startswith(f"invalid provider_name: {provider!r} is not this unit's own")
    # Nothing of it reaches GARM's setup, so it can rewrite no provider.
    assert [unit for unit, _ in state.units] == [CFG0]


def test_unit_that_published_nothing_yet_is_only_noted():
    state = relation_state(True, [("u/0", {"ingress-address": "10.0.0.1"})], app="garm")
    assert state.desired.specs == ()
    assert state.desired.held == ()
    assert state.silent == ("u/0",)


def test_a_cross_model_unit_named_after_its_alias_defines_its_own_provider():
    # Consumed as "ci-cfg", the configurator still derives names from its real app name.
    unit, data = "ci-cfg/3", {**EXAMPLE_UNIT, "provider_name": "garm-configurator-3"}
    state = relation_state(
        True, [(unit, data)], View(True, cross_model=frozenset({"ci-cfg"})), app="garm"
    )
    (spec,) = state.desired.specs
    assert spec.provider_name == "ci-cfg-3"
    assert [data.provider_name for _, data in state.units] == ["ci-cfg-3"]
    # The same name from an application of this model is another unit's: refused.
    local = relation_state(True, [(unit, data)], app="garm")
    assert local.desired.specs == () and local.units == ()
    assert local.desired.held[0].reason.startswith("invalid provider_name")


def test_what_a_partly_seen_application_publishes_is_unsettled_and_nothing_else():
    """ADR 0002: a unit of an application this unit may not see whole can publish a name
    another unit also publishes; the planner retires none of those (``Desired.unsettled``).
    An invalid name is kept too when it can be read, as spelt in any case."""
    bad = {**SECOND_UNIT, "name": "Sm-X64", "max_runner": "0"}
    units = [
        ("cfg-a/0", EXAMPLE_UNIT),
        ("cfg-b/0", bad),
        ("cfg-b/1", {**SECOND_UNIT, "name": "not a name!"}),
    ]

    partial = relation_state(True, units, View(False, "cfg-b", frozenset({"cfg-b"})), app="garm")
    whole = relation_state(True, units, app="garm")

    assert partial.desired.unsettled == {"sm-x64"}
    assert whole.desired.unsettled == frozenset()
