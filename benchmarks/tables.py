"""Writing a benchmark's result table: the JSON (atomically) and its markdown beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from muppets.config import write_json_atomic


def write_table(out: Path, table: Any, markdown: str) -> str:
    """``table`` as JSON at ``out`` and ``markdown`` at ``out`` with the ``.md`` suffix; returns ``markdown``."""
    write_json_atomic(out, table)
    out.with_suffix(".md").write_text(markdown, encoding="utf-8")
    return markdown


def report(result: Any, out: Path | None) -> None:
    """Print ``result`` as JSON and, with ``out``, write it there too (atomically)."""
    import json

    print(json.dumps(result, indent=2))
    if out:
        write_json_atomic(out, result)
