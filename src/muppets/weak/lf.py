"""Labeling functions: plain Python that votes a class index for one example, or abstains.

An LF receives one :class:`~muppets.tasks.spec.TextExample` (``x.text``, ``x.text_b``,
``x.meta``, ``x.id``) — the same object whether the data came from a task split or from a text
file (:func:`muppets.weak.apply.read_texts` wraps each line in one), so an LF written against a
task runs unchanged on raw text, and ``x.text`` reads as in Snorkel. It returns ``ABSTAIN``
(-1) or a class index ``0..K-1`` (a numpy integer is accepted; a bool, a float or a string is
not).

Three ways to write one::

    @labeling_function()
    def short_comment(x):
        return HAM if len(x.text.split()) < 5 else ABSTAIN

    @labeling_function(name="kw", resources={"words": ("buy",)})
    def kw(x, words):                      # resources arrive as keyword arguments
        return SPAM if any(w in x.text.lower() for w in words) else ABSTAIN

    keyword_lf("keyword_my", ["my"], label=SPAM)   # ready builders: keyword / regex / lexicon

A file of LFs (``muppets weak analyze LFS.py``) is an ordinary module: its ``LFS`` list if it
defines one, else every :class:`LabelingFunction` at module level in definition order.

Model-based LFs (a fine-tuned ``Predictor`` with a confidence threshold, a zero-shot GPT
prompt: :mod:`muppets.weak.model_lfs`) are LFs too — anything with ``name``, ``__call__(x)``
and ``cache_key()`` is — and add ``label_batch(examples)``, which the applier calls once per
column instead of once per example.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from muppets.errors import ConfigError, LabelingFunctionError
from muppets.tasks.spec import TextExample

__all__ = ["ABSTAIN", "LabelingFunction", "labeling_function", "keyword_lf", "regex_lf",
           "lexicon_lf", "length_lf", "load_lfs", "check_vote"]

ABSTAIN = -1  # the vote of an LF that does not label an example


class LabelingFunction:
    """A named function of one example → ``ABSTAIN`` or a class index.

    ``resources`` are passed to ``func`` as keyword arguments on every call (keywords, a
    lexicon, a model); they take part in :meth:`cache_key`, so two LFs built from one function
    with different keywords are cached apart.

    >>> lf = LabelingFunction("has_buy", lambda x: 1 if "buy" in x.text else ABSTAIN)
    >>> lf(TextExample("a", "buy now", None, None, "-:1")), lf.name
    (1, 'has_buy')
    """

    def __init__(self, name: str, func: Callable[..., Any],
                 resources: Mapping[str, Any] | None = None) -> None:
        if not name or not isinstance(name, str):
            raise ConfigError(f"a labeling function needs a non-empty name, got {name!r}")
        self.name = name
        self.func = func
        self.resources = dict(resources or {})

    def __call__(self, x: TextExample) -> Any:
        return self.func(x, **self.resources)

    def __repr__(self) -> str:
        return f"LabelingFunction({self.name!r})"

    def cache_key(self) -> str:
        """A digest of the name, the function's source code, the source of the module that
        defines it (so editing a helper or a word list it reads invalidates the cache too) and
        the resources: it changes when any of them does (used by the applier's cache)."""
        digest = hashlib.sha256(self.name.encode("utf-8"))
        digest.update(_source_of(self.func).encode("utf-8"))
        digest.update(_module_source(self.func).encode("utf-8"))
        digest.update(repr(sorted((k, _resource_repr(v)) for k, v in self.resources.items()))
                      .encode("utf-8"))
        return digest.hexdigest()


def _source_of(func: Callable[..., Any]) -> str:
    """The function's source text; for a lambda or builtin without source, its code object's
    bytecode and constants (still changes with the code)."""
    try:
        return inspect.getsource(func)
    except (OSError, TypeError):
        code = getattr(func, "__code__", None)
        if code is None:
            return repr(func)
        return code.co_code.hex() + repr(code.co_consts) + repr(code.co_names)


def _module_source(func: Callable[..., Any]) -> str:
    """The whole source file of the function's module ("" when there is none, e.g. a builtin):
    LFs call helpers and read module-level lists that their own source does not show."""
    module = inspect.getmodule(func)
    try:
        return inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):
        return ""


def _resource_repr(value: Any) -> str:
    """A text for the cache key that is the same in every process: sets and dicts are written
    in sorted order of their items' texts (``repr`` of a set of strings follows the process's
    hash seed, so the key would change on every run), recursively through lists and tuples."""
    if isinstance(value, re.Pattern):
        return f"re({value.pattern!r}, {value.flags})"
    key = getattr(value, "cache_key", None)
    if callable(key):
        return key()
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_resource_repr(v) for v in value)) + "}"
    if isinstance(value, Mapping):
        items = sorted(f"{_resource_repr(k)}: {_resource_repr(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_resource_repr(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def labeling_function(name: str | None = None,
                      resources: Mapping[str, Any] | None = None
                      ) -> Callable[[Callable[..., Any]], LabelingFunction]:
    """Decorator: turn ``def f(x, **resources)`` into a :class:`LabelingFunction` named
    ``name`` (default: the function's name)."""
    def wrap(func: Callable[..., Any]) -> LabelingFunction:
        return LabelingFunction(name or func.__name__, func, resources)
    return wrap


def check_vote(lf_name: str, vote: Any, cardinality: int, index: int,
               example: TextExample) -> int:
    """``vote`` as an int in ``{ABSTAIN, 0..cardinality-1}``, else a
    :class:`LabelingFunctionError` naming the LF, the example and the value."""
    ok = (isinstance(vote, int) or (hasattr(vote, "dtype") and vote.dtype.kind in "iu"
                                    and getattr(vote, "ndim", 0) == 0))
    if ok and not isinstance(vote, bool) and (int(vote) == ABSTAIN or 0 <= int(vote) < cardinality):
        return int(vote)
    raise LabelingFunctionError(
        f"returned {vote!r}, not ABSTAIN (-1) or a class index 0..{cardinality - 1}",
        lf=lf_name, index=index, example_id=example.id, source=example.source, value=vote)


# --- ready builders --------------------------------------------------------------------------

def _keyword_vote(x: TextExample, keywords: tuple[str, ...], label: int, lower: bool) -> int:
    text = x.text.lower() if lower else x.text
    return label if any(word in text for word in keywords) else ABSTAIN


def keyword_lf(name: str, keywords: Iterable[str], label: int, lower: bool = True) -> LabelingFunction:
    """Votes ``label`` when any keyword occurs in the text as a substring (after lower-casing
    the text when ``lower``: give the keywords in lower case then), as Snorkel's tutorial does."""
    words = tuple(keywords)
    if not words:
        raise ConfigError(f"keyword LF {name!r}: no keywords")
    return LabelingFunction(name, _keyword_vote, {"keywords": words, "label": label, "lower": lower})


def _regex_vote(x: TextExample, pattern: re.Pattern[str], label: int) -> int:
    return label if pattern.search(x.text) else ABSTAIN


def regex_lf(name: str, pattern: str, label: int, flags: int = re.IGNORECASE) -> LabelingFunction:
    """Votes ``label`` when ``re.search(pattern, text, flags)`` matches (case-insensitive by
    default)."""
    try:
        compiled = re.compile(pattern, flags)
    except re.error as err:
        raise ConfigError(f"regex LF {name!r}: bad pattern {pattern!r}: {err}") from None
    return LabelingFunction(name, _regex_vote, {"pattern": compiled, "label": label})


_WORD = re.compile(r"\w+(?:'\w+)?")


def _lexicon_vote(x: TextExample, lexicon: Mapping[str, int], min_hits: int) -> int:
    hits: dict[int, int] = {}
    for token in _WORD.findall(x.text.lower()):
        if token in lexicon:
            hits[lexicon[token]] = hits.get(lexicon[token], 0) + 1
    if not hits:
        return ABSTAIN
    best = max(hits.values())
    winners = [label for label, count in hits.items() if count == best]
    return winners[0] if len(winners) == 1 and best >= min_hits else ABSTAIN


def lexicon_lf(name: str, lexicon: Mapping[str, int], min_hits: int = 1) -> LabelingFunction:
    """Distant supervision from a word → label lexicon (a knowledge base, a sentiment word
    list): the label with the most lower-cased word hits, if it has ``min_hits`` or more and no
    other label has as many; else ABSTAIN."""
    table = {word.lower(): int(label) for word, label in lexicon.items()}
    if not table:
        raise ConfigError(f"lexicon LF {name!r}: empty lexicon")
    return LabelingFunction(name, _lexicon_vote, {"lexicon": table, "min_hits": min_hits})


def _length_vote(x: TextExample, below: int | None, above: int | None, label: int) -> int:
    words = len(x.text.split())
    if (below is not None and words < below) or (above is not None and words > above):
        return label
    return ABSTAIN


def length_lf(name: str, label: int, *, below: int | None = None,
              above: int | None = None) -> LabelingFunction:
    """A length heuristic: votes ``label`` when the whitespace word count is ``< below`` or
    ``> above`` (e.g. "short comments are ham": ``length_lf("short", HAM, below=5)``)."""
    if below is None and above is None:
        raise ConfigError(f"length LF {name!r}: give below=, above= or both")
    return LabelingFunction(name, _length_vote, {"below": below, "above": above, "label": label})


# --- LF files --------------------------------------------------------------------------------

def load_lfs(path: str | Path) -> list[LabelingFunction]:
    """The LFs of a Python file: its ``LFS`` list, else every module-level
    :class:`LabelingFunction` in definition order. The module is registered in
    ``sys.modules`` so that worker processes and pickling find it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"labeling-function file not found: {path}")
    name = "muppets_lfs_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ConfigError(f"{path}: cannot import ({type(err).__name__}: {err})") from err
    lfs = getattr(module, "LFS", None)
    if lfs is None:
        lfs = [v for v in vars(module).values() if isinstance(v, LabelingFunction)]
    elif isinstance(lfs, (str, bytes, dict)) or not isinstance(lfs, Iterable):
        raise ConfigError(f"{path}: LFS must be a list of labeling functions, got {type(lfs).__name__} "
                          f"({lfs!r:.80}): write LFS = [...]")
    return _checked_lfs(list(lfs), path)


def _checked_lfs(lfs: list[Any], path: Path) -> list[LabelingFunction]:
    if not lfs:
        raise ConfigError(f"{path}: no labeling functions (define LFS or @labeling_function)")
    names = [getattr(lf, "name", None) for lf in lfs]
    bad = [lf for lf, n in zip(lfs, names) if not isinstance(n, str) or not callable(lf)]
    if bad:
        raise ConfigError(f"{path}: not a labeling function: {bad[0]!r}")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{path}: duplicate labeling function names {dup}")
    return lfs
