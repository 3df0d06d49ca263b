"""The real BERT pipeline end to end, through the CLI and the recipe: raw text -> ``muppets
tokenizer train`` -> ``muppets data prepare`` -> ``muppets pretrain`` -> a Hugging Face directory.

A session fixture writes a tiny generated corpus (40 plain-text documents + a jsonl file),
trains a ~400-token WordPiece vocabulary and prepares the corpus through the CLI; every run
trains a 2-layer, 32-wide BERT on 32-token sequences for a handful of steps. Invariances
checked through the recipe: kill -9 + resume == uninterrupted run (2-node DDP == 1 process is
tests/test_multinode.py), gradient accumulation == one big batch; plus HF parity of the exported model and CLI errors.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from muppets import cli
from muppets.recipes import bert_pretrain
from muppets.train import step_losses

HERE = Path(__file__).resolve().parent
_SCRIPT = Path(sys.executable).parent / "muppets"
MUPPETS = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "muppets.cli"]

TINY = {"hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "num_layers": 2}
NO_DROPOUT = "model.overrides=" + json.dumps({**TINY, "hidden_dropout": 0.0, "attention_dropout": 0.0})


# ----------------------------------------------------------------------------- the corpus

_SUBJECTS = ["the farmer", "a young teacher", "my grandmother", "the old sailor", "every student",
             "the quiet librarian", "a curious child", "the mayor", "our neighbour",
             "the travelling musician", "a tired doctor", "the baker's daughter"]
_VERBS = ["carried", "painted", "discovered", "borrowed", "repaired", "described", "remembered",
          "followed", "admired", "photographed", "questioned", "delivered"]
_OBJECTS = ["a wooden boat", "the broken lantern", "an enormous map", "several letters",
            "the silver bicycle", "a basket of apples", "the forgotten garden", "two mysterious keys",
            "the village clock", "a handwritten recipe", "the frozen pond", "an unfinished story"]
_TAILS = ["near the river", "before sunrise", "during the storm", "after the long winter",
          "behind the railway station", "in the crowded market", "without saying a word",
          "with remarkable patience", "on a cold afternoon", "beside the lighthouse", "", ""]
_CLAUSES = ["because nobody else would", "although it was raining", "while the children slept",
            "and then everyone laughed", "so the town celebrated"]


_SYLLABLES = ["ka", "lo", "ven", "dar", "mi", "tor", "sel", "an", "ri", "bo", "quel", "est", "zu", "rha"]


def _name(rng: random.Random) -> str:
    """A made-up name or town: rare words that a 400-token vocabulary splits into ## pieces."""
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))).capitalize()


def _sentence(rng: random.Random) -> str:
    subject = _name(rng) if rng.random() < 0.4 else rng.choice(_SUBJECTS)
    tail = f"in {_name(rng)}" if rng.random() < 0.3 else rng.choice(_TAILS)
    words = [subject, rng.choice(_VERBS), rng.choice(_OBJECTS), tail]
    if rng.random() < 0.3:
        words.append(rng.choice(_CLAUSES))
    text = " ".join(w for w in words if w)
    end = rng.choice([".", ".", ".", "!", "?"]) if rng.random() < 0.3 else "."
    return text[0].upper() + text[1:] + end


def _document(rng: random.Random, lo: int = 5, hi: int = 15) -> list[str]:
    return [_sentence(rng) for _ in range(rng.randint(lo, hi))]


def write_corpus(directory: Path) -> Path:
    """``docs.txt``: 40 blank-line separated documents (hard-wrapped, 2-3 sentences a line);
    ``extra.jsonl``: 6 more documents. Deterministic."""
    rng = random.Random(2019)
    directory.mkdir(parents=True)
    blocks = []
    for _ in range(40):
        sentences = _document(rng)
        blocks.append("\n".join(" ".join(sentences[i:i + 3]) for i in range(0, len(sentences), 3)))
    (directory / "docs.txt").write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    records = [json.dumps({"id": i, "text": " ".join(_document(rng, 5, 8))}) for i in range(6)]
    (directory / "extra.jsonl").write_text("\n".join(records) + "\n", encoding="utf-8")
    return directory


# ----------------------------------------------------------------------------- helpers


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(HERE.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _muppets(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*MUPPETS, *map(str, args)], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@dataclass
class Pipeline:
    root: Path
    raw: Path  # the raw corpus directory (docs.txt + extra.jsonl)
    tokenizer: Path  # trained by `muppets tokenizer train`
    corpus: Path  # prepared by `muppets data prepare`
    config: Path  # the tiny-model YAML recipe using both
    prepare_stdout: str

    def run(self, run_dir: Path, *overrides: str) -> dict:
        """The recipe in this process (what ``muppets pretrain`` calls)."""
        cfg = bert_pretrain.load_config(self.config, [f"run_dir={run_dir}", *overrides])
        return bert_pretrain.run(cfg)


def _config(tokenizer: str, prepared: str, inputs: list[str]) -> dict:
    return {
        "model": {"preset": "bert-tiny", "overrides": dict(TINY)},
        "tokenizer": {"path": tokenizer, "vocab_size": 400},
        "corpus": {"inputs": inputs, "prepared": prepared, "workers": 1},
        "data": {"max_seq_len": 32, "masking": {"max_predictions": 5}, "eval_examples": 32,
                 "eval_fraction": 0.1},
        "train": {"batch_size": 8, "lr": 1e-3, "progress": False, "tensorboard": False,
                  "threads": 1, "log_every": 1},
        "eval_batch_size": 16,
    }


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    root = tmp_path_factory.mktemp("e2e")
    raw = write_corpus(root / "raw")
    tok, corpus = root / "tok", root / "corpus"
    proc = _ok(_muppets("tokenizer", "train", "--input", raw, "--out", tok, "--vocab-size", 400,
                        cwd=root))
    assert f"-> {tok}" in proc.stdout and (tok / "vocab.txt").is_file()
    proc = _ok(_muppets("data", "prepare", "--input", raw, "--tokenizer", tok, "--out", corpus,
                        "--workers", 1, cwd=root))
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(_config(str(tok), str(corpus), [str(raw)])), encoding="utf-8")
    return Pipeline(root, raw, tok, corpus, config, proc.stdout)


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final" / "model.safetensors"))


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _losses(run_dir: Path, steps: int) -> list[float]:
    losses = step_losses(run_dir)
    assert sorted(losses) == list(range(1, steps + 1)), f"{run_dir}: logged steps {sorted(losses)}"
    return [losses[s] for s in range(1, steps + 1)]


def _close(a: list[float], b: list[float], tol: float) -> bool:
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol


# ----------------------------------------------------------------------------- 1. the happy path


def test_prepare_summary(pipeline: Pipeline) -> None:
    out = pipeline.prepare_stdout
    assert out.startswith(f"prepared {pipeline.corpus}: 2 files, 46 documents, "), out
    assert "0 empty documents, 0 skipped files, 0 skipped lines" in out
    meta = json.loads((pipeline.corpus / "meta.json").read_text())
    assert meta["num_documents"] == 46 and meta["num_sentences"] > 46 * 5


def test_pretrain_cli_exports_a_hugging_face_model(pipeline: Pipeline) -> None:
    transformers = pytest.importorskip("transformers")
    from muppets.interop.hf_bert import load_hf_bert

    run_dir = pipeline.root / "happy"
    proc = _ok(_muppets("pretrain", pipeline.config, f"run_dir={run_dir}", "train.steps=6",
                        cwd=pipeline.root))
    assert "pretraining finished at step 6" in proc.stdout
    assert "held-out MLM accuracy" in proc.stdout and "held-out NSP accuracy" in proc.stdout
    final = run_dir / "final"
    assert f"Hugging Face model directory: {final}" in proc.stdout
    assert len(_losses(run_dir, 6)) == 6

    resolved = json.loads((run_dir / "config.json").read_text())
    assert resolved["run_dir"] == str(run_dir) and resolved["train"]["steps"] == 6
    assert resolved["model"]["preset"] == "bert-tiny" and resolved["model"]["overrides"] == TINY
    assert resolved["data"]["masking"]["max_predictions"] == 5
    assert resolved["train"]["warmup_steps"] == 0  # defaults are filled in, not only what was set
    hf_config = json.loads((final / "config.json").read_text())
    assert (hf_config["hidden_size"], hf_config["num_hidden_layers"]) == (32, 2)

    hf, info = transformers.BertForPreTraining.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    tok = transformers.AutoTokenizer.from_pretrained(final)
    text = ["The old sailor repaired the broken lantern.", "A curious child borrowed several letters!"]
    batch = tok(text[:1], text[1:], return_tensors="pt", padding=True)
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    ours_tok = WordPieceTokenizer.load(final)
    assert tok(text[0], add_special_tokens=False)["input_ids"] == ours_tok.encode(text[0])
    ours = load_hf_bert(final).eval()
    hf.eval()
    with torch.no_grad():
        a = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"].bool())
        b = hf(**batch)
    assert (a.mlm_logits - b.prediction_logits).abs().max() <= 1e-5
    assert (a.nsp_logits - b.seq_relationship_logits).abs().max() <= 1e-5


def test_recipe_trains_tokenizer_and_prepares_corpus_itself(pipeline: Pipeline) -> None:
    run_dir = pipeline.root / "self-made"
    own = ["tokenizer.path=", "corpus.prepared="]
    summary = pipeline.run(run_dir, *own, "train.steps=2")
    assert summary["step"] == 2 and summary["corpus"] == str(run_dir / "corpus")
    tok_file = run_dir / "tokenizer" / "tokenizer.json"
    # Same texts and settings as `muppets tokenizer train` / `data prepare`: same vocab and tokens.
    assert (run_dir / "tokenizer" / "vocab.txt").read_text() == (pipeline.tokenizer / "vocab.txt").read_text()
    assert (run_dir / "corpus" / "tokens.bin").read_bytes() == (pipeline.corpus / "tokens.bin").read_bytes()
    # Running again with more steps reuses both and resumes from the step-2 checkpoint.
    stamps = [tok_file.stat().st_mtime_ns, (run_dir / "corpus" / "meta.json").stat().st_mtime_ns]
    summary = pipeline.run(run_dir, *own, "train.steps=3")
    assert summary["step"] == 3
    assert stamps == [tok_file.stat().st_mtime_ns, (run_dir / "corpus" / "meta.json").stat().st_mtime_ns]
    assert len(_losses(run_dir, 3)) == 3


def _tree(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("steps", [2, 4], ids=["finished", "unfinished"])
def test_a_refused_run_destroys_nothing(pipeline: Pipeline, steps: int) -> None:
    from muppets.errors import RunDirError

    run_dir = pipeline.root / f"refused-{steps}"
    pipeline.run(run_dir, "corpus.prepared=", "train.steps=2")  # its own corpus, of the configured tokenizer
    before = _tree(run_dir)
    with pytest.raises(RunDirError, match=r"tokenizer\.path: '.*' -> ''"):  # another tokenizer: trained, then used
        pipeline.run(run_dir, "corpus.prepared=", "tokenizer.path=", f"train.steps={steps}")
    assert _tree(run_dir) == before  # neither a tokenizer trained nor the corpus prepared again


# ----------------------------------------------------------------------------- 2. kill -9 and resume

# `muppets pretrain`, slowed down (sleeping, not computing) after every step from step 4 on, so
# that the test can SIGKILL it right after the step-4 checkpoint appears, before it finishes.
_SLOW_CLI = """
import sys, time
from muppets.train.trainer import Trainer
report = Trainer._report
def slow_report(self, stats):
    report(self, stats)
    if self.step >= 4:
        time.sleep(0.5)
Trainer._report = slow_report
from muppets.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_kill_and_resume_equals_uninterrupted_run(pipeline: Pipeline) -> None:
    a, b = pipeline.root / "resume-a", pipeline.root / "resume-b"
    pipeline.run(a, "train.steps=8")  # dropout stays on (0.1): the RNG state must be restored

    args = ["pretrain", str(pipeline.config), f"run_dir={b}", "train.steps=8", "train.checkpoint_every=4"]
    ckpt = b / "checkpoints" / "step-00000004"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_CLI, *args], cwd=pipeline.root, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ckpt.is_dir() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert ckpt.is_dir(), f"run B never wrote {ckpt} (exit {proc.returncode}):\n{stderr[-3000:]}"
    assert proc.returncode == -signal.SIGKILL, (
        f"run B ended by itself (exit {proc.returncode}) before it could be killed: the test "
        f"would not exercise resume\n{stderr[-3000:]}")
    assert not (b / "final").exists() and not (b / "checkpoints" / "step-00000008").exists()
    assert max(step_losses(b)) < 8

    resumed = _ok(_muppets(*args, cwd=pipeline.root))
    assert f"resumed from {ckpt} at step 4" in resumed.stderr
    assert "pretraining finished at step 8" in resumed.stdout
    assert _close(_losses(a, 8), _losses(b, 8), 1e-6), (_losses(a, 8), _losses(b, 8))
    assert _max_diff(_weights(a), _weights(b)) <= 1e-6


def test_sigterm_exports_the_model_so_far_marked_interrupted_and_the_same_command_resumes(pipeline: Pipeline) -> None:
    """A signal still exports ``final/`` (the model so far is of use), but ``summary.json`` says
    ``interrupted`` so that no script takes it for a finished run; the same command resumes."""
    run = pipeline.root / "sigterm"
    args = ["pretrain", str(pipeline.config), f"run_dir={run}", "train.steps=8", "train.checkpoint_every=4"]
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_CLI, *args], cwd=pipeline.root, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (run / "checkpoints" / "step-00000004").is_dir() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr[-3000:]  # `pretrain && finetune` does not go on with a partial model
    stopped = json.loads((run / "summary.json").read_text())
    assert stopped["interrupted"] and stopped["stopped_early"] and 4 <= stopped["step"] < 8
    assert f"pretraining stopped by a signal at step {stopped['step']}" in stdout
    assert (run / "final" / "config.json").is_file()

    resumed = _ok(_muppets(*args, cwd=pipeline.root))
    assert f"at step {stopped['step']}" in resumed.stderr and "pretraining finished at step 8" in resumed.stdout
    done = json.loads((run / "summary.json").read_text())
    assert done["step"] == 8 and not done["interrupted"] and not done["stopped_early"]


# ----------------------------------------------------------------------------- 3. DDP


# Two processes equal one: tests/test_multinode.py, across two network namespaces (BERT MLM-only
# and MLM+NSP, GPT, fine-tuning, an elastic restart); tests/test_trainer.py on one machine.


# ----------------------------------------------------------------------------- 4. accumulation


def test_accumulation_through_the_recipe_equals_one_big_batch(pipeline: Pipeline) -> None:
    acc, big = pipeline.root / "acc4", pipeline.root / "acc1"
    pipeline.run(acc, "train.steps=2", "train.accumulation=4", NO_DROPOUT)
    pipeline.run(big, "train.steps=2", "train.accumulation=1", NO_DROPOUT)
    assert _close(_losses(acc, 2), _losses(big, 2), 1e-6), (_losses(acc, 2), _losses(big, 2))
    assert _max_diff(_weights(acc), _weights(big)) <= 1e-6



def test_an_untied_decoder_pretrains_exports_and_fine_tunes_from_the_export(pipeline: Pipeline) -> None:
    from muppets.interop.hf_bert import load_hf_bert
    from muppets.tokenizers.wordpiece import WordPieceTokenizer
    from muppets.transfer.models import new_task_model

    run_dir = pipeline.root / "untied"
    overrides = "model.overrides=" + json.dumps({**TINY, "tie_word_embeddings": False})
    pipeline.run(run_dir, "train.steps=3", overrides)
    final = run_dir / "final"
    assert json.loads((final / "config.json").read_text())["tie_word_embeddings"] is False
    model = load_hf_bert(final)
    assert model.mlm.decoder is not None
    weights = _weights(run_dir)
    assert not torch.equal(weights["cls.predictions.decoder.weight"], weights["bert.embeddings.word_embeddings.weight"])
    task = new_task_model(final, "classify", 2, WordPieceTokenizer.load(final))  # the backbone alone, as fine-tuning takes it
    assert torch.equal(task.backbone.embeddings.tokens.weight, model.backbone.embeddings.tokens.weight)

# ----------------------------------------------------------------------------- 5. CLI errors


def test_unknown_override_key_exits_2_and_lists_valid_keys(pipeline: Pipeline) -> None:
    proc = _muppets("pretrain", pipeline.config, "train.stepz=3", cwd=pipeline.root)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "train.stepz" in proc.stderr and "valid keys" in proc.stderr
    assert "steps" in proc.stderr and "batch_size" in proc.stderr and "Traceback" not in proc.stderr


def test_wrong_type_and_bad_config_file_name_key_and_value(pipeline: Pipeline, capsys) -> None:
    assert cli.main(["pretrain", str(pipeline.config), "train.steps=abc"]) == 2
    err = capsys.readouterr().err
    assert "train.steps" in err and "'abc'" in err
    bad = pipeline.root / "bad.yaml"
    bad.write_text("model:\n  presett: bert-tiny\n", encoding="utf-8")
    assert cli.main(["pretrain", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "model.presett" in err and "preset" in err and "valid keys" in err


def test_data_prepare_errors_name_the_file_line_and_path(pipeline: Pipeline, capsys) -> None:
    bad = pipeline.root / "latin1.txt"
    bad.write_bytes(b"A fine first line.\n\nAnother line.\nThe caf\xe9 was closed.\n")
    out = pipeline.root / "bad-corpus"
    code = cli.main(["data", "prepare", "--input", str(bad), "--tokenizer", str(pipeline.tokenizer),
                     "--out", str(out), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}:4" in err and "UTF-8" in err, err
    assert not out.exists()
    missing = pipeline.root / "no-such-dir" / "corpus.txt"
    code = cli.main(["data", "prepare", "--input", str(missing), "--tokenizer", str(pipeline.tokenizer),
                     "--out", str(out), "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and str(missing) in err and "no such file" in err, err
    # The recipe names a missing corpus input too (here while training its own tokenizer).
    code = cli.main(["pretrain", str(pipeline.config), f"run_dir={pipeline.root / 'missing-run'}",
                     "tokenizer.path=", f"corpus.inputs=[{missing}]"])
    err = capsys.readouterr().err
    assert code == 2 and str(missing) in err, err


# ----------------------------------------------------------------------------- 6. whole-word masking


def _split_words(data, steps: int = 10) -> tuple[int, int]:
    """Over the first ``steps`` batches: (multi-piece words with a masked piece, such words
    only partly masked). [SEP] ends a word: truncation may cut a segment's first word."""
    from muppets.objectives.mlm import IGNORE

    cont, special = data.is_continuation, set(data.special.all)
    words = partial = 0
    for step in range(steps):
        (batch,) = data.micro_batches(step, 0, 1)
        for ids, pos, lab in zip(batch["input_ids"], batch["mlm_positions"], batch["mlm_labels"]):
            original, masked = ids.clone(), torch.zeros(len(ids), dtype=torch.bool)
            keep = lab != IGNORE
            original[pos[keep]], masked[pos[keep]] = lab[keep], True
            word = [0]  # word index of every position
            for t in range(1, len(ids)):
                joins = bool(cont[int(original[t])]) and int(original[t - 1]) not in special
                word.append(word[-1] if joins else word[-1] + 1)
            word = torch.tensor(word)
            for w in word[masked].unique():
                pieces = word == w
                if pieces.sum() > 1:
                    words += 1
                    partial += int(not masked[pieces].all())
    return words, partial


def test_pretrain_dropout_trains_without_and_exports_the_models_own(pipeline: Pipeline) -> None:
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    tok = WordPieceTokenizer.load(pipeline.tokenizer)
    cfg = bert_pretrain.load_config(pipeline.config, ["model.pretrain_dropout=0.0",
                                                      "model.overrides={hidden_dropout: 0.2, attention_dropout: 0.3}"])
    trained = bert_pretrain.build_model(cfg, tok).cfg
    assert (trained.hidden_dropout, trained.attention_dropout) == (0.0, 0.0)
    assert bert_pretrain.export_dropout(cfg) == (0.2, 0.3)  # the architecture's, for fine-tuning
    assert bert_pretrain.export_dropout(bert_pretrain.load_config(pipeline.config, [])) is None
    init = bert_pretrain.load_config(None, ["model.init_from=minilm", "model.pretrain_dropout=0.0"])
    assert bert_pretrain.export_dropout(init) == (0.1, 0.1)  # all-MiniLM-L6-v2's config.json

    run_dir = pipeline.root / "nodrop"
    pipeline.run(run_dir, "train.steps=2", "model.pretrain_dropout=0.0")
    exported = json.loads((run_dir / "final" / "config.json").read_text())
    own = bert_pretrain.BertConfig.preset("bert-tiny", **TINY)
    assert (exported["hidden_dropout_prob"], exported["attention_probs_dropout_prob"]) == (
        own.hidden_dropout, own.attention_dropout)
    with pytest.raises(Exception, match="pretrain_dropout"):
        bert_pretrain.load_config(pipeline.config, ["model.pretrain_dropout=1.0"])


def test_whole_word_masking_run(pipeline: Pipeline) -> None:
    from muppets.data.shards import TokenCorpus
    from muppets.objectives.mlm_nsp import BertPretrainingData
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    run_dir = pipeline.root / "wwm"
    summary = pipeline.run(run_dir, "train.steps=2", "data.masking.whole_word=true")
    assert summary["step"] == 2 and all(np.isfinite(_losses(run_dir, 2)))
    assert json.loads((run_dir / "config.json").read_text())["data"]["masking"]["whole_word"] is True

    # The corpus has multi-piece words, and the recipe's batches mask them whole (token-level
    # masking, the contrast, cuts some of them).
    tok, corpus = WordPieceTokenizer.load(pipeline.tokenizer), TokenCorpus(pipeline.corpus)
    assert tok.is_continuation[np.asarray(corpus.tokens)].mean() > 0.05
    for whole_word in (True, False):
        cfg = bert_pretrain.load_config(pipeline.config, [f"data.masking.whole_word={whole_word}"])
        data = BertPretrainingData(corpus, bert_pretrain.special_ids(tok), cfg.data, 8, 1, 0,
                                   tok.is_continuation)
        words, partial = _split_words(data)
        assert words > 5 and (partial == 0) == whole_word, (whole_word, words, partial)
