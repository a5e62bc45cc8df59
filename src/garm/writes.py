"""The one loop that sends the charm's writes to GARM, through the one memory of refusals.

Each kind of write GARM is asked (setup's, scalesets', runner templates') is a ``Write``:
its key in the memory (``garm.refusals``), its description for the operator, how it is
sent and how GARM's answer changes what the pass sees. ``Writes`` sends a plan's writes
in order: one refused before waits out its back-off, one that needs what a held write
makes waits unsent, a refusal is remembered and the next write goes on, an accepted
write is forgotten by the memory; an unreachable GARM ends the writes, with what was
learnt kept. ``plan`` is the same loop against a GARM that records the writes instead of
making them (``garm.recording``). ADR 0003.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from garm.client import GarmApiError, GarmUnreachable
from garm.refusals import Held, Refusals, is_permanent

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]
Seen = TypeVar("Seen")


class UnmadeError(Exception):
    """A write the charm cannot even make, for a cause only the operator can remove."""


class UndoneError(Exception):
    """GARM answered the write yet did not carry it out: a refusal all the same, no error."""


class Write(ABC):
    """One write GARM is asked: its key, its description, how it is sent.

    ``unlocks``: the key prefixes of writes GitHub may have refused for want of what this
    write changes (a credential's key, an org's binding): due again once GARM takes it.
    """

    unlocks: tuple[str, ...] = ()

    @abstractmethod
    def asks(self) -> list[tuple[str, str]]:
        """Its keys in the memory of refusals, each with a digest of what it asks for."""

    @abstractmethod
    def line(self) -> str:
        """The write as the operator reads it: names and changed keys, never a secret."""

    @abstractmethod
    def send(self, garm: Any, seen: Any, writes: Writes) -> Any:
        """Make the write; return what the pass sees once GARM has answered."""

    def target(self) -> object:
        """What it acts on: refused once, a pass plans nothing more on it (``closed``)."""
        return self.asks()[0][0]

    def makes(self) -> str | None:
        """What GARM has only once this write is made (a credential's name)."""
        return None

    def needs(self) -> str | None:
        """What another write makes and this one needs (GARM would refuse it without)."""
        return None

    def on_refusal(self, exc: GarmApiError, writes: Writes, garm: Any, seen: Any) -> Any:
        """What a refusal tells: by default, a refusal to remember and to tell."""
        writes.refuse(self, exc, is_permanent(exc.status))
        return seen


@dataclass(frozen=True)
class ActionError:
    """A call GARM refused (``action`` None: an observing read), its cause for a status line.

    ``blocking`` marks a write the charm could not even make (``UnmadeError``).
    """

    action: Write | None
    error: str
    blocking: bool = False


@dataclass
class Writes:
    """The loop's ledger: the memory of refusals as it goes, what was done, held, refused.

    ``budget`` (seconds) ends the writes once spent (``spent``), so a hook never hangs
    on a slow GARM; the next pass goes on from what it observes.
    """

    now: datetime
    memory: Refusals
    log: Log
    budget: float | None = None
    started: float = field(default_factory=lambda: time.monotonic())
    spent: bool = False
    done: list[Write] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)
    errors: list[ActionError] = field(default_factory=list)
    closed: set[object] = field(default_factory=set)
    absent: set[str] = field(default_factory=set)
    # What a write read once for the pass (a base template's body), by what it is.
    reads: dict[object, Any] = field(default_factory=dict)
    # What GARM answered so far in ``run``: kept when GARM goes away in the middle.
    seen: Any = None

    def go_on(self, log: Log, budget: float | None) -> Writes:
        """The ledger, kept for the next step of the pass: its own log, its budget from now."""
        self.log, self.budget, self.started = log, budget, time.monotonic()
        return self

    def run(self, garm: Any, writes: Iterable[Write], seen: Seen) -> Seen:
        """Send each write the memory lets through, in order; ``GarmUnreachable`` ends them.

        Each answer is kept as it comes (``seen``): what GARM took before it went away is
        what the pass last saw.
        """
        self.seen = seen
        for write in writes:
            held = (self.memory.holding(k, a, self.now) for k, a in write.asks())
            refusal = next((r for r in held if r is not None), None)
            if refusal is not None:
                self._hold(write, Held(write.line(), refusal))
                continue
            if write.needs() in self.absent:
                self.log.info("not yet: %s (%s is not in GARM)", write.line(), write.needs())
                continue
            if self.budget is not None and time.monotonic() - self.started > self.budget:
                self.log.warning("pass budget of %ss spent; the next hook continues", self.budget)
                self.spent = True
                return seen
            seen = self.seen = self.send(garm, write, seen)
        return seen

    def send(self, garm: Any, write: Write, seen: Seen) -> Seen:
        """Make one write, unchecked, and keep what GARM answered."""
        try:
            seen = write.send(garm, seen, self)
        except GarmUnreachable as exc:
            self.log.error("GARM unreachable during %s: %s", write.line(), exc)
            raise
        except GarmApiError as exc:
            self.closed.add(write.target())
            return write.on_refusal(exc, self, garm, seen)
        except UnmadeError as exc:
            self.closed.add(write.target())
            # A cause that refuses every write of a kind alike is said once.
            if all(e.error != str(exc) for e in self.errors):
                self.log.error("cannot %s: %s", write.line(), exc)
                self.errors.append(ActionError(write, str(exc), blocking=True))
            return seen
        except UndoneError as exc:
            self.closed.add(write.target())
            self.log.warning("GARM did not %s: %s", write.line(), exc)
            self._held_now(write, str(exc), permanent=False)
            return seen
        self.log.info("done: %s", write.line())
        self.done.append(write)
        for key, _ in write.asks():
            self.memory = self.memory.accepted(key)
        if write.unlocks:
            # A create or an update GitHub refused may have been refused for want of
            # this access (a key, an App's installation): it goes again now.
            self.memory = self.memory.due_now(self.now, lambda k: k.startswith(write.unlocks))
        return seen

    def refuse(self, write: Write, exc: GarmApiError, permanent: bool) -> None:
        """A refusal of ``write``: logged, told, and remembered so that it waits."""
        self.log.error("GARM refused to %s: %s", write.line(), exc)
        self.errors.append(ActionError(write, exc.cause))
        self._held_now(write, exc.cause, permanent)

    def _held_now(self, write: Write, cause: str, permanent: bool) -> None:
        """Remember the refusal of ``write``, which holds it back from now on."""
        for key, asked in write.asks():
            self.memory = self.memory.refused(key, asked, self.now, cause, permanent)
        self._hold(write, Held(write.line(), self.memory.refusals[write.asks()[0][0]]))

    def _hold(self, write: Write, held: Held) -> None:
        self.held.append(held)
        if (made := write.makes()) is not None:
            self.absent.add(made)

    def read(self, what: object, reader: Callable[[], Any]) -> Any:
        """What ``reader`` answers, read at most once per pass."""
        if what not in self.reads:
            self.reads[what] = reader()
        return self.reads[what]
