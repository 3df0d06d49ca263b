"""Every command block of the README runs, as written, at tiny settings (the runner and its
tables: ``tests/_markdown_runner.py``).

The README's blocks run in order in one working directory, as a new user would run them one after
the other; only the set-up and test commands of the first block are not run here: the suite
itself is their test (``.ci/run`` runs both on a clean clone). A block that fails names its
README line and the command.
"""

from __future__ import annotations

from pathlib import Path

from _markdown_runner import POSTPONED, ROOT, Workdir, bash_commands, markdown_blocks, run_page

README = ROOT / "README.md"


def readme_blocks():
    return markdown_blocks(README)


def test_every_readme_block_runs(tmp_path, monkeypatch, capsys) -> None:
    """The README's blocks, in order, in one fresh directory (one test: each block builds on the
    ones before it, and the order is the README's, whatever runs the suite); the commands that
    name a later section's output run at the end. A failure names the block's line."""
    monkeypatch.chdir(tmp_path)
    workdir = Workdir(tmp_path)
    timings = run_page(readme_blocks(), workdir)
    with capsys.disabled():
        print("\n" + "\n".join(timings))


def test_readme_blocks_are_found() -> None:
    """The parser sees the README's blocks (a fence typo would silently hide a block): the first
    is the two commands, whose main job the test above runs at tiny settings (the rest of the
    commands live in the manual's tutorials: tests/test_docs_tutorials.py)."""
    blocks = readme_blocks()
    assert blocks and blocks[0].lang == "bash"
    commands = bash_commands(blocks[0].text)
    assert commands == ["bash scripts/setup.sh", ".venv/bin/muppets pretrain configs/quickstart.yaml",
                        "bash scripts/setup.sh", ".venv/bin/python -m pytest"], commands
    assert bash_commands("a b \\\n  c  # note\nd && e 'f g'\n") == ["a b c", "d", "e 'f g'"]
