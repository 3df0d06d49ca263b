"""``load_task(name)``: every shared dataset by name, with its spec and splits.

>>> data = load_task("rte")                                      # doctest: +SKIP
>>> data.spec.labels, data.sizes()                               # doctest: +SKIP
(['entailment', 'not_entailment'], {'train': 2490, 'dev': 277})

Names: ``sst2 cola mrpc stsb rte qnli conll2003 conll2003-pos conll2003-chunk squad hellaswag mr youtube-spam``,
``spam`` (the same YouTube comments in the Snorkel spam tutorial's split: weak supervision),
``chnsenticorp msra-ner cmrc2018`` (Chinese: :mod:`muppets.tasks.chinese`) and
``xnli-<lang>`` / ``pawsx-<lang>`` (staged: en de fr es zh). Datasets that ship as one file
(QNLI, SQuAD, HellaSwag, MR, XNLI, PAWS-X, YouTube file 05, MSRA's training file, CMRC 2018)
get documented deterministic splits; :attr:`TaskData.notes` says how.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from muppets.errors import ConfigError
from muppets.paths import data_dir as shared_data_dir
from muppets.tasks.chinese import load_chnsenticorp, load_cmrc2018, load_msra_ner
from muppets.tasks.choice import load_hellaswag
from muppets.tasks.conll import load_conll2003, load_conll2003_chunk, load_conll2003_pos
from muppets.tasks.glue import load_cola, load_mrpc, load_qnli, load_rte, load_sst2, load_stsb
from muppets.tasks.sentiment import load_mr
from muppets.tasks.source import Problems
from muppets.tasks.spam import load_spam_tutorial, load_youtube_spam
from muppets.tasks.spec import TaskData
from muppets.tasks.squad import load_squad
from muppets.tasks.xlingual import load_pawsx, load_xnli

__all__ = ["STAGED_LANGUAGES", "list_tasks", "load_task"]

Loader = Callable[[Path, Problems], TaskData]

_LOADERS: dict[str, Loader] = {
    "sst2": load_sst2, "cola": load_cola, "mrpc": load_mrpc, "stsb": load_stsb,
    "rte": load_rte, "qnli": load_qnli, "conll2003": load_conll2003,
    "conll2003-pos": load_conll2003_pos, "conll2003-chunk": load_conll2003_chunk, "squad": load_squad,
    "hellaswag": load_hellaswag, "mr": load_mr, "youtube-spam": load_youtube_spam,
    "spam": load_spam_tutorial,
    "chnsenticorp": load_chnsenticorp, "msra-ner": load_msra_ner, "cmrc2018": load_cmrc2018,
}
_FAMILIES: dict[str, Callable[..., TaskData]] = {"xnli": load_xnli, "pawsx": load_pawsx}
STAGED_LANGUAGES = ("en", "de", "fr", "es", "zh")


def list_tasks() -> list[str]:
    """Every task name :func:`load_task` knows for the staged data."""
    return list(_LOADERS) + [f"{family}-{lang}" for family in _FAMILIES
                             for lang in STAGED_LANGUAGES]


def _loader(name: str) -> Loader:
    if name in _LOADERS:
        return _LOADERS[name]
    family, _, lang = name.partition("-")
    if family in _FAMILIES and lang:
        return partial(_FAMILIES[family], lang=lang)
    raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(list_tasks())} "
                      "(for your own files see muppets.tasks.read_table / read_conll / "
                      "read_squad)")


def load_task(name: str, data_dir: str | Path | None = None,
              errors: str = "strict") -> TaskData:
    """Read the shared dataset ``name`` from ``data_dir`` (default: the shared data folder).

    ``errors="strict"`` raises :class:`~muppets.errors.DataError` (file, line, value) at the
    first bad record; ``errors="skip"`` skips bad records, counts them in
    :attr:`TaskData.skipped` and logs a warning.
    """
    loader = _loader(name)
    problems = Problems(errors)
    root = Path(data_dir) if data_dir is not None else shared_data_dir()
    data = loader(root, problems)
    data.skipped = problems.skipped
    problems.summarize(name)
    return data
