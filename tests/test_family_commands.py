"""Tiny random RoBERTa, DistilBERT and ELECTRA directories (written by transformers, with a
tokenizer muppets trains) through what the commands call: a task model fine-tuned one step,
saved and read back (classify and tag), word embeddings (probe / embed), the attention view,
the serve engine (embeddings, fill-mask availability) and ONNX export with its check."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from _tiny_backbones import CORPUS  # noqa: E402

from muppets import families  # noqa: E402

NAMES = ("roberta", "distilbert", "electra")


def _tokenizer(name: str, directory):
    """RoBERTa: a byte-level BPE tokenizer.json written by transformers; others: WordPiece."""
    if name == "roberta":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>",
                                             sep_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                             mask_token="<mask>").save_pretrained(directory)
        return tok.get_vocab_size(), 1
    from muppets.tokenizers import WordPieceTokenizer

    tok = WordPieceTokenizer.train(CORPUS, vocab_size=200, min_frequency=1)
    tok.save(directory)
    return tok.vocab_size, tok.pad_id


@pytest.fixture(scope="module", params=NAMES)
def model_dir(request, tmp_path_factory):
    name = request.param
    directory = tmp_path_factory.mktemp(name)
    vocab, pad = _tokenizer(name, directory)
    common = dict(vocab_size=vocab, max_position_embeddings=70, pad_token_id=pad)
    cfg = {"roberta": lambda: transformers.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                         intermediate_size=37, type_vocab_size=1, **common),
           "distilbert": lambda: transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=37, **common),
           "electra": lambda: transformers.ElectraConfig(embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                                         num_attention_heads=4, intermediate_size=37, **common)}[name]()
    torch.manual_seed(0)
    transformers.AutoModelForMaskedLM.from_config(cfg).save_pretrained(directory)
    return name, directory


@pytest.mark.parametrize("kind", ["classify", "tag"])
def test_finetune_one_step_save_and_predict(model_dir, kind, tmp_path):
    from muppets.tasks.spec import TagExample, TextExample
    from muppets.transfer.features import make_features
    from muppets.transfer.models import load_task_model, load_tokenizer, new_task_model, save_task_model

    name, directory = model_dir
    tok = load_tokenizer(directory)
    labels = ["O", "X"] if kind == "tag" else ["neg", "pos"]
    if kind == "tag":
        examples = [TagExample(id="1", tokens=["the", "river", "bank"], tags=["O", "X", "O"], source="t:1")]
    else:
        examples = [TextExample(id="1", text="the river bank", text_b="money", label="pos", source="t:1")]
    feats = make_features(kind, examples, tok, labels=labels)
    ids = torch.tensor([feats[0].input_ids])
    types = torch.tensor([feats[0].token_type_ids])
    label = torch.tensor([feats[0].label]) if kind == "tag" else torch.tensor([1])
    model = new_task_model(directory, kind, 2, tok)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(ids, types, torch.ones_like(ids), labels=label).loss
    loss.backward()
    opt.step()
    save_task_model(model.eval(), tmp_path / "best", tok, labels)
    again = load_task_model(tmp_path / "best")
    assert families.of_model(again).name == name
    with torch.no_grad():
        assert torch.allclose(again.eval()(ids, types).logits, model(ids, types).logits, atol=1e-6)


def test_embed_probe_and_attention(model_dir):
    from muppets.analysis.attention import load_attention_model
    from muppets.transfer.embedders import load_embedder

    name, directory = model_dir
    embedder = load_embedder(directory)
    assert embedder.kind == name and embedder.pooling == "first"
    vectors = embedder.embed_batch([["the", "river", "bank"], ["money"]], [0, 2])
    assert vectors[0].shape == (2, 3, 32) and vectors[1].shape == (2, 1, 32)
    view = load_attention_model(directory).view("the river bank", "money")
    assert view.probs.shape[:2] == (2, 4) and view.is_pair and not view.causal


def test_serve_engine_embeds_and_knows_its_mlm(model_dir):
    from muppets.serve.config import ServeConfig
    from muppets.serve.engines import load_torch_engine

    name, directory = model_dir
    engine = load_torch_engine(ServeConfig(str(directory), port=0, backend="torch"))
    assert engine.kind == name and engine.has_mlm
    vectors = engine.embed_rows(engine.token_ids(["the river bank", "money"], True))
    assert len(vectors) == 2 and vectors[0].shape == (32,)


def test_export_onnx_checks_against_torch(model_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    from muppets.interop.onnx_export import export_onnx

    name, directory = model_dir
    report = export_onnx(directory, tmp_path / "onnx")
    assert report.family == name and report.max_abs_diff is not None and report.max_abs_diff <= 1e-4
