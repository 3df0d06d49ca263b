"""One corpus prepared on several machines: ``data prepare --part I/N``, then ``data merge``."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from muppets.cli import main
from muppets.data.merge import merge_parts
from muppets.data.prepare import prepare_corpus
from muppets.data.readers import KeyRange, ReadStats, input_bytes, iter_documents, list_files, part_range
from muppets.data.shards import ShardWriter
from muppets.data.units import UnitSpec
from muppets.errors import ConfigError, DataError
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from test_data_pipeline import StandInTokenizer, tiny_vocab

CORPUS_FILES = ("tokens.bin", "sentences.bin", "documents.bin", "units.bin")


def sentences(n: int, seed: int) -> str:
    words = "the a and of to in he she it was said mr mrs dr stop hello world alice".split()
    return " ".join(f"{words[(seed + i) % len(words)].capitalize()} {words[(seed * 7 + i) % len(words)]} "
                    f"{seed}{i}." for i in range(n))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Files of different sizes and formats: plain text, gzip, jsonl, wikiextractor, a bad line."""
    root = tmp_path_factory.mktemp("inputs")
    (root / "a_small.txt").write_text("\n\n".join(sentences(2 + i % 3, i) for i in range(5)), encoding="utf-8")
    with gzip.open(root / "b_packed.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n\n".join(sentences(1 + i % 4, 50 + i) for i in range(12)))
    (root / "c_records.jsonl").write_text("\n".join(json.dumps({"text": sentences(3, 90 + i) + "\n\n" + sentences(2, i)})
                                                    for i in range(20)) + "\n", encoding="utf-8")
    (root / "d_large.txt").write_bytes("\n\n".join(sentences(1 + i % 6, 200 + i) for i in range(60)).encode()
                                       + b"\n\nA bad \xff byte here. Hello.\n\n" + sentences(4, 7).encode() + b"\n")
    (root / "e_empty.txt").write_text("\n\n", encoding="utf-8")
    (root / "f_wiki.txt").write_text("".join(f'<doc id="{i}" title="T{i}">\nT{i}\n'  # every 5th: title only
                                             + ("" if i % 5 == 0 else f"{sentences(2, 300 + i)}\nMore. Text.\n")
                                             + "</doc>\n" for i in range(15)))
    return root


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory: pytest.TempPathFactory) -> WordPieceTokenizer:
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(tiny_vocab()) + "\n", encoding="utf-8")
    return WordPieceTokenizer.from_vocab(vocab)


def meta(directory: Path) -> dict:
    found = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
    found.pop("created")
    return found


def assert_same_corpus(one: Path, merged: Path) -> None:
    for name in CORPUS_FILES:
        assert (one / name).exists() == (merged / name).exists(), name
        if (one / name).exists():
            assert (one / name).read_bytes() == (merged / name).read_bytes(), name
    assert meta(one) == meta(merged)


def prepare_parts(inputs: list[Path], tok: object, root: Path, count: int, **kwargs: object) -> list[Path]:
    parts = [root / f"part{i}" for i in range(1, count + 1)]
    for i, out in enumerate(parts, start=1):
        prepare_corpus(inputs, tok, out, part=(i, count), progress=False, **kwargs)
    return parts


def test_three_parts_merge_into_the_one_machine_corpus_with_units(inputs: Path, wordpiece: WordPieceTokenizer,
                                                                  tmp_path: Path) -> None:
    settings = dict(workers=1, errors="replace", units=UnitSpec("pretokenizer"), batch_docs=4)
    prepare_corpus([inputs], wordpiece, tmp_path / "one", progress=False, **settings)
    parts = prepare_parts([inputs], wordpiece, tmp_path, 3, **settings)
    counts = [meta(p)["num_documents"] for p in parts]
    assert all(counts) and sum(counts) == meta(tmp_path / "one")["num_documents"]
    merge_parts(reversed(parts), tmp_path / "merged")  # any order given: merged by index
    assert_same_corpus(tmp_path / "one", tmp_path / "merged")
    assert (tmp_path / "merged" / "units.bin").exists() and "part" not in meta(tmp_path / "merged")
    assert meta(tmp_path / "one")["skipped"]["replaced_byte_sequences"] == 1


def test_one_file_is_split_by_rows_and_workers_do_not_matter(inputs: Path, tmp_path: Path) -> None:
    tok = StandInTokenizer.from_vocab(tiny_vocab())
    big = inputs / "d_large.txt"
    prepare_corpus([big], tok, tmp_path / "one", workers=1, errors="skip", progress=False)
    parts = prepare_parts([big], tok, tmp_path, 3, workers=2, errors="skip", batch_docs=3)
    assert all(meta(p)["num_documents"] > 10 for p in parts)  # each part holds rows of the one file
    merge_parts(parts, tmp_path / "merged")
    assert_same_corpus(tmp_path / "one", tmp_path / "merged")
    assert meta(tmp_path / "merged")["skipped"]["bad_lines"] == 1
    assert sum(meta(p)["files"] for p in parts) == 1


def test_more_parts_than_documents_leaves_some_empty(tmp_path: Path) -> None:
    tok = StandInTokenizer.from_vocab(tiny_vocab())
    small = tmp_path / "two.txt"
    small.write_text("Hello world.\n\nThe end.\n", encoding="utf-8")
    prepare_corpus([small], tok, tmp_path / "one", workers=1, progress=False)
    parts = prepare_parts([small], tok, tmp_path, 7, workers=1)
    assert sorted(meta(p)["num_documents"] for p in parts) == [0] * 5 + [1, 1]
    merge_parts(parts, tmp_path / "merged")
    assert_same_corpus(tmp_path / "one", tmp_path / "merged")


@pytest.mark.parametrize("errors", ["skip", "replace"])
def test_reader_counters_partition_over_any_number_of_parts(inputs: Path, tmp_path: Path, errors: str) -> None:
    shutil.copytree(inputs, tmp_path / "in")
    (tmp_path / "in" / "g_binary.txt").write_bytes(b"text\x00more\n")
    (tmp_path / "in" / "h_bad.jsonl").write_bytes(b'{"text": "ok"}\nnot json\n{"text": "b\xffd"}\n')
    whole = ReadStats()
    expected = [d.source for d in iter_documents([tmp_path / "in"], errors=errors, stats=whole)]
    assert whole.skipped_files == 2 and whole.skipped_lines >= 1 and whole.empty_documents >= 1
    for count in (1, 2, 3, 5, 8, 40):
        stats = [ReadStats() for _ in range(count)]
        got = [d.source for i in range(count)
               for d in iter_documents([tmp_path / "in"], errors=errors, stats=stats[i], part=(i + 1, count))]
        assert got == expected, count
        for name in ("files", "documents", "empty_documents", "skipped_files", "skipped_lines", "replaced"):
            assert sum(getattr(s, name) for s in stats) == getattr(whole, name), (count, name)
        summed: dict[str, int] = {}
        for s in stats:
            for kind, n in s.formats.items():
                summed[kind] = summed.get(kind, 0) + n
        assert summed == whole.formats, count
    cuts, start = set(), 0  # two parts cut at every file's ends and one byte either side
    for path in list_files([tmp_path / "in"]):
        start += input_bytes([path])
        cuts |= {start - 1, start, start + 1}
    for cut in sorted(cuts):
        halves = [ReadStats(), ReadStats()]
        got = [d.source for keys, stats in zip((KeyRange(0, cut), KeyRange(cut)), halves)
               for d in iter_documents([tmp_path / "in"], errors=errors, stats=stats, part=keys)]
        assert got == expected and halves[0].files + halves[1].files == whole.files, cut


def test_part_ranges_cover_the_bytes_once() -> None:
    ranges = [part_range(i, 3, 100) for i in (1, 2, 3)]
    assert [(r.lo, r.hi) for r in ranges] == [(0, 33), (33, 66), (66, None)]
    for bad in ((0, 3), (4, 3), (1, 0)):
        with pytest.raises(ValueError, match="1 <= I <= N"):
            part_range(*bad, 100)


@pytest.fixture(scope="module")
def two_parts(inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("two_parts")
    return prepare_parts([inputs / "a_small.txt", inputs / "c_records.jsonl"], StandInTokenizer.from_vocab(tiny_vocab()),
                         root, 2, workers=1)


def refuses(parts: list[Path], out: Path, match: str) -> None:
    with pytest.raises(DataError, match=match):
        merge_parts(parts, out)
    assert not out.exists()


def test_merge_refuses_parts_that_do_not_belong_together(inputs: Path, two_parts: list[Path], tmp_path: Path) -> None:
    other_vocab = {**tiny_vocab(), "zebra": len(tiny_vocab())}
    files = [inputs / "a_small.txt", inputs / "c_records.jsonl"]
    other_tok = prepare_parts(files, StandInTokenizer.from_vocab(other_vocab), tmp_path / "tok", 2, workers=1)
    refuses([two_parts[0], other_tok[1]], tmp_path / "out", "tokenizer fingerprint")
    three = prepare_parts(files, StandInTokenizer.from_vocab(tiny_vocab()), tmp_path / "three", 3, workers=1)
    refuses([two_parts[0], three[1], three[2]], tmp_path / "out", "number of parts")
    other_files = prepare_parts([inputs / "a_small.txt", inputs / "d_large.txt"], StandInTokenizer.from_vocab(tiny_vocab()),
                                tmp_path / "files", 2, workers=1, errors="skip")
    refuses([two_parts[0], other_files[1]], tmp_path / "out", "errors setting|input files")
    prepare_corpus(files, StandInTokenizer.from_vocab(tiny_vocab()), tmp_path / "skip", part=(2, 2), errors="skip",
                   workers=1, progress=False)
    refuses([two_parts[0], tmp_path / "skip"], tmp_path / "out", "errors setting")


def test_merge_refuses_missing_repeated_and_non_parts(inputs: Path, two_parts: list[Path], tmp_path: Path) -> None:
    refuses([two_parts[1]], tmp_path / "out", "part 1/2 missing")
    refuses([two_parts[0], two_parts[0], two_parts[1]], tmp_path / "out", "part 1/2 is given twice")
    prepare_corpus([inputs / "a_small.txt"], StandInTokenizer.from_vocab(tiny_vocab()), tmp_path / "whole", workers=1,
                   progress=False)
    refuses([two_parts[0], tmp_path / "whole"], tmp_path / "out", "not a part")
    (tmp_path / "mine").mkdir()
    refuses([two_parts[0], tmp_path / "mine"], tmp_path / "out", "not a prepared corpus")
    refuses([], tmp_path / "out", "no parts")


def test_merge_keeps_the_output_rules(two_parts: list[Path], tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="already exists"):
        merge_parts(two_parts, mine)
    with pytest.raises(DataError, match="not a prepared corpus"):
        merge_parts(two_parts, mine, overwrite=True)
    assert (mine / "notes.txt").read_text() == "mine"
    with ShardWriter(tmp_path / "old", vocab_size=10):
        pass
    merge_parts(two_parts, tmp_path / "old", overwrite=True)
    assert meta(tmp_path / "old")["num_documents"] == sum(meta(p)["num_documents"] for p in two_parts)


def test_pretraining_refuses_a_part_as_its_corpus(inputs: Path, two_parts: list[Path], tmp_path: Path) -> None:
    from muppets.recipes.common import CorpusSection, prepare_once

    section = CorpusSection(inputs=[str(inputs / "a_small.txt"), str(inputs / "c_records.jsonl")],
                            prepared=str(two_parts[1]), workers=1)
    refusal = r"is a part of a corpus \(2/2\), not the whole corpus; merge the parts first: muppets data merge"
    with pytest.raises(ConfigError, match=refusal):
        prepare_once(section, StandInTokenizer.from_vocab(tiny_vocab()), tmp_path / "run")


def test_prepare_refuses_a_bad_part(inputs: Path, tmp_path: Path) -> None:
    for bad in ((0, 2), (3, 2), (1, 0), ("1", 2), (1,)):
        with pytest.raises(ConfigError, match="part"):
            prepare_corpus([inputs / "a_small.txt"], StandInTokenizer.from_vocab(tiny_vocab()), tmp_path / "x",
                           part=bad, progress=False)  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()


def test_cli_prepares_parts_and_merges_them(inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tiny_vocab()) + "\n", encoding="utf-8")
    common = ["data", "prepare", "--input", str(inputs / "a_small.txt"), str(inputs / "f_wiki.txt"),
              "--tokenizer", str(vocab), "--workers", "1"]
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    for i in (1, 2, 3):
        assert main([*common, "--out", str(tmp_path / f"p{i}"), "--part", f"{i}/3"]) == 0
        assert f"(part {i}/3" in capsys.readouterr().out
    assert main(["data", "merge", str(tmp_path / "p2"), str(tmp_path / "p3"), str(tmp_path / "p1"),
                 "--out", str(tmp_path / "merged")]) == 0
    assert capsys.readouterr().out.startswith(f"merged 3 parts into {tmp_path / 'merged'}: 2 files")
    assert_same_corpus(tmp_path / "one", tmp_path / "merged")
    assert main(["data", "merge", str(tmp_path / "p1"), "--out", str(tmp_path / "again")]) == 2
    assert "parts 2/3, 3/3 missing" in capsys.readouterr().err
    for bad in ("0/3", "4/3", "2", "a/b", "1/0"):
        with pytest.raises(SystemExit):
            main([*common, "--out", str(tmp_path / "bad"), "--part", bad])
