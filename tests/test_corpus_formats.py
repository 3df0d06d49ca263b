"""Corpora in the formats people have: compressed, JSON Lines in .json, parquet, Arrow, CSV/TSV,
a datasets.save_to_disk directory — all prepare to the same shards as the plain jsonl."""
from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma
from pathlib import Path

import pytest

from muppets.data.formats import iter_rows, text_suffix
from muppets.data.prepare import prepare_corpus
from muppets.data.readers import ReadStats, detect_format, iter_documents
from muppets.errors import DataError
from test_data_pipeline import StandInTokenizer, tiny_vocab

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
zstandard = pytest.importorskip("zstandard")

TEXTS = ["Hello world. The cat said stop!", "Mr. Alice was in the world.\n\nShe said hello.",
         "It was a dark night; he said: 'stop'.", "a\nb\nc"]
SHARDS = ("tokens.bin", "sentences.bin", "documents.bin")


def jsonl_bytes(field: str = "text") -> bytes:
    return "".join(json.dumps({field: t, "id": i}) + "\n" for i, t in enumerate(TEXTS)).encode()


def write_all(root: Path) -> dict[str, Path]:
    """The same documents in every format (one file or directory each)."""
    root.mkdir()
    raw = jsonl_bytes()
    files = {
        "jsonl": root / "c.jsonl", "gz": root / "c.jsonl.gz", "bz2": root / "c.jsonl.bz2",
        "xz": root / "c.jsonl.xz", "zst": root / "c.jsonl.zst", "json": root / "c.json",
        "gz-no-suffix": root / "c-gzip-inside.jsonl",
    }
    files["jsonl"].write_bytes(raw)
    files["gz"].write_bytes(gzip.compress(raw))
    files["bz2"].write_bytes(bz2.compress(raw))
    files["xz"].write_bytes(lzma.compress(raw))
    files["zst"].write_bytes(zstandard.ZstdCompressor().compress(raw))
    files["json"].write_bytes(raw)
    files["gz-no-suffix"].write_bytes(gzip.compress(raw))  # found by its magic bytes
    table = pa.table({"id": list(range(len(TEXTS))), "text": TEXTS})
    files["parquet"] = root / "c.parquet"
    pq.write_table(table, files["parquet"], row_group_size=2)
    files["arrow"] = root / "c.arrow"
    with pa.ipc.new_file(str(files["arrow"]), table.schema) as writer:
        writer.write_table(table, max_chunksize=3)
    files["csv.gz"] = root / "c.csv.gz"
    with gzip.open(files["csv.gz"], "wt", newline="") as fh:
        csv.writer(fh).writerows([["id", "text"], *enumerate(TEXTS)])
    return files


@pytest.fixture(scope="module")
def formats(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    files = write_all(tmp_path_factory.mktemp("formats") / "in")
    datasets = pytest.importorskip("datasets")
    files["save_to_disk"] = files["jsonl"].parent / "hf"
    datasets.Dataset.from_dict({"id": list(range(len(TEXTS))), "text": TEXTS}).save_to_disk(
        str(files["save_to_disk"]))
    return files


def test_every_format_reads_the_same_documents(formats: dict[str, Path]) -> None:
    expected = [d.paragraphs for d in iter_documents(formats["jsonl"])]
    assert len(expected) == len(TEXTS) and expected[1] == ["Mr. Alice was in the world.", "She said hello."]
    for name, path in formats.items():
        assert [d.paragraphs for d in iter_documents(path)] == expected, name
    assert detect_format(formats["parquet"]) == detect_format(formats["save_to_disk"]) == "columnar"
    assert detect_format(formats["zst"]) == "jsonl" and detect_format(formats["csv.gz"]) == "csv"
    assert text_suffix("a/b.jsonl.zst") == ".jsonl" and text_suffix("x.txt") == ".txt"


def test_every_format_prepares_identical_shards(formats: dict[str, Path], tmp_path: Path) -> None:
    tokenizer = StandInTokenizer.from_vocab(tiny_vocab())
    shards = {}
    for name, path in formats.items():
        out = tmp_path / name
        prepare_corpus([path], tokenizer, out, workers=1, progress=False)
        shards[name] = [(out / f).read_bytes() for f in SHARDS]
    assert len(shards["jsonl"][0]) > 0
    for name, got in shards.items():
        assert got == shards["jsonl"], name


def test_a_directory_mixes_formats_and_takes_a_save_to_disk_dir_whole(formats: dict[str, Path]) -> None:
    stats = ReadStats()
    docs = list(iter_documents(formats["jsonl"].parent, stats=stats))
    # walked: .jsonl (plain and compressed), .parquet, .arrow and the hf directory; not .json / .csv
    assert stats.formats == {"jsonl": 6, "columnar": 3}
    assert len(docs) == 9 * len(TEXTS)


def test_rows_stream_in_batches_with_only_the_named_column(tmp_path: Path) -> None:
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"body": [f"row {i}" for i in range(3000)], "x": list(range(3000))}), path)
    rows = iter_rows(path, ["body"])
    assert next(rows) == (1, {"body": "row 0"})
    assert list(rows)[-1] == (3000, {"body": "row 2999"})
    docs = list(iter_documents(path, text_field="body"))
    assert docs[-1].source == f"{path}:3000" and docs[-1].paragraphs == ["row 2999"]


def test_truncated_gzip_names_the_file_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(jsonl_bytes() * 50)[:-40])
    with pytest.raises(DataError, match=r"truncated or corrupt gzip data after \d+ decompressed bytes") as err:
        list(iter_documents(path))
    assert str(path) in str(err.value)


def test_parquet_without_the_named_column_names_file_and_columns(formats: dict[str, Path]) -> None:
    with pytest.raises(DataError, match=r"no column 'body' \(columns: \['id', 'text'\]\)") as err:
        list(iter_documents(formats["parquet"], text_field="body"))
    assert str(formats["parquet"]) in str(err.value)


def test_binary_file_given_as_text_is_refused_naming_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "model.bin.txt"
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4)
    with pytest.raises(DataError, match=r"\(byte 4\): binary content, not text \(a NUL byte\)") as err:
        list(iter_documents(path))
    assert str(path) in str(err.value)
    stats = ReadStats()
    assert list(iter_documents(path, errors="skip", stats=stats)) == [] and stats.skipped_files == 1


def test_invalid_utf8_advice_names_the_cli_option(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\xe9 ok\n".encode("latin-1"))
    with pytest.raises(DataError, match="--errors replace"):
        list(iter_documents(path))


def test_csv_corpus_needs_its_text_column(tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_text("id\tbody\n1\thello world\n")
    assert [d.paragraphs for d in iter_documents(path, text_field="body")] == [["hello world"]]
    with pytest.raises(DataError, match=r"no column 'text' in the header \['id', 'body'\]"):
        list(iter_documents(path))
