"""The fleet at a glance: every scaleset GARM holds, by generation, as the pass sees it.

The ``show-scalesets`` answer, so that an operator watching a changeover needs neither
``garm-cli`` nor GARM's login. Pure: from ``Observed`` and its ``Plan``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate

from garm.models import Instance, ScaleSet
from garm.refusals import Held
from scalesets.actions import Observed, Phase, Plan, logical_name_of

# A current generation's own state; a retiring one's is its ``Phase``.
SERVING = "serving"
STARTING = "starting"  # not live yet: its listener is not up, or it is found disabled
# Juju takes an action's results on a command line: about 100 KB at most (ops'
# ActionEvent.set_results raises OSError past it). Kept well under, for the encoding.
RESULTS_BUDGET = 60_000


@dataclass(frozen=True)
class Generation:
    """One scaleset GARM holds, as the operator reads it.

    ``logical``: the scaleset it serves ("" when that cannot be told); ``runners``: counts
    by GARM's status; ``busy``: those running a job; ``stuck``: why it will not move on.
    """

    logical: str
    name: str
    id: int
    current: bool
    phase: str
    labels: tuple[str, ...]
    enabled: bool
    min_idle: int
    max_runners: int
    runners: Mapping[str, int]
    busy: int
    stuck: str = ""


def generations(
    observed: Observed, plan: Plan, spelt: Iterable[str] = ()
) -> tuple[Generation, ...]:
    """Every scaleset in ``observed``, grouped by the logical scaleset it serves.

    ``spelt``: the specs' names as spelt (the plan keys them lower-cased).
    """
    spelling = {name.lower(): name for name in spelt}
    current = {name: spelling.get(logical, logical) for logical, name in plan.current}
    refreshing = {p.scaleset for p in plan.progress if p.phase is Phase.REFRESHING}
    by_scaleset: dict[int, list[Instance]] = {}
    for instance in observed.instances:
        by_scaleset.setdefault(instance.scale_set_id, []).append(instance)
    rows = [
        _generation(s, current, refreshing, by_scaleset.get(s.id, []), plan)
        for s in observed.scalesets
    ]
    return tuple(sorted(rows, key=lambda g: (g.logical.lower(), not g.current, g.id)))


def _generation(
    scaleset: ScaleSet,
    current: Mapping[str, str],
    refreshing: set[str],
    runners: list[Instance],
    plan: Plan,
) -> Generation:
    logical = current.get(scaleset.name) or logical_name_of(scaleset) or ""
    is_current = scaleset.name in current
    if not is_current:
        phase = plan.phases.get(scaleset.id)
        shown = phase.value if phase is not None else "left alone"
    elif scaleset.name in refreshing:
        shown = Phase.REFRESHING.value
    elif not scaleset.enabled or _replacing(plan, logical):
        shown = STARTING
    else:
        shown = SERVING
    return Generation(
        logical=logical,
        name=scaleset.name,
        id=scaleset.id,
        current=is_current,
        phase=shown,
        labels=scaleset.labels,
        enabled=scaleset.enabled,
        min_idle=scaleset.min_idle_runners,
        max_runners=scaleset.max_runners,
        runners=dict(Counter(i.status or "unknown" for i in runners)),
        busy=sum(1 for i in runners if i.status == "running" and i.runner_status == "active"),
        stuck=plan.stuck.get(scaleset.id, ""),
    )


def _replacing(plan: Plan, logical: str) -> bool:
    """Whether ``logical``'s current generation still waits to take over from another."""
    return any(
        p.logical_name is not None
        and p.logical_name.lower() == logical.lower()
        and p.phase in (Phase.CREATING_REPLACEMENT, Phase.HANDING_OVER)
        for p in plan.progress
    )


def table(rows: tuple[Generation, ...]) -> str:
    """The generations as a fixed-width table, one line each, as ``juju status`` reads."""
    head = ("SCALESET", "GARM NAME", "ID", "PHASE", "ENABLED", "MIN/MAX", "RUNNERS", "BUSY")
    lines = [head] + [
        (
            g.logical or "-",
            g.name,
            str(g.id),
            g.phase,
            "yes" if g.enabled else "no",
            f"{g.min_idle}/{g.max_runners}",
            ", ".join(f"{n} {s}" for s, n in sorted(g.runners.items())) or "none",
            str(g.busy),
        )
        for g in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    ]
    return "\n".join(text)


def results(rows: tuple[Generation, ...], held: tuple[Held, ...], now: datetime) -> dict:
    """The action's answer: the table, and each generation as keys Juju accepts.

    Juju's keys are ``[a-z0-9-]``: a generation is keyed by its GARM id. A fleet too large
    for one answer (``RESULTS_BUDGET``) is told by its table alone, cut to fit.
    """
    answer: dict[str, object] = {
        "table": table(rows) if rows else "GARM holds no scaleset",
        "held": "\n".join(_retried(h, now) for h in held) or "none",
    }
    keyed = {f"scaleset-{g.id}": _keys(g) for g in rows}
    if _size({**answer, **keyed}) <= RESULTS_BUDGET:
        return {**answer, **keyed}
    answer["left-out"] = f"the keys of the {len(rows)} generations: too many for one answer"
    lines = str(answer["table"]).splitlines()
    room = RESULTS_BUDGET - _size({**answer, "table": ""}) - 100
    # Each line costs its text as JSON escapes it, and its newline.
    kept = sum(cost <= room for cost in accumulate(len(json.dumps(line)) for line in lines))
    if kept < len(lines):
        answer["table"] = "\n".join([*lines[:kept], f"... and {len(lines) - kept} more"])
    return answer


def _keys(g: Generation) -> dict[str, object]:
    return {
        "scaleset": g.logical or "-",
        "name": g.name,
        "current": "yes" if g.current else "no",
        "phase": g.phase,
        "labels": ",".join(g.labels),
        "enabled": "yes" if g.enabled else "no",
        "min-idle-runners": str(g.min_idle),
        "max-runners": str(g.max_runners),
        "runners": {k: str(n) for k, n in _by_key(g.runners).items()} or "none",
        "busy": str(g.busy),
        **({"stuck": g.stuck} if g.stuck else {}),
    }


def _size(answer: dict[str, object]) -> int:
    return len(json.dumps(answer).encode())


def _by_key(runners: Mapping[str, int]) -> dict[str, int]:
    """Counts by GARM's runner status as Juju keys: any free text GARM sends answers."""
    counts: Counter[str] = Counter()
    for status, count in runners.items():
        counts[re.sub(r"[^a-z0-9]+", "-", status.lower()).strip("-") or "unknown"] += count
    return dict(counts)


def _retried(held: Held, now: datetime) -> str:
    """A write held back, and when it is tried again (its back-off over)."""
    refusal = held.refusal
    seconds = max(0, int((refusal.retry_at - now).total_seconds()))
    blocked = "; needs the operator" if refusal.blocked else ""
    return f"{held.describe()}; tried again in {seconds}s{blocked}"
