"""Run the fenced ``bash`` and ``python`` blocks of a Markdown page (the README, a tutorial of
the manual) as written, in order, at tiny settings.

A page's blocks run in one working directory, as a reader would run them one after the other (a
block may use what an earlier one wrote: ``runs/mine``, ``runs/finetune/sst2/best``). Nothing in a
command is changed; the runner only *appends* the settings that make it tiny (:data:`TINY`: a few
steps, a few examples, the smallest preset), gives the files the pages say are the user's own
(:data:`USER_BOOKS`: ``my_corpus/`` = two Project Gutenberg books from the shared data,
``sentences.txt``), and reads the recipes' large shared corpora through a small excerpt
(:data:`CORPUS`). ``muppets`` commands run in this process (``muppets.cli.main``: the same parser
and code as the console command, without a torch import per command); ``torchrun``, ``python
benchmarks/…`` and the servers run as the subprocesses they are. Only the set-up and test
commands (:data:`NOT_RUN`) are not run here: the suite itself is their test.

A block that fails names its page, line and command. Used by ``tests/test_readme.py`` and
``tests/test_docs_tutorials.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from muppets.paths import data_dir

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

# The user's own files the README's commands name: two small Gutenberg books for `my_corpus/`
# (they hold "king", "man" and "woman", which the word-vector block asks about), a few sentences.
USER_BOOKS = ("carroll_alice_in_wonderland.txt", "london_the_call_of_the_wild.txt")
SENTENCES = ["The nurse said that she was tired.", "The doctor asked the nurse to help him.",
             "Bank loans fell.\tThe river bank flooded."]

# Commands the test does not run, with the reason (only the first block's set-up and test lines).
NOT_RUN = {
    "bash scripts/setup.sh": "the environment this suite runs in is the set-up's result (.ci/run runs it)",
    ".venv/bin/python -m pytest": "this suite itself",
    "python benchmarks/": "a benchmark: hours of runs that write under the repo's runs/ and benchmarks/results/ "
                          "(BENCHMARKS.md has its figures; tests/test_benchmark_jobs.py tests its parts)",
}

# Commands that name what a later section makes (the server of the serving section for the GPT
# section's model): run after every block, as a reader who came back to them would.
POSTPONED = ("muppets serve --model runs/gpt-mini/final",)

# Settings appended to a `muppets` command to make it tiny: (command words, first positional or
# "") -> extra arguments. Overrides given later win, so these replace the recipe's sizes only.
_PRETRAIN_TINY = ["train.steps=2", "train.batch_size=4", "train.warmup_steps=0", "train.eval_every=0",
                  "train.checkpoint_every=0", "train.progress=false", "train.plot=false", "train.threads=1",
                  "train.max_minutes=0"]
TINY: dict[tuple[str, str], list[str]] = {
    # the main job: its transfer (fine-tuning final/ and a random initialisation on CoNLL-2003) at tiny sizes too
    ("pretrain", "configs/quickstart.yaml"): [*_PRETRAIN_TINY, "model.preset=bert-tiny", "tokenizer.vocab_size=2000",
                                             "data.eval_examples=8", "data.max_seq_len=64",
                                             "transfer.finetune.max_train_examples=24",
                                             "transfer.finetune.max_eval_examples=16", "transfer.finetune.epochs=1",
                                             "transfer.finetune.batch_size=8", "transfer.finetune.max_seq_len=48",
                                             "transfer.finetune.eval_every=0", "transfer.finetune.progress=false",
                                             "transfer.finetune.threads=1"],
    ("pretrain", "configs/bert-mini.yaml"): [*_PRETRAIN_TINY, "model.preset=bert-tiny", "data.eval_examples=8",
                                            "data.max_seq_len=64"],
    ("pretrain", "configs/tapt-minilm.yaml"): [*_PRETRAIN_TINY, "data.eval_examples=8", "data.max_seq_len=32"],
    ("pretrain", "configs/bert-mini-chinese.yaml"): [*_PRETRAIN_TINY, "model.preset=bert-tiny", "tokenizer.vocab_size=2000",
                                                    "data.eval_examples=8", "data.max_seq_len=64"],
    ("pretrain", "configs/gpt-mini.yaml"): [*_PRETRAIN_TINY, "model.preset=gpt-tiny", "data.block_size=32",
                                           "data.eval_blocks=8"],
    ("pretrain", "configs/elmo-small.yaml"): [*_PRETRAIN_TINY, "model.preset=elmo-tiny", "data.window=16",
                                             "data.eval_windows=8"],
    # fine-tuning: 16 training examples (two steps of 8), 8 to evaluate on each split
    ("finetune", ""): ["max_train_examples=16", "max_eval_examples=8", "epochs=1", "batch_size=8", "max_seq_len=48",
                       "progress=false", "threads=1"],
    ("evaluate", ""): ["max_eval_examples=8", "max_seq_len=48"],
    ("multitask", ""): ["steps=2", "finetune_epochs=1", "finetune.max_train_examples=16", "finetune.batch_size=8",
                        "finetune.max_eval_examples=8", "finetune.max_seq_len=48", "finetune.progress=false"],
    ("probe", ""): ["--max-train-sentences", "16", "--max-eval-sentences", "8", "--epochs", "1", "--threads", "1"],
    ("word2vec train", ""): ["word2vec.epochs=1", "word2vec.workers=1", "word2vec.vector_size=16",
                            "word2vec.backend=eager"],  # torch.compile of the kernel: tests/test_word2vec.py
    ("nnlm train", ""): ["model.preset=nnlm-tiny", *_PRETRAIN_TINY],
    ("generate", ""): ["--max-new-tokens", "4"],
    ("zeroshot", ""): ["--threads", "1"],
    # docs/tutorials/continued-pretraining.md and multilingual.md (pretrain-bert.md and
    # chinese-ernie.md use the entries above)
    ("pretrain", "configs/dapt-minilm.yaml"): [*_PRETRAIN_TINY, "data.eval_examples=8", "data.max_seq_len=32"],
    ("pretrain", "configs/bert-mini-multilingual.yaml"): [*_PRETRAIN_TINY, "model.preset=bert-tiny",
                                                         "tokenizer.vocab_size=2000", "data.eval_examples=10",
                                                         "data.max_seq_len=64"],
    # docs/tutorials/feature-based.md (finetune.md and multitask.md use the entries above)
    ("features", ""): ["max_train_examples=16", "max_eval_examples=8", "epochs=1", "batch_size=8",
                       "embed_batch_size=8", "progress=false", "threads=1"],
    ("embed", ""): ["--threads", "1"],
    # docs/tutorials/serve-export.md: an int8 export scores the first 8 dev examples (float32 and int8)
    ("export onnx", ""): ["--max-eval-examples", "8"],
    # docs/tutorials/distill-quantize.md: a student of 24 training sentences and 16 unlabeled ones, one epoch
    ("distill", ""): ["max_unlabeled=16", "train.max_train_examples=24", "train.max_eval_examples=16", "train.epochs=1",
                      "train.batch_size=8", "train.progress=false", "train.threads=1"],
}
# Option values lowered in place (the README's --limit 1000 would score 1,000 items).
SMALLER = {"--limit": "4", "--pretrain-steps": "2"}

# The recipes' shared corpora, read through a small excerpt (file name -> first N bytes) for the
# test: the full ones take minutes to prepare.
CORPUS = {
    "data:english-corpus/books": "my_corpus/",
    "data:english-corpus/wiki": "wiki_excerpt/",
    "data:chinese/corpus": "zh_corpus/",
}
EXCERPT_CHARS = {"wiki_excerpt": 150_000, "zh_corpus": 20_000}


@dataclass
class Block:
    source: Path  # the Markdown page
    line: int  # its line of the opening fence
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}"


def markdown_blocks(page: Path) -> list[Block]:
    """The fenced ``bash`` and ``python`` blocks of a Markdown page, in order."""
    blocks, lang, start, lines = [], None, 0, []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and lang is None:
            lang, start, lines = fence.group(1) or "text", number, []
        elif fence:
            if lang in ("bash", "python"):
                blocks.append(Block(page, start, lang, "\n".join(lines)))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def bash_commands(text: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments dropped, ``&&`` split."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        command = []
        for word in words + ["&&"]:
            if word == "&&":
                if command:
                    commands.append(shlex.join(command))
                command = []
            else:
                command.append(word)
    return commands


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Workdir:
    """The directory a page's commands run in, with the user's files and the repo's configs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        for name in ("configs", "examples", "benchmarks"):
            (path / name).symlink_to(ROOT / name)
        books = path / "my_corpus"
        books.mkdir()
        for name in USER_BOOKS:
            shutil.copy(data_dir() / "english-corpus" / "books" / name, books / name)
        for name, shared in (("wiki_excerpt", "english-corpus/wiki"), ("zh_corpus", "chinese/corpus")):
            source = sorted((data_dir() / shared).glob("*.txt"))[0]
            text = source.read_text(encoding="utf-8")[: EXCERPT_CHARS[name]]
            (path / name).mkdir()  # whole WikiExtractor <doc>s only
            (path / name / source.name).write_text(text[: text.rfind("</doc>") + len("</doc>")] + "\n", encoding="utf-8")
        (path / "sentences.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
        self.env = {**os.environ, "MUPPETS_DATA": str(data_dir()), "OMP_NUM_THREADS": "1",
                    "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        self.namespace: dict = {"__name__": "page"}
        self.postponed: list[tuple[Block, str]] = []
        # Servers a page started in the background (`muppets serve … &`) for its later Python
        # blocks, and the port each page port was given here (its URLs are pointed at it).
        self.servers: list[subprocess.Popen] = []
        self.ports: dict[str, str] = {}

    def run_bash(self, block: Block) -> None:
        for command in bash_commands(block.text):
            started = time.perf_counter()
            self.run_command(block, command)
            print(f"  {time.perf_counter() - started:5.1f} s  {command[:100]}")

    def run_command(self, block: Block, command: str, *, postponed: bool = False) -> None:
        if any(re.sub(r"^([A-Z_]+=\S* )+", "", command).startswith(prefix) for prefix in NOT_RUN):
            return
        if not postponed and command.startswith(POSTPONED):
            self.postponed.append((block, command))
            return
        words = shlex.split(command)
        env_words = []
        while words and re.match(r"^[A-Z_]+=", words[0]):
            env_words.append(words.pop(0))
        if words[0] == ".venv/bin/muppets":
            words[0] = "muppets"
        words = [SMALLER.get(words[i - 1], w) if i else w for i, w in enumerate(words)]
        where = f"{block.where}: {command}"
        if words[0] == "muppets":
            self.run_muppets(words[1:], where)
        elif words[0] == "torchrun":
            args = self.tiny(words[words.index("muppets.cli") + 1:])
            self.subprocess([PYTHON, "-m", "torch.distributed.run", *words[1:words.index("muppets.cli") + 1], *args],
                            env_words, where)
        elif words[0] == "python":
            self.subprocess([PYTHON, *words[1:]], env_words, where)
        else:
            raise AssertionError(f"{where}: the test does not know how to run {words[0]!r}")

    def tiny(self, args: list[str]) -> list[str]:
        """``args`` (a ``muppets`` command without the program) with the tiny settings appended
        and the large shared corpora named through their excerpts."""
        redirect = args[args.index(">"):] if ">" in args else []
        args = args[: len(args) - len(redirect)]
        args = [self.swap_corpus(a) for a in args]
        name = " ".join(args[:2]) if args[0] in ("word2vec", "nnlm", "weak", "data", "tokenizer", "vectors",
                                                  "export") else args[0]
        positional = next((a for a in args[len(name.split()):] if not a.startswith("-") and "=" not in a), "")
        extra = TINY.get((name, positional), TINY.get((name, ""), []))
        if name == "multitask":  # each task of the recipe's list: a few training examples
            tasks = yaml.safe_load((ROOT / positional).read_text(encoding="utf-8"))["tasks"]
            extra = [*extra, *(f"tasks[{i}].max_train_examples=16" for i in range(len(tasks)))]
        if name in ("pretrain", "word2vec train", "nnlm train") and not any(
                a.startswith(("corpus.inputs=", "corpus.prepared=")) for a in args):
            extra = [*extra, self.recipe_inputs(positional)]
        return [*args, *extra, *redirect]

    def recipe_inputs(self, config: str) -> str:
        """``corpus.inputs=[…]`` naming the excerpts of the recipe's own shared corpora."""
        text = (ROOT / config).read_text(encoding="utf-8")
        found = sorted({v for k, v in CORPUS.items() if k in text})
        assert found, f"{config}: no shared corpus the test knows in its corpus.inputs"
        return f"corpus.inputs=[{','.join(found)}]"

    @staticmethod
    def swap_corpus(arg: str) -> str:
        for shared, excerpt in CORPUS.items():
            arg = arg.replace(shared, excerpt)
        return arg

    def run_muppets(self, args: list[str], where: str) -> None:
        if args[0] == "serve":
            return self.serve(self.tiny(args), where)
        from muppets.cli import main

        args = self.tiny(args)
        out = io.StringIO()
        redirect = args[args.index(">") + 1] if ">" in args else None
        if redirect:
            args = args[: args.index(">")]
        err = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(args)
        assert status == 0, f"{where}: exit status {status}\n{err.getvalue()[-3000:]}"
        if redirect:
            (self.path / redirect).write_text(out.getvalue(), encoding="utf-8")

    def serve(self, args: list[str], where: str) -> None:
        """Start the server as the README does (on a free port), wait until ``/health`` answers
        (the model is loaded), stop it. A command that ends in ``&`` (a tutorial's server, which
        its later Python blocks call) keeps running until the page ends: the page's port in those
        blocks' URLs is replaced by the free one."""
        background = args[-1] == "&"
        args = args[:-1] if background else args
        port = free_port()
        self.ports[args[args.index("--port") + 1]] = str(port)
        args[args.index("--port") + 1] = str(port)
        proc = subprocess.Popen([PYTHON, "-m", "muppets.cli", *args, "--threads", "1"], cwd=self.path,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, f"{where}: the server stopped\n{proc.stdout.read()[-3000:]}"
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                        health = json.load(r)
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"{where}: no /health within 120 s"
                    time.sleep(0.3)
            assert health, where
        finally:
            if not background or proc.poll() is not None:
                proc.terminate()
                proc.wait(timeout=60)
        if background:
            self.servers.append(proc)

    def stop_servers(self) -> None:
        for proc in self.servers:
            proc.terminate()
            proc.wait(timeout=60)
        self.servers = []

    def subprocess(self, argv: list[str], env_words: list[str], where: str) -> None:
        env = {**self.env, **dict(w.split("=", 1) for w in env_words)}
        done = subprocess.run(argv, cwd=self.path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{where}: exit status {done.returncode}\n{done.stderr[-3000:]}"

    def run_python(self, block: Block) -> None:
        text = block.text
        for page_port, port in self.ports.items():  # http://localhost:8000/… -> this run's server
            text = re.sub(rf"(localhost|127\.0\.0\.1):{page_port}\b", rf"\g<1>:{port}", text)
        code = compile(PRELUDE.get(text.splitlines()[0], "") + text, block.where, "exec")
        exec(code, self.namespace)  # noqa: S102 - the README's own example code


# What a Python block assumes the reader has at hand (inputs built from its own tokenizer).
PRELUDE = {
    "from muppets.interop.hf_bert import load_hf_bert": (
        "import torch\n"
        "from muppets.tokenizers import WordPieceTokenizer\n"
        "_tok = WordPieceTokenizer.load('runs/mine/final')\n"
        "input_ids = torch.tensor([[_tok.cls_id, *_tok.encode('The king is here.'), _tok.sep_id]])  # (1, T)\n"
        "token_type_ids, attention_mask = torch.zeros_like(input_ids), torch.ones_like(input_ids)\n"),
}




def run_page(blocks: list[Block], workdir: Workdir) -> list[str]:
    """Run ``blocks`` in order in ``workdir``, then the postponed commands; the time of each block."""
    timings = []
    try:
        for block in blocks:
            started = time.perf_counter()
            if block.lang == "bash":
                workdir.run_bash(block)
            else:
                workdir.run_python(block)
            timings.append(f"{block.where}: {time.perf_counter() - started:.1f} s")
        for block, command in workdir.postponed:
            workdir.run_command(block, command, postponed=True)
    finally:
        workdir.stop_servers()
    return timings
