"""Corrupt or hostile task files end in a clear DataError naming the file (and line and value
where there is one) within a time bound, in both error modes, or load (issue 15, item 8).

The shared-dataset readers are fuzzed on the first lines of the real files, copied into a
data directory of their own; the readers of your own files get targeted hostile records.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_hostile_files import HOSTILE, mutations

from muppets.errors import DataError, MuppetsError
from muppets.paths import data_dir
from muppets.tasks import load_task, read_conll, read_squad, read_table, read_task

FILES = {  # task -> its files under the data directory
    "sst2": ["glue/SST-2/stsa.binary.train", "glue/SST-2/stsa.binary.dev"],
    "cola": ["glue/CoLA/in_domain_train.tsv", "glue/CoLA/in_domain_dev.tsv",
             "glue/CoLA/out_of_domain_dev.tsv"],
    "mrpc": ["glue/MRPC/train.tsv", "glue/MRPC/dev.tsv"],
    "stsb": ["glue/STS-B/train.tsv", "glue/STS-B/dev.tsv"],
    "rte": ["glue/RTE/train.tsv", "glue/RTE/dev.tsv"],
    "qnli": ["glue/QNLI/dev.tsv"],
    "conll2003": ["conll2003/eng.train", "conll2003/eng.testa", "conll2003/eng.testb"],
    "squad": ["squad/dev-v1.1.json"],
    "hellaswag": ["hellaswag/hellaswag_val_full.txt"],
    "mr": ["sentiment/mr/rt-polarity.pos", "sentiment/mr/rt-polarity.neg"],
    "youtube-spam": [f"youtube-spam/{n}" for n in ("Youtube01-Psy.csv", "Youtube02-KatyPerry.csv",
                                                   "Youtube03-LMFAO.csv", "Youtube04-Eminem.csv",
                                                   "Youtube05-Shakira.csv")],
    "xnli-de": ["xnli/dev-de.tsv"],
    "pawsx-zh": ["paws-x/dev-zh.tsv"],
}


def small_copy(root: Path, name: str) -> list[Path]:
    """The first lines (SQuAD: the first paragraphs) of each file of ``name`` under ``root``."""
    paths = []
    for rel in FILES[name]:
        source, path = data_dir() / rel, root / rel
        if not source.is_file():
            pytest.skip(f"shared data file {source} is missing")
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "squad":
            squad = json.loads(source.read_text(encoding="utf-8"))
            squad["data"] = [dict(a, paragraphs=a["paragraphs"][:2]) for a in squad["data"][:2]]
            path.write_text(json.dumps(squad, indent=1), encoding="utf-8")
        else:
            path.write_bytes(b"".join(source.read_bytes().splitlines(True)[:36]))
        paths.append(path)
    return paths


def loads_or_refuses(load, seconds: float = 5.0) -> None:
    start = time.perf_counter()
    try:
        load()
    except MuppetsError:
        pass
    assert time.perf_counter() - start < seconds


@pytest.mark.parametrize("name", list(FILES))
def test_fuzzed_shared_task_files_are_refused(tmp_path, name):
    for path in small_copy(tmp_path, name):
        assert load_task(name, tmp_path).sizes()  # the small copy itself loads
        good = path.read_bytes()
        for case in mutations(good, seed=len(path.name)) + list(HOSTILE.values()):
            path.write_bytes(case)
            for errors in ("strict", "skip"):
                loads_or_refuses(lambda: load_task(name, tmp_path, errors))
        path.write_bytes(good)


TABLE = {"csv": b"text,label\nhello world,1\nsecond row,0\n",
         "tsv": b"text\tlabel\nhello world\t1\nsecond row\t0\n",
         "tsv-quoted": b'text\tlabel\n"hello world"\t1\nsecond row\t0\n',
         "jsonl": b'{"text": "hello world", "label": 1}\n{"text": "second row", "label": 0}\n'}
COLUMNS = {"text": "text", "label": "label"}


@pytest.mark.parametrize("fmt", list(TABLE))
def test_fuzzed_tables_are_refused(tmp_path, fmt):
    path = tmp_path / f"t.{fmt}"
    for case in mutations(TABLE[fmt], seed=len(fmt)) + list(HOSTILE.values()):
        path.write_bytes(case)
        for errors in ("strict", "skip"):
            loads_or_refuses(lambda: read_table(path, "classify", COLUMNS, fmt, errors=errors))


def refused_then_skipped(tmp_path, name: str, data: bytes, read, match: str, line: int | None):
    """``read(path, "strict")`` raises a DataError at ``path:line`` matching ``match``;
    ``read(path, "skip")`` skips that record and keeps the good one before it."""
    path = tmp_path / name
    path.write_bytes(data)
    start = time.perf_counter()
    with pytest.raises(DataError, match=match) as err:
        read(path, "strict")
    where = str(path) if line is None else f"{path}:{line}"
    assert str(err.value).startswith(where + (":" if line is None else ""))
    task = read(path, "skip")
    assert task.skipped == 1 and len(task["train"]) == 1
    assert time.perf_counter() - start < 5.0


GOOD_ROW = b'{"text": "fine", "label": 1}\n'


@pytest.mark.parametrize("record, match", [
    (b"[" * 100_000, "nested deeper than Python's recursion limit"),
    (b'{"a":' * 100_000, "nested deeper than Python's recursion limit"),
    (b'{"text": "x", "label": ' + b"9" * 5000 + b"}", "4300 digits"),
    (b'{"text": "x", "label": [1, 2]}', r"a label must be a string or a number \(value: '\[1, 2\]'\)"),
    (b'{"text": "x", "label": 1', r"invalid JSON \(truncated\?\)"),
    (b'{"text": "x"}', "missing key 'label'"),
    (b"x" * (10 * 2**20), "invalid JSON"),
], ids=["array bomb", "object bomb", "huge integer", "list label", "truncated", "no label", "10 MB"])
def test_hostile_jsonl_record(tmp_path, record, match):
    read = lambda path, errors: read_table(path, "classify", COLUMNS, "jsonl", errors=errors)  # noqa: E731
    refused_then_skipped(tmp_path, "t.jsonl", GOOD_ROW + record + b"\n", read, match, line=2)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "tsv-quoted"])
@pytest.mark.parametrize("row, match", [
    ("only one cell", "expected 2 columns, found 1"),
    ("unknown label|7", r"unknown label .* \(value: '7'\)"),
    ("cut UTF-8 na\xc3", "invalid UTF-8"),
])
def test_hostile_table_row(tmp_path, fmt, row, match):
    sep = b"," if fmt == "csv" else b"\t"
    data = b"text" + sep + b"label\nfine" + sep + b"1\n" + row.encode("latin-1").replace(b"|", sep)
    read = lambda path, errors: read_table(path, "classify", COLUMNS, fmt, labels=["0", "1"],  # noqa: E731
                                           errors=errors)
    refused_then_skipped(tmp_path, f"t.{fmt}", data, read, match, line=3)


RECORDS = {"tag": {"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]},
           "span": {"question": "Who?", "context": "Ada wrote code.", "answers": {"text": ["Ada"], "answer_start": [0]}},
           "choice": {"context": "Ada", "endings": ["wrote", "read"], "label": 0}}


@pytest.mark.parametrize("kind, change, match", [
    ("tag", {"tokens": "EU rejects"}, r"tokens must be a list \(value: 'EU rejects'\)"),
    ("tag", {"tokens": [1, 2]}, "tokens must be a non-empty list of non-empty strings"),
    ("tag", {"tokens": [], "tags": []}, "tokens must be a non-empty list of non-empty strings"),
    ("tag", {"tags": ["B-ORG"]}, r"1 tags for 2 tokens"),
    ("tag", {"tags": [3, 0]}, "tags are integer ids: give their names"),
    ("tag", {"tags": [True, "O"]}, r"a tag must be a name or an integer id \(value: 'True'\)"),
    ("tag", {"tags": ["E-ORG", "O"]}, r"unknown tag .* \(value: 'E-ORG'\)"),
    ("span", {"answers": {"text": ["Ada"], "answer_start": [0, 4]}}, "answers: 1 texts, 2 answer_start values"),
    ("span", {"answers": "Ada"}, "answers must be"),
    ("span", {"answers": [{"text": "Ada", "answer_start": "0"}]}, "an 'answer_start' >= 0"),
    ("span", {"context": 5}, "context must be a non-empty string"),
    ("span", {"question": " "}, "empty question"),
    ("choice", {"label": 1.5}, "label must be the index of the right ending"),
    ("choice", {"label": True}, "label must be the index of the right ending"),
    ("choice", {"label": "-1"}, r"label out of range 0-1 \(value: -1\)"),
    ("choice", {"endings": ["wrote", 3]}, "endings must be a non-empty list of non-empty strings"),
    ("choice", {"endings": "wrote"}, "endings must be a list"),
], ids=lambda x: x if isinstance(x, str) and len(x) < 8 else None)
def test_hostile_tag_span_and_choice_records(tmp_path, kind, change, match):
    good = json.dumps(RECORDS[kind]).encode() + b"\n"
    bad = json.dumps({**RECORDS[kind], **change}).encode() + b"\n"
    read = lambda path, errors: read_task(path, kind, errors=errors)  # noqa: E731
    refused_then_skipped(tmp_path, "t.jsonl", good + bad, read, match, line=2)


@pytest.mark.parametrize("kind", list(RECORDS))
def test_fuzzed_tag_span_and_choice_records_are_refused(tmp_path, kind):
    path = tmp_path / "t.jsonl"
    good = b"".join(json.dumps(RECORDS[kind]).encode() + b"\n" for _ in range(3))
    for case in mutations(good, seed=len(kind)) + list(HOSTILE.values()):
        path.write_bytes(case)
        for errors in ("strict", "skip"):
            loads_or_refuses(lambda: read_task(path, kind, errors=errors))


CONLL = b"EU NNP I-ORG\nrejects VBZ O\n\n"


@pytest.mark.parametrize("tail, kwargs, match, line", [
    (b"Peter NNP\n", {}, r"expected 3 columns, found 2 \(value: 'Peter NNP'\)", 4),
    (b"Peter NNP E-PER\n", {}, r"unknown tag .* \(value: 'E-PER'\)", 4),
    (b"x" * (10 * 2**20), {}, "expected 3 columns, found 1", 4),
    (b"Peter NNP I-PER\n", {"token_col": 5}, r"row has 3 columns, fewer than the columns asked for", 1),
])
def test_hostile_conll_line(tmp_path, tail, kwargs, match, line):
    """The token_col case raised IndexError (strict and skip) before it was checked."""
    read = lambda path, errors: read_conll(path, errors, types=["PER", "ORG"], **kwargs)  # noqa: E731
    if "token_col" in kwargs:  # every line is refused: nothing is left in skip mode
        path = tmp_path / "c.conll"
        path.write_bytes(CONLL + tail)
        with pytest.raises(DataError, match=match):
            read(path, "strict")
        with pytest.raises(DataError, match="no sentences could be read"):
            read(path, "skip")
        return
    refused_then_skipped(tmp_path, "c.conll", CONLL + tail, read, match, line)


def _squad(*qas) -> bytes:
    paragraph = {"context": "Ada wrote code.", "qas": list(qas)}
    return json.dumps({"data": [{"title": "t", "paragraphs": [paragraph]}]}).encode()


GOOD_QA = {"id": "good", "question": "Who?", "answers": [{"text": "Ada", "answer_start": 0}]}


@pytest.mark.parametrize("bad, match", [
    ({"id": "q", "question": "Who?", "answers": 5}, "question q: 'answers' is not a list"),
    ({"id": "q", "question": "Who?", "answers": {"text": "Ada"}}, "question q: 'answers' is not a list"),
    ({"id": "q", "question": "Who?", "answers": [{"text": "Ada", "answer_start": 10**30}]},
     "answer does not match the context"),
])
def test_hostile_squad_question(tmp_path, bad, match):
    """The non-list answers raised TypeError ('int' object is not iterable) before."""
    refused_then_skipped(tmp_path, "qa.json", _squad(GOOD_QA, bad), read_squad, match, line=1)


@pytest.mark.parametrize("data, match", [
    (b"[" * 100_000, "nested deeper than Python's recursion limit"),
    (b'{"data": ' + b"9" * 5000 + b"}", "4300 digits"),
    (json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "c", "qas": 3}]}]}).encode(),
     "'qas' is not a list"),
])
@pytest.mark.parametrize("errors", ["strict", "skip"])
def test_hostile_squad_file(tmp_path, data, match, errors):
    path = tmp_path / "qa.json"
    path.write_bytes(data)
    with pytest.raises(DataError, match=match if errors == "strict" or "qas" not in match
                       else "no questions could be read") as err:
        read_squad(path, errors)
    assert str(err.value).startswith(str(path))


def test_spam_file_without_a_usable_comment_is_refused_in_skip_mode(tmp_path):
    """Every comment of file 05 empty once HTML is removed: skip mode divided by zero before."""
    folder = tmp_path / "youtube-spam"
    folder.mkdir()
    for i in range(1, 6):
        comment = b"hi there" if i < 5 else b"<br />"
        (folder / f"Youtube0{i}-v.csv").write_bytes(
            b"COMMENT_ID,AUTHOR,DATE,CONTENT,CLASS\nc1,a,d," + comment + b",1\n")
    with pytest.raises(DataError, match="Youtube05-v.csv:2: comment is empty once HTML"):
        load_task("youtube-spam", tmp_path)
    with pytest.raises(DataError, match="Youtube05-v.csv: no examples could be read"):
        load_task("youtube-spam", tmp_path, errors="skip")
