"""Every tutorial of the manual (``docs/tutorials/*.md``) runs, as written, at tiny settings.

Each page's fenced ``bash`` and ``python`` blocks run in order in a fresh directory of their own
(a tutorial builds only on its own earlier steps and on the shared data), through the same runner
as the README's (``tests/_markdown_runner.py``): the commands are the page's, the runner only
appends the settings that make them tiny. So the manual cannot drift from the CLI: a renamed
option, a changed default or a removed command fails here, naming the page and line.
"""

from __future__ import annotations

import pytest

from _markdown_runner import ROOT, Workdir, markdown_blocks, run_page

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
PAGES = [p for p in TUTORIALS if p.name != "index.md"]


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_tutorial_runs(page, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = markdown_blocks(page)
    assert blocks, f"{page}: no bash or python block to run"
    timings = run_page(blocks, Workdir(tmp_path))
    with capsys.disabled():
        print("\n" + "\n".join(timings))


def test_every_tutorial_is_in_the_index() -> None:
    """The tutorials' index page links every tutorial (the nav check of the build covers the rest)."""
    index = (ROOT / "docs" / "tutorials" / "index.md").read_text(encoding="utf-8")
    missing = [p.name for p in PAGES if f"({p.name})" not in index]
    assert not missing, f"docs/tutorials/index.md does not link {missing}"
