"""The repository cites only what a reader of it can follow, and its doc links resolve.

Two checks over the files git tracks (and the untracked ones it does not ignore):

- nothing cites a file outside the repository: no ``shared/…`` path, no relative path
  that climbs out of the repository root (a markdown link target, or a backticked path
  to a file, one whose name has an extension: ``../../etc/cron.d/x`` in a list of
  hostile inputs is no citation), no bare markdown file name that is not one of the
  repository's own, and no ``<page>.md §N`` whose page lacks a section N;
- every relative link in README.md, CONTRIBUTING.md, SECURITY.md and docs/**/*.md names
  a file that exists, and every ``#anchor`` matches a heading of the page it points at,
  by GitHub's rule for heading anchors.

Each check is a function over a root and a list of files, so that the tests below also
run it on a tree planted with the very mistakes it must find.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The literals are split so that this file does not cite what it looks for.
OUTSIDE_DIR = "shared" + "/"
MD = ".md"
_OUTSIDE = re.compile(r"(?<![\w.-])" + re.escape(OUTSIDE_DIR) + r"[\w.-]")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")
_BACKTICKED = re.compile(r"`([^`\s]+)`")
_FILE = re.compile(r"[^/]\.\w+(?:#.*)?$")
_BARE_MD = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")
_CITED_PAGE = re.compile(r"([\w./-]*[\w-]+\.md)(?:\)|`)?")
_SECTION = re.compile(r"^\s*(?:[(,/\u2013-]|and)?\s*§(\d+(?:\.\d+)*)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.?(?:\s|$)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_CODE_SPAN = re.compile(r"`+[^`]*`+")
# Files whose bare "§N" means a section of one page, as their docstrings say.
BARE_SECTIONS = {
    "tests/unit/test_garm_double_wire.py": "docs/reference/garm-api.md",
    "tests/unit/test_garm_double_templates.py": "docs/reference/garm-api.md",
    "tests/garm_double.py": "docs/reference/garm-api.md",
}


def repository_files(root: Path) -> list[str]:
    """What git tracks under ``root``, and what is untracked but not ignored."""
    listed: set[str] = set()
    for extra in ([], ["--others", "--exclude-standard"]):
        out = subprocess.run(
            ["git", "ls-files", "-z", *extra], cwd=root, capture_output=True, check=True
        ).stdout
        listed.update(name for name in out.decode().split("\0") if name)
    return sorted(name for name in listed if (root / name).is_file())


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _lines(root: Path, files: Iterable[str], having: str = "") -> Iterator[tuple[str, int, str]]:
    """The lines of the text files, those with ``having`` in them only."""
    for name in files:
        text = text_of(root / name)
        if text is not None:
            for number, line in enumerate(text.splitlines(), 1):
                if having in line:
                    yield name, number, line


def _escapes(root: Path, name: str, target: str) -> bool:
    """Whether a relative ``target`` written in file ``name`` resolves outside ``root``."""
    if _SCHEME.match(target) or target.startswith(("/", "#", "~")):
        return False
    path = target.split("#", 1)[0]
    if ".." not in Path(path).parts:
        return False
    resolved = (root / name).parent.joinpath(path).resolve()
    return not resolved.is_relative_to(root.resolve())


def outside_citations(root: Path, files: Iterable[str]) -> list[str]:
    """Every line that cites a file outside ``root``, as ``file:line: what``."""
    files = list(files)
    own_pages = {Path(name).name for name in files if name.endswith(".md")}
    found = []
    for name, number, line in _lines(root, files):
        where = f"{name}:{number}"
        if _OUTSIDE.search(line):
            found.append(f"{where}: cites a path under {OUTSIDE_DIR}: {line.strip()}")
        targets = [m.group(1) for m in _LINK.finditer(line)]
        targets += [m.group(1) for m in _REFERENCE.finditer(line)]
        targets += [m.group(1) for m in _BACKTICKED.finditer(line) if _FILE.search(m.group(1))]
        for target in targets:
            if _escapes(root, name, target):
                found.append(f"{where}: {target} is outside the repository")
        for match in _BARE_MD.finditer(line):
            if match.group(1) not in own_pages:
                found.append(f"{where}: {match.group(1)} is no page of this repository")
    return found


def _page(root: Path, name: str, cited: str, files: list[str]) -> Path | None:
    """The repository page a citation names: by path (from the file or the root) or name."""
    for base in ((root / name).parent, root):
        candidate = (base / cited).resolve()
        if candidate.is_file() and candidate.is_relative_to(root.resolve()):
            return candidate
    if "/" not in cited:
        same = [f for f in files if Path(f).name == cited]
        if len(same) == 1:
            return root / same[0]
    return None


def numbered_sections(page: Path) -> set[str]:
    """The section numbers a page's headings start with ("2.6" for "### 2.6 Delete")."""
    numbers = set()
    for heading in headings(page.read_text()):
        if match := _NUMBERED.match(heading):
            numbers.add(match.group(1))
    return numbers


def _sections_after(rest: str) -> list[str]:
    cited = []
    while match := _SECTION.match(rest):
        cited.append(match.group(1))
        rest = rest[match.end() :]
    return cited


def section_citations(root: Path, files: Iterable[str]) -> list[str]:
    """Every ``<page>.md §N`` whose page is not in ``root`` or has no section N."""
    files = list(files)
    found = []
    # Each page's sections read once (a page is cited from thousands of lines).
    numbered = functools.cache(numbered_sections)
    # No citation without a §; and the page pattern is slow on the lines of code.
    for name, number, line in _lines(root, files, having="§"):
        for match in _CITED_PAGE.finditer(line):
            cited = _sections_after(line[match.end() :])
            if not cited:
                continue
            page = _page(root, name, match.group(1), files)
            if page is None:
                found.append(f"{name}:{number}: {match.group(1)} is no page of this repository")
                continue
            missing = [n for n in cited if n not in numbered(page)]
            if missing:
                found.append(f"{name}:{number}: {match.group(1)} has no section §{missing[0]}")
        bare = BARE_SECTIONS.get(name)
        if bare is not None and (root / bare).is_file():
            have = numbered(root / bare)
            for cited in re.findall(r"§(\d+(?:\.\d+)*)", line):
                if cited not in have:
                    found.append(f"{name}:{number}: {bare} has no section §{cited}")
    return found


# --- markdown links --------------------------------------------------------------------


def _prose(text: str) -> Iterator[tuple[int, str]]:
    """The lines of a markdown text outside fenced code, with inline code blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, _CODE_SPAN.sub("", line)


def headings(text: str) -> Iterator[str]:
    """The text of each ATX heading outside fenced code."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := _HEADING.match(line)):
            yield match.group(2)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: its text lower-cased, punctuation but - and _ dropped,
    spaces turned into -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page's headings give, the repeats numbered as GitHub numbers them."""
    seen: Counter[str] = Counter()
    result = set()
    for heading in headings(page.read_text()):
        slug = anchor(heading)
        result.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return result


def doc_pages(files: Iterable[str]) -> list[str]:
    """The pages whose links are checked."""
    top = {"README.md", "CONTRIBUTING.md", "SECURITY.md"}
    return [f for f in files if f in top or (f.startswith("docs/") and f.endswith(".md"))]


def broken_links(root: Path, pages: Iterable[str]) -> list[str]:
    """Every relative link of ``pages`` to a missing file or to a heading not there."""
    found = []
    for name in pages:
        page = root / name
        for number, line in _prose(page.read_text()):
            targets = [m.group(1) for m in _LINK.finditer(line)]
            targets += [m.group(1) for m in _REFERENCE.finditer(line)]
            for target in targets:
                if _SCHEME.match(target):
                    continue
                path, _, fragment = target.partition("#")
                linked = (page.parent / path).resolve() if path else page
                where = f"{name}:{number}: {target}"
                if not linked.exists():
                    found.append(f"{where}: no such file")
                elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                    found.append(f"{where}: no heading #{fragment} in {linked.name}")
    return found


# --- the repository --------------------------------------------------------------------


@pytest.fixture(scope="module")
def files() -> list[str]:
    """The repository's files as git sees them."""
    return repository_files(ROOT)


def test_no_file_cites_a_path_outside_the_repository(files: list[str]):
    found = outside_citations(ROOT, files)
    assert not found, "\n".join(found)


def test_every_cited_section_exists(files: list[str]):
    found = section_citations(ROOT, files)
    assert not found, "\n".join(found)


def test_every_doc_link_resolves(files: list[str]):
    pages = doc_pages(files)
    assert "README.md" in pages
    assert "docs/index.md" in pages
    found = broken_links(ROOT, pages)
    assert not found, "\n".join(found)


# --- the checks find what they must ----------------------------------------------------


def _plant(root: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return sorted(files)


def test_a_planted_outside_citation_is_named_with_its_line(tmp_path: Path):
    climb = "../" * 3
    planted = {
        "src/a.py": f'"""Facts.\n\nFrom {OUTSIDE_DIR}notes{MD}, checked.\n"""\n',
        "docs/b.md": f"# B\n\nSee [there]({climb}notes{MD}).\n",
        "docs/c.md": f"# C\n\nAs `{climb}elsewhere/x.py` says, not `{climb}etc/x`.\n",
        "tests/d.py": f"# design{MD} says so\n",
        "docs/fine.md": f"# Fine\n\n[ok](../src/a.py), `../src/a.py`, `/etc/garm`, e{MD}.\n",
        f"docs/e{MD}": "# E\n",
    }
    found = outside_citations(tmp_path, _plant(tmp_path, planted))
    assert found == [
        f"docs/b.md:3: {climb}notes{MD} is outside the repository",
        f"docs/c.md:3: {climb}elsewhere/x.py is outside the repository",
        f"src/a.py:3: cites a path under {OUTSIDE_DIR}: From {OUTSIDE_DIR}notes{MD}, checked.",
        f"tests/d.py:1: design{MD} is no page of this repository",
    ]


def test_a_planted_section_citation_must_name_a_section(tmp_path: Path):
    page = f"api{MD}"
    planted = {
        f"docs/{page}": "# API\n\n## 2. Scale sets\n\n### 2.6 Delete\n",
        "src/a.py": f"# kept (docs/{page} §2.6), gone (docs/{page} §2.7)\n",
        "docs/b.md": f"# B\n\n[the API]({page}) §2.6, §9\n",
        "src/c.py": f"# other{MD} §1\n",
    }
    found = section_citations(tmp_path, _plant(tmp_path, planted))
    assert found == [
        f"docs/b.md:3: {page} has no section §9",
        f"src/a.py:1: docs/{page} has no section §2.7",
        f"src/c.py:1: other{MD} is no page of this repository",
    ]


def test_a_planted_broken_link_or_anchor_is_named(tmp_path: Path):
    planted = {
        f"docs/a{MD}": (
            "# A page\n\n## GARM's log — where\n\n## Twice\n\n## Twice\n\n"
            f"[ok](#garms-log--where) [ok](#twice-1) [ok](b{MD}#b-b) [ok](https://x.org/#y)\n"
            f"[bad](#nowhere) [bad](c{MD}) [bad](b{MD}#b)\n"
            f"```\n[in code](d{MD})\n```\n`[in code](d{MD})`\n"
        ),
        f"docs/b{MD}": "# B: `b`\n",
    }
    found = broken_links(tmp_path, _plant(tmp_path, planted))
    assert found == [
        f"docs/a{MD}:10: #nowhere: no heading #nowhere in a{MD}",
        f"docs/a{MD}:10: c{MD}: no such file",
        f"docs/a{MD}:10: b{MD}#b: no heading #b in b{MD}",
    ]


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("GARM's log", "garms-log"),
        ("0001 — Apply scaleset label changes", "0001--apply-scaleset-label-changes"),
        ("`get-credentials`", "get-credentials"),
        ("2.6 Delete: `DELETE /scalesets/{id}`", "26-delete-delete-scalesetsid"),
        ("Look inside GARM (optional)", "look-inside-garm-optional"),
        (f"snake_case and [a link](x{MD})", "snake_case-and-a-link"),
    ],
)
def test_anchor_follows_githubs_rule(heading: str, expected: str):
    assert anchor(heading) == expected
