"""Task readers: files → :class:`TaskSpec` + splits of typed examples (first step of transfer).

``load_task("sst2")`` reads a shared dataset by name (:mod:`muppets.tasks.registry`);
:func:`read_task` reads your own files of any kind with no code (:func:`read_table`,
:func:`read_conll` and :func:`read_squad` one format each).
Modules: ``spec`` (dataclasses), ``source`` (decoding, numbering, error policy), ``splits``
(deterministic splits), ``table`` (csv/tsv/jsonl), ``glue``, ``xlingual`` (XNLI, PAWS-X),
``sentiment`` (MR), ``spam`` (YouTube), ``conll``, ``squad``, ``choice`` (HellaSwag), ``records``
(tag, span and choice records in tables), ``files`` (your files of any kind).
"""

from muppets.tasks.conll import iob1_to_bio, read_conll
from muppets.tasks.files import guess_kind, read_task
from muppets.tasks.registry import list_tasks, load_task
from muppets.tasks.spec import (KINDS, Answer, ChoiceExample, Example, SpanExample, TagExample,
                                TaskData, TaskSpec, TextExample)
from muppets.tasks.squad import read_squad
from muppets.tasks.table import read_table

__all__ = ["KINDS", "Answer", "ChoiceExample", "Example", "SpanExample", "TagExample",
           "TaskData", "TaskSpec", "TextExample", "iob1_to_bio", "list_tasks", "load_task",
           "read_conll", "read_squad", "read_table", "read_task", "guess_kind"]
