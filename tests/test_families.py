"""Parity tier: RoBERTa, XLM-R, DistilBERT and ELECTRA directories that transformers writes
(tiny random configs, no download) read by muppets' registry of families: every encoder layer
<= 1e-5 from transformers', MLM logits <= 1e-4, and muppets' saved directory loads back in
transformers' Auto classes with no missing key and the same outputs. Plus the registry's errors."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from muppets import families  # noqa: E402
from muppets.errors import CheckpointError  # noqa: E402

V, H, L, HEADS, FF = 99, 32, 2, 4, 37

torch.manual_seed(0)


def _roberta(cls=None):
    cfg = (cls or transformers.RobertaConfig)(vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS,
                                              intermediate_size=FF, max_position_embeddings=40, type_vocab_size=1,
                                              pad_token_id=1, bos_token_id=0, eos_token_id=2)
    return cfg


CONFIGS = {
    "roberta": lambda: _roberta(),
    "xlm-roberta": lambda: _roberta(transformers.XLMRobertaConfig),
    "camembert": lambda: _roberta(transformers.CamembertConfig),
    "distilbert": lambda: transformers.DistilBertConfig(vocab_size=V, dim=H, n_layers=L, n_heads=HEADS, hidden_dim=FF,
                                                         max_position_embeddings=40, pad_token_id=0),
    "electra": lambda: transformers.ElectraConfig(vocab_size=V, embedding_size=16, hidden_size=H, num_hidden_layers=L,
                                                  num_attention_heads=HEADS, intermediate_size=FF,
                                                  max_position_embeddings=40, pad_token_id=0),
    "electra-same-width": lambda: transformers.ElectraConfig(vocab_size=V, embedding_size=H, hidden_size=H,
                                                             num_hidden_layers=L, num_attention_heads=HEADS,
                                                             intermediate_size=FF, max_position_embeddings=40),
}
FAMILY = {"roberta": "roberta", "xlm-roberta": "roberta", "camembert": "roberta", "distilbert": "distilbert",
          "electra": "electra", "electra-same-width": "electra"}


def _randomise(model: torch.nn.Module) -> None:
    """Every weight random (LayerNorms and biases too), so a swapped name cannot go unnoticed."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)


def _inputs(pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, V, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    return ids.masked_fill(mask == 0, pad_id), mask


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def hf_dir(request, tmp_path_factory):
    cfg = CONFIGS[request.param]()
    torch.manual_seed(0)
    model = transformers.AutoModelForMaskedLM.from_config(cfg).eval()
    _randomise(model)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return request.param, path, model


def _max_layer_diff(ours, theirs, mask) -> float:
    real = mask.bool()[..., None]
    return max(float(((a - b) * real).abs().max()) for a, b in zip(ours, theirs))


def test_family_of_each_directory(hf_dir):
    name, path, _ = hf_dir
    assert families.of_directory(path).name == FAMILY[name]


def test_encoder_layers_and_mlm_logits_match_transformers(hf_dir):
    name, path, hf = hf_dir
    family = families.of_directory(path)
    ours = family.load(path).eval()
    ids, mask = _inputs(hf.config.pad_token_id or 0)
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        mine = ours(ids, None, mask)
    assert len(mine.encoded.layers) == L + 1
    layer_diff = _max_layer_diff(mine.encoded.layers, out.hidden_states, mask)
    logit_diff = float(((mine.mlm_logits - out.logits) * mask[..., None]).abs().max())
    print(f"{name}: layers {layer_diff:.2e}, mlm logits {logit_diff:.2e}")
    assert layer_diff <= 1e-5
    assert logit_diff <= 1e-4


def test_saved_directory_loads_in_transformers_with_no_missing_key(hf_dir, tmp_path):
    name, path, hf = hf_dir
    family = families.of_directory(path)
    ours = family.load(path).eval()
    family.save(ours, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == hf.config.model_type
    back, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"], info
    bare, info = transformers.AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"], info
    ids, mask = _inputs(hf.config.pad_token_id or 0)
    with torch.no_grad():
        want, got = hf(input_ids=ids, attention_mask=mask).logits, back.eval()(input_ids=ids, attention_mask=mask).logits
        hidden = bare.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
        mine = ours(ids, None, mask).encoded.last
    assert float(((want - got) * mask[..., None]).abs().max()) <= 1e-5
    assert float(((hidden - mine) * mask[..., None]).abs().max()) <= 1e-5
    again = family.load(tmp_path).eval().state_dict()  # and muppets reads its own directory back
    kept = [k for k in ours.state_dict() if not k.startswith(("nsp.", "pooler."))]  # heads these families lack
    assert kept and all(torch.equal(again[k], ours.state_dict()[k]) for k in kept)


def test_electra_discriminator_reads_as_an_encoder(tmp_path):
    cfg = CONFIGS["electra"]()
    torch.manual_seed(0)
    hf = transformers.ElectraForPreTraining(cfg).eval()
    _randomise(hf)
    hf.save_pretrained(tmp_path)
    family = families.of_directory(tmp_path)
    ours = family.load(tmp_path).eval()
    ids, mask = _inputs(0)
    with torch.no_grad():
        want = hf.electra(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        mine = ours.backbone(ids, None, mask).layers
    assert _max_layer_diff(mine, want, mask) <= 1e-5
    assert not family.has_mlm(tmp_path)  # its head detects replaced tokens: no fill-mask


@pytest.mark.parametrize("kind", ["classify", "tag", "span", "choice"])
@pytest.mark.parametrize("name", ["roberta", "distilbert", "electra"])
def test_task_models_save_as_transformers_task_directories(name, kind, tmp_path):
    """A task model saved by its family loads in transformers' AutoModelFor<Task> with its
    head (no missing key) and gives the same logits."""
    torch.manual_seed(0)
    src = tmp_path / "src"
    hf = transformers.AutoModelForMaskedLM.from_config(CONFIGS[name]()).eval()
    hf.save_pretrained(src)
    family = families.of_directory(src)
    model = family.new_task_model(src, kind, 3, None)
    _randomise(model)
    model.eval()
    family.save_task_model(model, tmp_path / "task", None, ["a", "b", "c"])
    auto = {"classify": transformers.AutoModelForSequenceClassification, "tag": transformers.AutoModelForTokenClassification,
            "span": transformers.AutoModelForQuestionAnswering, "choice": transformers.AutoModelForMultipleChoice}[kind]
    theirs, info = auto.from_pretrained(tmp_path / "task", output_loading_info=True)
    assert not info["missing_keys"], info
    ids, mask = _inputs(hf.config.pad_token_id or 0)
    if kind == "choice":
        ids, mask = ids[None], mask[None]  # (1, 3 choices, T)
    with torch.no_grad():
        want = theirs.eval()(input_ids=ids, attention_mask=mask).logits if kind != "span" else \
            torch.stack([x for x in theirs.eval()(input_ids=ids, attention_mask=mask)[:2]], -1)
        got = model(ids, None, mask).logits
    if kind in ("tag", "span"):
        want, got = want * mask[..., None], got * mask[..., None]
    assert float((want - got).abs().max()) <= 1e-5
    again = families.get(family.name).load_task_model(tmp_path / "task")
    assert not again.fresh_head


def test_unknown_model_type_names_the_file_and_key(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "albert"}))
    with pytest.raises(CheckpointError) as err:
        families.of_directory(tmp_path)
    assert str(tmp_path / "config.json") in str(err.value) and "'model_type'" in str(err.value)
    assert "albert" in str(err.value)


def test_every_family_registered_once_with_its_model_types():
    names = [f.name for f in families.families()]
    assert sorted(names) == ["bert", "bilstm", "distilbert", "electra", "gpt", "roberta"]
    for t, name in {"xlm-roberta": "roberta", "camembert": "roberta", "gpt2": "gpt", "bert": "bert",
                    "distilbert": "distilbert", "electra": "electra"}.items():
        assert families.for_model_type(t).name == name
    with pytest.raises(ValueError):
        families.register(families.get("bert"))
