"""ELMo's character input: every word becomes a fixed row of ``max_chars`` character ids.

A word is read as its UTF-8 bytes (Peters et al. 2018 §3.1 / bilm-tf's ``UnicodeCharsVocabulary``)
cut to ``max_chars − 2`` bytes, framed by begin- and end-of-word markers and padded with the
padding character. Ids are shifted by one so that 0 can stand for "no token at all" (a padded
position of the batch: its whole row is 0)::

    0            padding token (the whole row)
    1 … 256      byte b  ->  b + 1
    257          the sentence-start character (the row of ``<s>``)
    258          the sentence-end character (the row of ``</s>``)
    259          begin of word
    260          end of word
    261          padding character (fills the row after end of word)

so there are :data:`NUM_CHARS` = 262 ids. The sentence boundary tokens are not spelled out:
``<s>`` is the row ``[259, 257, 260, 261, …]`` and ``</s>`` ``[259, 258, 260, 261, …]``.

Usage::

    from muppets.tokenizers.characters import CharacterMapper
    chars = CharacterMapper()
    chars.word_ids("cat")[:5]            # [259, 100, 98, 117, 260]   ('c' = 99 -> 100)
    ids, mask = chars.batch([["The", "cat"], ["Hi"]])   # (2, 4, 50) with <s> … </s>, (2, 4)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from muppets.errors import ConfigError

MAX_CHARS = 50  # ELMo's characters per token, markers included
NUM_CHARS = 262  # 0 (padding token) + 256 bytes + 5 specials
PAD_TOKEN = 0  # char id of every cell of a padded token
BOS_CHAR, EOS_CHAR = 257, 258  # the character of <s> and of </s>
BOW_CHAR, EOW_CHAR, PAD_CHAR = 259, 260, 261  # begin of word, end of word, padding character


class CharacterMapper:
    """Words -> ``(max_chars,)`` character-id rows (see the module docstring for the ids).

    Args:
        max_chars: row length; a word keeps its first ``max_chars − 2`` UTF-8 bytes.
        bos_token, eos_token: the strings given the sentence-start / sentence-end rows
            (a :class:`~muppets.tokenizers.words.WordVocab`'s ``<s>`` and ``</s>``).
        pad_token: the string given the all-zero row of a padded position (``<pad>``).
    """

    def __init__(self, max_chars: int = MAX_CHARS, bos_token: str = "<s>", eos_token: str = "</s>",
                 pad_token: str = "<pad>") -> None:
        if max_chars < 3:
            raise ConfigError(f"max_chars: {max_chars} leaves no room for a character between the word markers")
        self.max_chars = max_chars
        self.specials = {bos_token: self._marker_row(BOS_CHAR), eos_token: self._marker_row(EOS_CHAR),
                         pad_token: np.zeros(max_chars, np.int16)}
        self.bos_token, self.eos_token = bos_token, eos_token

    def _marker_row(self, char: int) -> np.ndarray:
        row = np.full(self.max_chars, PAD_CHAR, np.int16)
        row[:3] = (BOW_CHAR, char, EOW_CHAR)
        return row

    def word_ids(self, word: str) -> np.ndarray:
        """``(max_chars,)`` int16: ``[BOW, byte+1 …, EOW, PAD_CHAR …]`` (or a special row)."""
        special = self.specials.get(word)
        if special is not None:
            return special.copy()
        data = word.encode("utf-8", errors="replace")[: self.max_chars - 2]
        row = np.full(self.max_chars, PAD_CHAR, np.int16)
        row[0] = BOW_CHAR
        row[1:len(data) + 1] = np.frombuffer(data, np.uint8).astype(np.int16) + 1
        row[len(data) + 1] = EOW_CHAR
        return row

    def encode_words(self, words: Sequence[str]) -> np.ndarray:
        """``(N, max_chars)`` int16, one row per word (e.g. a vocabulary's id -> chars table)."""
        if not words:
            return np.zeros((0, self.max_chars), np.int16)
        return np.stack([self.word_ids(w) for w in words])

    def batch(self, sentences: Sequence[Sequence[str]],
              add_boundaries: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokenised sentences -> ``char_ids (B, T, max_chars)`` long and ``mask (B, T)`` bool.

        With ``add_boundaries`` each sentence is framed as ``<s> w1 … wn </s>``, as ELMo reads
        it in training and at feature time. Rows are right-padded to the longest sentence.
        """
        rows = [[self.bos_token, *s, self.eos_token] if add_boundaries else list(s) for s in sentences]
        T = max((len(r) for r in rows), default=0)
        ids = np.zeros((len(rows), T, self.max_chars), np.int64)  # (B, T, C)
        mask = np.zeros((len(rows), T), bool)
        for i, row in enumerate(rows):
            if row:
                ids[i, :len(row)] = self.encode_words(row)
                mask[i, :len(row)] = True
        return torch.from_numpy(ids), torch.from_numpy(mask)
