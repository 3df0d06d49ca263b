"""Claim: training memory stays flat as the corpus grows (peak RSS ratio 2x/1x <= 1.1).

Runs three training commands for a few steps each, on a corpus prepared from the shared English
corpus (books + wiki, what the configs train on) and on one prepared from two copies of it:

* ``muppets pretrain configs/gpt-mini.yaml``  (GPT-2 BPE; ``train.steps`` steps, final eval,
  HF export and the unigram baseline included)
* ``muppets pretrain configs/bert-mini.yaml`` (with ``tokenizer.path`` = BERT-base-uncased's
  vocabulary instead of training a WordPiece, so that no tokenizer is trained in the run)
* ``muppets word2vec train configs/word2vec-sg.yaml`` (its 2 Hogwild worker processes; one epoch
  cut by ``word2vec.max_minutes``; the 2x run uses ``min_count`` 10, so that it trains exactly the
  words and matrices of the 1x run: every count doubles)

The corpora (and word2vec's word vocabulary, counted once on the 1x text) are prepared first,
outside the measurement, into ``--work`` (default ``/tmp/train-memory``; reused by later runs).
Each command runs as a fresh process; a thread samples, every 50 ms, the summed VmRSS of it and
all its descendants and keeps the largest sum (``peak_tree_rss``), and likewise the summed
RssAnon (``peak_tree_anon``: heap memory, without file pages such as the memory-mapped corpus
or shared libraries). VmRSS counts pages shared by several processes (the Hogwild matrices, the
mapped corpus) once per process, so it over-states the real footprint, equally in both cases.
``ru_maxrss`` of the command (largest single process of its tree) comes from ``wait4``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_memory.py --out benchmarks/results/train_memory.json

``--pythonpath DIR`` runs the commands on another source tree (e.g. ``git archive HEAD src``
extracted to /tmp, to measure the code before a change).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from muppets.paths import data_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prepare_memory import _descendants  # noqa: E402  (the process-tree walk, shared)

REPO = Path(__file__).resolve().parent.parent
CORPUS_PARTS = ("books", "wiki")  # the configs' corpus.inputs
KINDS = ("gpt", "bert", "word2vec")
MB = 1024 * 1024


class TreeMemorySampler(threading.Thread):
    """Sample the summed VmRSS and RssAnon (bytes) of a process and its descendants; keep peaks."""

    def __init__(self, root: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peak_rss = self.peak_anon = self.peak_processes = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            pids = _descendants(self.root) | {self.root}
            rss = anon = 0
            for pid in pids:
                status = _status(pid)
                rss, anon = rss + status.get("VmRSS", 0), anon + status.get("RssAnon", 0)
            if rss > self.peak_rss:
                self.peak_rss, self.peak_processes = rss, len(pids)
            self.peak_anon = max(self.peak_anon, anon)
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _status(pid: int) -> dict[str, int]:
    """VmRSS and RssAnon of ``pid`` in bytes ({} when it is gone)."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "RssAnon"):
                out[key] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


# ----------------------------------------------------------------------------- preparing


def corpus_inputs(work: Path, copies: int) -> list[Path]:
    """The shared corpus parts, or ``work/x2/copy{1,2}/<part>/<file>`` symlinks to each file."""
    corpus = data_dir() / "english-corpus"
    if copies == 1:
        return [corpus / p for p in CORPUS_PARTS]
    root = work / "x2"
    if not root.is_dir():
        for copy in ("copy1", "copy2"):
            for part in CORPUS_PARTS:
                (root / copy / part).mkdir(parents=True)
                for file in sorted((corpus / part).iterdir()):
                    (root / copy / part / file.name).symlink_to(file)
    return [root]


def tokenizer(kind: str, work: Path):
    """The tokenizer each recipe encodes the corpus with under the overrides of :func:`command`."""
    if kind == "gpt":
        from muppets.recipes.gpt_pretrain import corpus_tokenizer
        from muppets.tokenizers.bpe import ByteLevelBPETokenizer
        return corpus_tokenizer(ByteLevelBPETokenizer.load(data_dir() / "vocab/gpt2"))
    if kind == "bert":
        from muppets.tokenizers.wordpiece import WordPieceTokenizer
        return WordPieceTokenizer.from_vocab(data_dir() / "vocab/bert-base-uncased/vocab.txt",
                                             lowercase=True)
    from muppets.recipes.common import CorpusSection
    from muppets.recipes.word_vocab import WordVocabSection, ensure_word_vocab
    from muppets.tokenizers.words import WordVocab
    ensure_word_vocab(WordVocabSection(min_count=1, lowercase=True),  # configs/word2vec-sg.yaml's
                      CorpusSection(inputs=[str(p) for p in corpus_inputs(work, 1)]), work / "w2v")
    return WordVocab.load(work / "w2v" / "vocab")


def prepare(kind: str, copies: int, work: Path) -> Path:
    """``work/<kind>-<copies>x/corpus``, prepared unless it exists."""
    from muppets.data.prepare import prepare_corpus
    out = work / f"{kind}-{copies}x" / "corpus"
    if not (out / "meta.json").is_file():
        print(f"preparing {out}", flush=True)
        prepare_corpus(corpus_inputs(work, copies), tokenizer(kind, work), out, workers=2,
                       progress=False, overwrite=True)
    return out


# ----------------------------------------------------------------------------- measuring


def command(kind: str, copies: int, corpus: Path, run_dir: Path, steps: int, w2v_minutes: float,
            work: Path) -> list[str]:
    muppets = str(Path(sys.executable).parent / "muppets")
    common = [f"run_dir={run_dir}", f"corpus.prepared={corpus}"]
    train = [f"train.steps={steps}", "train.eval_every=0", "train.checkpoint_every=0",
             "train.progress=false", "train.tensorboard=false", "train.threads=1", "device=cpu"]
    if kind == "gpt":
        return [muppets, "pretrain", "--fresh", "configs/gpt-mini.yaml", *common, *train]
    if kind == "bert":
        return [muppets, "pretrain", "--fresh", "configs/bert-mini.yaml", *common, *train,
                "tokenizer.path=data:vocab/bert-base-uncased/vocab.txt"]
    return [muppets, "word2vec", "train", "--fresh", "configs/word2vec-sg.yaml", *common,
            f"vocab.path={work / 'w2v' / 'vocab'}", "word2vec.epochs=1",
            f"word2vec.max_minutes={w2v_minutes}", f"word2vec.min_count={5 * copies}", "evaluate=false"]


def measure(kind: str, copies: int, args: argparse.Namespace) -> dict:
    """Run one command in a fresh process while sampling its tree; return the measurements."""
    corpus = prepare(kind, copies, args.work)
    meta_before = (corpus / "meta.json").read_text()
    run_dir = args.work / "runs" / f"{kind}-{copies}x"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = command(kind, copies, corpus, run_dir, args.steps, args.w2v_minutes, args.work)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if args.pythonpath:
        env["PYTHONPATH"] = str(args.pythonpath)
    print(f"{kind} {copies}x: {' '.join(cmd)}", flush=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(run_dir.parent / f"{kind}-{copies}x.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)
        sampler = TreeMemorySampler(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    sampler.stop()
    if proc.returncode != 0:
        raise SystemExit(f"{kind} {copies}x failed ({proc.returncode}): see {run_dir.parent}/{kind}-{copies}x.log")
    if (corpus / "meta.json").read_text() != meta_before:
        raise SystemExit(f"{kind} {copies}x prepared its corpus again: the measurement is void")
    meta = json.loads(meta_before)
    return {"kind": kind, "copies": copies, "command": " ".join(cmd[1:]),
            "corpus_tokens": meta["num_tokens"], "corpus_documents": meta["num_documents"],
            "corpus_sentences": meta["num_sentences"], "token_dtype": meta["dtype"],
            "seconds": round(time.perf_counter() - started, 1),
            "peak_tree_rss_bytes": sampler.peak_rss, "peak_tree_anon_bytes": sampler.peak_anon,
            "peak_tree_processes": sampler.peak_processes,
            "maxrss_bytes": usage.ru_maxrss * 1024}  # KiB on Linux


def summarize(rows: list[dict]) -> list[dict]:
    """Per kind: 2x/1x ratios of the peaks and the growth in MB."""
    out = []
    for kind in dict.fromkeys(r["kind"] for r in rows):
        one, two = (next(r for r in rows if r["kind"] == kind and r["copies"] == c) for c in (1, 2))
        out.append({"kind": kind,
                    "rss_ratio": round(two["peak_tree_rss_bytes"] / one["peak_tree_rss_bytes"], 3),
                    "rss_growth_mb": round((two["peak_tree_rss_bytes"] - one["peak_tree_rss_bytes"]) / MB, 1),
                    "anon_ratio": round(two["peak_tree_anon_bytes"] / one["peak_tree_anon_bytes"], 3),
                    "anon_growth_mb": round((two["peak_tree_anon_bytes"] - one["peak_tree_anon_bytes"]) / MB, 1),
                    "maxrss_ratio": round(two["maxrss_bytes"] / one["maxrss_bytes"], 3)})
    return out


def print_table(rows: list[dict], ratios: list[dict]) -> None:
    print(f"{'case':<13}{'tokens':>12}{'seconds':>9}{'peak RSS MB':>13}{'peak anon MB':>14}"
          f"{'maxrss MB':>11}{'procs':>7}")
    for r in rows:
        print(f"{r['kind'] + ' ' + str(r['copies']) + 'x':<13}{r['corpus_tokens']:>12}{r['seconds']:>9.1f}"
              f"{r['peak_tree_rss_bytes'] / MB:>13.1f}{r['peak_tree_anon_bytes'] / MB:>14.1f}"
              f"{r['maxrss_bytes'] / MB:>11.1f}{r['peak_tree_processes']:>7}")
    for s in ratios:
        print(f"{s['kind']:<9} peak RSS 2x/1x {s['rss_ratio']:.3f} ({s['rss_growth_mb']:+.1f} MB), "
              f"anon {s['anon_ratio']:.3f} ({s['anon_growth_mb']:+.1f} MB), maxrss {s['maxrss_ratio']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--work", type=Path, default=Path("/tmp/train-memory"),
                        help="prepared corpora and run directories (reused; never in the repo)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset of " + ",".join(KINDS))
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps of the GPT and BERT runs")
    parser.add_argument("--w2v-minutes", type=float, default=0.1, help="word2vec's training budget")
    parser.add_argument("--pythonpath", type=Path, help="run the commands on this source tree")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    rows = [measure(kind, copies, args) for kind in kinds for copies in (1, 2)]
    ratios = summarize(rows)
    print_table(rows, ratios)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report = {"claim": "training peak RSS stays flat as the corpus doubles (ratio <= 1.1)",
                  "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
                  "source": str(args.pythonpath or "this tree"), "date": time.strftime("%Y-%m-%d %H:%M"),
                  "cases": rows, "ratios": ratios}
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
