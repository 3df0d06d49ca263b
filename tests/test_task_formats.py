"""Task files in the formats people have, read through the corpus readers' format layer:
compressed, JSON Lines in .json (as Dataset.to_json writes it), parquet, save_to_disk; SQuAD
still recognised; an unknown suffix or a JSON document given as a table refused with the reason."""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
from pathlib import Path

import pytest

from muppets.errors import ConfigError, DataError
from muppets.tasks import read_conll
from muppets.transfer.finetune import TaskSection, guess_kind, load_task_data
from muppets.weak.pipeline import load_weak_input

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
zstandard = pytest.importorskip("zstandard")

ROWS = [("a fine film", "pos"), ("dull, too long", "neg"), ("loved it", "pos")]


def table_files(root: Path) -> dict[str, Path]:
    root.mkdir()
    lines = "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in ROWS).encode()
    buf = io.StringIO()
    csv.writer(buf).writerows([("text", "label"), *ROWS])
    files = {name: root / name for name in ("t.jsonl", "t.json", "t.jsonl.bz2", "t.jsonl.zst",
                                            "t.csv", "t.csv.gz", "t.parquet")}
    for name in ("t.jsonl", "t.json"):
        files[name].write_bytes(lines)
    files["t.jsonl.bz2"].write_bytes(bz2.compress(lines))
    files["t.jsonl.zst"].write_bytes(zstandard.ZstdCompressor().compress(lines))
    files["t.csv"].write_text(buf.getvalue())
    files["t.csv.gz"].write_bytes(gzip.compress(buf.getvalue().encode()))
    pq.write_table(pa.table({"text": [t for t, _ in ROWS], "label": [y for _, y in ROWS]}), files["t.parquet"])
    datasets = pytest.importorskip("datasets")
    files["hf"] = root / "hf"
    datasets.Dataset.from_dict({"text": [t for t, _ in ROWS], "label": [y for _, y in ROWS]}).save_to_disk(
        str(files["hf"]))
    files["to_json.json"] = root / "to_json.json"
    datasets.Dataset.from_dict({"text": [t for t, _ in ROWS], "label": [y for _, y in ROWS]}).to_json(
        str(files["to_json.json"]))
    return files


def test_every_table_format_gives_the_same_classify_examples(tmp_path: Path) -> None:
    for name, path in table_files(tmp_path / "in").items():
        data = load_task_data(TaskSection(files={"train": str(path)}))
        assert data.spec.kind == "classify", name
        assert [(ex.text, ex.label) for ex in data.splits["train"]] == ROWS, name
        assert data.spec.labels == ["neg", "pos"], name


def test_squad_json_is_still_span_compressed_or_not(tmp_path: Path) -> None:
    doc = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Paris is in France.",
           "qas": [{"id": "q1", "question": "Where?", "answers": [{"text": "France", "answer_start": 12}]}]}]}]}
    for path in (tmp_path / "squad.json", tmp_path / "squad.json.gz"):
        raw = json.dumps(doc, indent=None if path.suffix == ".json" else 1).encode()
        path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
        assert guess_kind(path) == "span"
        data = load_task_data(TaskSection(files={"train": str(path)}))
        assert data.splits["train"][0].answers[0].text == "France"


def test_json_document_as_a_table_and_unknown_suffix_are_refused(tmp_path: Path) -> None:
    doc = tmp_path / "records.json"
    doc.write_text(json.dumps([{"text": "x", "label": "y"}], indent=1))
    with pytest.raises(DataError, match="one JSON document, not JSON Lines"):
        load_task_data(TaskSection(files={"train": str(doc)}, kind="classify"))
    odd = tmp_path / "train.dat"
    odd.write_text("text,label\nx,y\n")
    with pytest.raises(DataError, match=r"cannot tell the table format from the suffix '\.dat'.*task\.format"):
        load_task_data(TaskSection(files={"train": str(odd)}))
    data = load_task_data(TaskSection(files={"train": str(odd)}, format="csv"))
    assert data.splits["train"][0].text == "x"


def test_compressed_conll_and_weak_label_tables(tmp_path: Path) -> None:
    conll = tmp_path / "train.conll.gz"
    conll.write_bytes(gzip.compress(b"EU B-ORG\nrejects O\n\nPeter B-PER\n"))
    assert guess_kind(conll) == "tag"
    data = read_conll({"train": conll})
    assert [ex.tags for ex in data.splits["train"]] == [["B-ORG", "O"], ["B-PER"]]
    table = tmp_path / "texts.csv.gz"
    table.write_bytes(gzip.compress(b"text\nhello\n"))
    with pytest.raises(ConfigError, match="would be read as plain text"):
        load_weak_input(str(table))
    lines = tmp_path / "texts.txt.gz"
    lines.write_bytes(gzip.compress(b"hello\nworld\n"))
    assert [ex.text for ex in load_weak_input(str(lines)).examples] == ["hello", "world"]


def test_parquet_task_without_the_column_names_file_and_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"sentence": ["x"], "label": ["y"]}), path)
    with pytest.raises(DataError, match=r"no column 'text' for text \(columns: \['sentence', 'label'\]; "
                       r"name the text column: task.columns=\{text: NAME\}\)") as err:
        load_task_data(TaskSection(files={"train": str(path)}))
    assert str(err.value).startswith(f"{path}: ")
    data = load_task_data(TaskSection(files={"train": str(path)}, columns={"text": "sentence"}))
    assert [(ex.text, ex.label) for ex in data.splits["train"]] == [("x", "y")]
