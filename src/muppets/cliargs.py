"""Argument types shared by the command-line parsers, so a bad number is argparse's clear
``error: argument --threads: …`` (exit 2) and never a traceback from deep inside torch."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


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


# ----------------------------------------------------------------------------- the model argument
MODEL_FORMS = "--model MODEL (or MODEL as the first argument)"


@dataclass(frozen=True)
class ModelSlots:
    """Where a command's model may stand besides ``--model``: first, before its other positional
    arguments ``others`` (their dests, in order), of which it takes ``least`` to ``takes`` (None:
    any number)."""

    others: tuple[str, ...] = ()
    least: int = 0
    takes: int | None = 0
    required: bool = True  # no model given either way is an error (False: the config's model is used)
    until_assignment: bool = False  # the positionals end at the first key=value after the first one (overrides)


def add_model_argument(p: argparse.ArgumentParser, help: str, slots: ModelSlots = ModelSlots(), *,
                       positional: bool = True) -> None:
    """The model of a command, in either form: ``--model MODEL``, the documented one, or ``MODEL``
    as the command's first positional argument (``muppets probe minilm`` = ``muppets probe --model
    minilm``); :func:`settle_model` then tells which. ``positional`` declares that argument
    (``model_positional``, optional; call this before adding the other positionals); a command
    whose other positionals argparse cannot tell apart from it (``finetune TASK key=value …``)
    leaves it out, and :func:`settle_model` reads the model from the front of ``slots.others``."""
    p.add_argument("--model", metavar="MODEL", help=f"{help}; may also come first, as MODEL")
    if positional:
        p.add_argument("model_positional", nargs="?", metavar="MODEL",
                       help="the model, as --model says (one of the two)")
    p.set_defaults(model_slots=slots)


def settle_model(args: argparse.Namespace) -> str | None:
    """Set ``args.model`` to the model given either way, and the command's other positionals to
    what follows it (:func:`model_and_rest`); returns the model. Every command that takes a model
    calls it first; calling it again changes nothing."""
    slots: ModelSlots = args.model_slots
    first = getattr(args, "model_positional", None)
    values = {name: getattr(args, name) for name in slots.others}
    tokens = [first] if first is not None else []
    for value in values.values():
        tokens += value if isinstance(value, list) else [] if value is None else [value]
    tokens += getattr(args, "model_extra", [])  # positionals argparse left over after an option
    lead = len(tokens)
    if slots.until_assignment:
        lead = next((i for i, t in enumerate(tokens) if i and "=" in t), len(tokens))
    args.model, rest = model_and_rest(args.model, tokens[:lead], least=slots.least, takes=slots.takes,
                                      required=slots.required, command=getattr(args, "command", ""))
    rest += tokens[lead:]
    for name, value in values.items():  # back in order: one each, a list (nargs + or *) the rest
        taken = rest if isinstance(value, list) else rest[:1]
        setattr(args, name, list(taken) if isinstance(value, list) else (taken[0] if taken else None))
        rest = rest[len(taken):]
    if rest:  # more than the command takes (argparse leaves such words to us after an option)
        from muppets.errors import ConfigError

        raise ConfigError(f"{getattr(args, 'command', '')}: unrecognized arguments: {' '.join(rest)}")
    args.model_positional, args.model_extra = None, []
    return args.model


def model_and_rest(option: str | None, positionals: list[str], *, least: int = 0, takes: int | None = None,
                   required: bool = True, command: str = "") -> tuple[str | None, list[str]]:
    """``(model, the other positional arguments)`` of a command that takes ``least`` to ``takes``
    other positionals (``takes`` None: any number). With ``--model`` (``option``), every positional
    is one of the others, except a first one beyond ``takes``: the model written twice, which must
    then be the same model. Without it, the first positional is the model when there are more than
    ``least``. A model given as two different ones, or a ``required`` one given neither way, is a
    :class:`~muppets.errors.ConfigError`.

    >>> model_and_rest(None, ["minilm", "The text"], takes=1)
    ('minilm', ['The text'])
    >>> model_and_rest("minilm", ["The text"], takes=1)
    ('minilm', ['The text'])
    >>> model_and_rest(None, ["sst2"], least=1, takes=1, required=False)
    (None, ['sst2'])
    """
    from muppets.errors import ConfigError

    where = f"{command}: " if command else ""
    rest = list(positionals)
    if option is not None:
        if takes is not None and len(rest) > takes:
            first = rest.pop(0)
            if first != option:
                raise ConfigError(f"{where}the model is given twice, as {first!r} and as --model {option!r}: give it "
                                  "once, as --model MODEL or as the first argument")
        return option, rest
    if len(rest) > least:
        return rest[0], rest[1:]
    if required:
        raise ConfigError(f"{where}which model? give {MODEL_FORMS}")
    return None, rest
