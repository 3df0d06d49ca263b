"""Corrupt or hostile word-vector files end in a clear :class:`DataError`, in time linear in the
file's size and without allocating more than the file can hold; fuzzed word-vector files and
Hugging Face GPT directories end in a typed error within a time bound (issue 15, item 8; the
targeted GPT directory checks are in test_hf_gpt_untied.py)."""

from __future__ import annotations

import json
import time
import tracemalloc

import numpy as np
import pytest

from muppets.errors import DataError
from muppets.interop import word2vec_format
from muppets.interop.word2vec_format import read_vectors

MB = 1 << 20


def rejected(path, fmt: str = "auto", match: str = "", seconds: float = 1.0) -> DataError:
    """Read ``path``: it must raise a DataError naming the file within ``seconds``."""
    start = time.perf_counter()
    with pytest.raises(DataError, match=match) as err:
        read_vectors(path, fmt=fmt)
    assert time.perf_counter() - start < seconds
    assert str(path) in str(err.value)
    return err.value


@pytest.mark.parametrize("first", [b"", b"ok " + np.ones(10, "<f4").tobytes()])
def test_spaceless_binary_file_is_rejected_fast(tmp_path, first):
    path = tmp_path / "spaceless.bin"
    path.write_bytes(b"2 10\n" + first + b"x" * (8 * MB))
    err = rejected(path, "word2vec-binary", match=f"file ends inside vector {1 + bool(first)} of 2")
    assert err.position == 5 + len(first)  # the start of the broken record


def test_binary_reader_is_linear_in_small_blocks(tmp_path, monkeypatch):
    """With 1 KB blocks, 8 MB without a space took 4 s when every block rescanned and copied the
    whole buffer (8,192 blocks); reading each byte once takes milliseconds."""
    monkeypatch.setattr(word2vec_format, "_BLOCK", 1024)
    path = tmp_path / "spaceless.bin"
    path.write_bytes(b"1 10\n" + b"x" * (8 * MB))
    rejected(path, "word2vec-binary", match="file ends inside vector 1 of 1", seconds=0.5)
    words = [f"w{i}" for i in range(3000)]  # and many records across block boundaries still read
    matrix = np.random.default_rng(0).standard_normal((3000, 7)).astype(np.float32)
    word2vec_format.write_word2vec_format(tmp_path / "v.bin", words, matrix, binary=True)
    back_words, back = read_vectors(tmp_path / "v.bin")
    assert back_words == words and np.array_equal(back, matrix)


@pytest.mark.parametrize("binary", [True, False])
def test_huge_header_is_a_data_error_not_a_memory_error(tmp_path, binary):
    path = tmp_path / "huge"
    row = b"ab " + (np.ones(1000, "<f4").tobytes() if binary else b" ".join([b"1"] * 1000) + b"\n")
    path.write_bytes(b"400000000 1000\n" + row)
    fmt = "word2vec-binary" if binary else "word2vec-text"
    rejected(path, fmt, match="file ends (inside vector 2|after 1) of 400000000")


@pytest.mark.parametrize("binary", [True, False])
def test_header_sizes_are_checked_before_allocating(tmp_path, binary):
    """A header of 2,000,000 x 1,000 (8 GB of float32) over a 4 KB file allocates nothing big."""
    path = tmp_path / "lying"
    row = b"ab " + (np.ones(1000, "<f4").tobytes() if binary else b" ".join([b"1"] * 1000) + b"\n")
    path.write_bytes(b"2000000 1000\n" + row)
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="of 2000000"):
            read_vectors(path, fmt="word2vec-binary" if binary else "word2vec-text")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MB


def test_huge_dimension_is_rejected(tmp_path):
    (tmp_path / "wide.bin").write_bytes(b"1 4000000000\nab " + b"\0" * 64)
    rejected(tmp_path / "wide.bin", "word2vec-binary", match="file ends inside vector 1 of 1")
    (tmp_path / "wide.txt").write_bytes(b"1 4000000000\nab 1 2 3\n")
    rejected(tmp_path / "wide.txt", "word2vec-text", match="expected 4000000000 values after the word, found 3")


def test_glove_rows_times_first_row_width_is_not_allocated(tmp_path):
    """A wide first row and many short lines claimed 200,001 x 100,000 floats (80 GB)."""
    path = tmp_path / "glove.txt"
    path.write_bytes(b"w " + b" ".join([b"1"] * 100_000) + b"\n" + b"a\n" * 200_000)
    rejected(path, "glove", match=r"glove.txt:2: expected 100000 values after the word, found 0")


# ----------------------------------------------------------------------------- fuzzing
# Truncated, bit-flipped, padded and random versions of valid files: every read either returns a
# consistent result or raises one of muppets' typed errors, quickly. Seeded: failures replay.


def mutations(data: bytes, seed: int) -> list[bytes]:
    """Corrupt variants of ``data``: truncations, byte flips, inserted junk, random bytes."""
    rng = np.random.default_rng(seed)
    out = [b"", data[:1], data + b"\xff" * 7, rng.bytes(len(data))]
    out += [data[: int(rng.integers(1, len(data)))] for _ in range(12)]
    for i in range(20):
        flipped = bytearray(data)
        for at in rng.integers(0, min(len(data), 64 if i % 2 else len(data)), int(rng.integers(1, 6))):
            flipped[at] = int(rng.integers(0, 256))  # even draws anywhere, odd ones in the header
        out.append(bytes(flipped))
    for _ in range(6):
        at = int(rng.integers(0, len(data)))
        out.append(data[:at] + rng.bytes(int(rng.integers(1, 40))) + data[at:])
    return out


def vector_files() -> dict[str, bytes]:
    words = [f"w{i}" for i in range(20)] + ["é", "naïve"]
    matrix = np.random.default_rng(1).standard_normal((len(words), 8)).astype(np.float32)
    head = f"{len(words)} 8\n".encode()
    text = head + b"".join(f"{w} {' '.join(str(v) for v in row)}\n".encode() for w, row in zip(words, matrix))
    binary = head + b"".join(w.encode() + b" " + row.astype("<f4").tobytes() for w, row in zip(words, matrix))
    return {"word2vec-text": text, "word2vec-binary": binary, "glove": text[len(head):]}


def lying_headers(data: bytes) -> list[bytes]:
    body = data[data.index(b"\n") + 1:]
    return [h + body for h in (b"400000000 1000\n", b"1 4000000000\n", b"99999999999999999999 8\n",
                               b"0 8\n", b"22 0\n", b"-3 8\n", b"22 8 1\n")]


@pytest.mark.parametrize("fmt", ["word2vec-text", "word2vec-binary", "glove"])
def test_fuzzed_vector_files_end_in_data_errors(tmp_path, fmt):
    data = vector_files()[fmt]
    cases = mutations(data, seed=len(fmt)) + (lying_headers(data) if fmt != "glove" else [])
    for i, case in enumerate(cases):
        path = tmp_path / f"case{i}"
        path.write_bytes(case)
        for how in ("auto", fmt):
            start = time.perf_counter()
            try:
                words, matrix = read_vectors(path, fmt=how)
            except DataError:
                pass
            else:
                assert matrix.dtype == np.float32 and matrix.shape[0] == len(words) == len(set(words))
            assert time.perf_counter() - start < 1.0, (i, how)


def gpt_directory(directory):
    import torch

    from muppets.interop.hf_gpt import load_hf_gpt, save_hf_gpt
    from muppets.models.gpt import GPTConfig, GPTLanguageModel

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, max_position_embeddings=16, hidden_size=16, num_layers=2,
                    num_heads=2, intermediate_size=32)
    out = save_hf_gpt(GPTLanguageModel(cfg), directory)
    load_hf_gpt(out)  # once, so the time bounds below do not count first-use imports
    return out


def loads_or_refuses(directory) -> None:
    from muppets.errors import MuppetsError
    from muppets.interop.hf_gpt import load_hf_gpt

    start = time.perf_counter()
    try:
        load_hf_gpt(directory)
    except MuppetsError:
        pass
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("bad", [None, "x", -1, 0, 1.5, True, 10**15, [], {}], ids=repr)
def test_fuzzed_hf_gpt_config_values_are_refused(tmp_path, bad, one_thread):
    directory = gpt_directory(tmp_path / "gpt")
    path = directory / "config.json"
    good = json.loads(path.read_text())
    for key in good:
        path.write_text(json.dumps({**good, key: bad}))
        loads_or_refuses(directory)


def test_fuzzed_hf_gpt_files_are_refused(tmp_path, one_thread):
    directory = gpt_directory(tmp_path / "gpt")
    for name, seed in (("config.json", 1), ("model.safetensors", 2)):
        path = directory / name
        good = path.read_bytes()
        for case in mutations(good, seed):
            path.write_bytes(case)
            loads_or_refuses(directory)
        path.write_bytes(good)


# ----------------------------------------------------------------------------- tokenizer files
# Every file a tokenizer directory holds, fuzzed and replaced by hostile content: each load
# returns a tokenizer that encodes, or raises a MuppetsError, within the time bound.

HOSTILE = {"empty": b"", "nesting bomb": b"[" * 100_000, "object bomb": b'{"a":' * 100_000,
           "huge number": b'{"model_max_length": ' + b"9" * 5000 + b"}",
           "10 MB line": b"x" * (10 * MB), "cut UTF-8": "naïve".encode()[:3]}


def tokenizer_dirs(root):
    """(loader, directory, files) of each saved tokenizer format, trained on a tiny corpus."""
    from muppets.tokenizers import ByteLevelBPETokenizer, WordPieceTokenizer
    from muppets.tokenizers.words import WordVocab

    corpus = ["The quick brown fox jumps over the lazy dog.", "Café au lait, 北京 naïve."] * 10
    wordpiece = WordPieceTokenizer.train(corpus, vocab_size=120, min_frequency=1)
    bpe = ByteLevelBPETokenizer.train(corpus, vocab_size=300, min_frequency=1)
    wp, bare_wp = wordpiece.save(root / "wp"), wordpiece.save(root / "wp-bare")
    bpe, bare_bpe = bpe.save(root / "bpe"), bpe.save(root / "bpe-bare")
    for bare in (bare_wp, bare_bpe):
        (bare / "tokenizer.json").unlink()  # read vocab.txt / vocab.json + merges.txt instead
    configs = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
    return {"wordpiece": (WordPieceTokenizer.load, wp, configs),
            "wordpiece-vocab.txt": (WordPieceTokenizer.load, bare_wp, ["vocab.txt"]),
            "bpe": (ByteLevelBPETokenizer.load, bpe, configs),
            "bpe-vocab.json": (ByteLevelBPETokenizer.load, bare_bpe, ["vocab.json", "merges.txt"]),
            "words": (WordVocab.load, WordVocab.build(corpus, min_count=1).save(root / "words"),
                      ["words.txt", "words.json"])}


def loads_encodes_or_refuses(load, directory, seconds: float = 5.0) -> None:
    from muppets.errors import MuppetsError

    start = time.perf_counter()
    try:
        tok = load(directory)
    except MuppetsError:
        pass
    else:
        ids = tok.encode("the naïve ☃ fox")  # a tokenizer that loads must also encode
        assert all(0 <= i < tok.vocab_size for i in ids)
    assert time.perf_counter() - start < seconds


@pytest.mark.parametrize("kind", ["wordpiece", "wordpiece-vocab.txt", "bpe", "bpe-vocab.json", "words"])
def test_fuzzed_tokenizer_files_are_refused(tmp_path, kind):
    load, directory, files = tokenizer_dirs(tmp_path)[kind]
    for name in files:
        path = directory / name
        good = path.read_bytes()
        for case in mutations(good, seed=len(name)) + list(HOSTILE.values()):
            path.write_bytes(case)
            loads_encodes_or_refuses(load, directory)
        path.write_bytes(good)


def _edit_json(**changes):
    def edit(data: bytes) -> bytes:
        obj = json.loads(data)
        for dotted, value in changes.items():
            *parents, key = dotted.split(".")
            node = obj
            for parent in parents:
                node = node[parent]
            node[key] = value
        return json.dumps(obj).encode()
    return edit


@pytest.mark.parametrize("kind, name, edit, match", [
    ("wordpiece", "tokenizer.json", _edit_json(**{"model.vocab.the": 2**31}), "more than twice the"),
    ("wordpiece", "tokenizer.json", _edit_json(**{"model.vocab.the": 0}), r"have the same id \(value: 0\)"),
    ("wordpiece", "tokenizer.json", _edit_json(**{"model.unk_token": "[NOPE]"}), "unk_token is not in"),
    ("wordpiece", "tokenizer_config.json", _edit_json(strip_accents="yes"), "strip_accents must be true"),
    ("wordpiece", "tokenizer_config.json", _edit_json(do_lower_case="false"), "do_lower_case must be"),
    ("wordpiece", "tokenizer_config.json", _edit_json(model_max_length=-5), "model_max_length must be"),
    ("wordpiece", "special_tokens_map.json", lambda _: HOSTILE["nesting bomb"], "nested deeper"),
    ("wordpiece", "tokenizer_config.json", lambda _: HOSTILE["huge number"], "4300 digits"),
    ("wordpiece-vocab.txt", "vocab.txt", lambda d: d.replace(b"[UNK]\n", b""), r"lacks a special token.*\[UNK\]"),
    ("bpe", "tokenizer.json", _edit_json(added_tokens=5), "added_tokens is not a list"),
    ("bpe", "tokenizer.json", _edit_json(**{"model.vocab.Ġt": 10**30}), "more than twice the"),
    ("bpe", "tokenizer_config.json", _edit_json(add_prefix_space="no"), "add_prefix_space must be"),
    ("bpe-vocab.json", "vocab.json", _edit_json(zzzz=2**31), "more than twice the"),
    ("bpe-vocab.json", "merges.txt", lambda d: d + b"zz qq\n", r":\d+: merge 'zz' \+ 'qq' needs 'zz'"),
    ("words", "words.txt", lambda d: d + d.splitlines(True)[5], r":\d+: word repeated \(first on line 6\)"),
    ("words", "words.txt", lambda d: d.replace(b"<pad>\t0", "<pad>\t²".encode()), r":1: expected 'word<TAB>count'"),
    ("words", "words.txt", lambda d: d.replace(b"<pad>\t0", b"<pad>\t" + b"9" * 40), r":1: expected 'word<TAB>count'"),
    ("words", "words.txt", lambda d: d.replace(b"<unk>", b"<unx>"), "a word vocabulary starts with"),
    ("words", "words.txt", lambda d: b"\xff" + d, "not valid UTF-8"),
    ("words", "words.json", lambda _: b"[1]", "expected a mapping"),
    ("words", "words.json", lambda _: b'{"lowercase": "no"}', "lowercase: expected true/false"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "")
def test_hostile_tokenizer_file_names_file_and_value(tmp_path, kind, name, edit, match):
    """Each of these raised a raw RecursionError, ValueError, TypeError or UnicodeDecodeError,
    loaded a vocabulary of 2**31 ids from a file of 300 tokens, or loaded a tokenizer whose
    first unknown word raised a bare Exception (the unk_token case)."""
    load, directory, _ = tokenizer_dirs(tmp_path)[kind]
    path = directory / name
    path.write_bytes(edit(path.read_bytes()))
    start = time.perf_counter()
    with pytest.raises(DataError, match=match) as err:
        load(directory)
    assert time.perf_counter() - start < 5.0
    assert str(err.value).startswith(str(path))


def test_legitimate_oddities_still_load(tmp_path):
    """Repeated vocab.txt lines (the last keeps its id, as in tokenizers) and no merges at all."""
    _, wp, _ = tokenizer_dirs(tmp_path)["wordpiece-vocab.txt"]
    from muppets.tokenizers import ByteLevelBPETokenizer, WordPieceTokenizer

    vocab = (wp / "vocab.txt").read_bytes()
    (wp / "vocab.txt").write_bytes(vocab + vocab.splitlines(True)[-1])
    assert WordPieceTokenizer.load(wp).vocab_size == len(vocab.splitlines()) + 1
    _, bpe, _ = tokenizer_dirs(tmp_path / "again")["bpe-vocab.json"]
    (bpe / "merges.txt").write_bytes(b"#version: 0.2\n")
    tok = ByteLevelBPETokenizer.load(bpe)
    assert tok.decode(tok.encode("naïve")) == "naïve"


# ----------------------------------------------------------------------------- model directories
# config.json (and a safetensors index) of every model directory reader, replaced by hostile
# content: a CheckpointError naming the file, never a raw RecursionError / ValueError /
# UnicodeDecodeError.


def model_dirs(root):
    """(loader, directory, JSON file) of an HF BERT, an HF GPT, a task model and an ELMo model."""
    import torch

    from muppets.interop.hf_bert import load_hf_bert, save_hf_bert
    from muppets.interop.hf_gpt import load_hf_gpt
    from muppets.interop.hf_tasks import load_hf_task_model, save_hf_task_model
    from muppets.models.bert import BertConfig, BertForPreTraining
    from muppets.models.elmo import ElmoConfig, ElmoLanguageModel
    from muppets.recipes.elmo_pretrain import load_elmo, save_elmo
    from muppets.tokenizers import WordPieceTokenizer
    from muppets.tokenizers.words import WordVocab

    corpus = ["the quick brown fox jumps over the lazy dog"] * 5
    tok = WordPieceTokenizer.train(corpus, vocab_size=60, min_frequency=1)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                     max_position_embeddings=16, pad_token_id=tok.pad_id)
    bert = save_hf_bert(BertForPreTraining(cfg), root / "bert", tok)
    task = load_hf_task_model(bert, kind="classify", num_labels=2)
    task_dir = save_hf_task_model(task, root / "task", tok, labels=["0", "1"])
    vocab = WordVocab.build(corpus, min_count=1)
    elmo = save_elmo(ElmoLanguageModel(ElmoConfig.preset("elmo-tiny", vocab_size=len(vocab))), vocab, root / "elmo")
    gpt = gpt_directory(root / "gpt")
    return [(load_hf_bert, bert, "config.json"), (load_hf_gpt, gpt, "config.json"),
            (load_hf_task_model, task_dir, "config.json"), (load_elmo, elmo, "config.json")]


def test_hostile_model_config_files_are_checkpoint_errors(tmp_path, one_thread):
    from muppets.errors import CheckpointError

    for load, directory, name in model_dirs(tmp_path):
        path = directory / name
        good = path.read_bytes()
        for label, content in {**HOSTILE, "a list": b"[1, 2]", "not UTF-8": b'{"a": "\xff"}'}.items():
            if label == "10 MB line":
                continue  # a long but valid-looking token: covered by the fuzzed GPT files
            path.write_bytes(content)
            start = time.perf_counter()
            with pytest.raises(CheckpointError, match=name):
                load(directory)
            assert time.perf_counter() - start < 2.0, (load.__name__, label)
        path.write_bytes(good)


def test_hostile_safetensors_index_is_a_checkpoint_error(tmp_path):
    from muppets.errors import CheckpointError
    from muppets.interop.safetensors_io import read_weights

    index = tmp_path / "model.safetensors.index.json"
    for content in (HOSTILE["nesting bomb"], HOSTILE["huge number"], b"\xff\xfe", b'{"weight_map": 3}'):
        index.write_bytes(content)
        with pytest.raises(CheckpointError, match="index"):
            read_weights(tmp_path)
