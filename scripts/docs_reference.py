"""MkDocs hook: the manual's reference pages, generated from the code at every build.

* ``reference/cli.md`` — every ``muppets`` command and option, walked from the real argparse
  parser (:func:`muppets.cli.build_parser`), with its help text and default;
* ``reference/config.md`` — every key of every run config (the dataclasses the YAML files fill),
  with its type, default and the comment written beside the field in the source;
* ``reference/api/<package>.md`` — one page per package, each module rendered by mkdocstrings
  from its docstrings (``::: muppets.pkg.module``); the pages join the nav here.

Nothing is written into ``docs/``: the pages exist only in the build, so they cannot drift from
the code. ``tests/test_docs.py`` checks that every option, key and public class is on them.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import io
import pkgutil
import re
import sys
import tokenize
import typing
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

# The configs a run reads from YAML: (title, "module:Class", the command that reads it).
RUN_CONFIGS = [
    ("BERT pretraining", "muppets.recipes.bert_pretrain:PretrainConfig", "muppets pretrain (model.preset bert-*)"),
    ("GPT pretraining", "muppets.recipes.gpt_pretrain:GPTPretrainConfig", "muppets pretrain (model.preset gpt-*)"),
    ("ELMo pretraining", "muppets.recipes.elmo_pretrain:ElmoPretrainConfig", "muppets pretrain (model.preset elmo-*)"),
    ("NNLM", "muppets.recipes.nnlm_pretrain:NNLMRunConfig", "muppets nnlm train"),
    ("word2vec", "muppets.recipes.word2vec_train:Word2VecRunConfig", "muppets word2vec train"),
    ("Fine-tuning", "muppets.transfer.finetune:FinetuneConfig", "muppets finetune / evaluate"),
    ("Multi-task learning", "muppets.multitask.config:MultitaskConfig", "muppets multitask"),
    ("Distillation", "muppets.distill.config:DistillConfig", "muppets distill"),
]


# ----------------------------------------------------------------------------- command line


def _md(text: str | None) -> str:
    """Help text as one Markdown table cell."""
    text = " ".join((text or "").split())
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _subcommands(parser: argparse.ArgumentParser, words: list[str]):
    """(command words, parser) for every leaf command under ``parser``, in the parser's order."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
        return
    for action in subs:
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for name, sub in action.choices.items():
            sub._muppets_help = helps.get(name)  # the one-line help its parent lists
            yield from _subcommands(sub, [*words, name])


def option_names(action: argparse.Action) -> str:
    return ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"


def cli_page() -> str:
    from muppets.cli import build_parser

    parser = build_parser()
    out = ["# Command line", "",
           "Every `muppets` command and option, generated from the parser at build time "
           "(`scripts/docs_reference.py`). `muppets COMMAND --help` prints the same.", ""]
    commands = list(_subcommands(parser, []))
    out += ["| command | what it does |", "|---|---|"]
    for words, sub in commands:
        anchor = "-".join(words)
        out.append(f"| [`muppets {' '.join(words)}`](#{anchor}) | {_md(getattr(sub, '_muppets_help', None) or sub.description)} |")
    out.append("")
    for words, sub in commands:
        out += [f"## muppets {' '.join(words)} {{ #{'-'.join(words)} }}", ""]
        if sub.description:
            out += [sub.description.strip(), ""]
        usage = sub.format_usage().strip().removeprefix("usage: ")
        out += ["```text", usage, "```", ""]
        rows = [a for a in sub._actions if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]
        if rows:
            out += ["| option | default | meaning |", "|---|---|---|"]
            for action in rows:
                default = action.default
                shown = "" if default in (None, argparse.SUPPRESS, False) or not action.option_strings else f"`{default}`"
                choices = f" One of: {', '.join(map(str, action.choices))}." if action.choices and not isinstance(
                    action, argparse._SubParsersAction) else ""
                out.append(f"| {option_names(action)} | {shown} | {_md(action.help)}{_md(choices)} |")
            out.append("")
    return "\n".join(out)


# ----------------------------------------------------------------------------- configuration


def field_comments(cls: type) -> dict[str, str]:
    """The comment written after each field of a dataclass, read from its source."""
    import inspect

    try:
        source, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    tokens = tokenize.generate_tokens(io.StringIO("".join(source)).readline)
    line_field: dict[int, str] = {}
    for number, line in enumerate(source, 1):
        m = re.match(r"^    (\w+)\s*:", line)
        if m:
            line_field[number] = m.group(1)
    for tok in tokens:
        if tok.type == tokenize.COMMENT and tok.start[0] in line_field:
            comments[line_field[tok.start[0]]] = tok.string.lstrip("# ").strip()
    return comments


def _type_name(annotation: typing.Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return str(text).replace("typing.", "")


def _default(f: dataclasses.Field) -> typing.Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def config_rows(cls: type, prefix: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    rows, nested = [], []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        kind = hints.get(f.name, f.type)
        if dataclasses.is_dataclass(kind):
            nested.append((f.name, kind))
            continue
        default = _default(f)
        shown = "required" if default is dataclasses.MISSING else f"`{default!r}`"
        rows.append(f"| `{prefix}{f.name}` | `{_md(_type_name(kind))}` | {_md(shown)} | {_md(comments.get(f.name))} |")
    out = rows
    for name, kind in nested:
        doc = (kind.__doc__ or "").strip().split("\n\n")[0]
        out += ["", f"#### `{prefix}{name}` ({kind.__name__})", "", " ".join(doc.split()), "",
                "| key | type | default | meaning |", "|---|---|---|---|"]
        out += config_rows(kind, f"{prefix}{name}.")
    return out


def config_page() -> str:
    out = ["# Configuration keys", "",
           "Every key of every run config, generated from the dataclasses the YAML files fill "
           "(`scripts/docs_reference.py`): type, default, and the comment beside the field in the "
           "source. Give any key on the command line as a dotted override (`train.lr=5e-4`, "
           "`tasks[1].weight=2`); `--print-config` prints a run's full config as a file. "
           "See [the configuration system](../concepts/configuration.md).", ""]
    for title, target, command in RUN_CONFIGS:
        module, name = target.split(":")
        cls = getattr(importlib.import_module(module), name)
        doc = (cls.__doc__ or "").strip().split("\n\n")[0]
        out += [f"## {title}", "", f"Read by `{command}`; class `{module}.{name}`. {' '.join(doc.split())}", "",
                "| key | type | default | meaning |", "|---|---|---|---|"]
        out += config_rows(cls, "")
        out.append("")
    return "\n".join(out)


# ----------------------------------------------------------------------------- Python API


def packages() -> dict[str, list[str]]:
    """Package name -> its modules, for every package of ``muppets`` (top-level modules under
    ``muppets`` itself)."""
    import muppets

    found: dict[str, list[str]] = {"muppets": ["muppets"]}
    for info in pkgutil.walk_packages(muppets.__path__, "muppets."):
        if info.name.split(".")[-1].startswith("_"):
            continue
        if info.ispkg:
            found.setdefault(info.name, []).append(info.name)
        else:
            found.setdefault(info.name.rsplit(".", 1)[0], []).append(info.name)
    return found


def api_page(package: str, modules: list[str]) -> str:
    title = "muppets (top-level modules)" if package == "muppets" else package
    doc = _package_summary(package)
    out = [f"# {title}", "", doc, ""]
    for module in modules:
        out += [f"::: {module}", "    options:", "      show_submodules: false", "      heading_level: 2", ""]
    return "\n".join(out)


def _package_summary(package: str) -> str:
    path = ROOT / "src" / Path(*package.split(".")) / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree) or ""
    return " ".join(doc.split("\n\n")[0].split())


def api_index(found: dict[str, list[str]]) -> str:
    out = ["# Python API", "", "Generated from the docstrings by mkdocstrings, one page per package. "
           "The notebook API is on [muppets](muppets.md): `muppets.load`, `muppets.Predictor`, "
           "`muppets.encode` and the label models.", "", "| package | what it holds |", "|---|---|"]
    for package in found:
        out.append(f"| [{package}]({package}.md) | {_md(_package_summary(package))} |")
    return "\n".join(out)


# ----------------------------------------------------------------------------- hooks

_FOUND: dict[str, list[str]] = {}  # the packages on_config put in the nav, for on_files


def on_config(config, **kwargs):
    found = packages()
    api = [{"Python API": "reference/api/index.md"}] + [{p: f"reference/api/{p}.md"} for p in found]
    for section in config["nav"]:
        if isinstance(section, dict) and "Reference" in section:
            section["Reference"] = [e for e in section["Reference"] if not (isinstance(e, dict) and "Python API" in e)]
            section["Reference"].append({"Python API": [e for e in api]})
    _FOUND.clear()
    _FOUND.update(found)
    return config


def on_files(files, config, **kwargs):
    found = _FOUND or packages()
    pages = {"reference/cli.md": cli_page(), "reference/config.md": config_page(),
             "reference/api/index.md": api_index(found)}
    pages.update({f"reference/api/{p}.md": api_page(p, m) for p, m in found.items()})
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files
