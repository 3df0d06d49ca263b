"""Tiny random RoBERTa, XLM-R, DistilBERT and ELECTRA directories as transformers writes them
(``AutoModelForMaskedLM.save_pretrained``), each with a tokenizer the ``tokenizers`` library
trains on :data:`_tiny_backbones.CORPUS`: byte-level BPE (RoBERTa), Unigram (XLM-R), WordPiece
(DistilBERT, ELECTRA). Shared by the family command and continued-pretraining tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from _tiny_backbones import CORPUS

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _roberta_tokenizer(transformers, directory: Path) -> tuple[int, int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=ROBERTA_SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>",
                                         sep_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                         mask_token="<mask>").save_pretrained(directory)
    return tok.get_vocab_size(), 1


def _unigram_tokenizer(transformers, directory: Path) -> tuple[int, int]:
    """A SentencePiece-style Unigram vocabulary, written by transformers' XLMRobertaTokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=120, special_tokens=ROBERTA_SPECIALS,
                                                            unk_token="<unk>"))
    vocab = [tuple(v) for v in json.loads(tok.to_str())["model"]["vocab"]]
    hf = transformers.XLMRobertaTokenizer(vocab=vocab)
    hf.save_pretrained(directory)
    return len(hf), hf.pad_token_id


def _wordpiece_tokenizer(directory: Path) -> tuple[int, int]:
    from muppets.tokenizers import WordPieceTokenizer

    tok = WordPieceTokenizer.train(CORPUS, vocab_size=200, min_frequency=1)
    tok.save(directory)
    return tok.vocab_size, tok.pad_id


def _config(transformers, name: str, vocab: int, pad: int):
    common = dict(vocab_size=vocab, max_position_embeddings=70, pad_token_id=pad)
    roberta = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, type_vocab_size=1,
                   bos_token_id=0, eos_token_id=2, **common)
    return {"roberta": lambda: transformers.RobertaConfig(**roberta),
            "xlm-roberta": lambda: transformers.XLMRobertaConfig(**roberta),
            "distilbert": lambda: transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=37, **common),
            "electra": lambda: transformers.ElectraConfig(embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                                          num_attention_heads=4, intermediate_size=37, **common)}[name]()


def tiny_family_dir(name: str, directory: Path, seed: int = 0) -> Path:
    """A random 2-layer, 32-wide ``name`` (roberta | xlm-roberta | distilbert | electra: the
    generator, with its MLM head) and its tokenizer, saved into ``directory``."""
    import transformers

    directory.mkdir(parents=True, exist_ok=True)
    if name == "roberta":
        vocab, pad = _roberta_tokenizer(transformers, directory)
    elif name == "xlm-roberta":
        vocab, pad = _unigram_tokenizer(transformers, directory)
    else:
        vocab, pad = _wordpiece_tokenizer(directory)
    torch.manual_seed(seed)
    transformers.AutoModelForMaskedLM.from_config(_config(transformers, name, vocab, pad)).save_pretrained(directory)
    return directory
