"""The charm library's garm-side models (LIBPATCH 3), and that old readers are unaffected.

What garm publishes lives in *garm's application* databag; the configurator's data lives
in its *unit* databags. Today's configurator reads nothing from garm, and garm parses
only configurator unit databags, so neither reads the new keys; these tests pin that the
parsing of configurator data is unchanged even if the keys turned up beside it, and that
a reader of the new keys survives whatever garm (an older, a newer, a broken one) left.
"""

from __future__ import annotations

import json

import pytest
from charms.garm_machine.v0 import garm_configurator as lib
from charms.garm_machine.v0.garm_configurator import (
    PHASES,
    ConfiguratorUnitData,
    DatabagError,
    GarmAppData,
    ScalesetState,
)
from hypothesis import given
from hypothesis import strategies as st

from juju.relation import relation_state
from tests.databags import EXAMPLE_UNIT, SECOND_UNIT, follower

CFG0, CFG1 = "garm-configurator/0", "garm-configurator/1"
JUJU_KEYS = ("ingress-address", "egress-subnets", "private-address")

REPLACING = ScalesetState(
    "replacing", "lg-x64", "lg-x64-3f2a1c", 3, "draining 3 runners", "lg-x64-9b8c7d"
)
PUBLISHED = GarmAppData(
    scalesets={CFG0: REPLACING, CFG1: ScalesetState("held", "sm-x64", message="invalid x")}
)


def test_the_library_is_the_same_library_one_patch_on():
    assert (lib.LIBID, lib.LIBAPI, lib.LIBPATCH) == ("5c0a8f4e3b8d4f1e9a7c2d6b1e4f8a90", 0, 6)
    assert PHASES == ("creating", "serving", "replacing", "removing", "waiting", "held")


# --- the format, as written ---------------------------------------------------------------


def test_the_databag_as_garm_writes_it():
    assert PUBLISHED.to_databag() == {
        "version": "1",
        "scalesets": (
            '{"garm-configurator/0":{"draining":"3","message":"draining 3 runners",'
            '"name":"lg-x64","phase":"replacing","replaced":"lg-x64-9b8c7d",'
            '"scaleset":"lg-x64-3f2a1c"},'
            '"garm-configurator/1":{"message":"invalid x","name":"sm-x64","phase":"held"}}'
        ),
    }


def test_what_garm_writes_reads_back_whole():
    assert GarmAppData.from_databag(PUBLISHED.to_databag()) == GarmAppData(1, PUBLISHED.scalesets)
    assert GarmAppData.from_databag(PUBLISHED.to_databag()).for_unit(CFG0) == REPLACING


def test_unset_fields_are_absent_and_every_value_is_a_string():
    assert ScalesetState("creating").to_dict() == {"phase": "creating"}
    assert ScalesetState("creating", "ci", "", None, "  ").to_dict() == {
        "phase": "creating",
        "name": "ci",
    }
    for entry in json.loads(PUBLISHED.to_databag()["scalesets"]).values():
        assert all(isinstance(v, str) for v in entry.values())


def test_a_message_is_one_short_line():
    long = ScalesetState("held", message="line one\nline\ttwo\x00 " + "x" * 500).to_dict()
    assert long["message"].startswith("line one line two ")
    assert len(long["message"]) == lib.MAX_MESSAGE
    assert long["message"].endswith("…")


def test_equal_states_render_equal_text_whatever_the_order():
    swapped = GarmAppData(scalesets=dict(reversed(list(PUBLISHED.scalesets.items()))))
    assert swapped.to_databag() == PUBLISHED.to_databag()


# --- a reader of the new keys tolerates absence, other versions and garbage ---------------


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({}, id="an older garm: nothing"),
        pytest.param(
            {"ingress-address": "10.1.2.3", "egress-subnets": "10.1.2.3/32"}, id="Juju's only"
        ),
        pytest.param({"scalesets": "{not json"}, id="not JSON"),
        pytest.param({"scalesets": "[1, 2]"}, id="a list"),
        pytest.param({"scalesets": '"text"'}, id="a string"),
        pytest.param({"scalesets": "null"}, id="null"),
        pytest.param({"scalesets": "1" * 5000}, id="a number too long"),
        pytest.param({"scalesets": "[" * 100_000}, id="too deep"),
        pytest.param({"scalesets": ""}, id="emptied"),
        pytest.param({"scalesets": '{"a/0": 1, "b/0": [], "c/0": {"name": "x"}}'}, id="no phase"),
        pytest.param(
            {"scalesets": '{"a/0": {"phase": 7}, "b/0": {"phase": " "}}'}, id="bad phase"
        ),
        pytest.param(
            {"scalesets": json.dumps({k: {"phase": "x"} for k in ("a b/0", "A/0", "a/0\n", "a")})},
            id="not unit names",
        ),
    ],
)
def test_a_reader_finds_nothing_where_nothing_readable_is(data):
    assert GarmAppData.from_databag(data).scalesets == {}
    assert GarmAppData.from_databag(data).for_unit(CFG0) is None


@pytest.mark.parametrize(
    ("version", "expected"),
    [(None, None), ("1", 1), ("2", 2), (" 3 ", 3), ("v2", None), ("-1", None), ("", None)],
)
def test_the_version_is_read_when_it_can_be(version, expected):
    data = {} if version is None else {"version": version}
    assert GarmAppData.from_databag(data).version == expected


def test_a_newer_format_is_read_for_what_this_one_knows():
    data = {
        "version": "7",
        "something-else": "x",
        "scalesets": json.dumps(
            {
                CFG0: {
                    "phase": "migrating",
                    "name": "ci",
                    "scaleset": "ci-1a2b3c",
                    "draining": 2,
                    "eta": {"minutes": 5},
                },
                CFG1: {"phase": "serving", "draining": True, "message": ["not", "text"]},
            }
        ),
    }
    read = GarmAppData.from_databag(data)
    assert read.version == 7
    assert read.scalesets == {
        CFG0: ScalesetState("migrating", "ci", "ci-1a2b3c", 2),
        CFG1: ScalesetState("serving"),
    }
    assert not read.scalesets[CFG0].known
    assert read.scalesets[CFG1].known


@pytest.mark.parametrize(
    ("draining", "expected"),
    [("3", 3), (3, 3), ("0", 0), (-1, None), ("-1", None), ("2.5", None), (2.5, None),
     (True, None), ("1" * 20, None), (None, None), ("", None)],
)  # fmt: skip
def test_a_runner_count_is_read_when_it_is_one(draining, expected):
    assert ScalesetState.from_dict({"phase": "replacing", "draining": draining}) == (
        ScalesetState("replacing", draining=expected)
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=12), st.text(max_size=60), max_size=5))
def test_any_databag_reads_without_raising(data):
    GarmAppData.from_databag(data)


@given(st.dictionaries(st.text(max_size=20), JSON, max_size=4))
def test_any_json_reads_without_raising_and_what_is_read_renders_again(entries):
    read = GarmAppData.from_databag({"version": "1", "scalesets": json.dumps(entries)})
    assert GarmAppData.from_databag(read.to_databag()) == read


# --- old-style readers are unaffected -----------------------------------------------------


def test_configurator_data_parses_and_renders_as_before():
    parsed = ConfiguratorUnitData.from_databag(EXAMPLE_UNIT)
    assert parsed.to_databag() == {k: v for k, v in EXAMPLE_UNIT.items() if k not in JUJU_KEYS}


def test_garm_keys_beside_configurator_data_change_nothing_parsed():
    garm_keys = PUBLISHED.to_databag()
    for unit in (EXAMPLE_UNIT, SECOND_UNIT, follower(CFG1, EXAMPLE_UNIT, image=False)):
        assert ConfiguratorUnitData.from_databag({**unit, **garm_keys}) == (
            ConfiguratorUnitData.from_databag(unit)
        )


def test_garms_databag_read_as_a_unit_databag_is_a_unit_that_published_nothing():
    # Had a reader mistaken garm's databag for a configurator's, it would wait for a
    # scaleset definition, not refuse the data or define a scaleset.
    garm_keys = PUBLISHED.to_databag()
    assert not ConfiguratorUnitData.has_scaleset(garm_keys)
    state = relation_state(True, [(CFG0, garm_keys)], app="garm")
    assert state.silent == (CFG0,)
    assert state.desired.specs == ()
    assert state.desired.held == ()


def test_the_relation_state_garm_builds_ignores_the_new_keys():
    plain = relation_state(
        True, [(CFG0, EXAMPLE_UNIT), (CFG1, follower(CFG1, EXAMPLE_UNIT))], app="garm"
    )
    garm_keys = PUBLISHED.to_databag()
    mixed = relation_state(
        True,
        [
            (CFG0, {**EXAMPLE_UNIT, **garm_keys}),
            (CFG1, {**follower(CFG1, EXAMPLE_UNIT), **garm_keys}),
        ],
        app="garm",
    )
    assert mixed == plain


def test_a_unit_across_models_finds_its_entry_by_its_number():
    # garm knows a cross-model unit by the offer's name; the unit itself by its own.
    data = GarmAppData(
        scalesets={"ci-offer/0": ScalesetState("serving"), "ci-offer/1": ScalesetState("held")}
    )
    assert data.for_unit("garm-configurator/1") == ScalesetState("held")
    assert data.for_unit("ci-offer/0") == ScalesetState("serving")
    assert data.for_unit("garm-configurator/2") is None


# --- org and repo, as the real configurator leaves them (LIBPATCH 5) ----------------------

# garm-configurator writes with update() and never removes a key: switched from an org to
# a repo, it publishes both (charms/garm-configurator/src/charm.py, _configure_garm_relation
# in canonical/github-runner-operators). Key order in a databag means nothing.
SWITCHED = [
    {**EXAMPLE_UNIT, "org": "example-org", "repo": "example-org/ci"},
    {**{k: v for k, v in EXAMPLE_UNIT.items() if k != "org"}, "repo": "example-org/ci"}
    | {"org": "example-org"},
]


@pytest.mark.parametrize("data", SWITCHED)
def test_both_keys_read_as_the_reader_says(data):
    as_repo = ConfiguratorUnitData.from_databag(data, use="repo")
    as_org = ConfiguratorUnitData.from_databag(data, use="org")
    assert (as_repo.org, as_repo.repo) == (None, "example-org/ci")
    assert (as_org.org, as_org.repo) == ("example-org", None)


@pytest.mark.parametrize("data", SWITCHED)
def test_both_keys_without_a_say_are_refused_naming_them(data):
    with pytest.raises(DatabagError, match="org and repo are mutually exclusive"):
        ConfiguratorUnitData.from_databag(data)


def test_use_names_a_key_only_where_both_are_published():
    # One key: use changes nothing (it is no way to read an absent key).
    only_org = ConfiguratorUnitData.from_databag(EXAMPLE_UNIT, use="repo")
    assert (only_org.org, only_org.repo) == ("example-org", None)
    # The one used is still checked.
    bad = {**EXAMPLE_UNIT, "repo": "not a repo"}
    with pytest.raises(DatabagError, match="repo"):
        ConfiguratorUnitData.from_databag(bad, use="repo")
    assert ConfiguratorUnitData.from_databag(bad, use="org").org == "example-org"
