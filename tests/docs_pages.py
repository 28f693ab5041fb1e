"""The README and the documentation site's pages (docs/**/*.md), as the tests that execute their examples read them.

A section is found by its heading text wherever it lives (the README or any page, at any heading level), so an
example keeps being executed when its text moves between pages; it runs to the next heading of its level or above.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from settings import REPO

DOCS = REPO / "docs"
HEADING = re.compile(r"^(#+) +(.+?) *$", re.M)


def pages() -> list[Path]:
    """The README, then every page of the site."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def all_text() -> str:
    return "\n".join(path.read_text() for path in pages())


def section(heading: str) -> str:
    """The text under the heading `heading` (without its #s), up to the next heading of its level or above."""
    found = [(path, m) for path in pages() for m in HEADING.finditer(path.read_text()) if m.group(2) == heading]
    assert len(found) == 1, f"heading {heading!r}: {len(found)} in {[str(p.relative_to(REPO)) for p, _ in found]}"
    path, match = found[0]
    text, level = path.read_text(), len(match.group(1))
    following = (m.start() for m in HEADING.finditer(text, match.end()) if len(m.group(1)) <= level)
    return text[match.end() : next(following, len(text))]


@cache
def generator() -> ModuleType:
    """docs/generate.py, the MkDocs hook that writes the generated parts of the pages (not a package: loaded by path)."""
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def code_blocks(heading: str, language: str) -> list[str]:
    """Every ```<language> block of a section, in order."""
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", section(heading), flags=re.S | re.M)
