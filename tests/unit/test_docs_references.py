"""Docstrings, comments and the README cite only files that are in the repository.

* every ``docs/<page>.md`` named in ``src``, ``tests``, ``bench``, ``scripts`` or ``README.md`` exists;
* the README stays a front door of at most 150 lines (everything else is a page of ``docs/``, built by ``make docs``);
* no file cites the project's research notes (the names in ``NOTES``), which live outside the repository, except
  where ``docs/`` has a page of that name; ``PENDING`` lists files exempt while being
  rewritten (none now).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("src", "tests", "bench", "scripts")
DOC_LINK = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)")
NOTES = re.compile(
    r"(research/)?\b(k8s-protocols|peers|trace-replay-method|failure-cases|real-kubelet|style-anchors)\.md"
)
PENDING: set[str] = set()


def _texts() -> dict[str, str]:
    files = [p for top in SCANNED for p in (ROOT / top).rglob("*.py") if "_pb" not in p.parts]
    files.append(ROOT / "README.md")
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in files}


def test_every_cited_docs_page_exists() -> None:
    cited = {(name, page) for name, text in _texts().items() for page in DOC_LINK.findall(text)}
    assert cited, "expected at least one docs/ reference"
    missing = sorted(f"{name}: docs/{page}" for name, page in cited if not (ROOT / "docs" / page).is_file())
    assert missing == []


def test_no_citation_of_notes_outside_the_repository() -> None:
    offenders = []
    for name, text in _texts().items():
        if name in PENDING:
            continue
        # A note's name is fine where docs/ has a page of that name (ours, e.g. failure-cases.md), unless the
        # citation says research/.
        offenders += [
            f"{name}: {m.group(0)}"
            for m in NOTES.finditer(text)
            if m.group(1) or not (ROOT / "docs" / f"{m.group(2)}.md").is_file()
        ]
    assert offenders == []


def test_readme_is_a_front_door_of_at_most_150_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
