"""Zero-shot cross-validation by row (the same rows held out in every language, never trained
on) and cross-lingual retrieval@1 (centring, chance, pooling)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from _tiny_backbones import tiny_bert
from muppets.errors import ConfigError
from muppets.interop.hf_bert import load_hf_bert
from muppets.tasks.spec import TaskSpec, TextExample
from muppets.tokenizers.wordpiece import WordPieceTokenizer
from muppets.transfer.xlingual import (ParallelTask, chance, cv_splits, layer_retrieval, load_parallel,
                                       retrieval_at_1, row_folds, sentence_groups, sentence_vectors)

SPEC = TaskSpec("toy-en", "pair", ["0", "1"], "accuracy", ("a", "b"))


def _toy(rows: int = 23, missing: dict[str, set[int]] | None = None) -> ParallelTask:
    missing = missing or {}
    by_lang = {lang: {r: TextExample(f"dev-{lang}-{r}", f"{lang} {r}", f"{lang} b{r}", str(r % 2), f"f:{r}")
                      for r in range(rows) if r not in missing.get(lang, set())}
               for lang in ("en", "de", "zh")}
    return ParallelTask("toy", SPEC, by_lang)


def test_folds_partition_the_rows() -> None:
    folds = row_folds(list(range(23)), 5, seed=1)
    joined = np.concatenate(folds)
    assert sorted(joined.tolist()) == list(range(23)) and len(set(joined.tolist())) == 23
    assert sorted(map(len, folds)) == [4, 4, 5, 5, 5]
    assert [f.tolist() for f in folds] == [f.tolist() for f in row_folds(list(range(23)), 5, seed=1)]
    with pytest.raises(ConfigError):
        row_folds([1, 2], 3)


def test_rows_sharing_a_sentence_are_grouped_and_never_split_across_folds() -> None:
    premise = {r: TextExample(f"dev-en-{r}", f"premise {r // 3}", f"hypothesis {r}", str(r % 3), "f") for r in range(12)}
    premise[9] = TextExample("dev-en-9", "premise 3", "hypothesis 2", "0", "f")  # shares row 2's hypothesis
    groups = sentence_groups(premise)
    assert groups == {0: 0, 1: 0, 2: 0, 3: 3, 4: 3, 5: 3, 6: 6, 7: 6, 8: 6, 9: 0, 10: 0, 11: 0}
    for fold in row_folds(list(premise), 2, seed=4, groups=groups):
        held = set(fold.tolist())
        assert all((a in held) == (b in held) for a in premise for b in premise if groups[a] == groups[b])
    with pytest.raises(ConfigError, match="groups"):
        row_folds(list(premise), 4, groups=groups)  # three groups cannot fill four folds


def test_same_rows_held_out_in_every_language_and_never_trained_on() -> None:
    task = _toy(missing={"de": {3, 7}})  # untranslated rows (PAWS-X "NS") are absent in that language
    seen = []
    for fold in cv_splits(task, k=4, seed=2):
        held = set(fold.held_rows.tolist())
        trained = {int(ex.id.rsplit("-", 1)[1]) for ex in fold.train}
        assert not held & trained and held | trained == set(range(23))
        assert all(ex.id.startswith("dev-en-") for ex in fold.train)  # English only
        for lang, examples in fold.held_out.items():
            rows = [int(ex.id.rsplit("-", 1)[1]) for ex in examples]
            assert set(rows) == held - ({3, 7} if lang == "de" else set())
            assert all(ex.id.startswith(f"dev-{lang}-") for ex in examples)
        seen += sorted(held)
    assert sorted(seen) == list(range(23))  # each row predicted exactly once


def test_real_xnli_and_pawsx_are_parallel_by_row() -> None:
    xnli = load_parallel("xnli", ("en", "zh"))
    assert len(xnli.rows["en"]) == len(xnli.rows["zh"]) == 2490
    assert all(xnli.rows["en"][r].label == xnli.rows["zh"][r].label for r in xnli.rows["en"])
    assert xnli.rows["zh"][min(xnli.rows["zh"])].text == "他说，妈妈，我回来了。"
    paws = load_parallel("pawsx", ("en", "de"))
    assert len(paws.rows["en"]) == 2000 and len(paws.rows["de"]) == 2000 - 68  # NS rows dropped
    fold = next(cv_splits(paws, k=5))
    assert set(fold.held_rows.tolist()) >= {int(ex.id.rsplit("-", 1)[1]) for ex in fold.held_out["de"]}
    for task in (xnli, paws):  # no English sentence of a held-out row is ever trained on
        for fold in cv_splits(task, k=5):
            trained = {s for ex in fold.train for s in (ex.text, ex.text_b)}
            assert not any({ex.text, ex.text_b} & trained for ex in fold.held_out["en"])


def test_retrieval_is_perfect_up_to_a_per_language_shift() -> None:
    rng = np.random.default_rng(0)
    english = rng.normal(size=(200, 16))
    shifted = english + rng.normal(scale=5.0, size=16)  # the same vectors, moved by a language offset
    assert retrieval_at_1(shifted, english) == 1.0
    assert retrieval_at_1(shifted, english, centre=False) < 0.5  # without centring the shift hurts


def test_retrieval_of_random_vectors_is_near_chance() -> None:
    rng = np.random.default_rng(1)
    n, trials = 100, 50
    scores = [retrieval_at_1(rng.normal(size=(n, 8)), rng.normal(size=(n, 8))) for _ in range(trials)]
    assert chance(n) == 0.01
    assert abs(np.mean(scores) - chance(n)) < 0.01  # standard error of the mean ~0.0014


def test_layer_retrieval_scores_every_layer_and_language() -> None:
    rng = np.random.default_rng(2)
    en = rng.normal(size=(3, 30, 4))
    scores = layer_retrieval({"en": en, "de": en + 1.0, "zh": rng.normal(size=(3, 30, 4))})
    assert set(scores) == {"de", "zh"} and scores["de"] == [1.0, 1.0, 1.0] and len(scores["zh"]) == 3


def test_sentence_vectors_mean_pool_the_pieces_without_specials_or_padding(tmp_path: Path) -> None:
    directory = tiny_bert(tmp_path / "bert")
    model, tok = load_hf_bert(directory).backbone, WordPieceTokenizer.load(directory)
    texts = ["the river bank", "a good movie with a great plot and awful phone", "money"]
    together = sentence_vectors(model, tok, texts, batch_size=3)
    alone = np.concatenate([sentence_vectors(model, tok, [t]) for t in texts], axis=1)
    assert together.shape == (3, 3, 32)  # (embeddings + 2 layers, texts, hidden)
    np.testing.assert_allclose(together, alone, atol=1e-5)  # padding changes nothing
    ids = torch.tensor([[tok.cls_id, *tok.encode("money"), tok.sep_id]])
    with torch.inference_mode():
        layers = model(input_ids=ids, token_type_ids=torch.zeros_like(ids), attention_mask=torch.ones_like(ids)).layers
    np.testing.assert_allclose(together[:, 2], torch.stack([h[0, 1:-1].mean(0) for h in layers]).numpy(), atol=1e-5)


def test_zero_shot_cv_predicts_every_row_once_per_language_and_reuses_finished_folds(tmp_path: Path) -> None:
    from muppets.transfer.finetune import FinetuneConfig
    from muppets.transfer.xlingual import zero_shot_cv

    model = tiny_bert(tmp_path / "bert")
    task = _toy(rows=40, missing={"zh": {5}})
    cfg = FinetuneConfig(model=str(model), epochs=2, batch_size=8, max_seq_len=16, threads=1, progress=False)
    summary = zero_shot_cv(task, cfg, k=2, root=tmp_path / "cv")
    assert {lang: r["rows"] for lang, r in summary["languages"].items()} == {"en": 40, "de": 40, "zh": 39}
    assert summary["languages"]["en"]["majority"] == 0.5 and len(summary["languages"]["de"]["folds"]) == 2
    assert not (tmp_path / "cv" / "fold-0" / "best").exists()  # models deleted once the fold is scored
    assert zero_shot_cv(task, cfg, k=2, root=tmp_path / "cv")["languages"] == summary["languages"]
    with pytest.raises(ConfigError, match="another fold"):  # other folds never reuse those results
        zero_shot_cv(task, cfg, k=2, fold_seed=1, root=tmp_path / "cv")


def test_zero_shot_cv_reuses_a_finished_fold_only_with_its_settings_and_model(tmp_path: Path) -> None:
    """A fold's xlingual.json records the fine-tuning settings and the model's weight fingerprint:
    another seed, lr, epoch count or model is refused (its result would be reported under the new
    settings), pacing settings and a copy of the same weights elsewhere are not."""
    import dataclasses
    import json
    import shutil

    from muppets.errors import RunDirError
    from muppets.transfer.finetune import FinetuneConfig
    from muppets.transfer.xlingual import zero_shot_cv

    model = tiny_bert(tmp_path / "bert")
    task = _toy(rows=24)
    cfg = FinetuneConfig(model=str(model), epochs=1, batch_size=8, max_seq_len=16, threads=1, progress=False)
    root = tmp_path / "cv"
    summary = zero_shot_cv(task, cfg, k=2, root=root)
    other_weights = tiny_bert(tmp_path / "bert-2", seed=1)
    for change, named in [({"seed": 2}, "seed: 1 -> 2"), ({"lr": 1e-4}, "lr: 5e-05 -> 0.0001"),
                          ({"epochs": 2}, "epochs: 1 -> 2"), ({"model": str(other_weights)}, "model weights")]:
        with pytest.raises(RunDirError, match=f"other settings.*{re.escape(named)}"):
            zero_shot_cv(task, dataclasses.replace(cfg, **change), k=2, root=root)
    same_weights = shutil.copytree(model, tmp_path / "bert-copy")
    again = zero_shot_cv(task, dataclasses.replace(cfg, threads=2, model=str(same_weights)), k=2, root=root)
    assert again["languages"] == summary["languages"]  # reused: pacing and the path do not count
    record = root / "fold-0" / "xlingual.json"
    saved = json.loads(record.read_text(encoding="utf-8"))
    assert saved["settings"]["seed"] == 1 and saved["model_sha256"] == summary["model_sha256"]
    record.write_text(json.dumps({k: v for k, v in saved.items() if k not in ("settings", "model_sha256")}))
    with pytest.raises(RunDirError, match="without the settings"):  # a record of before: cannot be told apart
        zero_shot_cv(task, cfg, k=2, root=root)


def test_the_selection_slice_of_a_fold_shares_no_sentence_with_its_training_rows() -> None:
    """zero_shot_cv selects on a slice of each fold's English training rows: whole sentence groups
    (before, all 199 selection rows of XNLI fold 0 shared a premise with training rows)."""
    from muppets.tasks.spec import TaskData
    from muppets.transfer.finetune import FinetuneConfig, selection_split

    for name, premise_only in (("xnli", True), ("pawsx", False)):
        task = load_parallel(name, ("en",))
        for fold in cv_splits(task, k=5):
            train, mode, chosen, _ = selection_split(FinetuneConfig(selection="train-slice"),
                                                     TaskData(task.spec, {"train": fold.train}))
            trained = {s for ex in train for s in ((ex.text,) if premise_only else (ex.text, ex.text_b))}
            assert mode == "train-slice" and not any({ex.text, ex.text_b} & trained for ex in chosen)
            assert abs(len(chosen) - 0.1 * len(fold.train)) <= 4  # about the 10% slice of before
            assert {ex.label for ex in chosen} == set(task.spec.labels)
