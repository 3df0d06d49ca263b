"""One corpus prepared on one machine vs in 3 parts (``data prepare --part I/3``) + ``data merge``.

Five shards of the shared English Wikipedia (about 5 MB), read as 5 files and joined into one
file (so that parts split inside a file), tokenized with the bert-base-uncased vocabulary, one
worker. For each layout it prints the one-machine time, each part's time, their sum and the
longest (what N machines would wait for), the merge time, and whether the merged shards are
byte-identical to the one-machine corpus. Times are wall clock in process, best of ``--repeats``.

    python benchmarks/prepare_parts.py --repeats 5 --out benchmarks/results/prepare_parts.json
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from muppets.data.merge import merge_parts
from muppets.data.prepare import prepare_corpus
from muppets.paths import data_dir
from muppets.tokenizers.wordpiece import WordPieceTokenizer

SHARDS = ("AA_wiki_00.txt", "AA_wiki_25.txt", "AA_wiki_50.txt", "AA_wiki_75.txt", "AB_wiki_00.txt")
PARTS = 3


def _best(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    data = data_dir()
    files = [data / "english-corpus" / "wiki" / name for name in SHARDS]
    tok = WordPieceTokenizer.from_vocab(data / "vocab" / "bert-base-uncased" / "vocab.txt")
    root = Path(tempfile.mkdtemp(prefix="prepare_parts-"))
    joined = root / "five_shards.txt"
    joined.write_bytes(b"".join(f.read_bytes() for f in files))
    rows = []
    try:
        for name, inputs in (("5 files", files), ("1 file", [joined])):
            d = root / name.replace(" ", "_")
            one = _best(lambda: prepare_corpus(inputs, tok, d / "one", workers=1, progress=False, overwrite=True),
                        args.repeats)
            parts = [_best(lambda i=i: prepare_corpus(inputs, tok, d / f"p{i}", workers=1, progress=False,
                                                      overwrite=True, part=(i, PARTS)), args.repeats)
                     for i in range(1, PARTS + 1)]
            merge = _best(lambda: merge_parts([d / f"p{i}" for i in range(1, PARTS + 1)], d / "merged",
                                              overwrite=True), args.repeats)
            same = all(filecmp.cmp(d / "one" / f, d / "merged" / f, shallow=False)
                       for f in ("tokens.bin", "sentences.bin", "documents.bin"))
            metas = [json.loads((d / k / "meta.json").read_text()) for k in ("one", "merged")]
            for meta in metas:
                meta.pop("created")
            row = {"layout": name, "bytes": sum(p.stat().st_size for p in inputs), "one_machine_s": one,
                   "parts_s": parts, "sum_over_one": sum(parts) / one, "longest_over_one": max(parts) / one,
                   "merge_s": merge, "identical_shards": same, "equal_meta": metas[0] == metas[1]}
            rows.append(row)
            print(f"{name} ({row['bytes']:,} bytes): one machine {one:.2f} s; parts "
                  f"{' + '.join(f'{p:.2f}' for p in parts)} = {sum(parts):.2f} s ({row['sum_over_one']:.2f}x), "
                  f"longest {max(parts):.2f} s ({row['longest_over_one']:.2f}x); merge {merge:.2f} s; "
                  f"identical shards {same}, equal meta.json but its time {row['equal_meta']}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["identical_shards"] and r["equal_meta"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
