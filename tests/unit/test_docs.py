"""The documentation holds together: a short front page, links that resolve, no orphan page.

README.md is the front page (at most :data:`FRONT_PAGE_MAX_LINES` lines); the
rest lives in ``docs/``. Every relative Markdown link and image in README.md,
CONTRIBUTING.md and ``docs/*.md`` must name an existing file, and a
``#fragment`` must name a heading of the target, slugged the way GitHub does
(:func:`slug`). Every page in ``docs/`` must be reachable from README.md or
the index ``docs/README.md``. Standard library only, so the unit tier runs it
anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FRONT_PAGE = ROOT / "README.md"
INDEX = DOCS / "README.md"
FRONT_PAGE_MAX_LINES = 200

#: ``[text](target)`` and ``![alt](target)``, with an optional ``"title"``; ``<target>`` allowed.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def checked_pages() -> list[Path]:
    """The pages whose links are checked: the front page, CONTRIBUTING.md and every ``docs/*.md``."""
    return [FRONT_PAGE, ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]


def _prose_lines(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: inline markup dropped, lower case,
    every character but letters, digits, ``_``, ``-`` and spaces removed, spaces to ``-``."""
    text = _CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every ``#fragment`` that names a heading of ``page``; repeated headings get ``-1``, ``-2``... as on GitHub."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(page: Path) -> list[str]:
    """The link and image targets of ``page`` outside code blocks and code spans."""
    found: list[str] = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        found.extend(_LINK.findall(_CODE_SPAN.sub("", line)))
    return found


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(page: Path) -> list[str]:
    """What is wrong with the relative links of ``page``, one sentence each (empty: all resolve)."""
    problems: list[str] = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{target}: no file {_shown(resolved)}")
            continue
        if fragment and resolved.suffix == ".md" and unquote(fragment) not in anchors(resolved):
            problems.append(f"{target}: no heading with the anchor #{fragment} in {_shown(resolved)}")
    return problems


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Why is my job waiting?", "why-is-my-job-waiting"),
        ("Restart in place: `--supervise`", "restart-in-place---supervise"),
        (
            "Contract (what users and the acceptance checks rely on)",
            "contract-what-users-and-the-acceptance-checks-rely-on",
        ),
        ("The local control plane (`ring-devcluster`)", "the-local-control-plane-ring-devcluster"),
        ("Facts measured here (TensorFlow 2.21, CPU)", "facts-measured-here-tensorflow-221-cpu"),
        ("snake_case and [a link](x.md)", "snake_case-and-a-link"),
    ],
    ids=["question-mark", "code-span", "parentheses", "code-in-parentheses", "dots-and-commas", "underscore-and-link"],
)
def test_slug_follows_githubs_rule(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_repeated_headings_get_numbered_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Figures\n\n```sh\n# not a heading\n```\n\n## Figures\n", encoding="utf-8")
    assert anchors(page) == {"title", "figures", "figures-1"}


def test_a_missing_file_and_a_missing_anchor_are_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Real section\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#real-section) [gone](missing.md) [bad](other.md#no-such) [self](#page)\n"
        "`[code](not-a-link.md)` [web](https://example.com/x.md)\n",
        encoding="utf-8",
    )
    assert [p.split(":")[0] for p in broken_links(page)] == ["missing.md", "other.md#no-such"]


def test_the_front_page_is_short() -> None:
    lines = len(FRONT_PAGE.read_text(encoding="utf-8").splitlines())
    assert lines <= FRONT_PAGE_MAX_LINES, f"README.md has {lines} lines; move detail to a page in docs/"


@pytest.mark.parametrize("page", checked_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_every_docs_page_is_linked_from_the_front_page_or_the_index() -> None:
    def targets(page: Path) -> set[Path]:
        return {(page.parent / unquote(t.partition("#")[0])).resolve() for t in links(page) if not t.startswith("#")}

    linked = targets(FRONT_PAGE) | targets(INDEX)
    orphans = [p.name for p in sorted(DOCS.glob("*.md")) if p != INDEX and p.resolve() not in linked]
    assert INDEX.resolve() in targets(FRONT_PAGE), "README.md does not link docs/README.md"
    assert orphans == [], f"docs pages linked from neither README.md nor docs/README.md: {orphans}"
