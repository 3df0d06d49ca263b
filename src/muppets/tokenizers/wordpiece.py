"""BERT WordPiece tokenizer on top of the Hugging Face ``tokenizers`` library.

The pipeline is BERT's (Devlin et al. 2019, §3 and the ``google-research/bert`` code): a
``BertNormalizer`` (clean control characters, put spaces around CJK ideographs, optionally
strip accents and lowercase), a ``BertPreTokenizer`` (split on whitespace and punctuation),
then greedy longest-match-first WordPiece with ``##`` marking pieces that continue a word.
The special tokens are ``[PAD] [UNK] [CLS] [SEP] [MASK]``; a freshly trained vocabulary gives
them ids 0..4, a real BERT ``vocab.txt`` keeps its own ids (``[CLS]`` = 101 in bert-base).

Ids are identical to ``transformers.BertTokenizerFast`` for the same vocabulary and options
(``tests/test_tokenizer.py`` checks every sentence of SST-2, CoNLL-2003 and SQuAD dev), and
:meth:`WordPieceTokenizer.save` writes a directory that ``transformers`` loads as it is.
``transformers`` is only a test oracle: nothing here imports it.

Usage::

    import tempfile
    from muppets.paths import data_dir
    from muppets.tokenizers import WordPieceTokenizer

    corpus = ["The quick brown fox jumps.", "Café au lait, 北京."] * 10
    tok = WordPieceTokenizer.train(corpus, vocab_size=200)
    ids = tok.encode("the quick fox")                # no [CLS]/[SEP]: pretraining adds them
    batch = tok.encode_batch(["one", "two words"])  # Rust batch encoder
    feats = tok.encode_for_model("a question?", "its context", max_length=64)
    out = tok.save(tempfile.mkdtemp())              # vocab.txt, tokenizer.json, two configs
    same = WordPieceTokenizer.load(out)
    worker_copy = WordPieceTokenizer.from_json(tok.to_json())  # cheap, for worker processes

    bert = WordPieceTokenizer.from_vocab(data_dir() / "vocab/bert-base-uncased/vocab.txt")
    print(bert.cls_id, bert.encode("unaffable"))    # 101 [14477, 20961, 3468]
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Encoding, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers import processors, trainers
from tokenizers.models import WordPiece

from muppets.config import final_path, parse_json, write_json_atomic
from muppets.errors import ConfigError, DataError
from muppets.progress import progress_bar
from muppets.tokenizers.script import SCRIPTS, check_script, script_converter

logger = logging.getLogger(__name__)

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
CONTINUATION_PREFIX = "##"
_JSON_FORMAT = "muppets.wordpiece/1"  # tag of :meth:`WordPieceTokenizer.to_json` strings
_ROLES = ("pad", "unk", "cls", "sep", "mask")  # trained vocabularies give these ids 0..4
_UNSET_MAX_LENGTH = 10**12  # transformers writes int(1e30) when no length is known
SCRIPT_KEY = "muppets_chinese_script"  # tokenizer_config.json key of WordPieceSettings.chinese_script


@dataclass(frozen=True)
class WordPieceSettings:
    """Everything besides the vocabulary that decides how text becomes ids."""

    lowercase: bool = True  # lowercase before WordPiece ("uncased" models)
    strip_accents: bool | None = None  # None: strip exactly when lowercasing (BERT's rule)
    tokenize_chinese_chars: bool = True  # put spaces around CJK ideographs: one token each
    chinese_script: str = ""  # "" (as written) | simplified | traditional: convert first (OpenCC)
    model_max_length: int | None = None  # longest input the paired model accepts, if known
    pad_token: str = "[PAD]"  # padding
    unk_token: str = "[UNK]"  # replaces words that WordPiece cannot split
    cls_token: str = "[CLS]"  # first token of every model input
    sep_token: str = "[SEP]"  # closes each segment
    mask_token: str = "[MASK]"  # replaces masked tokens in masked-LM pretraining

    def special_tokens(self) -> dict[str, str]:
        """Map role (``pad`` …) to token string, in the order of :data:`_ROLES`."""
        return {role: getattr(self, f"{role}_token") for role in _ROLES}

    def to_hf_config(self) -> dict[str, Any]:
        """The ``tokenizer_config.json`` that ``transformers`` reads for a BERT tokenizer."""
        config: dict[str, Any] = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "do_basic_tokenize": True,
            "never_split": None,
            "clean_up_tokenization_spaces": True,
        }
        config.update({f"{role}_token": tok for role, tok in self.special_tokens().items()})
        if self.model_max_length is not None:
            config["model_max_length"] = self.model_max_length
        if self.chinese_script:  # muppets converts; transformers ignores the key (see script.py)
            config[SCRIPT_KEY] = self.chinese_script
        return config

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], normalizer: Any = None) -> WordPieceSettings:
        """Read a ``tokenizer_config.json`` dict; keys it lacks come from ``normalizer``."""
        fallback = _normalizer_settings(normalizer)
        max_length = config.get("model_max_length")
        if not isinstance(max_length, int) or max_length >= _UNSET_MAX_LENGTH:
            max_length = None
        tokens = {f"{r}_token": _token_text(config.get(f"{r}_token"), getattr(cls, f"{r}_token"))
                  for r in _ROLES}
        return cls(
            lowercase=bool(config.get("do_lower_case", fallback.get("lowercase", True))),
            strip_accents=config.get("strip_accents", fallback.get("strip_accents")),
            tokenize_chinese_chars=bool(config.get(
                "tokenize_chinese_chars", fallback.get("handle_chinese_chars", True))),
            chinese_script=config.get(SCRIPT_KEY, ""),
            model_max_length=max_length,
            **tokens,
        )


def _normalizer_settings(normalizer: Any) -> dict[str, Any]:
    """The options of a ``BertNormalizer`` (empty for any other normalizer)."""
    if not isinstance(normalizer, normalizers.BertNormalizer):
        return {}
    keys = ("lowercase", "strip_accents", "handle_chinese_chars")
    return {key: getattr(normalizer, key) for key in keys}


def _token_text(value: Any, default: str) -> str:
    """A special token from a config: a string, or transformers' ``{"content": ...}`` form."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else default


def _read_vocab_txt(path: Path) -> dict[str, int]:
    """Read a BERT ``vocab.txt``: line i (0-based) is the token with id i.

    Parsing follows ``tokenizers``' ``WordPiece.read_file``, which transformers uses: split on
    ``\\n`` only (not on other Unicode line breaks), strip trailing whitespace, and let a
    repeated token keep the id of its last line.
    """
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise DataError(f"cannot read vocabulary ({err.strerror})", path=path) from err
    except UnicodeDecodeError as err:
        raise DataError("vocabulary is not valid UTF-8", path=path, position=err.start) from err
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    vocab = {line.rstrip(): index for index, line in enumerate(lines)}
    if not any(vocab):
        raise DataError("vocabulary file is empty", path=path)
    if len(vocab) < len(lines):
        logger.warning("%s: %d repeated tokens; each keeps the id of its last line",
                       path, len(lines) - len(vocab))
    return vocab


def _read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object from ``path``, naming the file (and line) on any error."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise DataError(f"cannot read file ({err.strerror})", path=path) from err
    except UnicodeDecodeError as err:
        raise DataError("file is not valid UTF-8", path=path, position=err.start) from err
    data = parse_json(text, path)
    if not isinstance(data, dict):
        raise DataError("expected a JSON object at the top level", path=path)
    return data


_CONFIG_FLAGS = ("do_lower_case", "strip_accents", "tokenize_chinese_chars", "add_prefix_space")


def _read_configs(directory: Path) -> dict[str, Any]:
    """``special_tokens_map.json`` updated by ``tokenizer_config.json`` (each if present).

    Options that settings read with ``bool()`` must be JSON booleans (``strip_accents`` may be
    null), and an integer ``model_max_length`` must be >= 1: anything else ("false", which
    ``bool()`` reads as true; a list, which the normalizer refuses) names the file and value.
    """
    config: dict[str, Any] = {}
    for name in (SPECIAL_TOKENS_MAP_FILE, CONFIG_FILE):  # the latter wins
        path = directory / name
        if not path.is_file():
            continue
        data = _read_json(path)
        for key in _CONFIG_FLAGS:
            if key in data and not isinstance(data[key], bool) and not (
                    key == "strip_accents" and data[key] is None):
                raise DataError(f"{key} must be true or false", path=path, value=data[key])
        if SCRIPT_KEY in data and data[SCRIPT_KEY] not in SCRIPTS:
            raise DataError(f"{SCRIPT_KEY} must be one of {list(SCRIPTS)}", path=path, value=data[SCRIPT_KEY])
        length = data.get("model_max_length")
        if isinstance(length, int) and length < 1:
            raise DataError("model_max_length must be at least 1", path=path, value=length)
        config.update(data)
    return config


def _check_ids(vocab: dict[str, Any], path: str | Path | None) -> dict[str, int]:
    """Check that ``vocab`` maps tokens to distinct ids >= 0, at most twice as many ids as tokens.

    The model gets one embedding row per id up to the largest, so an id far beyond the token
    count (``"the": 2147483648`` in a file of 300 tokens) would make it allocate rows the file
    cannot fill; a few unused ids (a ``vocab.txt`` with repeated lines) are fine.
    """
    if not vocab:
        raise DataError("vocabulary is empty", path=path)
    owner: dict[int, str] = {}
    for token, index in vocab.items():
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise DataError(f"the id of {token!r} is not an integer >= 0", path=path, value=index)
        if index in owner:
            raise DataError(f"tokens {owner[index]!r} and {token!r} have the same id",
                            path=path, value=index)
        if index >= 2 * len(vocab):
            raise DataError(f"the id of {token!r} is more than twice the {len(vocab)} tokens of "
                            "the vocabulary", path=path, value=index)
        owner[index] = token
    return vocab


TOKENIZER_MODELS = ("BPE", "Unigram", "WordLevel", "WordPiece")  # the model types the tokenizers library reads


def parse_tokenizer_json(text: str, source: str | Path | None) -> Tokenizer:
    """Parse a ``tokenizer.json`` string; a ``model.type`` the ``tokenizers`` library cannot read
    is a :class:`DataError` naming the file and the key (instead of the Rust parser's
    "untagged enum" message), any other flaw one naming the file."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:  # RecursionError: nesting deeper than json parses
        raise DataError(f"not a valid tokenizer.json: {err}", path=source) from err
    model = data.get("model") if isinstance(data, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    if kind is not None and kind not in TOKENIZER_MODELS:  # (older files omit it: the library infers it)
        raise DataError(f"key 'model.type' is {kind!r}, not a tokenizer model muppets reads "
                        f"(one of: {', '.join(TOKENIZER_MODELS)})", path=source, value=kind)
    try:
        return Tokenizer.from_str(text)
    except Exception as err:  # the Rust parser raises a bare Exception
        raise DataError(f"not a valid tokenizer.json: {err}", path=source) from err


def _backend_from_str(text: str, source: str | Path | None) -> Tokenizer:
    """Parse a ``tokenizer.json`` string and check that it holds a WordPiece model."""
    backend = parse_tokenizer_json(text, source)
    if not isinstance(backend.model, WordPiece):
        kind = type(backend.model).__name__
        raise DataError(f"key 'model.type' is {kind!r}: this tokenizer.json does not hold a WordPiece model "
                        "(a RoBERTa / XLM-R directory says so in its config.json's model_type)", path=source, value=kind)
    _check_ids(backend.get_vocab(with_added_tokens=True), source)
    unk = backend.model.unk_token  # without it in the vocabulary, encoding an unknown word fails
    if unk not in backend.get_vocab(with_added_tokens=False):
        raise DataError("the WordPiece model's unk_token is not in its vocabulary", path=source,
                        value=unk)
    return backend


def _set_bert_splitting(backend: Tokenizer, settings: WordPieceSettings) -> None:
    """BERT's normalizer and pre-tokenizer: what turns text into words, before WordPiece."""
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=settings.tokenize_chinese_chars,
        strip_accents=settings.strip_accents, lowercase=settings.lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()


def _assemble(backend: Tokenizer, settings: WordPieceSettings, source: str | Path | None) -> Tokenizer:
    """Give ``backend`` BERT's pipeline around its WordPiece model, as transformers builds it.

    Normalizer options come from ``settings`` (as transformers' ``BertTokenizer`` does, even
    when a tokenizer.json says otherwise); padding and truncation stored in a tokenizer.json
    (MiniLM's pads every input to 128) are switched off: callers get exact token lists.
    """
    _set_bert_splitting(backend, settings)
    backend.decoder = decoders.WordPiece(prefix=backend.model.continuing_subword_prefix)
    backend.no_padding()
    backend.no_truncation()
    specials = settings.special_tokens()
    missing = [tok for tok in specials.values() if backend.token_to_id(tok) is None]
    if missing:
        raise DataError("vocabulary lacks a special token", path=source, value=missing[0])
    backend.add_special_tokens([AddedToken(tok, special=True, normalized=False)
                                for tok in specials.values()])
    cls_tok, sep_tok = specials["cls"], specials["sep"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls_tok}:0 $A:0 {sep_tok}:0",
        pair=f"{cls_tok}:0 $A:0 {sep_tok}:0 $B:1 {sep_tok}:1",
        special_tokens=[(cls_tok, backend.token_to_id(cls_tok)),
                        (sep_tok, backend.token_to_id(sep_tok))])
    return backend


class WordPieceTokenizer:
    """A BERT WordPiece tokenizer: train one, or load BERT's ``vocab.txt`` or an HF directory.

    Build it with :meth:`train`, :meth:`from_vocab`, :meth:`load` or :meth:`from_json`; the
    constructor takes an already assembled ``tokenizers.Tokenizer``.
    """

    def __init__(self, backend: Tokenizer, settings: WordPieceSettings) -> None:
        self._backend = backend
        self._settings = settings
        self._convert = script_converter(check_script(settings.chinese_script))
        self._special_ids = {role: backend.token_to_id(tok)
                             for role, tok in settings.special_tokens().items()}
        assert None not in self._special_ids.values(), "backend was not assembled"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int = 30522,
        *,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        chinese_script: str = "",
        min_frequency: int = 2,
        limit_alphabet: int = 1000,
        show_progress: bool = False,
        model_max_length: int | None = None,
    ) -> WordPieceTokenizer:
        """Learn a WordPiece vocabulary of at most ``vocab_size`` tokens from ``texts``.

        The special tokens get ids 0..4 (``[PAD] [UNK] [CLS] [SEP] [MASK]``). ``texts`` is read
        once. The same texts give the same vocabulary in every run (see :func:`_train_vocab`).
        The trainer always keeps the whole alphabet (the ``limit_alphabet`` most frequent
        characters, plus the ``##`` form of those seen inside words), so with a tiny
        ``vocab_size`` the result can be larger; a warning says so. With ``chinese_script``
        the texts are converted first (:mod:`muppets.tokenizers.script`), as every later input is.
        """
        _check_train_args(texts, vocab_size, min_frequency, limit_alphabet)
        settings = WordPieceSettings(lowercase=lowercase, strip_accents=strip_accents,
                                     tokenize_chinese_chars=tokenize_chinese_chars,
                                     chinese_script=check_script(chinese_script),
                                     model_max_length=model_max_length)
        convert = script_converter(chinese_script)
        counts = _count_words(texts if convert is None else map(convert, texts), settings, show_progress)
        if not counts:
            raise DataError("training texts are empty: they contain no word")
        vocab = _train_vocab(counts, settings, vocab_size, min_frequency, limit_alphabet,
                             show_progress)
        if len(vocab) > vocab_size:
            logger.warning("trained vocabulary has %d tokens, more than vocab_size=%d: the "
                           "alphabet alone needs them (lower limit_alphabet)", len(vocab), vocab_size)
        logger.info("trained a WordPiece vocabulary of %d tokens on %d distinct words",
                    len(vocab), len(counts))
        model = WordPiece(vocab, unk_token=settings.unk_token,
                          continuing_subword_prefix=CONTINUATION_PREFIX)
        return cls(_assemble(Tokenizer(model), settings, None), settings)

    @classmethod
    def from_vocab(
        cls,
        path: str | Path,
        *,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        chinese_script: str = "",
        model_max_length: int | None = None,
    ) -> WordPieceTokenizer:
        """Load a BERT ``vocab.txt`` (one token per line, line number = id).

        Raises :class:`DataError` naming the file if it is missing, unreadable or empty, or
        naming the special token it lacks.
        """
        settings = WordPieceSettings(lowercase=lowercase, strip_accents=strip_accents,
                                     tokenize_chinese_chars=tokenize_chinese_chars,
                                     chinese_script=chinese_script, model_max_length=model_max_length)
        return cls._from_vocab_settings(Path(path), settings)

    @classmethod
    def _from_vocab_settings(cls, path: Path, settings: WordPieceSettings) -> WordPieceTokenizer:
        vocab = _read_vocab_txt(path)
        model = WordPiece(vocab, unk_token=settings.unk_token,
                          continuing_subword_prefix=CONTINUATION_PREFIX)
        return cls(_assemble(Tokenizer(model), settings, path), settings)

    @classmethod
    def load(cls, directory: str | Path) -> WordPieceTokenizer:
        """Read a directory written by :meth:`save` or by transformers for a BERT model.

        Uses ``tokenizer.json`` when present, else ``vocab.txt``; options (lowercasing, special
        tokens, ``model_max_length``) come from ``tokenizer_config.json`` (and
        ``special_tokens_map.json``) when present, else from tokenizer.json's normalizer.
        """
        directory = Path(directory)
        if not directory.is_dir():
            raise DataError("tokenizer directory not found", path=directory)
        config = _read_configs(directory)
        json_path, vocab_path = directory / TOKENIZER_FILE, directory / VOCAB_FILE
        if json_path.is_file():
            try:
                text = json_path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise DataError(f"cannot read tokenizer file ({err})", path=json_path) from err
            return cls._from_backend(_backend_from_str(text, json_path), config, json_path)
        if vocab_path.is_file():
            return cls._from_vocab_settings(vocab_path, WordPieceSettings.from_hf_config(config))
        raise DataError(f"neither {TOKENIZER_FILE} nor {VOCAB_FILE} found", path=directory)

    @classmethod
    def _from_backend(cls, backend: Tokenizer, config: dict[str, Any],
                      source: str | Path | None) -> WordPieceTokenizer:
        settings = WordPieceSettings.from_hf_config(config, backend.normalizer)
        return cls(_assemble(backend, settings, source), settings)

    @classmethod
    def from_json(cls, text: str) -> WordPieceTokenizer:
        """Rebuild from :meth:`to_json` (or from a plain HF ``tokenizer.json`` string)."""
        data = parse_json(text)
        if not isinstance(data, dict):
            raise DataError("expected a JSON object", value=type(data).__name__)
        if data.get("format") != _JSON_FORMAT:
            return cls._from_backend(_backend_from_str(text, None), {}, None)
        try:
            settings = WordPieceSettings(**data["settings"])
            backend_text = data["backend"]
        except (KeyError, TypeError) as err:
            raise DataError(f"malformed {_JSON_FORMAT} string: {err}") from err
        return cls(_backend_from_str(backend_text, None), settings)

    def with_chinese_script(self, script: str, source: str | Path | None = None) -> WordPieceTokenizer:
        """This tokenizer converting Chinese text to ``script`` first (``""``: as it is).

        A tokenizer that converts already keeps its own script when ``script`` is ``""``
        (unset); asking it for the other script is a :class:`ConfigError` naming ``source``.
        """
        own = self._settings.chinese_script
        if not check_script(script, "tokenizer.chinese_script") or script == own:
            return self
        if own:
            raise ConfigError(f"tokenizer.chinese_script={script}: the tokenizer at {source or '(given)'} converts "
                              f"to {own}; a model reads one script")
        logger.info("tokenizer %s: Chinese text is converted to %s script before tokenizing", source or "", script)
        return WordPieceTokenizer(self._backend, dataclasses.replace(self._settings, chinese_script=script))

    def to_json(self) -> str:
        """Serialise everything (settings + the Rust tokenizer) to one string for workers.

        ``chinese_script`` is left out when unset, so the string (and the fingerprint of the
        corpora prepared with it) is what it was before the setting existed."""
        settings = dataclasses.asdict(self._settings)
        if not settings["chinese_script"]:
            del settings["chinese_script"]
        return json.dumps({"format": _JSON_FORMAT, "settings": settings, "backend": self._backend.to_str()})

    # ------------------------------------------------------------------ saving
    def save(self, directory: str | Path) -> Path:
        """Write ``vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json`` and
        ``special_tokens_map.json``: a directory transformers' ``AutoTokenizer`` loads.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / VOCAB_FILE).write_text(
            "".join(tok + "\n" for tok in self._vocab_lines()), encoding="utf-8")
        self._backend.save(str(directory / TOKENIZER_FILE))
        write_json_atomic(directory / CONFIG_FILE, self._settings.to_hf_config())
        special_map = {f"{role}_token": tok for role, tok in self._settings.special_tokens().items()}
        write_json_atomic(directory / SPECIAL_TOKENS_MAP_FILE, special_map)
        logger.info("saved WordPiece tokenizer (%d tokens) to %s", self.vocab_size, final_path(directory))
        return directory

    def _vocab_lines(self) -> list[str]:
        """Tokens ordered by id; an id no token owns (a vocab.txt with repeated lines) gets a
        bracketed placeholder, which the pre-tokenizer can never produce from text."""
        lines = [f"[unused-id-{i}]" for i in range(self.vocab_size)]
        for token, index in self._backend.get_vocab(with_added_tokens=True).items():
            lines[index] = token
        return lines

    # ------------------------------------------------------------------ vocabulary
    @property
    def backend(self) -> Tokenizer:
        """The underlying ``tokenizers.Tokenizer`` (no padding, no truncation)."""
        return self._backend

    @property
    def settings(self) -> WordPieceSettings:
        """Normalisation options, special-token strings and ``model_max_length``."""
        return self._settings

    @cached_property
    def vocab_size(self) -> int:
        """Number of embedding rows needed: largest id + 1."""
        return max(self._backend.get_vocab(with_added_tokens=True).values()) + 1

    @property
    def lowercase(self) -> bool:
        """Whether input is lowercased (an "uncased" model)."""
        return self._settings.lowercase

    @property
    def model_max_length(self) -> int | None:
        """Longest input (with special tokens) the paired model accepts, if known."""
        return self._settings.model_max_length

    @property
    def pad_id(self) -> int:
        """Id of ``[PAD]``."""
        return self._special_ids["pad"]

    @property
    def unk_id(self) -> int:
        """Id of ``[UNK]``."""
        return self._special_ids["unk"]

    @property
    def cls_id(self) -> int:
        """Id of ``[CLS]``."""
        return self._special_ids["cls"]

    @property
    def sep_id(self) -> int:
        """Id of ``[SEP]``."""
        return self._special_ids["sep"]

    @property
    def mask_id(self) -> int:
        """Id of ``[MASK]``."""
        return self._special_ids["mask"]

    @property
    def special_ids(self) -> dict[str, int]:
        """Role (``pad``, ``unk``, ``cls``, ``sep``, ``mask``) → id."""
        return dict(self._special_ids)

    def token_to_id(self, token: str) -> int | None:
        """Id of ``token``, or None if it is not in the vocabulary."""
        return self._backend.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        """Token with id ``index``, or None if no token has it."""
        return self._backend.id_to_token(index)

    @cached_property
    def is_continuation(self) -> np.ndarray:
        """(vocab_size,) read-only bool array: True where the token starts with ``##``."""
        flags = np.zeros(self.vocab_size, dtype=bool)
        prefix = self._backend.model.continuing_subword_prefix
        for token, index in self._backend.get_vocab(with_added_tokens=False).items():
            flags[index] = token.startswith(prefix)
        flags.flags.writeable = False
        return flags

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Join WordPiece ids back into text (``##`` pieces glued to their word)."""
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ encoding
    @property
    def script_converter(self) -> Callable[[str], str] | None:
        """The length-preserving conversion every text goes through before the normalizer
        (``settings.chinese_script``; None when the text is read as written)."""
        return self._convert

    def _texts(self, texts: Sequence[str]) -> list[str]:
        return list(texts) if self._convert is None else [self._convert(t) for t in texts]

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without ``[CLS]``/``[SEP]``."""
        return self._backend.encode(self._texts([text])[0], add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text without special tokens, via the parallel Rust batch encoder."""
        encodings = self._backend.encode_batch_fast(self._texts(texts), add_special_tokens=False)
        return [enc.ids for enc in encodings]

    def encode_text_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text read as plain text, as corpus text is: nothing is added, and a
        special token's string in it (``[MASK]``, ``[SEP]``) is encoded as the characters it
        is (``[`` ``mask`` ``]``), never as that token, which :meth:`encode_batch` gives (as
        transformers does, for inputs that mean it)."""
        encodings = self._text_backend.encode_batch_fast(self._texts(texts), add_special_tokens=False)
        return [enc.ids for enc in encodings]

    def encode_text_with_words(self, texts: Sequence[str]) -> list[Encoding]:
        """:meth:`encode_text_batch`'s encodings with their offsets and word ids (what a corpus
        needs to store masking units: :mod:`muppets.data.units`)."""
        return self._text_backend.encode_batch(self._texts(texts), add_special_tokens=False)

    @cached_property
    def _text_backend(self) -> Tokenizer:
        return plain_text_copy(self._backend)

    def encode_with_word_ids(self, texts: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """(ids, word index of each token) per text, without special tokens.

        A word is a pre-tokenizer unit (a run of letters/digits, or one punctuation mark or
        CJK character); all WordPiece pieces of a word share its index — whole-word masking
        masks them together.
        """
        return [(enc.ids, _word_ids(enc)) for enc in self.encodings(texts)]

    def encodings(self, texts: Sequence[str]) -> list[Encoding]:
        """Full encodings (ids, offsets into each text, word ids) without special tokens."""
        return self._backend.encode_batch(self._texts(texts), add_special_tokens=False)

    def encode_words(self, sentences: Sequence[Sequence[str]]) -> list[Encoding]:
        """Encodings of sentences already split into words (``word_ids`` index the words)."""
        if self._convert is None:
            words = [list(ws) for ws in sentences]
        else:  # convert each sentence whole (phrase rules see the context), then cut it back into its words
            words = []
            for ws in sentences:
                joined, at, cut = self._convert("".join(ws)), 0, []
                for w in ws:
                    cut.append(joined[at:at + len(w)])
                    at += len(w)
                words.append(cut)
        return self._backend.encode_batch(words, is_pretokenized=True, add_special_tokens=False)

    def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """(ids, (start, end) character span of each token in the original text) per text."""
        return [(enc.ids, list(enc.offsets)) for enc in self.encodings(texts)]

    def encode_for_model(self, text: str, text_pair: str | None = None,
                         max_length: int | None = None) -> dict[str, list[int]]:
        """``[CLS] text [SEP] (text_pair [SEP])`` as ``input_ids``, ``token_type_ids`` and
        ``attention_mask``, exactly as ``BertTokenizerFast(text, text_pair)`` gives them.

        With ``max_length`` the inputs are cut with ``longest_first`` (see
        :func:`_longest_first`) so that the whole input, special tokens included, fits. No
        padding. A ``max_length`` below the number of special tokens raises
        :class:`ConfigError` (transformers would silently return the untruncated input).
        """
        pairs = None if text_pair is None else [text_pair]
        return self.encode_for_model_batch([text], pairs, max_length)[0]

    def encode_for_model_batch(self, texts: Sequence[str], text_pairs: Sequence[str] | None = None,
                               max_length: int | None = None) -> list[dict[str, list[int]]]:
        """:meth:`encode_for_model` for many inputs at once, via the Rust batch encoder."""
        budget = content_budget(texts, text_pairs, max_length)
        firsts = self.encode_batch(texts)
        seconds = [None] * len(firsts) if text_pairs is None else self.encode_batch(text_pairs)
        return [self._features(a, b, budget) for a, b in zip(firsts, seconds)]

    def _features(self, first: list[int], second: list[int] | None,
                  budget: int | None) -> dict[str, list[int]]:
        """Truncate to ``budget`` content tokens, then add [CLS]/[SEP] and segment ids."""
        if budget is not None:
            first, second = _longest_first(first, second, budget)
        ids = [self.cls_id, *first, self.sep_id]
        type_ids = [0] * len(ids)
        if second is not None:
            ids += [*second, self.sep_id]
            type_ids += [1] * (len(second) + 1)
        return {"input_ids": ids, "token_type_ids": type_ids, "attention_mask": [1] * len(ids)}

    def __repr__(self) -> str:
        s = self._settings
        return (f"WordPieceTokenizer(vocab_size={self.vocab_size}, lowercase={s.lowercase}, "
                f"strip_accents={s.strip_accents}, model_max_length={s.model_max_length})")


def plain_text_copy(backend: Tokenizer) -> Tokenizer:
    """A copy of ``backend`` that reads special-token strings in the text as ordinary text
    (``encode_special_tokens``); the flag is not serialised, so every copy sets it again."""
    copy = Tokenizer.from_str(backend.to_str())
    copy.encode_special_tokens = True
    return copy


def _count_words(texts: Iterable[str], settings: WordPieceSettings,
                 show_progress: bool) -> Counter[str]:
    """How often each word (BERT normalisation + pre-tokenisation) occurs in ``texts``."""
    splitter = Tokenizer(WordPiece())
    _set_bert_splitting(splitter, settings)
    normalize, split = splitter.normalizer.normalize_str, splitter.pre_tokenizer.pre_tokenize_str
    counts: Counter[str] = Counter()
    for text in progress_bar(texts, desc="counting words", unit=" texts", enabled=show_progress):
        counts.update(word for word, _ in split(normalize(text)))
    return counts


def _train_vocab(counts: Counter[str], settings: WordPieceSettings, vocab_size: int,
                 min_frequency: int, limit_alphabet: int, show_progress: bool) -> dict[str, int]:
    """Run the ``tokenizers`` WordPiece trainer (greedy BPE-style merges) on ``counts``.

    Left to itself the Rust trainer is not deterministic (huggingface/tokenizers#1794): it
    numbers the ``##c`` tokens in hash-map order and breaks ties between equally frequent
    merges by those numbers, so each run can give a different vocabulary. Here the alphabet is
    chosen up front (most frequent first, ties by character) and the ``##c`` tokens are
    registered, sorted, right after the special tokens, so every id the trainer compares is
    fixed.
    """
    alphabet = _alphabet(counts, limit_alphabet)
    inside = sorted({ch for word in counts for ch in word[1:]} & set(alphabet))
    fixed = list(settings.special_tokens().values()) + [CONTINUATION_PREFIX + ch for ch in inside]
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
        special_tokens=fixed, limit_alphabet=len(alphabet), initial_alphabet=alphabet,
        continuing_subword_prefix=CONTINUATION_PREFIX)
    backend = Tokenizer(WordPiece(unk_token=settings.unk_token,
                                  continuing_subword_prefix=CONTINUATION_PREFIX))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # words are already split
    backend.train_from_iterator(_replay(counts), trainer=trainer)
    return backend.get_vocab(with_added_tokens=True)


ALPHABET_WARNING = 1e-4  # share of character occurrences left out of the alphabet that is worth a warning


def _alphabet(counts: Counter[str], limit: int) -> list[str]:
    """The ``limit`` most frequent characters (ties broken by the character), sorted; says how
    much of the text the characters beyond the limit are (they can only become ``[UNK]``)."""
    chars: Counter[str] = Counter()
    for word, count in counts.items():
        for ch in word:
            chars[ch] += count
    ranked = sorted(chars.items(), key=lambda item: (-item[1], item[0]))
    left_out = sum(count for _, count in ranked[limit:])
    if left_out:
        share = left_out / sum(chars.values())
        (logger.warning if share >= ALPHABET_WARNING else logger.info)(
            "limit_alphabet=%d keeps %d of %d characters: the other %d, %.3f%% of the character occurrences, will be "
            "[UNK] (with the whole word they are part of, unless it is a CJK character)%s", limit, limit, len(ranked),
            len(ranked) - limit, 100 * share, "; raise limit_alphabet" if share >= ALPHABET_WARNING else "")
    return sorted(ch for ch, _ in ranked[:limit])


def _replay(counts: Counter[str], chunk: int = 4096) -> Iterator[str]:
    """Feed the trainer each word ``count`` times, as space-separated runs."""
    for word in sorted(counts):
        remaining = counts[word]
        while remaining > 0:
            n = min(remaining, chunk)
            yield " ".join([word] * n)
            remaining -= n


def content_budget(texts: Sequence[str], text_pairs: Sequence[str] | None,
                   max_length: int | None) -> int | None:
    """Text tokens that fit in ``max_length`` beside the 2 (single) or 3 (pair) special tokens
    of a model input (None = no limit); checks the pair lists match."""
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise ConfigError(f"{len(texts)} texts but {len(text_pairs)} text_pairs")
    n_special = 2 if text_pairs is None else 3
    if max_length is not None and max_length < n_special:
        raise ConfigError(f"max_length={max_length} cannot hold the {n_special} special tokens")
    return None if max_length is None else max_length - n_special


def _longest_first(first: list[int], second: list[int] | None,
                   budget: int) -> tuple[list[int], list[int] | None]:
    """Cut ``first`` (and ``second``) to at most ``budget`` tokens in total, keeping the heads.

    The ``longest_first`` rule of ``tokenizers`` (and so of transformers' fast tokenizers): if
    the shorter input fits in half the budget it stays whole and the longer one gets the rest;
    otherwise both get half (the second input gets the odd token). Done here on id lists
    because the Rust truncation also builds every overflow window, which for a pair costs
    (len_a / budget) x (len_b / budget) encodings.
    """
    if second is None:
        return first[:budget], None
    if len(first) + len(second) <= budget:
        return first, second
    n_short = min(len(first), len(second))
    n_long = n_short if n_short > budget else max(n_short, budget - n_short)
    if n_short + n_long > budget:
        n_short, n_long = budget // 2, budget // 2 + budget % 2
    n_first, n_second = (n_long, n_short) if len(first) > len(second) else (n_short, n_long)
    return first[:n_first], second[:n_second]


def _word_ids(enc: Encoding) -> list[int]:
    """Word index per token; without special tokens every token belongs to a word."""
    word_ids = enc.word_ids
    assert None not in word_ids, "a token without a word: special tokens were added"
    return word_ids


def _check_train_args(texts: Iterable[str], vocab_size: int, min_frequency: int,
                      limit_alphabet: int) -> None:
    """Reject arguments the Rust trainer would misread or ignore."""
    if isinstance(texts, (str, bytes)):
        raise ConfigError("texts must be an iterable of strings, not one string")
    if vocab_size <= len(_ROLES):
        raise ConfigError(f"vocab_size={vocab_size} must exceed the {len(_ROLES)} special tokens")
    if min_frequency < 0:
        raise ConfigError(f"min_frequency={min_frequency} must be >= 0")
    if limit_alphabet < 1:
        raise ConfigError(f"limit_alphabet={limit_alphabet} must be >= 1")
