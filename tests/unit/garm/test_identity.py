"""Which GARM is the charm's: the record, the check before setup, and the adoption."""

from __future__ import annotations

import logging

import pytest

from garm.config import PostgresqlDatabase, SqliteDatabase
from garm.identity import NEW, Adoption, Identity, adoption, refusal, to_record, where

OLD = "6b1f0c3e-5a7d-4f2b-9e8c-1d2a3b4c5d6e"
OTHER = "0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b"
ON_PG = "postgresql db.internal:5433/garm"
NEW_PG = "postgresql db2.internal:5432/garm"
ON_SQLITE = "sqlite on garm/0"
RECORDED = Identity(OLD, ON_PG)


def test_where_names_the_database_and_never_its_login():
    database = PostgresqlDatabase("db.internal", 5433, "relation_7", "pg-Pa55word", "garm")
    assert where(database, "garm/0") == ON_PG
    assert where(SqliteDatabase("/var/lib/garm/garm.db"), "garm/0") == ON_SQLITE
    assert where(None, "garm/1") == "no database configured on garm/1"


def test_the_record_reads_back_as_written():
    assert Identity.read(RECORDED.render()) == RECORDED
    assert Identity.read(None) is None
    assert Identity.read("") is None


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '{"controller_id": 7, "database": "x"}', '{"controller_id": "", "database": "x"}'],
)
def test_a_hand_edited_record_is_ignored_and_said(text, caplog):
    with caplog.at_level(logging.WARNING):
        assert Identity.read(text) is None
    assert "garm-identity" in caplog.text


# --- before setup: may GARM, as it answers, be set up? -------------------------------------

SET_UP = {
    # Nothing recorded: a first deployment, or an upgrade from a revision without it.
    "nothing recorded, GARM empty": (None, None, ON_PG),
    "nothing recorded, GARM set up": (None, OTHER, ON_PG),
    "the recorded GARM": (RECORDED, OLD, ON_PG),
    # PostgreSQL's primary moved: the same GARM, reached elsewhere.
    "the recorded GARM, elsewhere": (RECORDED, OLD, NEW_PG),
    # The charm's own move: GARM left sqlite only while it held no scaleset.
    "moved from sqlite, empty": (Identity(OLD, ON_SQLITE), None, ON_PG),
    "moved from sqlite, set up": (Identity(OLD, ON_SQLITE), OTHER, ON_PG),
}


@pytest.mark.parametrize(("recorded", "answered", "here"), SET_UP.values(), ids=SET_UP.keys())
def test_garm_is_set_up(recorded, answered, here):
    assert refusal(recorded, answered, here, app="garm") == ""


def test_an_empty_garm_where_one_was_recorded_is_refused_naming_both():
    assert refusal(RECORDED, None, NEW_PG, app="garm") == (
        f"GARM in {NEW_PG} is empty, not the charm's GARM {OLD} in {ON_PG}: integrate that "
        "database again, or delete the old GARM's scale sets on GitHub, then run: "
        "juju run garm/leader adopt-garm controller-id=new"
    )


def test_another_garm_is_refused_naming_both():
    assert refusal(RECORDED, OTHER, NEW_PG, app="garm") == (
        f"GARM in {NEW_PG} is {OTHER}, not the charm's GARM {OLD} in {ON_PG}: integrate that "
        "database again, or delete the old GARM's scale sets on GitHub, then run: "
        f"juju run garm/leader adopt-garm controller-id={OTHER}"
    )


@pytest.mark.parametrize(
    ("recorded", "here"),
    [
        # Back from PostgreSQL to sqlite is no move the charm makes (a new leader with no
        # configuration and no postgresql relation would start an empty sqlite GARM).
        (Identity(OLD, ON_PG), ON_SQLITE),
        # Another unit's sqlite data is another GARM (start-empty-garm forgets the record).
        (Identity(OLD, "sqlite on garm/1"), ON_SQLITE),
    ],
)
def test_only_sqlite_to_postgresql_is_a_move(recorded, here):
    assert refusal(recorded, None, here, app="garm").startswith(f"GARM in {here} is empty")


# --- after setup: what to record ----------------------------------------------------------


def test_what_garm_answers_is_recorded_once():
    assert to_record(None, OTHER, NEW_PG) == Identity(OTHER, NEW_PG)
    assert to_record(RECORDED, OLD, ON_PG) is None  # as it stands: nothing written
    assert to_record(RECORDED, OLD, NEW_PG) == Identity(OLD, NEW_PG)  # its database moved
    assert to_record(Identity(OLD, ON_SQLITE), OTHER, ON_PG) == Identity(OTHER, ON_PG)


def test_an_empty_id_is_never_recorded():
    assert to_record(None, "", ON_PG) is None


# --- adopt-garm ---------------------------------------------------------------------------


def test_adopting_the_id_garm_answers_records_it():
    assert adoption(OTHER, OTHER, NEW_PG, app="garm") == Adoption(Identity(OTHER, NEW_PG))


def test_adopting_new_for_an_empty_garm_forgets_the_record():
    assert adoption(NEW, None, NEW_PG, app="garm") == Adoption(None)


ADOPTION_REFUSALS = {
    "another id": (
        OLD,
        OTHER,
        f"GARM in {NEW_PG} is {OTHER}, not {OLD}",
    ),
    "an id for an empty GARM": (
        OTHER,
        None,
        f"GARM in {NEW_PG} is empty: to start it afresh, run: "
        "juju run garm/leader adopt-garm controller-id=new",
    ),
    "new for a GARM that is not empty": (
        NEW,
        OTHER,
        f"GARM in {NEW_PG} is not empty: it is {OTHER}; to keep it, run: "
        f"juju run garm/leader adopt-garm controller-id={OTHER}",
    ),
}


@pytest.mark.parametrize(
    ("asked", "answered", "refused"), ADOPTION_REFUSALS.values(), ids=ADOPTION_REFUSALS.keys()
)
def test_adoption_takes_only_what_garm_answers_now(asked, answered, refused):
    assert adoption(asked, answered, NEW_PG, app="garm") == Adoption(refused=refused)
