"""The status reference and the code agree: every message both ways.

``docs/reference/status-messages.md`` is the reference of every status the charm can
show. Nothing keeps a reference in step by itself, so this module compares it with the
code, both ways, and fails on the first difference.

**What the code can say** is read from ``src/`` with ``ast`` by ``status_texts``: every
argument given to a parameter that takes status text (``status_texts.SINKS``: a
``Summary``'s message, a unit's problem, a skipped spec's reason, the cause a changeover
is stuck on, the description of a write GARM refused …) is followed back through
assignments, f-strings, ``+``, joins, the charm's own functions and properties, and the
exceptions caught, to *templates*: literal text with a placeholder wherever the source
cannot tell the text (a name, a count, GARM's or GitHub's own words). The parts of a
message are templates of their own (``image_id not published yet`` is one, and so is
``Waiting for <>``, which it is shown in).

**What the reference says** is the backticked text in the first column of its tables
and in its headings. There ``<placeholder>`` and ``…`` stand for any text; anything else
is the charm's wording, or an example value.

The tests:

- every template occurs in some entry of the reference, a placeholder of the template
  standing for any text there (``test_every_message_of_the_code_is_in_the_reference``);
- every entry is made by the code (``test_every_entry_of_the_reference_is_made_by_the_code``):
  it is a template whose placeholders are each filled with one word (a name, a count),
  with the reference's placeholders, or with text another template makes — parts joined
  by ``; ``, as the status line joins them. An entry with ``…`` (an abbreviation) only
  needs its words to line up with one template's;
- every sink is given text somewhere, and all of it is followed: text the test cannot
  follow fails, naming where (``test_every_text_of_the_code_is_followed``) — extend
  ``status_texts`` rather than let a message go unread.

Limits: any one word fills a placeholder, so an entry differing from the code only in a
single word used as a value passes; and the check is per part, so it does not prove the
parts are ever put together in the order an entry shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

import pytest

from tests.unit.juju.status_texts import (
    REPO,
    SHOWN_ENUMS,
    SINKS,
    Hole,
    Template,
    Texts,
    lone_hole,
)

REFERENCE = REPO / "docs/reference/status-messages.md"
# A placeholder of the reference: ``<scaleset>``, ``<n times>``, or an ellipsis.
PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>|…")
CODE_SPAN = re.compile(r"`([^`]+)`")
# A heading that is a message, such as ``### `Stuck: <name>: <cause>` ``.
CODE_HEADING = re.compile(r"^#+ `([^`]+)`$")
SEPARATOR_ROW = re.compile(r"^\|\s*:?-{3,}")
# What the status line puts between the parts it joins (``juju.status._join``).
JOINED = "; "


@cache
def texts() -> Texts:
    return Texts()


def templates() -> set[Template]:
    return {f.template for f in texts().found}


@cache
def entries() -> tuple[tuple[int, str], ...]:
    """The reference's entries with their line: first-column and heading code spans."""
    lines = REFERENCE.read_text().splitlines()
    found: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        header = number < len(lines) and SEPARATOR_ROW.match(lines[number]) is not None
        if line.startswith("#"):
            found += [(number, span) for span in CODE_HEADING.findall(line)]
        elif line.startswith("|") and not SEPARATOR_ROW.match(line) and not header:
            found += [(number, span) for span in CODE_SPAN.findall(line.split("|")[1])]
    return tuple(found)


def shown(text: Template) -> str:
    return "".join("<>" if isinstance(t, Hole) else t for t in text)


# ------------------------------------------------------------------ the code in the page


def pattern(text: Template) -> re.Pattern[str]:
    """A template as a regular expression: its placeholders stand for any text."""
    return re.compile("".join(".+?" if isinstance(t, Hole) else re.escape(t) for t in text), re.S)


def documented(text: Template, page: Iterable[str]) -> bool:
    """Whether some entry holds the template's text, its placeholders filled somehow."""
    wanted = pattern(text)
    return any(wanted.search(entry) for entry in page)


# ------------------------------------------------------------------ the page in the code


def is_value(text: str) -> bool:
    """One word (a name, a count), or nothing but the reference's placeholders."""
    if not text or text != text.strip():
        return False
    return len(text.split()) == 1 or not any(c.isalpha() for c in PLACEHOLDER.sub("", text))


class Maker:
    """Whether the code's templates make a text of the reference (see the module doc)."""

    def __init__(self, made: Iterable[Template]) -> None:
        self.templates = [t for t in set(made) if lone_hole(t) is None]
        self.patterns = {
            t: re.compile(pattern(t).pattern.replace(".+?", ".+"), re.S) for t in self.templates
        }
        self._known: dict[str, bool] = {}

    def makes(self, entry: str) -> bool:
        """Whether the code makes ``entry`` (a value alone is not a message)."""
        return self._joined(entry) or any(self._matches(t, entry) for t in self.templates)

    def _part(self, text: str) -> bool:
        if text not in self._known:
            self._known[text] = False  # a text is not made of itself
            self._known[text] = is_value(text) or self.makes(text)
        return self._known[text]

    def _joined(self, text: str) -> bool:
        at = text.find(JOINED)
        while at > 0:
            if self._part(text[:at]) and self._part(text[at + len(JOINED) :]):
                return True
            at = text.find(JOINED, at + 1)
        return False

    def _matches(self, text: Template, entry: str) -> bool:
        if "…" in entry:
            return abbreviates(entry, text)
        return self.patterns[text].fullmatch(entry) is not None and self._fill(text, entry, 0, 0)

    def _fill(self, text: Template, entry: str, token: int, at: int) -> bool:
        """Whether ``entry[at:]`` is ``text[token:]``, each placeholder filled by a part."""
        if token == len(text):
            return at == len(entry)
        current = text[token]
        if isinstance(current, str):
            return entry.startswith(current, at) and self._fill(
                text, entry, token + 1, at + len(current)
            )
        if token + 1 == len(text):
            return self._part(entry[at:])
        following = text[token + 1]
        assert isinstance(following, str)
        end = entry.find(following, at + 1)
        while end > 0:
            if self._part(entry[at:end]) and self._fill(text, entry, token + 1, end):
                return True
            end = entry.find(following, end + 1)
        return False


def abbreviates(entry: str, text: Template) -> bool:
    """Whether an entry with ``…`` lines up with a template: a wildcard meets any text.

    The placeholders on both sides stand for any text (none too); every other character
    of the one must meet the same character of the other.
    """
    mine: list[str | None] = []
    at = 0
    for found in PLACEHOLDER.finditer(entry):
        mine += [*entry[at : found.start()], None]
        at = found.end()
    mine += entry[at:]
    theirs = [
        None if isinstance(t, Hole) else c
        for t in text
        for c in ([t] if isinstance(t, Hole) else t)
    ]
    reached = {(0, 0)}
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        steps = []
        if i < len(theirs) and theirs[i] is None:
            steps += [(i + 1, j), (i, j + 1)] if j < len(mine) else [(i + 1, j)]
        if j < len(mine) and mine[j] is None:
            steps += [(i, j + 1), (i + 1, j)] if i < len(theirs) else [(i, j + 1)]
        if i < len(theirs) and j < len(mine) and theirs[i] is not None and theirs[i] == mine[j]:
            steps.append((i + 1, j + 1))
        for step in steps:
            if step[0] <= len(theirs) and step[1] <= len(mine) and step not in reached:
                reached.add(step)
                todo.append(step)
    return (len(theirs), len(mine)) in reached


# ------------------------------------------------------------------ the tests


def listed(items: Iterable[str]) -> str:
    return "".join(f"\n  {item}" for item in items)


def test_every_sink_is_given_text() -> None:
    """A sink no call gives text is stale: the code changed, and so must ``SINKS``."""
    stale = sorted(({s.label for s in SINKS if not s.optional} | set(SHOWN_ENUMS)) - texts().used)
    assert not stale, "no call gives these text any more:" + listed(stale)


def test_every_text_of_the_code_is_followed() -> None:
    untraced = texts().untraced
    assert not untraced, "cannot tell what these sinks are given:" + listed(untraced)


def test_every_message_of_the_code_is_in_the_reference() -> None:
    page = [entry for _, entry in entries()]
    missing = sorted(
        {
            f"{shown(found.template)!r} ({found.where})"
            for found in texts().found
            if not documented(found.template, page)
        }
    )
    assert not missing, f"not in {REFERENCE.relative_to(REPO)}:" + listed(missing)


def test_every_entry_of_the_reference_is_made_by_the_code() -> None:
    maker = Maker(templates())
    unknown = [f"line {line}: {entry!r}" for line, entry in entries() if not maker.makes(entry)]
    assert not unknown, (
        f"{REFERENCE.relative_to(REPO)} lists what the code does not make:" + listed(unknown)
    )


@pytest.mark.parametrize(
    "entry",
    [
        "Fix garm-configurator/0: GitHub App key expired",
        "Waiting for the moon to rise",
        "Replacing scaleset <scaleset>: cooling down",
        "GARM refused to <write> (<n times>): <cause>; will try tomorrow",
    ],
)
def test_an_entry_the_code_cannot_make_is_told(entry: str) -> None:
    assert not Maker(templates()).makes(entry)


@pytest.mark.parametrize(
    "entry",
    [
        "Fix garm-configurator/0: GitHub App key secret not readable yet",
        "Waiting for garm-configurator/2 to join: nothing it may serve is retired until then",
        "Replacing scaleset ci (ci-1): draining 2 runners",
        "GARM refused to retire scaleset ci (ci-1) (2 times): 500; will retry",
    ],
)
def test_an_entry_the_code_makes_is_taken(entry: str) -> None:
    assert Maker(templates()).makes(entry)


def test_a_message_the_reference_lacks_is_told() -> None:
    page = [entry for _, entry in entries()]
    assert not documented(("GitHub App key expired",), page)
    assert not documented(("Waiting for ", Hole(), " to rise"), page)
    assert documented(
        ("Waiting for ", Hole(), ": nothing it may serve is retired until then"), page
    )
