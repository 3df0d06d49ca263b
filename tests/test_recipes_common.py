"""What every pretraining recipe shares (muppets.recipes.common, muppets.recipes.pretraining):
the corpus stage never overwrites a directory the user named, only the run's own
``<run_dir>/corpus`` (also when it was prepared before special-token strings were text); the
held-out batches are built once; under DDP rank 0 prepares first, and its failure stops the
other ranks too."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

import pytest
import torch
import yaml

from muppets.data.prepare import SPECIALS_AS_TEXT
from muppets.data.shards import tokenizer_fingerprint
from muppets.errors import ConfigError, DataError, MuppetsError
from muppets.objectives.mlm_nsp import BertPretrainingData, PretrainDataConfig, SpecialIds
from muppets.recipes import bert_pretrain
from muppets.recipes.common import CorpusSection, prepare_once, rank_zero_first
from muppets.train.distributed import shutdown_distributed
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.tokenizers.words import WordVocab

from _tiny_corpora import random_corpus

TEXT = "The cat sat on the mat. A dog ran far away.\n\nThe Dog came back. The cat did not.\n"


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture()
def raw(tmp_path: Path) -> Path:
    path = tmp_path / "raw.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def _vocabs() -> tuple[WordVocab, WordVocab]:
    return WordVocab.build([TEXT], min_count=1), WordVocab.build([TEXT], min_count=1, lowercase=False)


def test_a_named_corpus_of_another_tokenizer_is_an_error_not_overwritten(tmp_path: Path, raw: Path) -> None:
    first, second = _vocabs()
    named = tmp_path / "shared-corpus"
    sec = CorpusSection(inputs=[str(raw)], prepared=str(named), workers=1)
    prepare_once(sec, first, tmp_path / "run-a")
    before = _files(named)
    with pytest.raises(ConfigError) as err:
        prepare_once(sec, second, tmp_path / "run-b")
    message = str(err.value)
    assert str(named) in message and "corpus.prepared" in message
    assert tokenizer_fingerprint(first.to_json()) in message
    assert tokenizer_fingerprint(second.to_json()) in message
    assert _files(named) == before  # untouched
    assert prepare_once(sec, first, tmp_path / "run-c").directory == named  # still reused


@pytest.mark.parametrize("named", [False, True])
def test_a_corpus_prepared_from_other_inputs_is_an_error_not_reused(tmp_path: Path, raw: Path, named: bool) -> None:
    other = tmp_path / "other.txt"
    other.write_text("A wholly different text.\n", encoding="utf-8")
    prepared = str(tmp_path / "shared-corpus") if named else ""
    out = tmp_path / "shared-corpus" if named else tmp_path / "run" / "corpus"
    vocab = _vocabs()[0]
    prepare_once(CorpusSection(inputs=[str(raw)], prepared=prepared, workers=1), vocab, tmp_path / "run")
    before = _files(out)
    with pytest.raises(ConfigError, match="was prepared from .*raw.txt.* but corpus.inputs names .*other.txt"):
        prepare_once(CorpusSection(inputs=[str(other)], prepared=prepared, workers=1), vocab, tmp_path / "run")
    assert _files(out) == before  # untouched
    same = CorpusSection(inputs=[str(tmp_path / "." / "raw.txt")], prepared=prepared, workers=1)
    assert prepare_once(same, vocab, tmp_path / "run").directory == out  # the same file, spelled otherwise


def test_a_relative_input_is_recorded_resolved(tmp_path: Path, monkeypatch) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    for folder, text in ((here, TEXT), (there, "A wholly different text.\n")):
        folder.mkdir()
        (folder / "raw.txt").write_text(text, encoding="utf-8")
    vocab, run = _vocabs()[0], tmp_path / "run"
    monkeypatch.chdir(here)
    prepare_once(CorpusSection(inputs=["raw.txt"], workers=1), vocab, run)
    meta = json.loads((run / "corpus" / "meta.json").read_text())
    assert meta["sources"] == [str(here / "raw.txt")]
    assert [f["path"] for f in meta["source_files"]] == [str(here / "raw.txt")]
    before = _files(run / "corpus")
    monkeypatch.chdir(there)  # the same relative name is another file here
    moved = f"prepared from .*'{here / 'raw.txt'}'.*but corpus.inputs names .*'{there / 'raw.txt'}'"
    with pytest.raises(ConfigError, match=moved):
        prepare_once(CorpusSection(inputs=["raw.txt"], workers=1), vocab, run)
    assert _files(run / "corpus") == before
    named = CorpusSection(inputs=[str(here / "raw.txt")], workers=1)  # the original file, named absolutely
    assert prepare_once(named, vocab, run).directory == run / "corpus"


def test_an_edited_input_is_an_error_not_reused(tmp_path: Path) -> None:
    vocab, run, folder = _vocabs()[0], tmp_path / "run", tmp_path / "in"
    folder.mkdir()
    raw = folder / "raw.txt"
    raw.write_text(TEXT, encoding="utf-8")
    sec = CorpusSection(inputs=[str(folder)], workers=1)
    prepare_once(sec, vocab, run)
    before = _files(run / "corpus")
    mtime = raw.stat().st_mtime_ns
    raw.write_text(TEXT + "One more line was added.\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"was prepared from {raw}, which changed since"):
        prepare_once(sec, vocab, run)
    raw.write_text(TEXT, encoding="utf-8")
    os.utime(raw, ns=(mtime, mtime))  # as it was; but a file was added
    assert prepare_once(sec, vocab, run).directory == run / "corpus"
    (folder / "more.txt").write_text("A new file.\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"prepared without .*{folder / 'more.txt'}.*, which the inputs now hold"):
        prepare_once(sec, vocab, run)
    assert _files(run / "corpus") == before


def test_an_older_meta_without_source_files_is_reused(tmp_path: Path, raw: Path) -> None:
    vocab, run = _vocabs()[0], tmp_path / "run"
    sec = CorpusSection(inputs=[str(raw)], workers=1)
    prepare_once(sec, vocab, run)
    meta_path = run / "corpus" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["source_files"]
    meta_path.write_text(json.dumps(meta))
    raw.write_text(TEXT + "Edited.\n", encoding="utf-8")  # not recorded: not checked
    assert prepare_once(sec, vocab, run).directory == run / "corpus"


class _CountTok:
    """A stand-in tokenizer: what it saves is its size."""

    def __init__(self, size: int) -> None:
        self.size = size

    def save(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "tokenizer.json").write_text(str(self.size))

    @staticmethod
    def load(out: Path) -> "_CountTok":
        return _CountTok(int((out / "tokenizer.json").read_text()))


def test_the_runs_tokenizer_is_not_reused_with_other_settings(tmp_path: Path, caplog) -> None:
    from muppets.errors import RunDirError
    from muppets.recipes.common import TokenizerSection, tokenizer_stage

    run = tmp_path / "run"
    assert tokenizer_stage(TokenizerSection(vocab_size=100), run, _CountTok.load, lambda: _CountTok(100)).size == 100
    assert tokenizer_stage(TokenizerSection(vocab_size=100), run, _CountTok.load, lambda: _CountTok(7)).size == 100
    for sec, shown in ((TokenizerSection(vocab_size=200), "tokenizer.vocab_size: 100 -> 200"),
                       (TokenizerSection(vocab_size=100, min_frequency=5), "tokenizer.min_frequency: 2 -> 5")):
        with pytest.raises(RunDirError, match=f"{run / 'tokenizer'} was trained with other settings .*{shown}"):
            tokenizer_stage(sec, run, _CountTok.load, lambda: _CountTok(200))
    assert (run / "tokenizer" / "tokenizer.json").read_text() == "100"
    (run / "tokenizer" / "build.json").unlink()  # trained by an older muppets: reused, with a warning
    assert tokenizer_stage(TokenizerSection(vocab_size=200), run, _CountTok.load, lambda: _CountTok(200)).size == 100
    assert "records no settings" in caplog.text


_HOLD = """
import sys, time
from muppets.train.rundir import run_lock
with run_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_one_run_at_a_time_in_a_run_directory(tmp_path: Path) -> None:
    import subprocess
    import sys

    from muppets.errors import RunDirError
    from muppets.train.rundir import LOCK_FILE, run_lock

    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    other = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert other.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirError, match=f"{run} is in use by another run \\(process {other.pid} "):
            with run_lock(run):
                pass
    finally:
        other.kill()  # SIGKILL: its lock file stays, but the lock went with the process
        other.wait()
    assert (run / LOCK_FILE).exists()
    with run_lock(run):
        with run_lock(run):  # held once by one process: nested holds take nothing more
            pass
        assert (run / LOCK_FILE).exists()
    assert not (run / LOCK_FILE).exists()


def test_a_named_directory_that_is_no_corpus_is_an_error(tmp_path: Path, raw: Path) -> None:
    named = tmp_path / "my-notes"
    named.mkdir()
    (named / "keep.txt").write_text("precious", encoding="utf-8")
    sec = CorpusSection(inputs=[str(raw)], prepared=str(named), workers=1)
    with pytest.raises(ConfigError, match="my-notes"):
        prepare_once(sec, _vocabs()[0], tmp_path / "run")
    assert _files(named) == {"keep.txt": b"precious"}


def test_the_runs_own_corpus_directory_holding_a_users_files_is_an_error(tmp_path: Path, raw: Path) -> None:
    own = tmp_path / "run" / "corpus"
    own.mkdir(parents=True)
    (own / "notes.txt").write_text("precious", encoding="utf-8")  # e.g. corpus.inputs=[<run_dir>/corpus]
    sec = CorpusSection(inputs=[str(own)], workers=1)
    with pytest.raises(DataError, match="holds files but is not a prepared corpus"):
        prepare_once(sec, _vocabs()[0], tmp_path / "run")
    assert _files(own) == {"notes.txt": b"precious"}


def test_a_named_directory_that_does_not_exist_is_prepared(tmp_path: Path, raw: Path) -> None:
    named = tmp_path / "new" / "corpus"
    sec = CorpusSection(inputs=[str(raw)], prepared=str(named), workers=1)
    assert prepare_once(sec, _vocabs()[0], tmp_path / "run").num_documents == 2


def test_the_runs_own_corpus_is_rebuilt_for_a_new_tokenizer(tmp_path: Path, raw: Path) -> None:
    first, second = _vocabs()
    run_dir = tmp_path / "run"
    for sec in (CorpusSection(inputs=[str(raw)], workers=1),  # "" = <run_dir>/corpus
                CorpusSection(inputs=[str(raw)], prepared=str(run_dir / "corpus"), workers=1)):
        for vocab in (first, second):
            corpus = prepare_once(sec, vocab, run_dir)
            assert corpus.directory == run_dir / "corpus"
            meta = json.loads((run_dir / "corpus" / "meta.json").read_text())
            assert meta["tokenizer_sha256"] == tokenizer_fingerprint(vocab.to_json())


def _drop_text_marker(corpus: Path) -> None:
    """Make ``corpus`` look prepared before special-token strings were encoded as text."""
    meta = json.loads((corpus / "meta.json").read_text())
    del meta[SPECIALS_AS_TEXT]
    (corpus / "meta.json").write_text(json.dumps(meta))


def _wordpiece() -> WordPieceTokenizer:
    return WordPieceTokenizer.train([TEXT], vocab_size=120, min_frequency=1)


def test_the_runs_own_corpus_prepared_before_specials_as_text_is_rebuilt(tmp_path: Path, raw: Path,
                                                                         caplog) -> None:
    sec, run_dir = CorpusSection(inputs=[str(raw)], workers=1), tmp_path / "run"
    prepare_once(sec, _wordpiece(), run_dir)
    meta = run_dir / "corpus" / "meta.json"
    assert json.loads(meta.read_text())[SPECIALS_AS_TEXT] is True
    _drop_text_marker(run_dir / "corpus")
    with caplog.at_level(logging.WARNING, logger="muppets.recipes.common"):
        prepare_once(sec, _wordpiece(), run_dir)
    assert json.loads(meta.read_text())[SPECIALS_AS_TEXT] is True
    assert any("before special-token strings" in r.getMessage() for r in caplog.records)


def test_a_named_corpus_prepared_before_specials_as_text_is_an_error(tmp_path: Path, raw: Path) -> None:
    named = tmp_path / "shared-corpus"
    sec = CorpusSection(inputs=[str(raw)], prepared=str(named), workers=1)
    prepare_once(sec, _wordpiece(), tmp_path / "run-a")
    _drop_text_marker(named)
    before = _files(named)
    with pytest.raises(ConfigError) as err:
        prepare_once(sec, _wordpiece(), tmp_path / "run-b")
    assert str(named) in str(err.value) and SPECIALS_AS_TEXT in str(err.value)
    assert _files(named) == before  # untouched


def test_an_older_word_vocabulary_corpus_is_reused(tmp_path: Path, raw: Path) -> None:
    """A word vocabulary never read a special string as one: its corpora stay valid."""
    named = tmp_path / "words-corpus"
    sec = CorpusSection(inputs=[str(raw)], prepared=str(named), workers=1)
    prepare_once(sec, _vocabs()[0], tmp_path / "run-a")
    _drop_text_marker(named)
    before = _files(named)
    assert prepare_once(sec, _vocabs()[0], tmp_path / "run-b").directory == named
    assert _files(named) == before


# ----------------------------------------------------------------------------- held-out batches


def test_the_held_out_batches_are_built_once(tmp_path: Path, caplog) -> None:
    """BERT's evaluator and its unigram baseline (MLM and NSP targets) read one set of held-out
    batches: built once, so the few-pairs warning of a small corpus is logged once."""
    corpus = random_corpus(tmp_path / "corpus", documents=20, max_sentences=12)
    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, all=[0, 1, 2, 3, 4])
    data = BertPretrainingData(corpus, special, PretrainDataConfig(max_seq_len=48, eval_fraction=0.2), 8, 1, 0)
    built = []
    data.eval_batches = lambda batch_size, build=data.eval_batches: built.append(batch_size) or build(batch_size)
    with caplog.at_level(logging.WARNING, logger="muppets.objectives.mlm_nsp"):
        bert_pretrain.evaluator(data, 16)
        baseline = bert_pretrain.unigram_baseline(data, 16)
    assert built == [16] and set(baseline) == {"mlm_accuracy", "mlm_perplexity", "nsp_accuracy"}
    assert sum("held-out NSP pairs" in r.getMessage() for r in caplog.records) == 1


# ----------------------------------------------------------------------------- rank 0 first


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_zero_fails(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))

    def build() -> str:
        if rank == 0:
            raise ConfigError("corpus.prepared=x is not a prepared corpus")
        return "opened"

    try:
        rank_zero_first(build)
        outcome = "returned"
    except MuppetsError as err:
        outcome = f"{type(err).__name__}: {err}"
    finally:
        shutdown_distributed()
    (Path(out) / f"rank{rank}.txt").write_text(outcome, encoding="utf-8")


def test_rank_zero_error_reaches_the_other_ranks(tmp_path: Path) -> None:
    """Rank 0 fails while preparing: it raises its error and rank 1 raises too, instead of
    waiting at the barrier for ever."""
    torch.multiprocessing.spawn(_rank_zero_fails, args=(_free_port(), str(tmp_path)), nprocs=2)
    assert (tmp_path / "rank0.txt").read_text() == "ConfigError: corpus.prepared=x is not a prepared corpus"
    assert (tmp_path / "rank1.txt").read_text().startswith("MuppetsError: rank 0 failed")


def test_one_corpus_recipes_refuse_corpus_languages(tmp_path):
    """corpus.languages is BERT's multilingual recipe; GPT, ELMo and NNLM say so instead of ignoring it."""
    import pytest as _pytest

    from muppets.errors import ConfigError
    from muppets.recipes import gpt_pretrain

    cfg = gpt_pretrain.load_config(None, [f"run_dir={tmp_path}", "corpus.languages={en: [x.txt]}"])
    with _pytest.raises(ConfigError, match="BERT pretraining only"):
        gpt_pretrain.run(cfg)


@pytest.mark.parametrize("recipe, field, value", [("bert_pretrain", "norm_first", "true"),
                                                  ("gpt_pretrain", "num_layers", "3"),
                                                  ("nnlm_pretrain", "hidden_size", "3"), ("elmo_pretrain", "num_highway", "1")])
def test_model_preset_and_overrides_are_checked_when_the_config_loads(recipe, field, value):
    import importlib

    load_config = importlib.import_module(f"muppets.recipes.{recipe}").load_config
    with pytest.raises(ConfigError, match=rf"model\.overrides: unknown key {field}:{value}; .*space after the colon, "
                                          rf"\{{{field}: {value}\}}"):
        load_config(None, [f"model.overrides={{{field}:{value}}}"])  # what `{norm_first: true}` unquoted turns into
    with pytest.raises(ConfigError, match=r"^model\.preset: unknown .* preset 'huge'"):
        load_config(None, ["model.preset=huge"])
    with pytest.raises(ConfigError, match=rf"model\.overrides: {field}: expected"):
        load_config(None, [f"model.overrides={{{field}: [1]}}"])
    assert load_config(None, [f"model.overrides={{{field}: {value}}}"]).model.overrides == {field: yaml.safe_load(value)}


CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("recipe, config", [("bert_pretrain", "bert-mini.yaml"), ("gpt_pretrain", "gpt-mini.yaml")])
def test_a_shortened_recipe_takes_its_warmup_and_evaluations_along(recipe, config, caplog):
    """`pretrain configs/bert-mini.yaml train.steps=40` reaches its peak learning rate and
    evaluates as often, in proportion, as the 3,200-step recipe; what the overrides set is kept."""
    from importlib import import_module

    load = import_module(f"muppets.recipes.{recipe}").load_config
    planned = load(CONFIGS / config, []).train
    with caplog.at_level(logging.INFO, logger="muppets.recipes.common"):
        short = load(CONFIGS / config, ["train.steps=40"]).train
    ratio = 40 / planned.steps
    assert short.warmup_steps == max(1, round(planned.warmup_steps * ratio)) < 40
    assert short.eval_every == max(1, round(planned.eval_every * ratio))
    assert 40 // short.eval_every == pytest.approx(planned.steps // planned.eval_every, abs=1)
    assert short.checkpoint_every == planned.checkpoint_every and short.lr == planned.lr  # nothing else follows
    assert (f"train.steps=40 where the config plans {planned.steps}: train.warmup_steps {planned.warmup_steps} -> "
            f"{short.warmup_steps} and train.eval_every {planned.eval_every} -> {short.eval_every}") in caplog.text
    kept = load(CONFIGS / config, ["train.warmup_steps=30", "train.steps=40"]).train
    assert kept.warmup_steps == 30 and kept.eval_every == short.eval_every
    assert load(CONFIGS / config, ["train.steps=40", "train={steps: 40}"]).train.warmup_steps == 0  # the whole section
    assert load(CONFIGS / config, [f"train.steps={planned.steps}"]).train == planned
    longer = load(CONFIGS / config, [f"train.steps={4 * planned.steps}"]).train
    assert longer.warmup_steps == 4 * planned.warmup_steps and longer.eval_every == 4 * planned.eval_every


def test_held_out_figures_worse_than_their_baseline_are_named_in_the_summary(capsys):
    from muppets import cli
    from muppets.recipes.pretraining import UNDERTRAINED, worse_than_baseline

    ev = {"mlm_accuracy": 0.05, "mlm_perplexity": 2826.8, "mlm_loss": 7.9, "nsp_accuracy": 0.6}
    base = {"mlm_accuracy": 0.06, "mlm_perplexity": 955.6, "nsp_accuracy": 0.5}
    worse = worse_than_baseline(ev, base)
    assert worse == {"mlm_accuracy": (0.05, 0.06), "mlm_perplexity": (2826.8, 955.6)}  # NSP beats its majority class
    assert worse_than_baseline({"lm_perplexity": 90.0, "lm_accuracy": 0.2}, {"lm_perplexity": 400.0,
                                                                               "lm_accuracy": 0.05}) == {}
    cli._print_pretrain_summary({"step": 40, "stopped_early": False, "final": "runs/x/final", "eval": ev,
                                 "unigram_baseline": base, "worse_than_baseline": worse})
    out = capsys.readouterr().out
    assert f"note: held-out mlm perplexity 2,826.8 is worse than the baseline's 955.6: {UNDERTRAINED}" in out
    assert "note: held-out mlm accuracy 0.0500 is worse than the baseline's 0.0600" in out and "nsp accuracy" not in out
