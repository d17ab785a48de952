"""MkDocs hook: the site's home page is the repository's README.md, its links made relative to ``docs/``.

The README links pages as ``docs/<page>.md`` (right on GitHub); the home page lives in ``docs/`` itself, so on the
site those links lose the prefix. Invariant: the home page and the README differ in nothing else, so there is one
front door to keep. Registered under ``hooks:`` in ``mkdocs.yml``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"


def home_markdown(readme: str) -> str:
    """The README as the site's home page: each ``](docs/<page>.md)`` link becomes ``](<page>.md)``."""
    return readme.replace("](docs/", "](")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs' page hook: replaces ``docs/index.md``'s placeholder with the README; other pages pass unchanged."""
    if page.file.src_uri != "index.md":
        return markdown
    return home_markdown(README.read_text(encoding="utf-8"))
