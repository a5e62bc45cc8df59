"""Creates GARM or GitHub refused, remembered so they are not re-sent on every pass.

A refused create leaves nothing in GARM to keep notes on (``notes`` is for
scalesets that exist), so the refusals live in the application's databag of the peer
relation: Juju keeps it, every unit reads it and the leader writes it, so a new leader
goes on with the same back-off instead of hitting GitHub again at once (``docs/adr/0003``).

A refusal is tied to the digest of what was asked: when the configurator publishes
something else (the operator fixed the runner group, say), the next pass creates at once.
Names GitHub answered "already exists" for are remembered for an hour too, so a create
does not walk the same taken names on every pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from garm.models import format_time, parse_time
from scalesets.notes import REFUSALS_BEFORE_BLOCKED, backoff, believed_wait

KEY = "create-refusals"


def request_digest(body: Mapping[str, Any]) -> str:
    """What a create asks for, without the generation name (which moves on when taken)."""
    asked = {k: v for k, v in body.items() if k != "name"}
    text = json.dumps(asked, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class CreateRefusal:
    """The last refusals of one logical scaleset's create, in a row.

    ``permanent``: the answer says GitHub or GARM will not accept this request as it is
    (a 4xx), so the operator is told at once rather than after a few tries.
    """

    digest: str
    refusals: int
    retry_at: datetime
    cause: str
    permanent: bool

    def again(self, now: datetime, cause: str, permanent: bool) -> CreateRefusal:
        """One more refusal of the same request."""
        count = self.refusals + 1
        return CreateRefusal(self.digest, count, now + backoff(count), cause, permanent)

    @property
    def blocked(self) -> bool:
        """Whether the operator must act for this create to succeed."""
        return self.permanent or self.refusals >= REFUSALS_BEFORE_BLOCKED


def first_refusal(digest: str, now: datetime, cause: str, permanent: bool) -> CreateRefusal:
    """The first refusal of a request."""
    return CreateRefusal(digest, 1, now + backoff(1), cause, permanent)


@dataclass(frozen=True)
class CreateMemory:
    """What GitHub answered to creates: refusals by logical name, taken names until when."""

    refusals: Mapping[str, CreateRefusal] = field(default_factory=dict)
    taken: Mapping[str, datetime] = field(default_factory=dict)

    def taken_now(self, now: datetime) -> frozenset[str]:
        """The names still known to be taken; a time too far ahead is not believed."""
        return frozenset(n for n, until in self.taken.items() if believed_wait(until, now))

    def kept_for(self, logical_names: frozenset[str] | None, now: datetime) -> CreateMemory:
        """Only what still matters.

        The refusals of the logical names asked for (all of them when ``None``: a view
        that may be partial must not forget a held name's back-off), and the taken
        names not yet expired.
        """
        refusals = {
            name: r
            for name, r in self.refusals.items()
            if logical_names is None or name in logical_names
        }
        taken = {name: until for name, until in self.taken.items() if name in self.taken_now(now)}
        return CreateMemory(refusals, taken)

    @classmethod
    def read(cls, text: str | None) -> CreateMemory:
        """Parse the databag value; anything unreadable is dropped (the create is retried)."""
        try:
            data = json.loads(text or "{}")
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        refusals = data.get("refusals")
        taken = data.get("taken")
        return cls(
            _read_refusals(refusals if isinstance(refusals, dict) else {}),
            {
                str(name): at
                for name, until in (taken if isinstance(taken, dict) else {}).items()
                if (at := parse_time(until)).year != 1
            },
        )

    def text(self) -> str:
        """The databag value, stable for equal contents so an unchanged memory writes nothing."""
        return json.dumps(
            {
                "refusals": {
                    name: {
                        "digest": r.digest,
                        "refusals": r.refusals,
                        "retry-at": format_time(r.retry_at),
                        "cause": r.cause,
                        "permanent": r.permanent,
                    }
                    for name, r in sorted(self.refusals.items())
                },
                "taken": {name: format_time(at) for name, at in sorted(self.taken.items())},
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    def __bool__(self) -> bool:
        return bool(self.refusals or self.taken)


def _read_refusals(data: Mapping[str, Any]) -> dict[str, CreateRefusal]:
    refusals: dict[str, CreateRefusal] = {}
    for name, item in data.items():
        if not isinstance(item, dict):
            continue
        retry_at = parse_time(item.get("retry-at"))
        count = item.get("refusals")
        if retry_at.year == 1 or not isinstance(count, int) or isinstance(count, bool):
            continue
        refusals[str(name)] = CreateRefusal(
            digest=str(item.get("digest", "")),
            refusals=max(count, 1),
            retry_at=retry_at,
            cause=str(item.get("cause", "")),
            permanent=item.get("permanent") is True,
        )
    return refusals
