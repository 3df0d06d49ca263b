"""Multi-task learning: samplers draw in their stated proportions; uncertainty, GradNorm and DWA
weights equal hand computations; a task of weight 0 leaves the single-task run unchanged;
hard sharing holds one encoder, joint aligned tasks encode once, soft sharing's penalty is the
pairwise distance; kill-and-resume equals an uninterrupted run; MT-DNN's second stage; CLI."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from muppets.cli import main as cli_main
from muppets.errors import ConfigError, TrainingInterrupted
from muppets.interop.hf_bert import save_hf_bert
from muppets.models.bert import BertConfig, BertForPreTraining
from muppets.multitask import MultitaskConfig, TaskEntry, TaskSchedule, TaskWeighting, run, task_probabilities
from muppets.multitask import plots as mt_plots
from muppets.multitask.model import MultiTaskModel
from muppets.tasks.spec import TagExample, TaskData, TaskSpec
from muppets.train import read_log
from muppets.transfer import finetune as ft
from muppets.transfer.models import load_task_model, new_task_model

mt_run = importlib.import_module("muppets.multitask.run")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_finetune import FILLER, _one_thread, cfg_for, text_task, tok  # noqa: E402,F401  (fixtures shared)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tok) -> Path:
    """A tiny random BERT without dropout (so that runs can be compared exactly)."""
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                     intermediate_size=37, max_position_embeddings=64, pad_token_id=tok.pad_id,
                     hidden_dropout=0.0, attention_dropout=0.0)
    out = tmp_path_factory.mktemp("tiny-bert-nodrop")
    save_hf_bert(BertForPreTraining(cfg), out, tok)
    return out


def tag_pair(n: int = 24) -> tuple[TaskData, TaskData]:
    """Two tagging tasks on the same sentences: names (NER-like) and a word-class tag (POS-like)."""
    rng = np.random.default_rng(3)
    names = ["john", "mary", "paris", "london"]
    sents = [list(rng.choice(FILLER + names, 6)) for _ in range(n + 8)]
    ner = [["B-PER" if w in names[:2] else "B-LOC" if w in names[2:] else "O" for w in s] for s in sents]
    pos = [["NAME" if w in names else "DET" if w in ("the", "a") else "WORD" for w in s] for s in sents]

    def task(name: str, tags: list, labels: list, metric: str) -> TaskData:
        ex = [TagExample(f"s{i}", s, t, "toy") for i, (s, t) in enumerate(zip(sents, tags))]
        return TaskData(TaskSpec(name, "tag", labels, metric, ("tokens",)), {"train": ex[:n], "dev": ex[n:]})

    return (task("ner", ner, ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], "entity_f1"),
            task("pos", pos, ["DET", "NAME", "WORD"], "token_accuracy"))


def mt_config(model_dir: Path, run_dir: Path, names: list[str], **kw) -> MultitaskConfig:
    finetune = kw.pop("finetune", {})
    base = cfg_for(model_dir, run_dir / "unused", **{"epochs": 2, **finetune})
    return MultitaskConfig(tasks=[TaskEntry(name=n, weight=kw.pop(f"weight_{n}", 1.0)) for n in names],
                           run_dir=str(run_dir), finetune=base, **kw)


# ----------------------------------------------------------------------------- samplers


def test_sampler_probabilities_follow_their_formulas():
    sizes = [100, 400, 1600]
    assert task_probabilities(sizes, "proportional") == pytest.approx(np.array(sizes) / 2100)
    root = np.sqrt(sizes)
    assert task_probabilities(sizes, "temperature", temperature=2.0) == pytest.approx(root / root.sum())
    assert task_probabilities(sizes, "uniform") == pytest.approx([1 / 3] * 3)
    start = task_probabilities(sizes, "annealed", progress=0.0)
    end = task_probabilities(sizes, "annealed", progress=1.0)
    assert start == pytest.approx(np.array(sizes) / 2100)
    powered = np.array(sizes, float) ** 0.2
    assert end == pytest.approx(powered / powered.sum())
    with pytest.raises(ConfigError):
        task_probabilities([10, 0], "uniform")
    with pytest.raises(ConfigError):
        task_probabilities([10], "nope")


@pytest.mark.parametrize("sampler", ["proportional", "temperature", "uniform"])
def test_schedule_draws_tasks_in_their_stated_proportions(sampler):
    sizes, steps = [5, 20, 80], 30_000
    schedule = TaskSchedule(sizes, sampler, steps, epochs=1, seed=7)
    counts = schedule.counts(steps)
    p = task_probabilities(sizes, sampler)
    sd = np.sqrt(steps * p * (1 - p))
    assert np.all(np.abs(counts - steps * p) < 4 * sd), (counts, steps * p)


def test_annealed_schedule_moves_from_proportional_towards_uniform():
    sizes, steps = [10, 90], 40_000
    schedule = TaskSchedule(sizes, "annealed", steps, epochs=4, seed=1)
    first = np.bincount([schedule.task_at(s) for s in range(0, 10_000)], minlength=2) / 10_000
    last = np.bincount([schedule.task_at(s) for s in range(30_000, 40_000)], minlength=2) / 10_000
    assert first[0] == pytest.approx(0.10, abs=0.015)
    expected = 10 ** 0.2 / (10 ** 0.2 + 90 ** 0.2)
    assert last[0] == pytest.approx(expected, abs=0.015)


def test_schedule_positions_count_earlier_draws_and_survive_a_jump_back():
    schedule = TaskSchedule([3, 4], "uniform", 50, epochs=1, seed=0)
    seen = [0, 0]
    for step in range(50):
        task, index = schedule.position(step)
        assert index == seen[task]
        seen[task] += 1
    assert schedule.position(10) == TaskSchedule([3, 4], "uniform", 50, 1, 0).position(10)


# ----------------------------------------------------------------------------- weightings


def test_uncertainty_weighting_matches_hand_computation():
    lr, weight_lr = 1e-4, 0.05
    w = TaskWeighting(["a", "b"], "uncertainty", lr=lr, weight_lr=weight_lr)
    with torch.no_grad():
        w.raw.copy_(torch.tensor([0.3, -0.2]) / w.scale)  # s = (0.3, -0.2)
    sums = {"a": torch.tensor(6.0, requires_grad=True), "b": torch.tensor(2.0, requires_grad=True)}
    units = {"a": 3.0, "b": 4.0}  # mean losses 2.0 and 0.5
    terms = w.combine(sums, units)
    total = terms["task:a"] / 3.0 + terms["task:b"] / 4.0 + terms["weighting"]
    s = torch.tensor([0.3, -0.2])
    L = torch.tensor([2.0, 0.5])
    assert float(total.detach()) == pytest.approx(float((torch.exp(-s) * L + s).sum()), rel=1e-6)
    total.backward()
    # d/ds (e^-s L + s) = 1 - e^-s L; raw = s / scale
    expected = (1 - torch.exp(-s) * L) * (weight_lr / lr)
    assert torch.allclose(w.raw.grad, expected, rtol=1e-5)
    assert torch.allclose(w.weights(), torch.exp(-s), rtol=1e-6)


def test_gradnorm_matches_hand_computation():
    torch.manual_seed(0)
    shared = torch.nn.Linear(3, 2, bias=False)
    heads = [torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)]
    x = torch.randn(5, 3)
    w = TaskWeighting(["a", "b"], "gradnorm", lr=1e-3, weight_lr=1e-2, alpha=1.5)
    with torch.no_grad():
        w.raw.copy_(torch.tensor([0.4, -0.1]) / w.scale)
        w.initial.copy_(torch.tensor([2.0, 1.0]))  # L(0): pretend an earlier step set them

    def losses():
        h = shared(x)
        return [(heads[k](h) ** 2).sum() * (k + 1) for k in range(2)]

    sums = dict(zip("ab", losses()))
    units = {"a": 5.0, "b": 5.0}
    terms = w.combine(sums, units, shared.weight)
    assert float(terms["weighting"].detach()) == 0.0
    terms["weighting"].backward(retain_graph=True)
    got = w.raw.grad.clone()
    # the GradNorm loss trains the weights alone: not a trace of it reaches the network
    for p in [shared.weight, *heads[0].parameters(), *heads[1].parameters()]:
        assert p.grad is None or float(p.grad.abs().sum()) == 0.0
    # by hand: weights, gradient norms at W, inverse training rates, target, |G - target| gradient
    theta = torch.tensor([0.4, -0.1], requires_grad=True)
    weights = 2 * torch.softmax(theta, 0)
    means = [s / 5.0 for s in losses()]
    norms = torch.stack([torch.autograd.grad(m, shared.weight, retain_graph=True)[0].norm() for m in means])
    L = torch.stack([m.detach() for m in means])
    ratio = L / torch.tensor([2.0, 1.0])
    r = ratio / ratio.mean()
    G = weights * norms
    target = (G.mean() * r ** 1.5).detach()
    (g_theta,) = torch.autograd.grad((G - target).abs().sum(), theta)
    assert torch.allclose(got, g_theta * w.scale, rtol=1e-4, atol=1e-7)
    # the task terms carry the weights as constants: no gradient reaches raw from them
    w.raw.grad = None
    (terms["task:a"] + terms["task:b"]).backward()
    assert w.raw.grad is None or float(w.raw.grad.abs().sum()) == 0.0
    assert float(w.weights().sum()) == pytest.approx(2.0)


def test_gradnorm_normalises_the_top_layers_feed_forward_output_not_the_pooler(model_dir, tok):
    from muppets.multitask.model import last_shared_weight

    backbone = new_task_model(model_dir, "classify", 2, tok).backbone
    top = backbone.layers[-1].ffn.down.weight
    assert last_shared_weight(backbone) is top
    assert [n for n, p in backbone.named_parameters() if p is top][0].startswith(f"layers.{len(backbone.layers) - 1}.")


def test_gradnorm_records_the_first_losses():
    shared = torch.nn.Parameter(torch.ones(2, 2))
    w = TaskWeighting(["a", "b"], "gradnorm", lr=1e-3)
    sums = {"a": (shared * 3).sum(), "b": (shared * 1).sum()}
    w.combine(sums, {"a": 2.0, "b": 4.0}, shared)
    assert w.initial.tolist() == pytest.approx([6.0, 1.0])


def test_dwa_weights_follow_the_loss_ratios_of_the_last_two_windows():
    w = TaskWeighting(["a", "b"], "dwa", temperature=2.0, window=2)
    feed = [(8.0, 2.0, 2.0), (4.0, 6.0, 1.0), (2.0, 2.0, 1.0), (6.0, 6.0, 3.0)]  # (sum a, sum b, units)
    for k, (a, b, n) in enumerate(feed):  # window means: (12/3, 8/3) then (8/4, 8/4)
        assert torch.allclose(w.weights(), torch.ones(2)), k  # 1 until two windows are closed
        w.combine({"a": torch.tensor(a), "b": torch.tensor(b)}, {"a": n, "b": n})
    ratio = torch.tensor([2.0 / 4.0, 2.0 / (8 / 3)])
    assert torch.allclose(w.weights(), 2 * torch.softmax(ratio / 2.0, 0), atol=1e-6)
    terms = w.combine({"a": torch.tensor(1.0), "b": torch.tensor(1.0)}, {"a": 1.0, "b": 1.0})
    assert float(terms["task:a"]) == pytest.approx(float(2 * torch.softmax(ratio / 2, 0)[0]), rel=1e-6)


def test_config_errors_name_the_setting(model_dir, tmp_path):
    with pytest.raises(ConfigError, match="joint"):
        mt_config(model_dir, tmp_path, ["a", "b"], weighting="uncertainty")
    with pytest.raises(ConfigError, match="unique"):
        mt_config(model_dir, tmp_path, ["a", "a"])
    with pytest.raises(ConfigError, match="sampler"):
        mt_config(model_dir, tmp_path, ["a"], sampler="sqrt")
    with pytest.raises(ConfigError, match=r"tasks\[1\]\.weight \(b\): invalid value -1"):
        mt_config(model_dir, tmp_path, ["a", "b"], weight_b=-1.0)


@pytest.mark.parametrize("settings, message", [
    ({"mode": "joint", "sampler": "uniform"}, "sampler=uniform: samplers draw one task per step"),
    ({"soft_penalty": 5.0}, "soft_penalty=5.0: the penalty between encoders needs sharing=soft"),
    ({"mode": "joint", "weighting": "dwa", "weight_b": 2.0}, r"tasks\[1\]\.weight \(b\): 2.0 is a fixed weight"),
    ({"mode": "joint", "weighting": "gradnorm", "sharing": "soft"}, "gradnorm .* needs sharing=hard"),
    ({"mode": "joint", "weighting": "uncertainty", "names": ["a"]}, r"weighting=uncertainty .* one task \(a\)"),
    ({"sharing": "soft", "names": ["a"]}, r"sharing=soft .* one task \(a\): list more tasks, or use sharing=hard"),
])
def test_a_setting_the_run_would_not_use_is_refused(model_dir, tmp_path, settings, message):
    names = settings.pop("names", ["a", "b"])
    with pytest.raises(ConfigError, match=message):
        mt_config(model_dir, tmp_path, names, **settings)


def test_a_config_file_error_names_its_line(tmp_path):
    from muppets.multitask import load_config

    path = tmp_path / "mt.yaml"
    path.write_text("mode: joint\nweighting: dwa\ntasks:\n  - name: rte\n  - name: rte\n")
    with pytest.raises(ConfigError, match=rf"^{path}:5: tasks: names must be unique"):
        load_config(path, [])
    path.write_text("mode: joint\nweighting: dwa\ntasks:\n  - name: rte\n  - name: mrpc\n    weight: 2\n")
    with pytest.raises(ConfigError, match=rf"^{path}:6: tasks\[1\]\.weight \(mrpc\): 2\.0 is a fixed weight"):
        load_config(path, [])
    path.write_text("mode: joint\nsampler: uniform\ntasks:\n  - name: rte\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: sampler=uniform"):
        load_config(path, [])
    path.write_text("tasks:\n  - name: rte\n  - name: mrcp\n")  # a typo: refused before the model loads
    with pytest.raises(ConfigError, match=rf"^{path}:3: tasks\[1\]\.name: unknown task 'mrcp'; registered tasks: sst2, "):
        load_config(path, [])
    path.write_text("tasks:\n  - name: mine\n    files: {train: t.tsv, dev: d.tsv}\n  - name: rte\n")
    assert load_config(path, []).names == ["mine", "rte"]  # a task of your own files may take any name


# ----------------------------------------------------------------------------- model


def test_soft_sharing_penalty_is_the_pairwise_distance(model_dir, tok):
    models = {n: new_task_model(model_dir, "classify", 2, tok) for n in "abc"}
    with torch.no_grad():
        for k, m in enumerate(models.values()):
            for p in m.backbone.parameters():
                p.add_(0.01 * k * torch.ones_like(p) + 0.001 * torch.randn_like(p))
    net = MultiTaskModel(models, TaskWeighting(list(models)), "soft", penalty=0.5)
    flat = [torch.cat([p.flatten() for p in m.backbone.parameters()]) for m in models.values()]
    pairwise = sum(((flat[a] - flat[b]) ** 2).sum() for a in range(3) for b in range(a + 1, 3))
    assert float(net.share_penalty().detach()) == pytest.approx(0.5 * float(pairwise.detach()), rel=1e-4)
    # its gradient is the pairwise sum's, computed by autograd through the copies
    params = [list(m.backbone.parameters()) for m in models.values()]
    reference = 0.5 * sum(((pa.float() - pb.float()) ** 2).sum() for a in range(3) for b in range(a + 1, 3)
                          for pa, pb in zip(params[a], params[b]))
    expected = torch.autograd.grad(reference, [p for ps in params for p in ps])
    (3.0 * net.share_penalty()).backward()
    for p, e in zip([p for ps in params for p in ps], expected):
        assert torch.allclose(p.grad, 3.0 * e, rtol=1e-4, atol=1e-5)  # fp32 differences of weights near 1
    with pytest.raises(ConfigError, match="one backbone module per task"):
        shared = dict(models)
        shared["b"].backbone = shared["a"].backbone
        MultiTaskModel(shared, TaskWeighting(list(models)), "soft")



def test_soft_sharing_from_random_init_starts_every_encoder_at_one_draw(model_dir, tok):
    datas = {"cls": text_task("classify", n=24), "pair": text_task("pair", n=16, seed=2)}
    cfg = mt_config(model_dir, Path("unused"), list(datas), sharing="soft", finetune={"init": "random"})
    tasks = mt_run._build_tasks(cfg, datas, model_dir, tok, torch.device("cpu"))
    a, b = (t.model.backbone.state_dict() for t in tasks)
    assert tasks[0].model.backbone is not tasks[1].model.backbone
    assert all(torch.equal(a[k], b[k]) for k in a)
    pretrained = new_task_model(model_dir, "classify", 2, tok).backbone.state_dict()
    assert not all(torch.equal(a[k], pretrained[k]) for k in a)  # drawn afresh, not the checkpoint


# ----------------------------------------------------------------------------- runs


def test_a_task_of_weight_zero_leaves_the_single_task_run_unchanged(model_dir, tmp_path):
    """Joint training of A (weight 1) and B (weight 0, fewer batches): A's best model, its
    selection history and its predictions equal a plain fine-tuning run of A."""
    a, b = text_task("classify", n=40, seed=0), text_task("pair", n=16, seed=1)
    single = ft.run(cfg_for(model_dir, tmp_path / "single", epochs=2), resume=False, data=a)
    cfg = mt_config(model_dir, tmp_path / "mt", ["a", "b"], mode="joint", weight_b=0.0)
    summary = run(cfg, resume=False, datas={"a": a, "b": b})
    assert summary["steps"] == single["steps"]
    assert summary["per_task"]["a"]["best_step"] == single["best_step"]
    assert summary["per_task"]["a"]["best_selection_score"] == pytest.approx(single["best_selection_score"], abs=1e-9)
    assert single["best_selection_score"] is not None
    assert summary["per_task"]["a"]["dev"] == pytest.approx(single["dev"], abs=1e-9)
    ours = load_task_model(tmp_path / "mt" / "tasks" / "a" / "best").state_dict()
    theirs = load_task_model(tmp_path / "single" / "best").state_dict()
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.allclose(ours[key], theirs[key], atol=1e-6), key
    mt_losses = [r["loss/task:a"] for r in read_log(tmp_path / "mt") if "loss/task:a" in r]
    single_losses = [r["loss/task"] for r in read_log(tmp_path / "single") if "loss/task" in r]
    assert mt_losses == pytest.approx(single_losses, abs=1e-6)


def test_alternating_hard_sharing_every_kind_then_mtdnn_finetuning(model_dir, tmp_path):
    datas = {"cls": text_task("classify", n=24), "pair": text_task("pair", n=24, seed=2),
             "reg": text_task("regress", n=24, seed=3), "tag": tag_pair()[0]}
    cfg = mt_config(model_dir, tmp_path / "mt", list(datas), sampler="temperature", then_finetune=True,
                    finetune_epochs=1)
    summary = run(cfg, resume=False, datas=datas)
    for name in datas:
        task_dir = tmp_path / "mt" / "tasks" / name
        assert (task_dir / "best" / "config.json").is_file() and (task_dir / "final" / "config.json").is_file()
        assert summary["per_task"][name]["dev"], name
        assert (tmp_path / "mt" / "finetuned" / name / "metrics.json").is_file()
        assert summary["per_task"][name]["finetuned"]["dev"]
    assert (tmp_path / "mt" / "multitask.png").is_file()
    records = read_log(tmp_path / "mt")
    trained = {k for r in records for k in r if k.startswith("loss/task:")}
    assert trained == {f"loss/task:{n}" for n in datas}
    assert all(sum(k.startswith("loss/task:") for k in r) == 1 for r in records if "loss" in r)
    evals = [r for r in records if "eval/mean" in r]
    assert evals and all(f"eval/weight/{n}" in evals[-1] for n in datas)
    assert json.loads((tmp_path / "mt" / "metrics.json").read_text())["per_task"].keys() == datas.keys()


def test_mtdnn_second_stage_can_follow_a_finished_stage_and_other_settings_cannot(model_dir, tmp_path):
    from muppets.errors import RunDirError

    datas = {"a": text_task("classify", n=16), "b": text_task("pair", n=16, seed=2)}
    run(mt_config(model_dir, tmp_path / "mt", list(datas)), datas=datas)
    summary = run(mt_config(model_dir, tmp_path / "mt", list(datas), then_finetune=True, finetune_epochs=1), datas=datas)
    assert all(summary["per_task"][name]["finetuned"]["dev"] for name in datas)
    with pytest.raises(RunDirError, match="finetune.lr"):
        run(mt_config(model_dir, tmp_path / "mt", list(datas), finetune={"lr": 5e-4}), datas=datas)


def test_joint_aligned_tags_share_one_batch_and_one_encoder_pass(model_dir, tmp_path, monkeypatch):
    ner, pos = tag_pair()
    calls = []
    original = mt_run.MultiTaskModel.forward

    def counting(self, **batch):
        first = next(iter(self.tasks.values())).backbone
        handle = first.register_forward_hook(lambda *a: calls.append(1))
        try:
            return original(self, **batch)
        finally:
            handle.remove()

    monkeypatch.setattr(mt_run.MultiTaskModel, "forward", counting)
    drawn = []
    draw = mt_run.write_multitask_plot
    monkeypatch.setattr(mt_run, "write_multitask_plot", lambda *a: drawn.append(draw(*a)))
    cfg = mt_config(model_dir, tmp_path / "mt", ["ner", "pos"], mode="joint", weighting="uncertainty")
    summary = run(cfg, resume=False, datas={"ner": ner, "pos": pos})
    assert len(calls) == summary["steps"]  # one encoder pass per step for both tasks
    records = read_log(tmp_path / "mt")
    assert all({"loss/task:ner", "loss/task:pos", "loss/weighting"} <= r.keys() for r in records if "loss" in r)
    weights = [r["eval/weight/pos"] for r in records if "eval/weight/pos" in r]
    assert weights[-1] != 1.0  # the learned weights moved
    path = [r["weight/pos"] for r in records if "loss" in r]  # every step's weight, not only at evaluations
    assert len(path) == summary["steps"] and path[0] != path[-1] and path[-1] == pytest.approx(weights[-1])
    assert "accuracy" in summary["per_task"]["pos"]["dev"]
    # multitask.png: redrawn after every evaluation and at the end, with the weights' path and
    # each task's loss divided by the weight its step used (1 at the first step)
    assert len(drawn) == len(weights) + 1 and all(p == tmp_path / "mt" / "multitask.png" for p in drawn)
    panels = {p.title: p for p in mt_plots.plan(records, {"ner": "f1", "pos": "accuracy"})}
    assert list(panels) == ["selection score per task", "task weight", "task training loss, unweighted"]
    assert [len(s.steps) for s in panels["task weight"].series] == [summary["steps"]] * 2
    steps, pos_loss = mt_plots.unweighted_losses(records, "pos", 1.0)
    trained = [r for r in records if "loss" in r]
    assert pos_loss[0] == trained[0]["loss/task:pos"]
    assert pos_loss[-1] == pytest.approx(trained[-1]["loss/task:pos"] / trained[-2]["weight/pos"])


def test_unweighted_task_loss_divides_by_the_weight_its_step_used():
    records = [{"step": 1, "loss/task:a": 3.0, "weight/a": 2.0},  # step 1 ran with the start weight
               {"step": 1, "eval/weight/a": 2.0},  # an evaluation record: not a step's weight
               {"step": 2, "loss/task:a": 4.0, "weight/a": 0.0},
               {"step": 3, "loss/task:a": 0.0, "weight/a": 0.5},  # weight 0: nothing to recover
               {"step": 4, "loss/task:b": 1.0},  # another task's step (alternating)
               {"step": 5, "loss/task:a": 1.0}]
    steps, values = mt_plots.unweighted_losses(records, "a", 1.5)
    assert steps.tolist() == [1, 2, 5] and values.tolist() == [2.0, 2.0, 2.0]


def test_the_weight_panel_appears_only_when_a_weight_moved():
    fixed = [{"step": s, "loss/task:a": 1.0 / s, "loss/task:b": 2.0 / s} for s in (1, 2, 3, 4)]
    fixed += [{"step": 4, "eval/a/f1": 0.5, "eval/b/f1": 0.6, "eval/weight/a": 1.0, "eval/weight/b": 2.0}]
    panels = mt_plots.plan(fixed, {"a": "f1", "b": "f1"}, {"a": 1.0, "b": 2.0})
    assert [p.title for p in panels] == ["selection score per task", "task training loss, unweighted"]
    assert panels[1].series[1].values[0] == pytest.approx(1.0)  # b's 2.0 / its fixed weight 2


@pytest.mark.parametrize("settings", [dict(sampler="annealed"),
                                      dict(mode="joint", weighting="dwa", dwa_window=2),
                                      dict(mode="joint", weighting="gradnorm"),
                                      dict(sharing="soft", soft_penalty=0.1)])
def test_kill_and_resume_equals_an_uninterrupted_run(model_dir, tmp_path, monkeypatch, settings):
    datas = {"cls": text_task("classify", n=24), "pair": text_task("pair", n=16, seed=2)}
    fin = {"eval_every": 2, "epochs": 2}
    full = run(mt_config(model_dir, tmp_path / "full", list(datas), finetune=fin, **settings),
               resume=False, datas=datas)
    original = mt_run._evaluator

    def killing(tasks, tok):
        evaluate = original(tasks, tok)

        def wrapped(model):
            out = evaluate(model)
            if not hasattr(wrapped, "done"):
                wrapped.done = True
                os.kill(os.getpid(), signal.SIGINT)  # the trainer finishes the step and checkpoints
            return out
        return wrapped

    monkeypatch.setattr(mt_run, "_evaluator", killing)
    cfg = mt_config(model_dir, tmp_path / "split", list(datas), finetune=fin, **settings)
    with pytest.raises(TrainingInterrupted):
        run(cfg, resume=False, datas=datas)
    monkeypatch.setattr(mt_run, "_evaluator", original)
    resumed = run(cfg, resume=True, datas=datas)
    assert resumed["steps"] == full["steps"]
    a = [r["loss"] for r in read_log(tmp_path / "full") if "loss" in r]
    b = [r["loss"] for r in read_log(tmp_path / "split") if "loss" in r]
    assert len(a) == len(b) == full["steps"]
    assert b == pytest.approx(a, abs=1e-6)
    for name in datas:
        assert resumed["per_task"][name]["dev"] == pytest.approx(full["per_task"][name]["dev"], abs=1e-6)


def test_resuming_with_another_task_list_names_the_change(model_dir, tmp_path, monkeypatch):
    from muppets.errors import CheckpointError

    datas = {"cls": text_task("classify", n=24), "pair": text_task("pair", n=16, seed=2)}
    fin = {"eval_every": 2, "epochs": 2}
    original = mt_run._evaluator

    def killing(tasks, tok):
        evaluate = original(tasks, tok)

        def wrapped(model):
            os.kill(os.getpid(), signal.SIGINT)  # the trainer finishes the step and checkpoints
            return evaluate(model)
        return wrapped

    monkeypatch.setattr(mt_run, "_evaluator", killing)
    with pytest.raises(TrainingInterrupted):
        run(mt_config(model_dir, tmp_path, ["cls"], finetune=fin), resume=False, datas={"cls": datas["cls"]})
    monkeypatch.setattr(mt_run, "_evaluator", original)
    with pytest.raises(CheckpointError, match=r"other settings \(.*\), whose model does not fit.*config\.json") \
            as caught:
        run(mt_config(model_dir, tmp_path, list(datas), finetune=fin), resume=True, datas=datas)
    assert "tasks: ['cls'] -> ['cls', 'pair']" in str(caught.value)


def test_cli_multitask_runs_a_config_file(model_dir, tmp_path, capsys):
    for name, seed in (("a", 0), ("b", 1)):
        data = text_task("classify", n=24, seed=seed)
        for split in ("train", "dev"):
            lines = [f"{ex.text},{ex.label}" for ex in data[split]]
            (tmp_path / f"{name}-{split}.csv").write_text("text,label\n" + "\n".join(lines) + "\n")
    config = tmp_path / "mt.yaml"
    config.write_text(
        f"run_dir: {tmp_path / 'run'}\n"
        "tasks:\n"
        f"  - {{name: a, files: {{train: {tmp_path / 'a-train.csv'}, dev: {tmp_path / 'a-dev.csv'}}}}}\n"
        f"  - {{name: b, files: {{train: {tmp_path / 'b-train.csv'}, dev: {tmp_path / 'b-dev.csv'}}}}}\n"
        "sampler: uniform\n"
        f"finetune: {{model: {model_dir}, epochs: 1, batch_size: 8, max_seq_len: 32, progress: false, log_every: 0}}\n")
    assert cli_main(["multitask", str(config), "finetune.lr=1e-3", "--fresh"]) == 0
    out = capsys.readouterr().out
    assert "a " in out and "dev" in out and "accuracy" in out
    assert (tmp_path / "run" / "tasks" / "b" / "best" / "config.json").is_file()
    assert cli_main(["multitask", str(config), "nope=1"]) != 0
    assert "unknown key 'nope'" in capsys.readouterr().err


def _csv_tasks(tmp_path: Path) -> str:
    """Two classify tasks as csv files; the ``tasks:`` lines of a config."""
    lines = []
    for name, seed in (("a", 0), ("b", 1)):
        data = text_task("classify", n=24, seed=seed)
        files = {}
        for split in ("train", "dev"):
            rows = [f"{ex.text},{ex.label}" for ex in data[split]]
            path = tmp_path / f"{name}-{split}.csv"
            path.write_text("text,label\n" + "\n".join(rows) + "\n")
            files[split] = path
        lines.append(f"  - {{name: {name}, files: {{train: {files['train']}, dev: {files['dev']}}}}}\n")
    return "".join(lines)


def test_two_process_ddp_equals_one_process(model_dir, tmp_path):
    """Joint training with DWA weights (window statistics all-reduced across ranks): 2 processes
    × 2 micro-batches equal 1 process × 4 micro-batches of the same global batch."""
    config = tmp_path / "mt.yaml"
    config.write_text("tasks:\n" + _csv_tasks(tmp_path) + "mode: joint\nweighting: dwa\ndwa_window: 1\n"
                      f"finetune: {{model: {model_dir}, epochs: 2, batch_size: 8, max_seq_len: 32, selection: last, "
                      "progress: false, log_every: 0, lr: 1.0e-3, eval_every: 3}\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(HERE.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    ddp = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "muppets.cli", "multitask", str(config), f"run_dir={tmp_path / 'ddp'}", "finetune.accumulation=2"]
    proc = subprocess.run(ddp, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert cli_main(["multitask", str(config), f"run_dir={tmp_path / 'one'}", "finetune.accumulation=4"]) == 0
    logs = [[r for r in read_log(tmp_path / d) if "loss" in r] for d in ("ddp", "one")]
    assert len(logs[0]) == len(logs[1]) > 4
    for a, b in zip(*logs):
        assert abs(a["loss"] - b["loss"]) <= 1e-5 and abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5
    weights = [[r["eval/weight/a"] for r in read_log(tmp_path / d) if "eval/weight/a" in r] for d in ("ddp", "one")]
    assert len(weights[0]) >= 2 and weights[0] == pytest.approx(weights[1], abs=1e-6) and weights[0][-1] != 1.0
