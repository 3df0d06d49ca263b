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

    from muppets.interop.hf_gpt import save_hf_gpt
    from muppets.models.gpt import GPTConfig, GPTLanguageModel

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, max_position_embeddings=16, hidden_size=16, num_layers=2,
                    num_heads=2, intermediate_size=32)
    return save_hf_gpt(GPTLanguageModel(cfg), directory)


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
