"""Draw the figures of the manual's Results pages from the measured data in benchmarks/results/.

    python benchmarks/results_plots.py [--out docs/images/results]

Nothing is measured here: every plot reads a result file written by the benchmark named in its
caption (or, where no result file holds a figure, the numbers BENCHMARKS stated, copied into
``PROSE`` below with the section they come from). The PNGs that benchmark scripts drew themselves
(loss curves, mix weights, probe curves, attention figures) are copied as they are. Each file is
kept at or under 200 KB.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MAX_BYTES = 200_000
COPIED = ["bert_mini_loss.png", "gpt_mini_loss.png", "mix_weights_sst2.png", "mix_weights_conll2003.png",
          "probe_layers_minilm.png", "probe_cumulative_minilm.png", "attention_shares_minilm.png",
          "attention_shares_gpt-mini.png", "attention_pronoun_minilm.png"]

# Figures stated only in prose (no result file holds them), copied from the sections named.
PROSE = {
    # pretraining.md, "An MLM decoder of its own" and "Pre-LN bert-mini" / "bert-mini-fast": held-out
    # MLM accuracy (%) at steps 1k … 10k and at the end
    "mlm_curves": {
        "tied, lr 1e-3 (1.75 CPU-h)": [12.4, 13.6, 13.8, 13.5, 13.9, 14.3, 15.3, 18.8, 22.9, 25.1, 25.53],
        "untied, lr 1e-3 (1.87 CPU-h)": [10.9, 11.1, 12.6, 12.9, 17.3, 23.6, 25.9, 27.4, 28.5, 29.1, 29.36],
        "pre-LN, lr 2e-3 (1.76 CPU-h)": [12.6, 13.1, 13.8, 14.1, 14.3, 14.6, 17.6, 22.9, 25.7, 27.2, 27.8, 28.09],
        "tied, lr 3e-4 (1.65 CPU-h)": [10.8, 12.5, 13.5, 13.8, 13.7, 14.2, 14.2, 14.5, 14.3, 14.7, 14.63],
    },
    "mlm_end_steps": {"tied, lr 1e-3 (1.75 CPU-h)": 10500, "untied, lr 1e-3 (1.87 CPU-h)": 10500,
                      "pre-LN, lr 2e-3 (1.76 CPU-h)": 11500, "tied, lr 3e-4 (1.65 CPU-h)": 11000},
}


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def save(fig, out: Path, name: str) -> Path:
    path = out / name
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    if path.stat().st_size > MAX_BYTES:
        from PIL import Image

        Image.open(path).convert("RGB").quantize(colors=128).save(path, optimize=True)
    assert path.stat().st_size <= MAX_BYTES, f"{path} is {path.stat().st_size} bytes"
    return path


def speed_ratios(out: Path) -> Path:
    """muppets ÷ the reference library, each measured in one run (higher: muppets faster)."""
    ft = load("finetune_speed.json")
    gpt = [load(f"gpt_speed_screen_{i}.json")["training"]["speedup"] for i in (1, 2, 3)]
    xeon = load("gpt_speed_xeon_issue15.json")["generation"]
    w2v = [m["words_per_s"] / g["words_per_s"]  # one ratio per paired round
           for f in ("word2vec_vs_gensim.json", "word2vec_vs_gensim_seed2.json", "word2vec_vs_gensim_seed3.json")
           for g, m in zip(load(f)["rounds"]["gensim"], load(f)["rounds"]["muppets"])]
    cli = next(r for r in load("cli_startup.json")["rows"] if r["command"] == "muppets --help")
    rows = [  # label, low, high
        ("BERT-mini pretraining vs BertForPreTraining", load("pretrain_speed.json")["speedup"], None),
        ("fine-tuning MiniLM vs a transformers loop", ft["training"]["speedup"], None),
        ("Predictor vs pipeline (default batch)", ft["inference"]["speedup_vs_pipeline_default"], None),
        ("gpt-mini training vs GPT2LMHeadModel (3 runs)", min(gpt), max(gpt)),
        ("greedy generation, batch 1, Xeon", xeon["batch_1"]["speedup"], None),
        ("greedy generation, batch 32, Xeon", xeon["batch_32"]["speedup"], None),
        ("byte-level BPE encode vs GPT2TokenizerFast",
         load("bpe_parity.json")["summary"]["speed_ratio_transformers_over_muppets"], None),
        ("word2vec vs gensim, words/s (4 paired rounds)", min(w2v), max(w2v)),
        ("muppets --help vs transformers --help", cli["ratio_transformers_over_this"], None),
    ]
    fig, ax = plt.subplots(figsize=(8.5, 4.4))
    ys = range(len(rows))[::-1]
    for y, (label, low, high) in zip(ys, rows):
        ax.barh(y, low, color="#26867d")
        if high is not None:
            ax.barh(y, high - low, left=low, color="#9fd3cd")
        ax.text((high or low) * 1.03, y, f"{low:.2f}×" + (f"–{high:.2f}×" if high else ""), va="center", fontsize=8)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(list(ys), [r[0] for r in rows], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(0.5, 12)
    ax.set_xticks([0.5, 1, 2, 3, 5, 10], ["0.5×", "1×", "2×", "3×", "5×", "10×"])
    ax.set_xlabel("muppets ÷ reference library, same run (log scale)")
    return save(fig, out, "speed_ratios.png")


def mlm_curves(out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, accs in PROSE["mlm_curves"].items():
        steps = [1000 * (i + 1) for i in range(len(accs) - 1)] + [PROSE["mlm_end_steps"][label]]
        ax.plot(steps, accs, marker="o", ms=3, label=label)
    ax.axhline(5.36, color="grey", ls=":", label="unigram baseline 5.36%")
    ax.set_xlabel("pretraining step (batch 32 × 128)")
    ax.set_ylabel("held-out MLM accuracy, %")
    ax.legend(fontsize=8)
    return save(fig, out, "mlm_curves_bert_mini.png")


def recipe_ablation(out: Path) -> Path:
    variants = load("recipe_ablation.json")["variants"]
    names = sorted(variants, key=lambda k: (variants[k]["budget_cpu_s"], variants[k]["mlm_accuracy"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = ["#9fd3cd" if variants[k]["budget_cpu_s"] <= 600 else "#26867d" for k in names]
    ax.barh(range(len(names)), [100 * variants[k]["mlm_accuracy"] for k in names], color=colors)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel("held-out MLM accuracy, % (light: 10 CPU-min, dark: 20 CPU-min)")
    return save(fig, out, "recipe_ablation.png")


def label_budget(out: Path) -> Path:
    rows = load("label_budget.json")["rows"]
    sizes = ["250", "500", "1000", "2000", "all"]
    xs = [250, 500, 1000, 2000, 6920]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for arm, label in (("pretrained", "untied bert-mini (1.87 CPU-h)"), ("random", "random init")):
        ax.errorbar(xs, [rows[s][arm]["mean"] for s in sizes], yerr=[rows[s][arm]["std"] for s in sizes],
                    marker="o", capsize=3, label=label)
    ax.set_xscale("log")
    ax.set_xticks(xs, ["250", "500", "1,000", "2,000", "6,920"])
    ax.set_xlabel("SST-2 training sentences")
    ax.set_ylabel("SST-2 dev accuracy, % (3 seeds)")
    ax.legend(fontsize=8)
    return save(fig, out, "label_budget.png")


def polysemy(out: Path) -> Path:
    results = load("polysemy_score.json")["results"]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, r in results.items():
        layers = sorted(r["overall"], key=int)
        ax.plot([int(l) for l in layers], [r["overall"][l]["nn_accuracy"] for l in layers], marker="o", label=name)
    ax.axhline(9 / 19, color="grey", ls=":", label="chance = any static vector")
    ax.set_xlabel("layer (0: embeddings or static vectors)")
    ax.set_ylabel("nearest-neighbour sense accuracy")
    ax.legend(fontsize=8, ncol=2)
    return save(fig, out, "polysemy_layers.png")


def tapt_length(out: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, task, sel in ((axes[0], "sst2", "train-slice accuracy"), (axes[1], "conll2003", "dev F1")):
        d = load(f"tapt_minilm_{task}_length.json")
        cands = sorted(d["candidates"], key=lambda c: c["steps"])
        steps = [c["steps"] for c in cands]
        ax.plot(steps, [c["selection_mean"] for c in cands], marker="o", color="#26867d", label=f"selection: {sel}")
        ax.set_xscale("log")
        ax.set_xticks(steps, [f"{s:,}" for s in steps], fontsize=8)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("TAPT steps")
        ax.set_ylabel(f"selection score ({sel})", color="#26867d")
        ax2 = ax.twinx()
        ax2.errorbar(steps, [c["difference_mean_std"][0] for c in cands],
                     yerr=[c["difference_mean_std"][1] for c in cands], marker="s", color="#b5542c", capsize=3)
        ax2.axhline(0.5, color="#b5542c", ls=":", lw=0.8)
        ax2.axhline(0.0, color="grey", lw=0.5)
        ax2.set_ylabel("reported gain over MiniLM (target +0.5)", color="#b5542c")
        ax.set_title(f"{task}: chosen {d['chosen_steps']} steps", fontsize=9)
    return save(fig, out, "tapt_length.png")


def finetune_table(out: Path) -> Path:
    table = load("finetune_table.json")
    cells = [("sst2", "accuracy", "SST-2 acc"), ("cola", "mcc", "CoLA MCC"), ("mrpc", "f1", "MRPC F1"),
             ("stsb", "pearson", "STS-B r"), ("rte", "accuracy", "RTE acc"), ("conll2003", "f1", "CoNLL F1"),
             ("squad", "f1", "SQuAD F1"), ("hellaswag", "accuracy", "HellaSwag acc")]
    arms = [("minilm", "all-MiniLM-L6-v2"), ("bert-mini-4", "bert-mini-4 (~4.5 CPU-h)"), ("random", "random init")]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.27
    for i, (arm, label) in enumerate(arms):
        means, stds = [], []
        for task, metric, _ in cells:
            entry = table[task].get(f"{arm}-bf16") or table[task][arm]  # the table's random SQuAD / HellaSwag cells are bf16
            split = entry.get("test") or entry["dev"]  # CoNLL-2003 reports test, the others dev
            m = split[metric]
            scale = 100 if m["mean"] <= 1.0 else 1  # squad's EM / F1 are stored in percent, the rest as fractions
            means.append(m["mean"] * scale)
            stds.append(m["std"] * scale)
        ax.bar([x + (i - 1) * width for x in range(len(cells))], means, width, yerr=stds, capsize=2, label=label)
    ax.set_xticks(range(len(cells)), [c[2] for c in cells], fontsize=8)
    ax.set_ylabel("score")
    ax.legend(fontsize=8)
    return save(fig, out, "finetune_table.png")


def finetune_memory(out: Path) -> Path:
    runs = load("finetune_memory_chnsenticorp_allocators.json")["runs"]
    labels = [f"{r['allocator']}" + (", trimmed every 30 s" if r["trim_heap_seconds"] else "") for r in runs]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    axes[0].barh(range(len(runs)), [r["peak_rss_gb"] for r in runs], color="#26867d")
    axes[0].set_xlabel("peak RSS, GB")
    axes[1].barh(range(len(runs)), [r["train_ratio"] for r in runs], color="#9fd3cd")
    axes[1].axvline(1.0, color="black", lw=0.8)
    axes[1].set_xlabel("training time ÷ untrimmed glibc (mean of first and last run)")
    axes[0].set_yticks(range(len(runs)), [f"{i + 1}. {l}" for i, l in enumerate(labels)], fontsize=8)
    return save(fig, out, "finetune_memory.png")


def feature_table(out: Path) -> Path:
    sst2 = load("feature_table_sst2_3seeds.json")["results"]["sst2"]
    conll = {}
    for f in ("feature_table_conll2003_3seeds_a.json", "feature_table_conll2003_mix_3seeds.json",
              "feature_table_conll2003_3seeds_b.json"):
        conll.update(load(f)["results"]["conll2003"])
    names = list(sst2)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.4
    for i, (data, split, metric, label) in enumerate(((sst2, "dev", "accuracy", "SST-2 dev accuracy"),
                                                      (conll, "test", "f1", "CoNLL-2003 test F1"))):
        ax.bar([x + (i - 0.5) * width for x in range(len(names))], [100 * data[n][split][metric]["mean"] for n in names],
               width, yerr=[100 * data[n][split][metric]["std"] for n in names], capsize=2, label=label)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(50, 90)
    ax.set_ylabel("score, % (3 seeds)")
    ax.legend(fontsize=8)
    return save(fig, out, "feature_table.png")


def weak_end_model(out: Path) -> Path:
    table = dict(load("weak_end_model.json")["table_test"])
    table.update(load("weak_end_model_selected.json")["table_test"])
    order = ["filtered", "soft", "hard", "soft-selected", "majority", "supervised"]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.barh(range(len(order)), [table[k]["mean"] for k in order], xerr=[table[k]["std"] for k in order],
            capsize=3, color=["#9fd3cd"] * 3 + ["#26867d", "#9fd3cd", "#777777"])
    ax.axvline(95.2, color="#b5542c", ls=":", label="target 95.2")
    ax.set_yticks(range(len(order)), order)
    ax.set_xlim(85, 100)
    ax.set_xlabel("spam tutorial test accuracy, % (250 comments, 5 seeds)")
    ax.legend(fontsize=8)
    return save(fig, out, "weak_end_model.png")


def multitask(out: Path) -> Path:
    arms = [("multitask_glue.json", "mtdnn+ft", "MT-DNN (stage + fine-tuning)"),
            ("multitask_glue_soft_chosen.json", "soft", "soft sharing, λ 1e-3"),
            ("multitask_glue.json", "mtdnn", "hard, proportional (stage)"),
            ("multitask_glue_samplers.json", "annealed", "hard, annealed (stage)"),
            ("multitask_glue_joint_5seeds.json", "joint-uncertainty", "joint, uncertainty"),
            ("multitask_glue_joint_5seeds.json", "joint-gradnorm", "joint, GradNorm")]
    tasks = ["rte", "mrpc", "stsb", "cola", "sst2"]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(arms)
    for i, (f, key, label) in enumerate(arms):
        table = load(f)["table"]
        ax.bar([x + (i - len(arms) / 2 + 0.5) * width for x in range(len(tasks))],
               [table[t][key]["paired"]["mean"] for t in tasks], width,
               yerr=[table[t][key]["paired"]["std"] for t in tasks], capsize=2, label=label)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(tasks)), ["RTE acc", "MRPC acc", "STS-B Pearson", "CoLA MCC", "SST-2 acc"])
    ax.set_ylabel("arm − single-task, paired (5 seeds)")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, out, "multitask_glue.png")


def chinese_masking(out: Path) -> Path:
    table = load("chinese_masking.json")["table"]
    variants = ["none", "piece", "whole_word", "ernie", "simplified"]
    tasks = [("chnsenticorp/accuracy", "ChnSentiCorp acc"), ("msra-ner/f1", "MSRA NER F1"), ("cmrc2018/f1", "CMRC 2018 F1")]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    for ax, (key, title) in zip(axes, tasks):
        means = [table[key][v]["mean"] for v in variants]
        ax.bar(range(len(variants)), means, yerr=[table[key][v]["std"] for v in variants], capsize=3,
               color=["#777777", "#9fd3cd", "#26867d", "#26867d", "#9fd3cd"])
        ax.set_ylim(min(means) - 3, max(means) + 2)
        ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
    return save(fig, out, "chinese_masking.png")


def xlingual_retrieval(out: Path) -> Path:
    untied = load("xlingual_retrieval_multilingual_untied.json")["retrieval_at_1"]
    rand = load("xlingual_retrieval_multilingual_untied_random.json")["retrieval_at_1"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, lang in enumerate(["de", "fr", "es", "zh"]):
        color = f"C{i}"
        ax.plot(range(len(untied[lang])), [100 * v for v in untied[lang]], marker="o", color=color, label=f"{lang}, pretrained")
        ax.plot(range(len(rand[lang])), [100 * v for v in rand[lang]], ls="--", color=color, label=f"{lang}, random weights")
    ax.set_xlabel("layer (0: embeddings)")
    ax.set_ylabel("retrieval@1 to English, %")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, out, "xlingual_retrieval.png")


def probe_uuas(out: Path) -> Path:
    models = load("probe_table.json")["models"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, (name, tasks) in enumerate(models.items()):
        s = tasks["structural"]
        ax.plot(range(len(s["pretrained"])), [100 * v for v in s["pretrained"]], marker="o", color=f"C{i}", label=name)
        ax.plot(range(len(s["random_encoder"])), [100 * v for v in s["random_encoder"]], ls="--", color=f"C{i}",
                label=f"{name}, random encoder")
    ax.set_xlabel("layer (0: embeddings)")
    ax.set_ylabel("UUAS, EWT test, %")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, out, "probe_uuas_layers.png")


def greedy_screen(out: Path) -> Path:
    d = load("greedy_screen.json")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, threads in zip(axes, (2, 1)):
        by = d[f"by_rows_{threads}_threads"]
        rows = sorted((int(k.split("_")[1]) for k in by))
        ax.plot(rows, [by[f"rows_{r}"]["screen_ms_per_step"] for r in rows], marker="o", label="int8 screen")
        ax.plot(rows, [by[f"rows_{r}"]["full_logits_ms_per_step"] for r in rows], marker="s", label="full float32 logits")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("rows decoded at once")
        ax.set_title(f"{threads} thread{'s' if threads > 1 else ''}", fontsize=9)
    axes[0].set_ylabel("ms per greedy step")
    axes[0].legend(fontsize=8)
    return save(fig, out, "greedy_screen_rows.png")


def serve_throughput(out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for f, precision, style in (("serve_load.json", "float32", "-"), ("serve_load_bf16.json", "bf16", "--")):
        for i, setting in enumerate(load(f)["embeddings"]):
            levels = setting["levels"]
            ax.plot([l["concurrency"] for l in levels], [l["throughput_rps"] for l in levels], ls=style,
                    marker="o", color=f"C{i}", label=f"{setting['label']}, {precision}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("/v1/embeddings requests/s")
    ax.legend(fontsize=8)
    return save(fig, out, "serve_throughput.png")


PLOTS = [speed_ratios, mlm_curves, recipe_ablation, label_budget, polysemy, tapt_length, finetune_table,
         finetune_memory, feature_table, weak_end_model, multitask, chinese_masking, xlingual_retrieval,
         probe_uuas, greedy_screen, serve_throughput]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "results")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for plot in PLOTS:
        print(plot(args.out).relative_to(ROOT) if args.out.is_relative_to(ROOT) else plot(args.out))
    for name in COPIED:
        shutil.copyfile(RESULTS / name, args.out / name)
        assert (args.out / name).stat().st_size <= MAX_BYTES, name


if __name__ == "__main__":
    main()
