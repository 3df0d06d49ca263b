"""Griffe extension for the manual's API pages: doctest examples written in a docstring's prose
(``>>> code`` lines and the output after them) become fenced ``pycon`` blocks, so that Markdown
renders them as code (not as a quotation, and ``[[1, 3]]`` in an output is never read as a link).
"""

from __future__ import annotations

import re

from griffe import Extension, Object


def fence_doctests(text: str) -> str:
    """``text`` with every run of doctest lines (a ``>>>`` line, its ``...`` continuations and
    its output up to a blank line) inside a ```` ```pycon ```` fence with the run's indent.

    A fenced block already in ``text`` is left as it is.
    """
    out: list[str] = []
    lines = text.split("\n")
    i, fenced = 0, False
    while i < len(lines):
        line = lines[i]
        if re.match(r"^\s*```", line):
            fenced = not fenced
        m = re.match(r"^(\s*)>>> ", line) if not fenced else None
        if not m:
            out.append(line)
            i += 1
            continue
        indent = m.group(1)
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(Extension):
    """Fences the doctests of every docstring griffe loads (see :func:`fence_doctests`)."""

    def on_instance(self, *, obj: Object, **kwargs) -> None:
        if obj.docstring is not None and ">>> " in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
