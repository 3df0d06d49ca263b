"""Claim: `prepare_corpus` memory stays flat as the corpus grows (peak RSS ratio 2x/1x ≈ 1.0).

Runs `prepare_corpus` with the BERT-base-uncased WordPiece vocabulary and 2 workers on
(a) the whole shared english corpus (books + wiki + tinyshakespeare) and (b) two copies of it
(a temp dir with two subdirectories of symlinks to every corpus file). Each case runs in a fresh
Python process so `getrusage` maxima are per case. Inside it, a thread samples VmRSS of the
process and all its descendants (the pool workers) every 50 ms from /proc and keeps the
largest sum; the table also shows `ru_maxrss` of the process itself and of its largest child.
Summed VmRSS counts pages shared by the forked workers more than once, so it over-states the
real footprint — but it does so equally in both cases.

    .venv/bin/python benchmarks/prepare_memory.py --out benchmarks/results/prepare_memory.json

``--formats text,gz,parquet`` runs the pair of cases once per input format: ``text`` is the
corpus as it is; ``gz`` every file gzip-compressed (``name.gz``, read through the decompression
layer); ``parquet`` one parquet file of the corpus's documents (a ``text`` column, paragraphs
joined by blank lines; row groups of 1,000 documents), read a record batch at a time. The 2x
case is two copies of the same files (symlinks), as for text.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/prepare_memory.py --formats gz,parquet \
        --out benchmarks/results/prepare_memory_formats.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from muppets.paths import data_dir

CORPUS_PARTS = ("books", "wiki", "tinyshakespeare")


class TreeRssSampler(threading.Thread):
    """Sample the summed VmRSS (bytes) of a process and its descendants; keep the peak."""

    def __init__(self, root: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak = self.peak_processes = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            pids = _descendants(self.root) | {self.root}
            total = sum(_vm_rss(pid) for pid in pids)
            if total > self.peak:
                self.peak, self.peak_processes = total, len(pids)
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue  # the process ended meanwhile
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _vm_rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_case(name: str, inputs: list[str], workers: int) -> dict:
    """Prepare ``inputs`` into a temp dir while sampling memory; return the measurements."""
    from muppets.data.prepare import prepare_corpus
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.from_vocab(data_dir() / "vocab/bert-base-uncased/vocab.txt")
    baseline = _vm_rss(os.getpid())
    sampler = TreeRssSampler(os.getpid())
    sampler.start()
    with tempfile.TemporaryDirectory(prefix="prepare-mem-") as tmp:
        summary = prepare_corpus(inputs, tokenizer, Path(tmp) / "corpus", workers=workers,
                                 progress=False)
    sampler.stop()
    kib = 1024  # ru_maxrss is in KiB on Linux
    return {
        "case": name, "workers": workers, "input_bytes": summary.bytes, "files": summary.files,
        "documents": summary.documents, "sentences": summary.sentences,
        "tokens": summary.tokens, "seconds": round(summary.seconds, 2),
        "tokens_per_second": round(summary.tokens_per_second),
        "baseline_rss_bytes": baseline, "peak_tree_rss_bytes": sampler.peak,
        "peak_tree_processes": sampler.peak_processes,
        "maxrss_self_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * kib,
        "maxrss_children_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * kib,
    }


def make_double_corpus(root: Path, corpus: Path, parts: tuple[str, ...] = CORPUS_PARTS) -> Path:
    """``root/copy{1,2}/<part>/<file>``: two copies of every file of the corpus (hard links
    where the file system allows, else copies: a symlink would be read once, its real path
    being listed already)."""
    import shutil

    for copy in ("copy1", "copy2"):
        for part in parts:
            target = root / copy / part
            target.mkdir(parents=True)
            for file in sorted((corpus / part).iterdir()):
                try:
                    os.link(file, target / file.name)
                except OSError:
                    shutil.copyfile(file, target / file.name)
    return root


def make_gz_corpus(root: Path, corpus: Path) -> Path:
    """``root/<part>/<file>.gz``: every corpus file gzip-compressed."""
    import gzip
    import shutil

    for part in CORPUS_PARTS:
        (root / part).mkdir(parents=True)
        for file in sorted((corpus / part).iterdir()):
            with open(file, "rb") as src, gzip.open(root / part / f"{file.name}.gz", "wb", 6) as dst:
                shutil.copyfileobj(src, dst)
    return root


def make_parquet_corpus(root: Path, corpus: Path) -> Path:
    """``root/all/corpus.parquet``: the corpus's documents, one row each (paragraphs joined by
    blank lines), written 1,000 rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from muppets.data.readers import iter_documents

    (root / "all").mkdir(parents=True)
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(root / "all" / "corpus.parquet", schema) as writer:
        batch: list[str] = []
        for doc in iter_documents([corpus / p for p in CORPUS_PARTS]):
            batch.append("\n\n".join(doc.paragraphs))
            if len(batch) == 1000:
                writer.write_table(pa.table({"text": batch}, schema=schema))
                batch = []
        writer.write_table(pa.table({"text": batch}, schema=schema))
    return root


def format_cases(fmt: str, tmp: Path, workers: int) -> list[dict]:
    """The 1x and 2x cases of one input format (``text``, ``gz`` or ``parquet``)."""
    corpus, parts = data_dir() / "english-corpus", CORPUS_PARTS
    if fmt == "gz":
        corpus = make_gz_corpus(tmp / "gz", corpus)
    elif fmt == "parquet":
        corpus, parts = make_parquet_corpus(tmp / "parquet", corpus), ("all",)
    double = make_double_corpus(tmp / f"{fmt}-x2", corpus, parts)
    suffix = "" if fmt == "text" else f"_{fmt}"
    return [measure(f"corpus_1x{suffix}", [corpus / p for p in parts], workers),
            measure(f"corpus_2x{suffix}", [double], workers)]


def measure(name: str, inputs: list[Path], workers: int) -> dict:
    """Run one case in a fresh interpreter (so getrusage is per case) and read its JSON."""
    with tempfile.NamedTemporaryFile(suffix=".json") as result:
        cmd = [sys.executable, __file__, "--case", name, "--workers", str(workers),
               "--result", result.name, *map(str, inputs)]
        subprocess.run(cmd, check=True)
        return json.loads(Path(result.name).read_text())


def print_table(rows: list[dict]) -> None:
    mb = 1024 * 1024
    print(f"{'case':<18}{'input MB':>9}{'docs':>8}{'sentences':>11}{'tokens':>12}{'seconds':>9}"
          f"{'peak RSS MB':>13}{'maxrss self':>13}{'maxrss child':>14}")
    for r in rows:
        print(f"{r['case']:<18}{r['input_bytes'] / mb:>9.1f}{r['documents']:>8}"
              f"{r['sentences']:>11}{r['tokens']:>12}{r['seconds']:>9.1f}"
              f"{r['peak_tree_rss_bytes'] / mb:>13.1f}{r['maxrss_self_bytes'] / mb:>13.1f}"
              f"{r['maxrss_children_bytes'] / mb:>14.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--formats", default="text", help="comma-separated: text, gz, parquet")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("inputs", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        args.result.write_text(json.dumps(run_case(args.case, args.inputs, args.workers)))
        return
    formats = args.formats.split(",")
    with tempfile.TemporaryDirectory(prefix="corpus-x2-") as tmp:
        rows = [row for fmt in formats for row in format_cases(fmt, Path(tmp), args.workers)]
    print_table(rows)
    ratios = {}
    for fmt, (one, two) in zip(formats, zip(rows[::2], rows[1::2])):
        ratios[fmt] = round(two["peak_tree_rss_bytes"] / one["peak_tree_rss_bytes"], 3)
        print(f"peak RSS ratio 2x/1x ({fmt}): {ratios[fmt]:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report = {"claim": "prepare_corpus peak RSS stays flat as the corpus doubles",
                  "command": f"benchmarks/prepare_memory.py --formats {args.formats} --out {args.out}",
                  "date": time.strftime("%Y-%m-%d"), "cases": rows,
                  **({"peak_rss_ratio_2x_over_1x": ratios["text"]} if formats == ["text"] else
                     {"peak_rss_ratio_2x_over_1x": ratios})}
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
