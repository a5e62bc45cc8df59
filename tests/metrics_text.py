"""Prometheus' text format read back strictly, and the charm's metrics contract."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# The contract (issue #12): each family's type and label names.
CONTRACT = {
    "garm_charm_scalesets": ("gauge", {"phase"}),
    "garm_charm_changeover_oldest_seconds": ("gauge", set()),
    "garm_charm_runners_draining": ("gauge", set()),
    "garm_charm_deletes_kept": ("gauge", set()),
    "garm_charm_force_removals_total": ("counter", set()),
    "garm_charm_runners_failing": ("gauge", {"scaleset"}),
    "garm_charm_runners": ("gauge", {"scaleset", "status"}),
    "garm_charm_last_pass_timestamp_seconds": ("gauge", set()),
    "garm_charm_last_pass_duration_seconds": ("gauge", set()),
    "garm_charm_last_pass_ok": ("gauge", set()),
    "garm_charm_reconcile_interval_seconds": ("gauge", set()),
    "garm_charm_drain_deadline_seconds": ("gauge", set()),
    "garm_charm_handover_timeout_seconds": ("gauge", set()),
    "garm_charm_info": ("gauge", {"version"}),
}
# What is told only when the pass read GARM.
OBSERVED = {
    "garm_charm_scalesets",
    "garm_charm_changeover_oldest_seconds",
    "garm_charm_runners_draining",
    "garm_charm_deletes_kept",
    "garm_charm_runners_failing",
    "garm_charm_runners",
}


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"'
_SAMPLE = re.compile(rf"({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)\}})? (\S+)")
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Labels = frozenset[tuple[str, str]]


@dataclass
class Family:
    kind: str
    help: str
    samples: dict[Labels, float] = field(default_factory=dict)

    def value(self, **labels: str) -> float:
        return self.samples[frozenset(labels.items())]

    def by(self, label: str) -> dict[str, float]:
        return {dict(k)[label]: v for k, v in self.samples.items()}


def parse(text: str) -> dict[str, Family]:
    """Families by name; fails on anything Prometheus would refuse or read otherwise.

    HELP then TYPE before any sample, each family's lines together and declared once,
    no duplicate series, values that are numbers, one newline at the end and no blank
    line (Prometheus accepts blank lines; the charm writes none).
    """
    assert text.endswith("\n") and not text.endswith("\n\n")
    families: dict[str, Family] = {}
    current: str | None = None
    helped: dict[str, str] = {}
    for line in text[:-1].split("\n"):
        assert line, "blank line"
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert re.fullmatch(_NAME, name) and name not in helped and name not in families
            helped[name] = help_text
            current = None
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert name in helped and name not in families, f"TYPE {name} without HELP"
            assert kind in ("gauge", "counter"), kind
            assert kind != "counter" or name.endswith("_total")
            families[name] = Family(kind, helped[name])
            current = name
        else:
            assert not line.startswith("#"), line
            match = _SAMPLE.fullmatch(line)
            assert match, f"not a sample: {line!r}"
            name, value = match[1], match[len(match.groups())]
            assert name == current, f"{name} outside its family"
            labels = re.findall(_LABEL, match[2] or "")
            keys = [k for k, _ in labels]
            assert len(keys) == len(set(keys)), f"repeated label in {line!r}"
            unescaped = frozenset(
                (k, re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m[0]], v)) for k, v in labels
            )
            assert unescaped not in families[name].samples, f"duplicate series {line!r}"
            number = float(value)
            assert math.isfinite(number)
            families[name].samples[unescaped] = number
    return families


def checked(text: str, observed: bool = True) -> dict[str, Family]:
    """The families, after checking each against the contract."""
    families = parse(text)
    wanted = CONTRACT if observed else {k: v for k, v in CONTRACT.items() if k not in OBSERVED}
    assert families.keys() == wanted.keys()
    for name, family in families.items():
        kind, labels = CONTRACT[name]
        assert family.kind == kind and family.help
        for series in family.samples:
            assert {k for k, _ in series} == labels, (name, series)
            assert all(v == v.lower() for _, v in series), (name, series)
    return families
