"""Argument types shared by the command-line parsers, so a bad number is argparse's clear
``error: argument --threads: …`` (exit 2) and never a traceback from deep inside torch."""

from __future__ import annotations

import argparse


def non_negative_int(text: str) -> int:
    """An integer >= 0 (``--threads 0`` = the default, ``--max-train-sentences 0`` = all).

    >>> non_negative_int("2")
    2
    """
    return at_least(0)(text)


def at_least(least: int):
    """An argparse type: an integer >= ``least`` (``--jobs``: 1, ``--cardinality``: 2).

    >>> at_least(2)("3")
    3
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}")
        return value

    parse.__name__ = f"integer >= {least}"
    return parse


def refuse_existing(*paths: object, overwrite: bool) -> None:
    """Refuse, before any work, to replace an output file the user named unless ``--overwrite``
    (as every writer of the command line does). ``None`` entries (outputs not asked for) are skipped.

    >>> refuse_existing(None, "no-such-file.json", overwrite=False)
    """
    import os

    from muppets.errors import ConfigError

    taken = [str(p) for p in paths if p and os.path.lexists(str(p))]
    if taken and not overwrite:
        raise ConfigError(f"{', '.join(taken)} {'exists' if len(taken) == 1 else 'exist'}: pass --overwrite to replace "
                          f"{'it' if len(taken) == 1 else 'them'}, or choose another output")
