"""One status line from a pass outcome: what an operator reads in ``juju status``.

Juju shows a single message per unit, so several changeovers are composed into one
line, most important first. Kept pure so every wording can be tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reconciler import Outcome

StatusKind = Literal["active", "waiting", "blocked"]


@dataclass(frozen=True)
class Summary:
    """The status a pass earns: its kind and the message."""

    kind: StatusKind
    message: str


def summarise(outcome: Outcome, scalesets: int) -> Summary:
    """Status for a finished pass; ``scalesets`` is how many logical scalesets are served.

    An unreachable GARM or a refused write is ``waiting``: the next hook retries without
    the operator. A changeover in progress is ``active``: every label is served while it
    runs, so nothing waiting for ``active`` should be held up by hours of draining.
    """
    if outcome.unreachable is not None:
        return Summary("waiting", f"GARM unreachable, will retry: {outcome.unreachable}")
    if outcome.errors:
        count = len(outcome.errors)
        noun = "call" if count == 1 else "calls"
        return Summary("waiting", f"GARM refused {count} {noun}: {outcome.errors[0].error}")
    parts = []
    for progress in outcome.progress:
        if progress.logical_name is None:
            parts.append(f"removing {progress.scaleset}: {progress.describe()}")
        else:
            parts.append(f"{progress.logical_name}: {progress.describe()}")
    if parts:
        return Summary("active", "Scalesets changing: " + "; ".join(parts))
    noun = "scaleset" if scalesets == 1 else "scalesets"
    return Summary("active", f"{scalesets} {noun} in sync")
