"""Nothing the charm reads from outside raises: every parser answers a value or a refusal.

One rule for every kind of outside data (design: "Nothing raises"): GARM's JSON and the
times in it, the notes the charm keeps on a scaleset, what it keeps in the peer relation
and the cos-agent databag, relation data, the files it wrote for GARM, and the resources
an operator attaches. Hypothesis feeds each parser random and hostile input; the only
answers allowed are a value of the parser's type or the refusal it documents. Each case
here fed one parser a value that once raised something else (OverflowError from a stamp
at the calendar's edge, ValueError from an offset of a day, RecursionError from a tar
archive or deep JSON).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import string
import tarfile
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from charms.garm_machine.v0.garm_configurator import ConfiguratorUnitData, DatabagError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from garm import resources
from garm.config import read_database, read_provider
from garm.models import Credential, Entity, Instance, ScaleSet, Template, parse_time
from garm.refusals import Refusals
from juju.lifecycle import View
from juju.postgresql import _first_endpoint
from juju.relation import relation_state
from observe.token import HeldToken, renewal_due, token_expiry
from runners.options import DebugSshError, debug_ssh
from scalesets.actions import Observed
from scalesets.notes import Notes, unread
from scalesets.planner import plan
from scalesets.spec import Desired, Settings
from tests.archives import long_names, raw_header
from tests.binaries import CHECK_USER
from tests.databags import EXAMPLE_UNIT, SECOND_UNIT
from tests.specs import make_spec
from tests.wire import T0, instance_json, scaleset_json

HOSTILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = T0 + timedelta(days=1)

# Times as RFC 3339 spells them, with every part stretched past its range, and the
# calendar's edges with offsets that push them off it.
DIGITS = st.text(alphabet=string.digits + "٣²", min_size=1, max_size=4)
TIMES = st.one_of(
    st.builds(
        "{}-{}-{}T{}:{}:{}{}{}".format,
        DIGITS,
        DIGITS,
        DIGITS,
        DIGITS,
        DIGITS,
        DIGITS,
        st.sampled_from(["", ".5", ".123456789123"]),
        st.sampled_from(["Z", "z", "+00:00", "-01:00", "+23:59", "+24:00", "-99:99", "+14:30"]),
    ),
    st.sampled_from(
        [
            "9999-12-31T23:59:59-01:00",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01T24:00:00Z",
        ]
    ),
    st.text(max_size=40),
)
# JSON values as GARM could send them, nested a little.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | TIMES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
GARM_KEYS = st.sampled_from(
    [
        "id",
        "name",
        "enabled",
        "tags",
        "extra_specs",
        "created_at",
        "updated_at",
        "org_id",
        "repo_id",
        "max_runners",
        "scale_set_id",
        "status",
        "data",
        "owner",
    ]
)
GARM_OBJECTS = st.dictionaries(GARM_KEYS | st.text(max_size=8), JSON, max_size=8)
# JSON text nested deeper than Python's parser goes (RecursionError, not ValueError).
DEEP = st.builds(
    lambda opener, n: opener * n,
    st.sampled_from(["[", '{"a":', '[{"scripts":']),
    st.integers(500, 5000),
)


@HOSTILE
@given(TIMES)
def test_any_time_reads_as_an_instant_in_utc(text: str):
    parsed = parse_time(text)
    assert parsed.tzinfo is UTC


@HOSTILE
@given(GARM_OBJECTS)
def test_any_garm_object_reads_as_a_model(data: dict):
    ScaleSet.from_json(data)
    Instance.from_json(data)
    Template.from_json(data)
    Credential.from_json(data)
    Entity.from_json("organization", data)
    Entity.from_json("repository", data)


def test_extra_specs_nested_deeper_than_the_parser_goes_read_as_sent():
    deep = "[" * 100_000 + "]" * 100_000
    assert ScaleSet.from_json({"id": 1, "extra_specs": deep}).extra_specs == deep


NOTES = st.one_of(
    st.text(max_size=60),
    st.lists(
        st.builds(
            "{}={}".format,
            st.sampled_from(
                ["retired-at", "enabled-at", "kept", "refused", "retry-at", "specs", "seen"]
            ),
            TIMES | st.text(alphabet=string.digits + "²-", max_size=8),
        ),
        max_size=6,
    ).map(";".join),
)


@HOSTILE
@given(NOTES, st.sampled_from(["running", "pending_delete", "creating", "error"]))
def test_any_notes_on_a_retired_scaleset_leave_the_plan_planned(notes: str, status: str):
    # The notes of a predecessor with a runner: every rule that reads a stamp is reached.
    spec = make_spec()
    old = ScaleSet.from_json(
        scaleset_json(
            1, "ci", labels=("ci", "linux"), enabled=False, max_runners=0, extended_state=notes
        )
    )
    new = ScaleSet.from_json(scaleset_json(2, "ci-new", labels=("ci", "linux", "x64")))
    busy = Instance.from_json(instance_json("garm-1", 1, status=status))
    Notes.read(notes).believed(NOW)
    assert set(unread(notes)) <= {"retired-at", "enabled-at", "specs", "seen"}
    assert unread(Notes.read(notes).text()) == ()  # what the charm writes always reads
    observed = Observed((old, new), (busy,), frozenset({spec.provider_name}))
    plan(Desired((spec,)), observed, NOW, Settings())


@HOSTILE
@given(st.one_of(st.none(), st.text(max_size=80), JSON.map(repr), DEEP))
def test_any_memory_of_refusals_reads_and_ages(text):
    memory = Refusals.read(text if isinstance(text, str) or text is None else str(text))
    memory.current(NOW)
    memory.taken_now(NOW)


@HOSTILE
@given(st.one_of(st.none(), st.text(max_size=80), DEEP), TIMES, st.none() | DEEP)
def test_any_held_token_reads_and_is_judged(text, fetched_at, payload):
    held = HeldToken.from_record(
        "a.b.c",
        text
        if text is None or "{" in text
        else f'{{"fetched-at": "{fetched_at}", "jwt-secret-fingerprint": "f"}}',
    )
    renewal_due(held, NOW, "f")
    if held is not None:
        token_expiry(held.token)
    if payload is not None:  # a token GARM issued whose claims nest too deep
        claims = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
        assert token_expiry(f"e30.{claims}.sig") is None


DATABAG_KEYS = st.sampled_from(sorted({*EXAMPLE_UNIT, *SECOND_UNIT, "repo", "runner_group"}))
DATABAGS = st.dictionaries(
    DATABAG_KEYS | st.text(max_size=6), st.text(max_size=30) | TIMES | DEEP, max_size=12
).map(lambda changes: {**EXAMPLE_UNIT, **changes})


@HOSTILE
@given(DATABAGS)
def test_any_configurator_databag_is_read_or_refused(data: dict[str, str]):
    with contextlib.suppress(DatabagError):
        ConfiguratorUnitData.from_databag(data)
    relation_state(True, [("garm-configurator/0", data)], View(True), app="garm")


@HOSTILE
@given(DEEP)
def test_scripts_nested_too_deep_are_refused_naming_the_key(scripts: str):
    # 1,500 bytes from any related unit once raised RecursionError out of every hook.
    data = {**EXAMPLE_UNIT, "pre_install_scripts": scripts}
    try:
        ConfiguratorUnitData.from_databag(data)
    except DatabagError as exc:
        assert exc.key == "pre_install_scripts"
    else:
        raise AssertionError("read scripts nested too deep")
    relation_state(True, [("garm-configurator/0", data)], View(True), app="garm")


@HOSTILE
@given(
    st.dictionaries(
        st.sampled_from(["host", "port", "rsa_fingerprint", "ed25519_fingerprint"]),
        st.text(max_size=20),
    )
)
def test_any_debug_ssh_databag_is_read_or_refused(data: dict[str, str]):
    with contextlib.suppress(DebugSshError):
        debug_ssh([("tmate/0", data)])


@HOSTILE
@given(
    st.text(max_size=200) | DEEP.map(lambda deep: "x = " + deep),
    st.dictionaries(
        st.sampled_from(["providers/p.toml", "providers/p-clouds.yaml"]),
        st.text(max_size=80) | DEEP,
    ),
)
def test_any_file_the_charm_wrote_for_garm_reads_back_or_not_at_all(config, files):
    read_database(config)
    read_database("[database]\nbackend = 'postgresql'\n" + config)
    read_provider("p", files)


@HOSTILE
@given(st.text(max_size=40))
def test_any_postgresql_endpoint_is_read_or_refused(endpoints: str):
    with contextlib.suppress(ValueError):
        _first_endpoint(endpoints)


# Archives: random bytes behind each kind's magic, and tar headers no tar program writes.
ARCHIVE_BYTES = st.one_of(
    st.binary(max_size=2048),
    st.binary(max_size=2048).map(gzip.compress),
    st.builds(
        lambda count, size, kind, tail: gzip.compress(
            long_names(count) + raw_header("garm", size, kind) + tail
        ),
        st.integers(0, 8),
        st.integers(0, 1 << 40),
        st.sampled_from([b"0", b"L", b"K", b"x", b"g", b"5", b"2", b"\0", b"?"]),
        st.binary(max_size=1024),
    ),
)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ARCHIVE_BYTES)
def test_any_attached_file_is_unpacked_or_refused(tmp_path: Path, data: bytes):
    source = tmp_path / "garm"
    source.write_bytes(data)
    with contextlib.suppress(resources.ResourceError):
        resources.prepare("garm", source, tmp_path / "work", CHECK_USER)


@pytest.mark.parametrize("count", [100, 5000])
def test_a_chain_of_long_names_is_refused_however_long(tmp_path: Path, count: int):
    source = tmp_path / "garm"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w"):
        pass
    source.write_bytes(gzip.compress(long_names(count) + archive.getvalue()))
    with pytest.raises(resources.ResourceError, match="a chain of extended headers"):
        resources.prepare("garm", source, tmp_path / "work", CHECK_USER)
