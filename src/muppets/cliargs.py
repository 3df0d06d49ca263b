"""Argument types shared by the command-line parsers, so a bad number is argparse's clear
``error: argument --threads: …`` (exit 2) and never a traceback from deep inside torch."""

from __future__ import annotations

import argparse


def non_negative_int(text: str) -> int:
    """An integer >= 0 (``--threads 0`` = the default, ``--max-train-sentences 0`` = all).

    >>> non_negative_int("2")
    2
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value
