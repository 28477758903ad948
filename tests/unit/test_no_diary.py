"""Docs and code comments say what is, not when someone found it: no diary lines.

"This session", "the session before", "today", "turn 12": true on the day they
were written, wrong or meaningless to the next reader. A run of record is
dated instead (docs/performance.md). Words in double quotes are quoted, not
used (CONTRIBUTING.md names the rule's examples).
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where the rule holds: the docs, and every source, script and config of the repository's layout.
TREES = ("ringcontroller", "agent", "model", "ranktable", "cmd", "build", "tests")
SUFFIXES = {".py", ".sh", ".md", ".yaml", ".yml", ".cfg", ".toml", ".conf", ".txt", ""}
DIARY = re.compile(
    r"\b(?:this|last|previous|earlier|next) session\b|\bsession before\b|\btoday\b|\byesterday\b"
    r"|\bthis turn\b|\bturn \d+\b|\bthe lead\b",
    re.IGNORECASE,
)

#: A string literal's prefix and quotes, at either end.
_QUOTES = re.compile(r"^[rRuU]*(\"{3}|'{3}|\"|')|(\"{3}|'{3}|\"|')$")


def checked_files(root: Path = ROOT) -> list[Path]:
    """README.md, CONTRIBUTING.md, docs/*.md and the text files under :data:`TREES` (no build output, no caches)."""
    files = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
    for tree in TREES:
        for path in sorted((root / tree).rglob("*")):
            parts = set(path.relative_to(root).parts)
            if path.is_file() and path.suffix in SUFFIXES and not parts & {"__pycache__", "data"}:
                if not any(p.endswith(".egg-info") for p in parts):
                    files.append(path)
    return files


def _prose(path: Path, text: str) -> list[tuple[int, str]]:
    """``(line number, text)`` of what is prose in ``path``: a page whole; in Python its comments and
    docstrings; elsewhere what follows a ``#`` (code such as ``date.today()`` is no diary)."""
    lines = text.splitlines()
    if path.suffix in (".md", ".txt"):
        return list(enumerate(lines, start=1))
    if path.suffix != ".py":
        return [(n, line.split("#", 1)[1]) for n, line in enumerate(lines, start=1) if "#" in line]
    out: list[tuple[int, str]] = []
    previous = tokenize.NEWLINE
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.string))
            elif tok.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                body = _QUOTES.sub("", tok.string)
                out.extend((tok.start[0] + i, part) for i, part in enumerate(body.splitlines()))
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                previous = tok.type
    except (tokenize.TokenError, SyntaxError):
        return list(enumerate(lines, start=1))
    return out


def diary_lines(path: Path) -> list[str]:
    """``file:line: text`` for each line of prose in ``path`` that reads like a diary (quoted words left out)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [
        f"{shown}:{n}: {line.strip()}" for n, line in _prose(path, text) if DIARY.search(re.sub(r'"[^"\n]*"', "", line))
    ]


def test_no_diary_in_docs_or_comments() -> None:
    found = [hit for path in checked_files() if path != Path(__file__) for hit in diary_lines(path)]
    assert found == []


@pytest.mark.parametrize(
    ("line", "diary"),
    [
        ("# measured this session on 2 cores", True),
        ("The figures of the session before were", True),
        ("users write today", True),
        ("(turn 12)", True),
        ('no "this session", "today"', False),
        ("left running after the session so the next run reuses it", False),
        ("measured 2026-12-02, 05:40-06:27 UTC", False),
    ],
)
def test_what_counts_as_a_diary_line(tmp_path: Path, line: str, diary: bool) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n\n{line}\n", encoding="utf-8")
    assert bool(diary_lines(page)) is diary


@pytest.mark.parametrize(
    ("source", "diary"),
    [
        ('"""Measured this session."""\n', True),
        ("x = 1  # the figures of the session before\n", True),
        ('def f():\n    """What it did today."""\n', True),
        ("import datetime\nday = datetime.date.today()\n", False),
        ('print("today")\n', False),
    ],
    ids=["docstring", "comment", "function-docstring", "code", "string-argument"],
)
def test_in_python_only_comments_and_docstrings_count(tmp_path: Path, source: str, diary: bool) -> None:
    module = tmp_path / "module.py"
    module.write_text(source, encoding="utf-8")
    assert bool(diary_lines(module)) is diary
