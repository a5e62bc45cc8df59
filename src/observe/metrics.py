"""The charm's own metrics: what the reconciler knows and GARM does not, as Prometheus text.

Rendered at the end of every leader pass and served between passes by ``endpoint``
(docs/adr/0005; names and labels: docs/reference/metrics.md). Every value is as of the
pass that ``garm_charm_last_pass_timestamp_seconds`` dates. What GARM could not be read for
is left out rather than shown as zero, and ``garm_charm_last_pass_ok`` is 0 then. Pure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from datetime import datetime

from scalesets.actions import KEPT_CAUSE, Observed, Phase, RemoveInstance
from scalesets.notes import Notes
from scalesets.reconciler import Outcome
from scalesets.spec import Settings

_PHASE_LABEL = {
    Phase.CREATING: "creating",
    Phase.CREATING_REPLACEMENT: "creating",
    Phase.HANDING_OVER: "handing_over",
    Phase.RETIRING: "retiring",
    Phase.DRAINING: "draining",
    Phase.AWAITING_DELETION: "awaiting_deletion",
    Phase.FORCE_REMOVING: "force_removing",
}
# Every phase a logical scaleset (or an orphan) is counted in, in the order shown.
PHASES = ("serving", *dict.fromkeys(_PHASE_LABEL.values()), "blocked")
# GARM's runner statuses (params.RunnerStatus), always shown so a series never vanishes
# when its count drops to zero; any other status GARM reports is shown as it comes.
RUNNER_STATUSES = ("pending", "installing", "idle", "active", "failed", "terminated")
# A runner GARM has not heard from yet reports no runner status at all.
NO_STATUS = "unknown"


def force_removals(outcome: Outcome | None) -> int:
    """Force-removals of runners GARM accepted in this pass (a refresh is none)."""
    if outcome is None:
        return 0
    return sum(isinstance(a, RemoveInstance) and a.force for a in outcome.done)


def scalesets_by_phase(outcome: Outcome) -> dict[str, int]:
    """Logical scalesets and orphans per phase; each is counted in exactly one.

    A changeover is counted in its phase (``blocked`` once stuck); a logical scaleset with
    a current generation and none under way is ``serving``, one whose idle runners are
    being refreshed included: its generation serves alone (docs/adr/0010).
    """
    counts: dict[str, int] = dict.fromkeys(PHASES, 0)
    changing = set()
    for progress in outcome.progress:
        if progress.phase is Phase.REFRESHING:
            continue
        counts["blocked" if progress.blocked else _PHASE_LABEL[progress.phase]] += 1
        if not progress.orphan and progress.logical_name is not None:
            changing.add(progress.logical_name.lower())
    counts["serving"] = len({logical for logical, _ in outcome.current} - changing)
    return counts


def _retired(observed: Observed) -> dict[int, datetime]:
    """Retired scalesets still in GARM (disabled, drain clock stamped): when, by id."""
    retired = {}
    for scaleset in observed.scalesets:
        retired_at = Notes.read(scaleset.extended_state).retired_at
        if retired_at is not None and not scaleset.enabled:
            retired[scaleset.id] = retired_at
    return retired


def _deletes_kept(observed: Observed) -> int:
    """Scalesets GARM kept after answering their delete (not those it refused outright)."""
    kept = {
        k.removeprefix("delete:")
        for k, refusal in observed.refusals.refusals.items()
        if k.startswith("delete:") and refusal.cause == KEPT_CAUSE
    }
    return sum(s.name.lower() in kept for s in observed.scalesets)


def render(
    outcome: Outcome | None,
    *,
    ended: datetime,
    duration: float,
    force_removals_total: int,
    reconcile_interval: int,
    settings: Settings | None,
    version: str,
) -> str:
    """The metrics text of a leader pass that ended at ``ended``, taking ``duration`` s.

    ``outcome`` is None when the pass stopped before reconciling, ``settings`` when the
    config cannot be read, ``version`` "" when GARM's is not known.
    """
    out = _Text()
    observed = outcome.observed if outcome is not None else None
    if outcome is not None and observed is not None:
        _scaleset_families(out, outcome, observed, ended)
    out.family(
        "garm_charm_force_removals_total",
        "Runners the charm force-removed (GARM accepted) since the unit started.",
        [({}, force_removals_total)],
        kind="counter",
    )
    out.family(
        "garm_charm_last_pass_timestamp_seconds",
        "Unix time the charm's last pass ended; every other value is as of then.",
        [({}, ended.timestamp())],
    )
    out.family(
        "garm_charm_last_pass_duration_seconds",
        "How long the charm's last pass took.",
        [({}, duration)],
    )
    out.family(
        "garm_charm_last_pass_ok",
        "1 if the last pass read GARM, which answered and accepted every write; else 0.",
        [({}, int(outcome is not None and observed is not None and outcome.ok))],
    )
    out.family(
        "garm_charm_reconcile_interval_seconds",
        "The configured reconcile-interval (0: no timer, passes on hooks only).",
        [({}, reconcile_interval)],
    )
    if settings is not None:
        out.family(
            "garm_charm_drain_deadline_seconds",
            "The configured drain-deadline-minutes, in seconds (0: never force-remove).",
            [({}, settings.drain_deadline.total_seconds())],
        )
        out.family(
            "garm_charm_handover_timeout_seconds",
            "The configured handover-timeout-minutes, in seconds.",
            [({}, settings.handover_timeout.total_seconds())],
        )
    out.family(
        "garm_charm_info",
        "GARM's version, as the charm installed it.",
        [({"version": version.lower() or NO_STATUS}, 1)],
    )
    return out.text()


def _scaleset_families(out: _Text, outcome: Outcome, observed: Observed, now: datetime) -> None:
    """The families that tell GARM's scalesets and runners, as the pass last saw them."""
    retired = _retired(observed)
    oldest = min(retired.values(), default=None)
    out.family(
        "garm_charm_scalesets",
        "Logical scalesets (and orphans) per phase of their changeover.",
        [({"phase": p}, n) for p, n in scalesets_by_phase(outcome).items()],
    )
    out.family(
        "garm_charm_changeover_oldest_seconds",
        "Age of the oldest changeover under way: since its oldest retired scaleset "
        "still present was retired (0 when none).",
        [({}, max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0)],
    )
    out.family(
        "garm_charm_runners_draining",
        "Runners still on retired scalesets.",
        [({}, sum(i.scale_set_id in retired for i in observed.instances))],
    )
    out.family(
        "garm_charm_deletes_kept",
        "Scalesets whose delete GARM answered but kept (GitHub refused).",
        [({}, _deletes_kept(observed))],
    )
    failing: list[tuple[dict[str, str], float]] = []
    by_status: list[tuple[dict[str, str], float]] = []
    for runners in outcome.runners:
        scaleset = runners.logical_name.lower()
        failing.append(({"scaleset": scaleset}, runners.failing))
        counts = Counter(i.runner_status.lower() or NO_STATUS for i in runners.instances)
        for status in sorted(set(RUNNER_STATUSES) | set(counts)):
            by_status.append(({"scaleset": scaleset, "status": status}, counts[status]))
    out.family(
        "garm_charm_runners_failing",
        "Runners of a logical scaleset's current generation in error or failed to start.",
        failing,
    )
    out.family(
        "garm_charm_runners",
        "Runners of a logical scaleset's current generation, by GARM runner status.",
        by_status,
    )


_Samples = Iterable[tuple[dict[str, str], float]]


class _Text:
    """Prometheus text exposition format 0.0.4, one family after another."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, help_text: str, samples: _Samples, kind: str = "gauge") -> None:
        self._lines.append(f"# HELP {name} {_escape_help(help_text)}")
        self._lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
            self._lines.append(
                f"{name}{{{pairs}}} {_number(value)}" if pairs else f"{name} {_number(value)}"
            )

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """A sample value: whole numbers without a fraction, others to the millisecond."""
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"not a metric value: {value!r}")
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")
