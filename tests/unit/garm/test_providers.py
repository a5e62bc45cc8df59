"""Which providers GARM keeps: the related units', and earlier ones a scaleset still uses.

Earlier ones come from the record a leader kept (``Recorded``, with the relation each
came from), or, before there is a record, from the provider files on this machine.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from garm.config import GarmConfig, OpenstackProvider, Proxy, SqliteDatabase, render_files
from garm.providers import KeptProviders, Recorded, kept_providers, read_record, record_text


def provider(name: str, word: str = "pw", project: str = "ci") -> OpenstackProvider:
    return OpenstackProvider(
        name=name,
        auth_url="https://keystone.internal:5000/v3",
        username="ci",
        password=word,
        project_name=project,
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        network="ci-net",
    )


def written(*providers: OpenstackProvider) -> dict[str, str]:
    """The provider files as the charm wrote them for ``providers`` before."""
    garm = GarmConfig(
        port=9997,
        jwt_secret="jwt-Secret-0f8d2c!x",
        db_passphrase="p" * 32,
        database=SqliteDatabase("/var/lib/garm/garm.db"),
        providers=providers,
        proxy=Proxy(),
        provider_executable="/usr/local/bin/garm-provider-openstack",
        config_dir="/etc/garm",
    )
    files = render_files(garm)
    return {name: text for name, text in files.items() if name.startswith("providers/")}


def on(relation: int | None, *providers: OpenstackProvider) -> list[Recorded]:
    """Providers as published on (or recorded for) one configurator relation."""
    return [Recorded(p, relation) for p in providers]


def never() -> set[str]:
    raise AssertionError("GARM asked when nothing hangs on its answer")


# --- the record, or the files before there is one ---------------------------------------


def test_the_record_wins_over_the_files():
    recorded = on(1, provider("cfg-0", "recorded"))
    files = written(provider("cfg-0", "on-disk"), provider("cfg-1"))
    kept = kept_providers([], recorded, files, lambda: {"cfg-0", "cfg-1"})
    assert kept == KeptProviders((Recorded(provider("cfg-0", "recorded"), 1),))


def test_without_a_record_the_files_of_an_earlier_revision_are_kept():
    gone = provider("cfg-1")
    kept = kept_providers([], None, written(gone), lambda: {"cfg-1"})
    assert kept == KeptProviders((Recorded(gone),))


def test_without_a_record_a_provider_whose_files_do_not_read_is_dropped():
    files = written(provider("cfg-1"))
    files["providers/cfg-1-clouds.yaml"] = "not json"
    assert kept_providers([], None, files, lambda: None) == KeptProviders((), ("cfg-1",))


def test_a_provider_from_the_files_is_taken_over_by_the_relation_publishing_it():
    # An earlier revision recorded no relation: which one published it cannot be told.
    now = provider("cfg-0", "new", project="other")
    kept = kept_providers(on(3, now), None, written(provider("cfg-0", "old")), never)
    assert kept == KeptProviders((Recorded(now, 3),))


# --- a partial view, and what is dropped ------------------------------------------------


def test_a_partial_view_keeps_every_recorded_provider_a_scaleset_uses():
    # A new leader sees one of the two units: the other's provider is the record's.
    recorded = on(1, provider("cfg-0", "zero"), provider("cfg-1", "one"))
    kept = kept_providers(on(1, provider("cfg-1", "one")), recorded, {}, lambda: {"cfg-0"})
    assert kept.providers == (provider("cfg-1", "one"), provider("cfg-0", "zero"))
    assert kept.record == (recorded[1], recorded[0])
    assert kept.dropped == ()


def test_when_garm_cannot_tell_every_earlier_provider_stays():
    recorded = on(1, provider("cfg-1"))
    assert kept_providers([], recorded, {}, lambda: None) == KeptProviders(tuple(recorded))


def test_a_provider_no_scaleset_uses_is_dropped_from_garm_and_the_record():
    recorded = on(1, provider("cfg-0"), provider("cfg-1"))
    kept = kept_providers(on(1, provider("cfg-0")), recorded, {}, lambda: {"cfg-0"})
    assert kept == KeptProviders((recorded[0],), ("cfg-1",))


def test_garm_is_asked_only_when_an_earlier_provider_is_not_published():
    published = on(1, provider("cfg-0"))
    assert kept_providers(published, published, {}, never) == KeptProviders(tuple(published))
    # A record with nothing in it is a record: files left on this machine are not read.
    files = written(provider("cfg-0"), provider("cfg-1"))
    assert kept_providers(published, [], files, never) == KeptProviders(tuple(published))


# --- a rotation, a reuse ----------------------------------------------------------------


def test_the_same_relation_publishing_other_settings_is_a_rotation_applied_at_once():
    rotated = provider("cfg-0", "new-password")
    kept = kept_providers(on(1, rotated), on(1, provider("cfg-0", "old")), {}, never)
    assert kept == KeptProviders((Recorded(rotated, 1),))


def test_a_reused_name_is_held_while_a_scaleset_of_the_earlier_relation_uses_it():
    before = Recorded(provider("cfg-a-0", "old", project="old-project"), 1)
    again = Recorded(provider("cfg-a-0", "new", project="new-project"), 2)
    for used in ({"cfg-a-0"}, None):  # in use, or GARM cannot tell (then unsure)
        kept = kept_providers([again], [before], {}, lambda used=used: used)
        assert kept == KeptProviders((before,), held=(again,), unsure=used is None)
        assert kept.providers == (before.provider,)


def test_a_reused_name_is_taken_once_no_scaleset_uses_it():
    before = Recorded(provider("cfg-a-0", "old", project="old-project"), 1)
    again = Recorded(provider("cfg-a-0", "new", project="new-project"), 2)
    assert kept_providers([again], [before], {}, lambda: {"other"}) == KeptProviders((again,))


def test_a_reused_name_with_the_same_settings_is_the_same_provider_taken_over_at_once():
    same = provider("cfg-a-0")
    kept = kept_providers(on(2, same), on(1, same), {}, never)
    assert kept == KeptProviders((Recorded(same, 2),))


def test_a_provider_kept_for_another_relation_says_which():
    kept = KeptProviders((Recorded(provider("cfg-a-0"), 0), Recorded(provider("cfg-b-0"))))
    assert kept.kept_for_another("cfg-a-0", 5) == 0  # relation 0 is a relation
    assert kept.kept_for_another("cfg-a-0", 0) is None
    assert kept.kept_for_another("cfg-a-0", None) is None  # not known: never another
    assert kept.kept_for_another("cfg-b-0", 5) is None
    assert kept.kept_for_another("not-kept", 5) is None


# --- the record's text ------------------------------------------------------------------


def test_the_record_is_written_only_when_it_changed():
    kept = KeptProviders(tuple(on(1, provider("cfg-0"), provider("cfg-1"))))
    assert kept.to_write(list(reversed(kept.record))) is None  # the same, in another order
    assert kept.to_write(None) == kept.record  # there is none yet
    assert KeptProviders(()).to_write(None) is None  # ... nor anything to put in one
    assert KeptProviders(()).to_write(on(1, provider("cfg-0"))) == ()  # the last one went
    assert kept.to_write(on(1, provider("cfg-0"))) == kept.record
    assert kept.to_write(on(2, provider("cfg-0"), provider("cfg-1"))) == kept.record
    rotated = on(1, provider("cfg-0", "new"), provider("cfg-1"))
    assert kept.to_write(rotated) == kept.record


def test_the_record_reads_back_as_written():
    record = (
        Recorded(provider("cfg-0", 'pa"ss\\word\n'), 0),
        Recorded(provider("cfg-1", "pw")),
    )
    text = record_text(record)
    assert read_record(text) == record
    assert read_record(record_text(())) == ()
    entry = json.loads(text)["cfg-0"]
    assert entry["relation"] == 0 and entry["password"] == 'pa"ss\\word\n'
    assert "name" not in entry  # the entry's key


def entry(**changes: object) -> str:
    fields = dataclasses.asdict(provider("cfg-0"))
    del fields["name"]
    return json.dumps({"cfg-0": {"relation": 1, **fields, **changes}})


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"cfg-0": []}',
        entry(relation="1"),
        entry(relation=True),
        entry(password=None),
        json.dumps({"../etc": json.loads(entry())["cfg-0"]}),  # not a provider name
        json.dumps({"cfg-0": {"relation": 1}}),
    ],
)
def test_a_record_that_does_not_read_whole_reads_as_none(text: str):
    assert read_record(text) is None
