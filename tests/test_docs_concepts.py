"""The manual's Concepts pages (``docs/concepts/``) against the code they describe: pure text, fast.

* the layout tree on ``architecture.md`` names every package and top-level module of
  ``src/muppets/``, and names nothing that is not there, so a package added, renamed or removed
  fails here until the page follows;
* every package has its API page linked there;
* the concepts index links every concepts page;
* no docstring or comment sends the reader to a design file that is not in the repository
  (the architecture page is where the design is written down).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "muppets"
CONCEPTS = ROOT / "docs" / "concepts"
ARCHITECTURE = CONCEPTS / "architecture.md"


def layout_tree() -> list[str]:
    """The entries (``nn/``, ``config.py`` …) of the ```text block that starts with ``src/muppets/``."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```text\n(src/muppets/\n.*?)^```", text, flags=re.S | re.M)
    assert len(blocks) == 1, f"{ARCHITECTURE}: expected one ```text block starting with src/muppets/, found {len(blocks)}"
    return [m.group(1) for line in blocks[0].splitlines()[1:] if (m := re.match(r"^  (\S+)", line))]


def packages() -> set[str]:
    return {p.parent.name for p in SRC.glob("*/__init__.py")}


def modules() -> set[str]:
    return {p.name for p in SRC.glob("*.py")}


def test_the_layout_tree_names_every_package_and_nothing_else() -> None:
    named = layout_tree()
    dirs = {e[:-1] for e in named if e.endswith("/")}
    files = {e for e in named if e.endswith(".py")}
    assert not [e for e in named if e not in {f"{d}/" for d in dirs} | files], named
    assert len(named) == len(set(named)), f"named twice: {sorted(e for e in named if named.count(e) > 1)}"
    assert packages() - dirs == set(), f"packages missing from the tree on {ARCHITECTURE.name}"
    assert dirs - packages() == set(), f"the tree on {ARCHITECTURE.name} names packages that do not exist"
    assert modules() - files == set(), f"top-level modules missing from the tree on {ARCHITECTURE.name}"
    assert files - modules() == set(), f"the tree on {ARCHITECTURE.name} names modules that do not exist"


def test_every_package_links_its_api_page() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [p for p in sorted(packages()) if f"(../reference/api/muppets.{p}.md)" not in text]
    assert not missing, f"{ARCHITECTURE.name} does not link the API pages of {missing}"
    assert "(../reference/api/muppets.md)" in text, "the top-level modules' API page is not linked"


def test_the_concepts_index_links_every_page() -> None:
    index = (CONCEPTS / "index.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in CONCEPTS.glob("*.md") if p.name != "index.md")
    assert pages, "no concepts pages"
    missing = [name for name in pages if f"({name})" not in index]
    assert not missing, f"docs/concepts/index.md does not link {missing}"


def test_no_source_cites_a_design_file_that_is_not_in_the_repo() -> None:
    name = "DESIGN" + ".md"  # spelt apart, so this file does not cite it
    if (ROOT / name).exists():
        return
    citing = [f"{p.relative_to(ROOT)}:{n}"
              for folder in ("src", "tests") for p in sorted((ROOT / folder).rglob("*.py"))
              for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if name in line]
    assert not citing, f"{name} is not in the repository, yet cited at {citing}: cite docs/concepts/architecture.md"
