"""Which of org and repo a configurator unit means, as the real configurator publishes them.

garm-configurator writes its unit databag with ``update`` and never removes a key
(canonical/github-runner-operators, ``charms/garm-configurator/src/charm.py``,
``_configure_garm_relation``), so its databags are played here the same way: each
``juju config`` sets one of the two keys; nothing is ever taken out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from juju import entities
from juju.entities import Seen, choose, published

U0, U1 = "garm-configurator/0", "garm-configurator/1"


@dataclass
class Configurator:
    """One garm-configurator unit: its options, and its databag as it writes it."""

    org: str | None = None
    repo: str | None = None
    bag: dict[str, str] | None = None

    def set(self, kind: str, value: str) -> None:
        """``juju config garm-configurator <kind>=<value>`` (the other option unset)."""
        self.org, self.repo = (value, None) if kind == "org" else (None, value)
        # update(): the key set is written, the one unset stays as it was.
        self.bag = {**(self.bag or {}), kind: value}

    def truth(self) -> tuple[str, str]:
        return ("org", self.org) if self.org else ("repo", self.repo or "")


def reads(*bags: dict[str, str], whole: bool = True) -> list[entities.Choices]:
    """The passes' choices for one unit over the databags it showed, memory carried."""
    memory: entities.Memory = {}
    out = []
    for bag in bags:
        choices = choose([(U0, bag)], memory, whole, app="garm")
        memory = choices.memory
        out.append(choices)
    return out


def test_a_switch_from_org_to_repo_follows_the_repo():
    first, switched = reads({"org": "acme"}, {"org": "acme", "repo": "acme/ci"})
    assert U0 not in first.uses and not first.unknown  # one key: nothing to choose
    assert switched.uses == {U0: "repo"}


def test_a_switch_back_to_another_org_follows_the_org():
    *_, back = reads(
        {"org": "acme"}, {"org": "acme", "repo": "acme/ci"}, {"org": "beta", "repo": "acme/ci"}
    )
    assert back.uses == {U0: "org"}


def test_a_new_repo_after_a_switch_follows_the_repo():
    *_, moved = reads(
        {"org": "acme"}, {"org": "acme", "repo": "acme/ci"}, {"org": "acme", "repo": "acme/web"}
    )
    assert moved.uses == {U0: "repo"}


def test_an_unchanged_databag_keeps_the_choice():
    *_, again = reads(
        {"org": "acme"}, {"org": "acme", "repo": "acme/ci"}, {"repo": "acme/ci", "org": "acme"}
    )
    assert again.uses == {U0: "repo"}  # key order is nothing


def test_both_at_first_sight_are_not_guessed():
    (first,) = reads({"org": "acme", "repo": "acme/ci"})
    assert first.uses == {}
    assert first.unknown == {U0: Seen("acme", "acme/ci")}
    assert first.memory == {U0: Seen("acme", "acme/ci")}  # the next change tells


def test_a_change_after_an_unknown_pair_tells():
    *_, told = reads({"org": "acme", "repo": "acme/ci"}, {"org": "acme", "repo": "acme/web"})
    assert told.uses == {U0: "repo"}


def test_both_changed_between_two_reads_are_not_guessed():
    *_, both = reads({"org": "acme", "repo": "acme/ci"}, {"org": "beta", "repo": "beta/ci"})
    assert U0 in both.unknown


def test_the_operators_choice_holds_until_the_unit_changes_again():
    memory = {U0: Seen("acme", "acme/ci", "org")}  # what choose-entity writes
    bag = {"org": "acme", "repo": "acme/ci"}
    assert choose([(U0, bag)], memory, True, app="garm").uses == {U0: "org"}
    assert choose([(U0, {**bag, "repo": "acme/web"})], memory, True, app="garm").uses == {
        U0: "repo"
    }


def test_blank_and_padded_values_are_read_as_the_library_reads_them():
    assert published({"org": "  ", "repo": " acme/ci "}) == Seen(None, "acme/ci", "repo")
    assert published({}) == Seen()


def test_a_partial_view_keeps_what_it_cannot_see_and_a_whole_one_forgets_the_gone():
    memory = {U1: Seen("acme", "acme/ci", "repo")}
    assert choose([(U0, {"org": "acme"})], memory, False, app="garm").memory[U1] == memory[U1]
    assert U1 not in choose([(U0, {"org": "acme"})], memory, True, app="garm").memory


def test_units_of_an_application_not_all_seen_are_remembered_in_a_whole_view():
    # Another model's units: goal-state lists none of them, so the view is called whole
    # once one is seen; the others may only be out of sight.
    memory = {"remote-abc/1": Seen("acme", "acme/ci", "repo")}
    seen = [("remote-abc/0", {"org": "acme"})]
    kept = choose(seen, memory, True, hidden={"remote-abc"}, app="garm").memory
    assert kept["remote-abc/1"] == memory["remote-abc/1"]
    assert "remote-abc/1" not in choose(seen, memory, True, hidden={"other"}, app="garm").memory


def test_a_move_the_charm_infers_is_logged(caplog):
    memory = {U0: Seen("acme", None, "org")}
    with caplog.at_level("WARNING", logger="juju.entities"):
        choose([(U0, {"org": "acme", "repo": "acme/ci"})], memory, True, app="garm")
    assert "following its repo acme/ci" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="juju.entities"):
        choose([(U0, {"org": "acme"})], memory, True, app="garm")  # nothing to infer
    assert not caplog.text


def test_the_memory_reads_back_what_it_wrote_and_never_raises():
    memory = {U0: Seen("acme", "acme/ci", "repo"), U1: Seen("beta", None, "org")}
    text = entities.render(memory)
    assert entities.read(text) == (memory, True)
    assert entities.read(None) == ({}, True)
    for garbage in ("{", "[]", '{"a": 3}', '{"a": {"use": "both"}}', '{"a": {"org": 1}}'):
        got, whole = entities.read(garbage)
        assert not whole
        assert got == {}
    assert entities.read("[" * 100_000) == ({}, False)
    kept, whole = entities.read(json.dumps({U0: {"org": "a", "use": "org"}, U1: 5}))
    assert kept == {U0: Seen("a", None, "org")}
    assert not whole


# --- the real configurator, played ------------------------------------------------------

ORGS = st.sampled_from(["acme", "beta", "gamma"])
REPOS = st.sampled_from(["acme/ci", "acme/web", "beta/ci"])
SETS = st.lists(
    st.one_of(st.tuples(st.just("org"), ORGS), st.tuples(st.just("repo"), REPOS)),
    min_size=1,
    max_size=12,
)


@given(SETS)
def test_read_after_every_change_each_change_it_can_see_is_followed(changes):
    """Every change that shows in the databag is followed, whatever came before.

    A return to the value left behind shows nothing (the databag is as it was), so the
    choice stays as it was: the one case the operator must tell (``choose-entity``).
    """
    unit, memory = Configurator(), {}
    for kind, value in changes:
        before, chose = dict(unit.bag or {}), dict(memory)
        unit.set(kind, value)
        choices = choose([(U0, unit.bag or {})], memory, True, app="garm")
        memory = choices.memory
        seen = published(unit.bag or {})
        use = seen.use or choices.uses.get(U0)
        assert U0 not in choices.unknown  # never unknown when every change is read
        if unit.bag != before:
            assert use is not None
            assert (use, seen.value(use)) == unit.truth()
        else:
            assert memory == chose


@given(SETS, st.lists(st.booleans(), min_size=12, max_size=12))
def test_whatever_reads_are_missed_a_pair_seen_is_never_chosen_without_a_change(changes, read):
    """A pass never takes a key whose value it has not seen change, or been told."""
    unit, memory = Configurator(), {}
    for (kind, value), seen_now in zip(changes, read, strict=False):
        unit.set(kind, value)
        if not seen_now:
            continue
        before = memory.get(U0)
        choices = choose([(U0, unit.bag or {})], memory, True, app="garm")
        memory = choices.memory
        if U0 in choices.uses:
            use = choices.uses[U0]
            assert before is not None
            then = before.value(use)
            assert then != published(unit.bag or {}).value(use) or before.use == use
