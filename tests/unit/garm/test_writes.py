"""The one loop every write goes through (``garm.writes``), with a write kind of its own.

A kind of write is one class: these tests define one here, as a new kind would be, and
the loop holds it back, remembers its refusals and forgets them, with nothing else
taught about it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from garm.client import GarmApiError, GarmUnreachable
from garm.refusals import Refusals
from garm.writes import UndoneError, UnmadeError, Write, Writes

NOW = datetime(2026, 12, 6, tzinfo=UTC)
LOG = logging.getLogger("tests.writes")


@dataclass(frozen=True)
class Knob(Write):
    """A write of a made-up kind: turn ``name`` to ``value``."""

    name: str
    value: int = 1
    made_by: str | None = None
    waits_for: str | None = None

    def asks(self) -> list[tuple[str, str]]:
        return [(f"knob:{self.name}", str(self.value))]

    def line(self) -> str:
        return f"turn knob {self.name} to {self.value}"

    def makes(self) -> str | None:
        return self.made_by

    def needs(self) -> str | None:
        return self.waits_for

    def send(self, garm: Any, seen: Any, writes: Writes) -> Any:
        return garm.turn(self.name, self.value, seen)


class Panel:
    """A GARM of knobs: answers as told, and records what it was sent."""

    def __init__(self, answers: dict[str, Exception] | None = None):
        self.answers, self.sent = answers or {}, []

    def turn(self, name: str, value: int, seen: tuple[str, ...]) -> tuple[str, ...]:
        self.sent.append(name)
        if name in self.answers:
            raise self.answers[name]
        return (*seen, name)


def refused(status: int = 500) -> GarmApiError:
    return GarmApiError("PUT", "/knobs", status, "Error", "no")


def test_writes_go_in_order_and_fold_what_garm_answered():
    writes = Writes(NOW, Refusals(), LOG)
    seen = writes.run(Panel(), [Knob("a"), Knob("b")], ())
    assert seen == ("a", "b")
    assert [w.line() for w in writes.done] == ["turn knob a to 1", "turn knob b to 1"]
    assert writes.memory == Refusals()


def test_a_refusal_is_remembered_and_holds_that_write_alone():
    panel = Panel({"a": refused()})
    writes = Writes(NOW, Refusals(), LOG)
    assert writes.run(panel, [Knob("a"), Knob("b")], ()) == ("b",)
    (error,) = writes.errors
    assert (error.action, error.error) == (Knob("a"), "no")
    assert [h.describe() for h in writes.held] == ["GARM refused to turn knob a to 1 (once): no"]
    # The next pass, within the back-off, does not send it; one asking otherwise goes.
    again = Writes(NOW + timedelta(seconds=30), writes.memory, LOG)
    panel.answers.clear()
    assert again.run(panel, [Knob("a"), Knob("a", 2)], ()) == ("a",)
    assert panel.sent == ["a", "b", "a"]
    assert "knob:a" not in again.memory.refusals  # accepted: forgotten


def test_a_write_needing_what_a_held_write_makes_waits_unsent():
    panel = Panel({"credential": refused()})
    writes = Writes(NOW, Refusals(), LOG)
    writes.run(panel, [Knob("credential", made_by="c"), Knob("org", waits_for="c")], ())
    assert panel.sent == ["credential"]


def test_an_undone_write_is_a_refusal_without_an_error_and_an_unmade_one_is_told_once():
    panel = Panel(
        {"kept": UndoneError("kept it"), "x": UnmadeError("no base"), "y": UnmadeError("no base")}
    )
    writes = Writes(NOW, Refusals(), LOG)
    writes.run(panel, [Knob("kept"), Knob("x"), Knob("y")], ())
    assert writes.memory.refusals["knob:kept"].cause == "kept it"
    assert not writes.memory.refusals["knob:kept"].blocked
    assert [(e.error, e.blocking) for e in writes.errors] == [("no base", True)]
    assert writes.closed == {"knob:kept", "knob:x", "knob:y"}


def test_an_unreachable_garm_ends_the_writes_with_what_was_learnt():
    panel = Panel({"a": refused(400), "b": GarmUnreachable("gone")})
    writes = Writes(NOW, Refusals(), LOG)
    with pytest.raises(GarmUnreachable):
        writes.run(panel, [Knob("a"), Knob("b"), Knob("c")], ())
    assert panel.sent == ["a", "b"]
    assert writes.memory.refusals["knob:a"].blocked  # a 4xx: the operator's at once


def test_a_spent_budget_ends_the_writes():
    writes = Writes(NOW, Refusals(), LOG, budget=-1)
    assert writes.run(Panel(), [Knob("a")], ()) == ()
    assert writes.spent
