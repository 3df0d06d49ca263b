"""The spam tutorial's LFs with its spaCy / TextBlob LFs replaced by muppets models.

The tutorial's seven deterministic LFs (``spam_lfs.py``) plus, in place of

* ``textblob_polarity`` (TextBlob polarity > 0.9 → HAM): ``sentiment_positive``, a MiniLM
  fine-tuned on SST-2 voting HAM when P(positive) >= 0.9;
* ``has_person`` (spaCy: fewer than 20 tokens and a PERSON entity → HAM): ``has_person``, a
  MiniLM fine-tuned on CoNLL-2003 voting HAM when a comment of fewer than 20 tokens has a word
  with P(B-PER) + P(I-PER) >= 0.9;
* optionally (``zero_shot=True``; the tutorial's ``textblob_subjectivity`` has no muppets
  counterpart) ``zero_shot_spam``: a GPT prompt, calibrated, margin 1 nat.

Thresholds are fixed a priori (the tutorial's own 0.9 and 20 words), not tuned on any split.
The models are the fine-tuning runs of this repository (``runs/…``; pass your own)::

    muppets weak analyze examples/weak/spam_model_lfs.py --task spam --split dev
"""

from __future__ import annotations

from pathlib import Path

from muppets.weak import load_lfs, predictor_lf, tagger_lf, zero_shot_lf

HAM, SPAM = 0, 1  # as in spam_lfs.py
RUNS = Path(__file__).resolve().parents[2] / "runs"
SST2_MODEL = RUNS / "ft-sst2-minilm-sel/seed-1/best"
NER_MODEL = RUNS / "ft-conll2003-minilm-unsorted/seed-1/best"
GPT_MODEL = RUNS / "gpt-mini/final"
SPAM_PROMPT = "YouTube comment: {text}\nIs this comment spam? Answer:"


def model_lfs(sst2: str | Path = SST2_MODEL, ner: str | Path = NER_MODEL,
              gpt: str | Path | None = None) -> list:
    """The model-based LFs (see the module docstring); ``gpt`` adds the zero-shot one."""
    lfs = [predictor_lf("sentiment_positive", sst2, {"1": HAM}, threshold=0.9),
           tagger_lf("has_person", ner, "PER", HAM, threshold=0.9, max_words=20)]
    if gpt is not None:
        lfs.append(zero_shot_lf("zero_shot_spam", gpt, SPAM_PROMPT, {HAM: " no", SPAM: " yes"},
                                margin=1.0, calibrate=True))
    return lfs


LFS = [*load_lfs(Path(__file__).with_name("spam_lfs.py")), *model_lfs()]
