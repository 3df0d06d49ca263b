"""Exponentially smoothed language sampling (multilingual BERT): ``p_l ∝ n_l ** alpha``.

A corpus with ``n_l`` units of language ``l`` is sampled with probabilities
``p_l = n_l^α / Σ_k n_k^α`` (google-research/bert ``multilingual.md``: α = 0.7), so a
high-resource language is under-sampled and a low-resource one over-sampled: α = 1 keeps the
corpus proportions, α = 0 gives every language the same share.

:class:`LanguageSample` applies it to the text a WordPiece vocabulary is trained on: the
paragraphs of language ``l`` are taken at the rate ``r_l = p_l · N / n_l`` (``N`` = the
sample's size, by default the corpus size ``Σ n_l``): ``floor(r_l)`` copies of each
paragraph plus one more with probability ``r_l - floor(r_l)``, drawn from a generator seeded
by ``(seed, language index)``, so the sample is the same in every run and the expected share
of language ``l`` in the sample is ``p_l``. The unit is the word, each CJK character counting as
one (what BERT's pre-tokenizer splits them into), so Chinese and space-separated languages are
measured alike.

>>> probs = smoothed_probabilities({"en": 900.0, "de": 100.0}, 0.7)
>>> round(probs["en"], 3), round(probs["de"], 3)
(0.823, 0.177)
>>> count_units("Er kam, 他说了")
5
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from muppets.errors import ConfigError

__all__ = ["DEFAULT_ALPHA", "smoothed_probabilities", "count_units", "LanguageSample"]

log = logging.getLogger(__name__)

DEFAULT_ALPHA = 0.7  # multilingual BERT's exponent
# CJK ideographs (the ranges BERT's tokenizer puts spaces around, _is_chinese_char).
_CJK = re.compile("[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
                  "\U0002b740-\U0002b81f\U0002b820-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f]")


def smoothed_probabilities(sizes: dict[str, float], alpha: float = DEFAULT_ALPHA) -> dict[str, float]:
    """``{language: n_l^α / Σ n_k^α}`` for the sizes ``{language: n_l}`` (each > 0)."""
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"corpus.language_alpha={alpha}: the smoothing exponent must lie in [0, 1] "
                          "(1 = corpus proportions, 0 = uniform; multilingual BERT used 0.7)")
    if not sizes:
        raise ConfigError("no languages to sample from")
    empty = [lang for lang, n in sizes.items() if not n > 0]
    if empty:
        raise ConfigError(f"languages {empty} have no text (sizes {sizes})")
    weights = {lang: math.exp(alpha * math.log(n)) for lang, n in sizes.items()}
    total = sum(weights.values())
    return {lang: w / total for lang, w in weights.items()}


def count_units(text: str) -> int:
    """Whitespace words, each CJK ideograph counting as one word."""
    cjk = len(_CJK.findall(text))
    return cjk + len((_CJK.sub(" ", text) if cjk else text).split())


@dataclass
class LanguageShare:
    """What the sample took from one language."""

    units: int  # n_l: units in the language's text
    paragraphs: int  # paragraphs in the language's text
    probability: float = 0.0  # p_l
    rate: float = 0.0  # r_l: expected copies of each paragraph
    sampled_units: int = 0  # units actually taken (known once the sample has been read)
    sampled_paragraphs: int = 0  # paragraph copies actually taken


@dataclass
class LanguageSample:
    """Paragraphs of several languages sampled with smoothed probabilities (module docstring).

    ``sources`` maps each language to a function returning a fresh iterator over its
    paragraphs (it is read twice: once to count, once to sample). :meth:`texts` yields the
    sample; :meth:`report` then says what was taken (``shares``).
    """

    sources: dict[str, Callable[[], Iterable[str]]]
    alpha: float = DEFAULT_ALPHA
    total: int = 0  # N: units in the sample (0 = Σ n_l, the corpus size)
    seed: int = 0
    shares: dict[str, LanguageShare] = field(default_factory=dict)

    def count(self) -> dict[str, LanguageShare]:
        """First pass: units and paragraphs per language, probabilities and rates."""
        for lang, source in self.sources.items():
            units = paragraphs = 0
            for text in source():
                units += count_units(text)
                paragraphs += 1
            self.shares[lang] = LanguageShare(units, paragraphs)
        probs = smoothed_probabilities({lang: s.units for lang, s in self.shares.items()}, self.alpha)
        size = self.total or sum(s.units for s in self.shares.values())
        for lang, share in self.shares.items():
            share.probability = probs[lang]
            share.rate = probs[lang] * size / share.units
            log.info("tokenizer sample: %s has %s units (p=%.3f, %.2f copies per paragraph, expected %s units)",
                     lang, f"{share.units:,}", share.probability, share.rate, f"{round(share.rate * share.units):,}")
        return self.shares

    def texts(self) -> Iterator[str]:
        """Second pass: each language's paragraphs, each repeated ``floor(r) + Bernoulli(frac r)`` times."""
        if not self.shares:
            self.count()
        for index, (lang, source) in enumerate(self.sources.items()):
            share = self.shares[lang]
            whole, frac = int(share.rate), share.rate - int(share.rate)
            rng = np.random.default_rng([self.seed, 41, index])
            for text in source():
                copies = whole + int(rng.random() < frac)
                if copies:
                    share.sampled_units += copies * count_units(text)
                    share.sampled_paragraphs += copies
                    for _ in range(copies):
                        yield text

    def report(self) -> dict:
        """The sample's settings and, per language, n_l, p_l, r_l and what was taken."""
        taken = sum(s.sampled_units for s in self.shares.values()) or 1
        return {"alpha": self.alpha, "unit": "whitespace word, each CJK ideograph one word",
                "languages": {lang: {**vars(s), "sampled_share": s.sampled_units / taken}
                              for lang, s in self.shares.items()}}
