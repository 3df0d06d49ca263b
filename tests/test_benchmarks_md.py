"""BENCHMARKS.md stays one readable table whose links land on the results pages (pure text, fast).

The detail of every figure lives in docs/results/*.md; BENCHMARKS.md opens with one table of at
most 60 rows, no cell over 200 characters, and every link in it must reach an existing file and,
for a #fragment, a heading of that page as mkdocs names it (its slug, or an explicit
``{ #id }`` attribute). Every results page must be reachable from BENCHMARKS.md.
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "BENCHMARKS.md"
RESULTS = ROOT / "docs" / "results"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def split_row(line: str) -> list[str]:
    """The cells of a markdown table row; an escaped pipe (\\|) stays inside its cell."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def first_table(text: str) -> list[list[str]]:
    """The rows (header and separator excluded) of the first table in ``text``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.lstrip().startswith("|"):
            break
        rows.append(split_row(line))
    return [r for r in rows[2:]]


def slugify(heading: str) -> str:
    """Python-Markdown's toc slug of a heading's text (mkdocs' default): markup dropped, NFKD to
    ASCII, punctuation dropped, lower case, runs of spaces and hyphens to one hyphen."""
    text = re.sub(r"[`*]", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """Every id mkdocs gives a heading of ``page``: explicit ``{ #id }`` or the slug, with the
    ``_1``, ``_2`` … suffixes of repeated slugs."""
    found, seen = set(), {}
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if not m:
            continue
        text = m.group(1)
        explicit = re.search(r"\{\s*#([\w-]+)\s*\}\s*$", text)
        if explicit:
            found.add(explicit.group(1))
            continue
        slug = slugify(text)
        n = seen.get(slug, 0)
        found.add(slug if n == 0 else f"{slug}_{n}")
        seen[slug] = n + 1
    return found


def test_the_first_table_is_short_and_its_cells_are_readable():
    rows = first_table(BENCHMARKS.read_text(encoding="utf-8"))
    assert 10 <= len(rows) <= 60, f"{len(rows)} rows"
    long = [(i + 1, len(c), c[:60]) for i, row in enumerate(rows) for c in row if len(c) > 200]
    assert not long, long
    assert len({len(r) for r in rows}) == 1, "every row has the same number of cells"


@pytest.mark.parametrize("page", ["BENCHMARKS.md", "README.md"])
def test_every_link_reaches_a_file_and_a_heading(page):
    """The links of BENCHMARKS.md and of the README (the two pages outside the manual, which its
    strict build does not check)."""
    BENCHMARKS = ROOT / page  # noqa: N806 - the page whose links are checked
    bad = []
    for target in LINK.findall(BENCHMARKS.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, fragment = target.partition("#")
        file = (BENCHMARKS.parent / path).resolve()
        if not file.is_file():
            bad.append(f"{target}: no such file")
        elif fragment and fragment not in anchors(file):
            bad.append(f"{target}: no heading #{fragment}")
    assert not bad, bad


def test_every_results_page_is_linked():
    linked = {(BENCHMARKS.parent / t.partition("#")[0]).resolve()
              for t in LINK.findall(BENCHMARKS.read_text(encoding="utf-8"))}
    pages = sorted(RESULTS.glob("*.md"))
    assert pages, "docs/results holds no page"
    assert not [p.name for p in pages if p.resolve() not in linked]


def test_the_slug_rules_match_mkdocs_on_known_headings():
    assert slugify("Speed: muppets vs transformers `BertForPreTraining` (same run)") == \
        "speed-muppets-vs-transformers-bertforpretraining-same-run"
    assert slugify("Issue 18 — multi-task learning (resolved 2026-11-29: RTE)") == \
        "issue-18-multi-task-learning-resolved-2026-11-29-rte"
    assert slugify("TAPT with `tie_word_embeddings: false`") == "tapt-with-tie_word_embeddings-false"
