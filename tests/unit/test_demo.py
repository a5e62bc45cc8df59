"""The demo (``tox -e demo``, ``tests/demo.py``), run in this process and read as printed.

It must end as its exit code promises, explain its columns before its first table, tell
a job starting only once the table shows the runner it starts on, and show a scaleset
``creating`` (in GARM, not yet on GitHub) as ``juju status`` does in the tutorial.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field

import pytest

from tests import demo

HOOK = re.compile(r"^t=\s*\d+:\d\d (?!\()\S.*? garm/0 (?P<status>\S+): (?P<message>.*)$")
REMARK = re.compile(r"^t=\s*\d+:\d\d \((?P<text>.*)$")
ROW = re.compile(
    r"^ {10}(?P<name>\S+ \(\S+\))\s+(?P<state>[a-z]+)\s+\[(?P<labels>[^\]]*)\] "
    r"runners=(?P<runners>\d+) busy=(?P<busy>\d+)(?: template=(?P<template>\S+))?$"
)
STARTS = re.compile(
    r"job starts on (?P<runner>\S+), the runner GARM started on (?P<on>\S+ \(\S+?\))"
)


@dataclass(frozen=True)
class Row:
    name: str
    state: str
    labels: str
    runners: int
    busy: int


@dataclass
class Block:
    """One hook's lines as printed: its status message and the scalesets' rows."""

    message: str
    rows: dict[str, Row] = field(default_factory=dict)


@dataclass(frozen=True)
class Told:
    code: int
    lines: list[str]

    def blocks_and_remarks(self) -> list[Block | str]:
        """The hooks' blocks and the remarks between them, in the order printed."""
        told: list[Block | str] = []
        for line in self.lines:
            if hook := HOOK.match(line):
                told.append(Block(hook["message"]))
            elif remark := REMARK.match(line):
                told.append(remark["text"])
            elif (row := ROW.match(line)) and told and isinstance(told[-1], Block):
                told[-1].rows[row["name"]] = Row(
                    row["name"], row["state"], row["labels"], int(row["runners"]), int(row["busy"])
                )
        return told


@pytest.fixture(scope="module")
def told() -> Told:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = demo.main()
    return Told(code, out.getvalue().splitlines())


def first_hook(told: Told) -> int:
    return next(i for i, line in enumerate(told.lines) if HOOK.match(line))


def test_the_story_ends_converged_and_the_leaving_unit_deletes_nothing(told: Told):
    assert told.code == 0, "\n".join(told.lines)
    assert "converged" in told.lines
    assert "nothing deleted by the leaving unit" in told.lines
    assert not [line for line in told.lines[first_hook(told) :] if "MISMATCH" in line]


def test_a_legend_comes_once_before_the_first_hook(told: Told):
    legend = demo.LEGEND.splitlines()
    assert told.lines[: len(legend)] == legend
    assert len(legend) < first_hook(told)
    assert "\n".join(told.lines).count(legend[0]) == 1


def test_the_legend_explains_every_column_the_rows_show(told: Told):
    legend = "\n".join(told.lines[: first_hook(told)])
    blocks = [x for x in told.blocks_and_remarks() if isinstance(x, Block)]
    states = {row.state for block in blocks for row in block.rows.values()}
    assert states == {"creating", "enabled", "retired"}
    fields = {"runners=", "busy=", "template="}
    assert all(any(f in line for line in told.lines if ROW.match(line)) for f in fields)
    for word in [
        "t=M:SS",
        "garm/0 <status>: <message>",
        "what changed:",
        "<name> (<GARM name>)",
        "[labels]",
        "MISMATCH",
        *states,
        *fields,
    ]:
        assert word in legend, word


def test_a_job_starts_only_on_a_runner_the_table_above_shows(told: Told):
    order = told.blocks_and_remarks()
    starts = [(i, STARTS.search(x)) for i, x in enumerate(order) if isinstance(x, str)]
    starts = [(i, found) for i, found in starts if found]
    assert starts, "the story tells no job starting"
    for at, found in starts:
        above = next(x for x in reversed(order[:at]) if isinstance(x, Block))
        below = next(x for x in order[at:] if isinstance(x, Block))
        assert above.rows[found["on"]].runners > 0, f"{found[0]} under a row with no runner"
        assert below.rows[found["on"]].busy > 0, f"{found[0]}: the next row shows it idle"
    for line in told.lines:
        assert "job starts" not in line or STARTS.search(line), line


def test_the_replacement_shows_creating_before_it_is_live(told: Told):
    blocks = [x for x in told.blocks_and_remarks() if isinstance(x, Block)]
    creating = [
        (i, row)
        for i, block in enumerate(blocks)
        if block.message.endswith(": creating replacement")
        for row in block.rows.values()
        if row.state == "creating"
    ]
    assert creating, "no block shows a replacement being created"
    at, row = creating[0]
    assert "arm64" in row.labels.split(",")
    later = [b.rows[row.name].state for b in blocks[at + 1 :] if row.name in b.rows]
    assert later and later[-1] == "enabled"


def test_a_new_scaleset_shows_creating_as_the_tutorial_says(told: Told):
    created = [
        b
        for b in told.blocks_and_remarks()
        if isinstance(b, Block) and b.message.startswith("Creating scaleset ci (")
    ]
    assert created
    assert {r.state for r in created[0].rows.values()} == {"creating"}
