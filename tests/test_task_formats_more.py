"""Task files of every kind in every format (issue 50): the same tagged sentences as CoNLL
columns, JSON Lines tokens + tags, csv, parquet and ``datasets.save_to_disk`` (conll2003's layout:
integer ``ner_tags`` named by their ClassLabel feature) read to identical examples; likewise
SQuAD JSON vs JSON Lines vs parquet / save_to_disk (squad's layout) and multiple choice
(hellaswag's and swag's layouts); ambiguous or broken files refused with the file and the reason;
a tiny fine-tuning run on a JSON Lines tag file."""
from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from muppets.errors import ConfigError, DataError
from muppets.tasks import guess_kind, read_task
from muppets.transfer.finetune import TaskSection, load_task_data

NAMES = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]  # conll2003's ClassLabel
SENTENCES = [(["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
             (["Peter", "Blackburn"], ["B-PER", "I-PER"]),
             (["BRUSSELS", "1996-08-22"], ["B-LOC", "O"])]


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def save(dataset: datasets.Dataset, path: Path) -> Path:
    dataset.save_to_disk(str(path)) if not path.suffix else dataset.to_parquet(str(path))
    return path


def tag_files(root: Path) -> dict[str, tuple[Path, dict]]:
    """name -> (file, task.columns) holding :data:`SENTENCES`."""
    root.mkdir()
    conll = "\n\n".join("\n".join(f"{w} {t}" for w, t in zip(*s)) for s in SENTENCES) + "\n"
    (root / "t.conll").write_text("-DOCSTART- O\n\n" + conll)
    (root / "t.conll.gz").write_bytes(gzip.compress(conll.encode()))
    (root / "t.jsonl").write_bytes(jsonl([{"tokens": w, "tags": t} for w, t in SENTENCES]))
    (root / "ids.jsonl").write_bytes(jsonl([{"words": w, "ner": [NAMES.index(x) for x in t]} for w, t in SENTENCES]))
    buf = io.StringIO()
    csv.writer(buf).writerows([("tokens", "tags")] + [(json.dumps(w), " ".join(t)) for w, t in SENTENCES])
    (root / "t.csv").write_text(buf.getvalue())
    features = datasets.Features({"id": datasets.Value("string"), "tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=NAMES))})
    hf = datasets.Dataset.from_dict({"id": [str(i) for i in range(len(SENTENCES))], "tokens": [w for w, _ in SENTENCES],
                                     "ner_tags": [[NAMES.index(x) for x in t] for _, t in SENTENCES]}, features=features)
    ner = {"tags": "ner_tags"}
    return {"conll": (root / "t.conll", {}), "conll.gz": (root / "t.conll.gz", {}), "jsonl": (root / "t.jsonl", {}),
            "ids.jsonl": (root / "ids.jsonl", {"tokens": "words", "tags": "ner"}), "csv": (root / "t.csv", {}),
            "parquet": (save(hf, root / "c.parquet"), ner), "save_to_disk": (save(hf, root / "conll2003"), ner)}


def test_tagged_sentences_read_the_same_in_every_format(tmp_path: Path) -> None:
    for name, (path, columns) in tag_files(tmp_path / "in").items():
        labels = NAMES if name == "ids.jsonl" else []  # integer ids without a ClassLabel: names from task.labels
        data = load_task_data(TaskSection(files={"train": str(path)}, kind="tag", columns=columns, labels=labels))
        assert [(ex.tokens, ex.tags) for ex in data.splits["train"]] == SENTENCES, name
        assert data.spec.kind == "tag" and set(data.spec.labels) >= {t for _, ts in SENTENCES for t in ts}, name
        assert guess_kind(path, columns) == "tag", name
    hf = load_task_data(TaskSection(files={"train": str(tmp_path / "in" / "conll2003")}, columns={"tags": "ner_tags"}))
    assert [ex.id for ex in hf.splits["train"]] == ["0", "1", "2"]  # the id column, as datasets has it
    assert hf.spec.labels == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def test_iob1_records_become_bio_and_the_label_set_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "iob1.jsonl"
    path.write_bytes(jsonl([{"tokens": ["Peter", "Blackburn", "EU"], "tags": ["I-PER", "I-PER", "I-ORG"]}]))
    assert read_task(path, "tag").splits["train"][0].tags == ["B-PER", "I-PER", "B-ORG"]
    with pytest.raises(DataError, match=r"iob1\.jsonl:1: unknown entity type \(expected one of \['PER'\]\)"):
        read_task(path, "tag", labels=["O", "B-PER", "I-PER"])
    with pytest.raises(ConfigError, match=r"task.labels \['PER'\]: a tag task's labels are O, B-<type>"):
        read_task(path, "tag", labels=["O", "PER"])


SQUAD = [("Paris is in France.", "Where is Paris?", [("France", 12)]),
         ("Paris is in France.", "What is in France?", [("Paris", 0), ("Paris", 0)]),
         ("The Rhine flows north.", "Which way does the Rhine flow?", [("north", 16)])]


def span_files(root: Path) -> dict[str, tuple[Path, dict]]:
    root.mkdir()
    doc = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": c, "qas": [{"id": f"q{i}", "question": q, "answers": [{"text": t, "answer_start": s} for t, s in a]}
                               for i, (c2, q, a) in enumerate(SQUAD) if c2 == c]}
        for c in dict.fromkeys(c for c, _, _ in SQUAD)]}]}
    (root / "squad.json").write_text(json.dumps(doc, indent=1))
    hf_rows = {"id": [f"q{i}" for i in range(len(SQUAD))], "title": ["t"] * len(SQUAD),
               "context": [c for c, _, _ in SQUAD], "question": [q for _, q, _ in SQUAD],
               "answers": [{"text": [t for t, _ in a], "answer_start": [s for _, s in a]} for _, _, a in SQUAD]}
    records = [dict(zip(hf_rows, values)) for values in zip(*hf_rows.values())]
    (root / "squad.jsonl").write_bytes(jsonl(records))
    (root / "to_json.json").write_bytes(jsonl(records))  # Dataset.to_json's JSON Lines in .json
    (root / "lists.jsonl.gz").write_bytes(gzip.compress(jsonl(
        [dict(r, answers=[{"text": t, "answer_start": s} for t, s in zip(*r["answers"].values())]) for r in records])))
    buf = io.StringIO()
    csv.writer(buf).writerows([list(hf_rows)] + [[r[k] if k != "answers" else json.dumps(r[k]) for k in hf_rows]
                                                 for r in records])
    (root / "squad.csv").write_text(buf.getvalue())
    hf = datasets.Dataset.from_dict(hf_rows)
    return {name: (path, {}) for name, path in [
        ("json", root / "squad.json"), ("jsonl", root / "squad.jsonl"), ("to_json", root / "to_json.json"),
        ("lists.jsonl.gz", root / "lists.jsonl.gz"), ("csv", root / "squad.csv"),
        ("parquet", save(hf, root / "squad.parquet")), ("save_to_disk", save(hf, root / "squad"))]}


def test_squad_questions_read_the_same_in_every_format(tmp_path: Path) -> None:
    for name, (path, columns) in span_files(tmp_path / "in").items():
        assert guess_kind(path) == "span", name
        data = load_task_data(TaskSection(files={"train": str(path)}))
        got = [(ex.id, ex.context, ex.question, [(a.text, a.start) for a in ex.answers], ex.title)
               for ex in data.splits["train"]]
        assert got == [(f"q{i}", c, q, a, "t") for i, (c, q, a) in enumerate(SQUAD)], name
        assert data.spec.kind == "span" and data.spec.metric == "squad", name


def test_span_answers_are_checked_against_the_context(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_bytes(jsonl([{"question": "Where?", "context": "Paris is in France.",
                             "answers": {"text": ["France"], "answer_start": [3]}}]))
    with pytest.raises(DataError, match=r"qa\.jsonl:1: question qa-1: answer does not match the context at "
                                        r"answer_start=3 .*\(value: 'France'\)"):
        read_task(path, "span")
    path.write_bytes(jsonl([{"question": "Who?", "context": "Paris is in France.",  # squad_v2: no answer
                             "answers": {"text": [], "answer_start": []}}]))
    assert read_task(path, "span").splits["train"][0].answers == []


ITEMS = [("A man sits down. He", ["eats.", "flies away.", "sings loudly.", "melts."], 0),
         ("The dog runs. It", ["barks.", "reads.", "drives.", "sleeps at once."], 3)]


def choice_files(root: Path) -> dict[str, tuple[Path, dict]]:
    root.mkdir()
    hellaswag = {"ind": [0, 1], "ctx": [c for c, _, _ in ITEMS], "endings": [e for _, e, _ in ITEMS],
                 "label": [str(y) for _, _, y in ITEMS]}  # hellaswag's label is a string
    (root / "h.jsonl").write_bytes(jsonl([dict(zip(hellaswag, v)) for v in zip(*hellaswag.values())]))
    swag = [("sent1", "ending0", "ending1", "ending2", "ending3", "label")] + [(c, *e, y) for c, e, y in ITEMS]
    buf = io.StringIO()
    csv.writer(buf).writerows(swag)
    (root / "swag.csv").write_text(buf.getvalue())
    (root / "default.tsv").write_text("context\tendings\tlabel\n" + "".join(
        f"{c}\t{json.dumps(e)}\t{y}\n" for c, e, y in ITEMS))
    hf = datasets.Dataset.from_dict(hellaswag)
    ctx = {"context": "ctx"}
    return {"jsonl": (root / "h.jsonl", ctx), "swag.csv": (root / "swag.csv", {"context": "sent1", "endings": [
        "ending0", "ending1", "ending2", "ending3"]}), "tsv": (root / "default.tsv", {}),
            "parquet": (save(hf, root / "h.parquet"), ctx), "save_to_disk": (save(hf, root / "hellaswag"), ctx)}


def test_choice_items_read_the_same_in_every_format(tmp_path: Path) -> None:
    for name, (path, columns) in choice_files(tmp_path / "in").items():
        data = load_task_data(TaskSection(files={"train": str(path)}, columns=columns))
        assert data.spec.kind == "choice" and data.spec.labels == ["0", "1", "2", "3"], name
        assert [(ex.context, ex.endings, ex.label) for ex in data.splits["train"]] == ITEMS, name


def test_choice_items_need_a_label_in_range_and_as_many_endings(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(jsonl([{"context": "x", "endings": ["a", "b"], "label": 2}]))
    with pytest.raises(DataError, match=r"c\.jsonl:1: label out of range 0-1 \(value: 2\)"):
        read_task(path, "choice")
    path.write_bytes(jsonl([{"context": "x", "endings": ["a", "b"], "label": 1},
                            {"context": "y", "endings": ["a", "b", "c"], "label": 1}]))
    with pytest.raises(DataError, match=r"c\.jsonl:2: 3 endings, but .*c\.jsonl:1 has 2"):
        read_task(path, "choice")


# ----------------------------------------------------------------------------- refused, never guessed


def refused(tmp_path: Path, name: str, content: bytes | str, kind: str = "", **section) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises((DataError, ConfigError)) as err:
        load_task_data(TaskSection(files={"train": str(path)}, kind=kind, **section))
    message = str(err.value)
    assert str(path) in message or isinstance(err.value, ConfigError), message
    return message


def test_ambiguous_or_broken_task_files_are_refused_with_the_file_and_the_reason(tmp_path: Path) -> None:
    records = jsonl([{"tokens": ["a"], "tags": ["O"]}])
    assert "a tag task reads JSON Lines; name a JSON Lines file .jsonl (a SQuAD document is task.kind span)" in refused(
        tmp_path, "doc.json", json.dumps([{"tokens": ["a"], "tags": ["O"]}], indent=1), "tag")
    assert "cannot tell the table format from the suffix '.dat'" in refused(tmp_path, "t.dat", "text,label\nx,y\n")
    assert "set task.format (csv, tsv, tsv-quoted, jsonl, columnar, squad)" in refused(tmp_path, "q.dat", "{}", "span")
    message = refused(tmp_path, "words.csv", "sentence,label\nx,y\n")
    assert ":1: no column 'text' for text in the header ['sentence', 'label'] (name the text column: task.columns={text: NAME})" \
        in message
    message = refused(tmp_path, "words.jsonl", jsonl([{"words": ["a"], "tags": ["O"]}]), "tag")
    assert "words.jsonl:1: missing key 'tokens' for tokens (name the tokens key: task.columns={tokens: NAME})" in message
    assert "the first line is JSON, not CoNLL columns" in refused(tmp_path, "t.conll", records, "tag")
    assert "a tag task's columns are ['tokens', 'tags', 'id']" in refused(tmp_path, "c.jsonl", records, "tag",
                                                                          columns={"text": "x"})
    assert "CoNLL columns have no header; name them by position" in refused(
        tmp_path, "n.conll", "a O\n", "tag", columns={"tags": "ner"})
    assert "task.format 'conll' does not fit a span task" in refused(tmp_path, "s.jsonl", records, "span",
                                                                      format="conll")
    assert "tags are integer ids: give their names in id order (task.labels)" in refused(
        tmp_path, "ids.jsonl", jsonl([{"tokens": ["a"], "tags": [0]}]), "tag")
    assert "tags for 2 tokens" in refused(tmp_path, "n.jsonl", jsonl([{"tokens": ["a", "b"], "tags": ["O"]}]), "tag")
    assert "a cell starting with '[' must be a JSON array" in refused(tmp_path, "r.csv", "tokens,tags\n['a'],O\n",
                                                                       "tag")
    with pytest.raises(ConfigError, match=r"the columns \['tokens', 'question'\] fit more than one task kind"):
        guess_kind(write(tmp_path / "both.jsonl", jsonl([{"tokens": ["a"], "question": "q"}])))
    assert "the header is one cell holding ';'" in refused(tmp_path, "semi.csv", "text;label\nx;y\n")
    assert "CoNLL columns (a token a line, no header): task.format conll" in refused(
        tmp_path, "conll.tsv", "EU\tB-ORG\nrejects\tO\n", "tag")
    assert "a list of records: write them as JSON Lines" in refused(
        tmp_path, "records.json", json.dumps([{"question": "q"}], indent=1), "span")
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["x"], "label": ["y"]}), parquet)
    with pytest.raises(DataError, match=r"t\.parquet: task\.format jsonl, but the file is a parquet / Arrow file"):
        load_task_data(TaskSection(files={"train": str(parquet)}, format="jsonl"))


def test_a_dataset_dict_stands_for_its_splits_and_one_split_of_it_is_named(tmp_path: Path) -> None:
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=NAMES))})
    split = {"tokens": [w for w, _ in SENTENCES], "ner_tags": [[NAMES.index(x) for x in t] for _, t in SENTENCES]}
    datasets.DatasetDict({name: datasets.Dataset.from_dict(split, features=features)
                          for name in ("train", "validation", "test")}).save_to_disk(str(tmp_path / "conll2003"))
    data = load_task_data(TaskSection(files={"train": str(tmp_path / "conll2003")}, columns={"tags": "ner_tags"}))
    assert data.spec.kind == "tag" and sorted(data.splits) == ["dev", "test", "train"]
    assert all([(ex.tokens, ex.tags) for ex in exs] == SENTENCES for exs in data.splits.values())
    with pytest.raises(DataError, match=r"a datasets DatasetDict with the splits \['train', 'validation', 'test'\]: "
                                        r"name one split's directory"):
        load_task_data(TaskSection(files={"train": str(tmp_path / "conll2003"), "dev": str(tmp_path / "x")},
                                   kind="tag"))


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_finetune_run_on_a_jsonl_tag_file(tmp_path: Path) -> None:
    from _tiny_backbones import tiny_bert

    from muppets.transfer.finetune import FinetuneConfig, run

    train = write(tmp_path / "train.jsonl", jsonl([{"tokens": w, "tags": t} for w, t in SENTENCES * 4]))
    dev = write(tmp_path / "dev.jsonl.gz", gzip.compress(jsonl([{"tokens": w, "tags": t} for w, t in SENTENCES])))
    cfg = FinetuneConfig(task=TaskSection(name="ner", files={"train": str(train), "dev": str(dev)}),
                         model=str(tiny_bert(tmp_path / "bert")), run_dir=str(tmp_path / "run"), max_seq_len=32,
                         batch_size=4, epochs=1, progress=False, log_every=0, device="cpu")
    summary = run(cfg)
    predictions = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == len(SENTENCES) and "f1" in summary["dev"]
    assert [len(p["prediction"]) for p in predictions] == [len(w) for w, _ in SENTENCES]
