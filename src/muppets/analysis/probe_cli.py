"""``muppets probe``: the probing suite from the shell (:mod:`muppets.analysis.probing`).

::

    muppets probe --model minilm --out runs/probe/minilm
    muppets probe --model runs/gpt-mini --tasks pos,ner,structural --layers 0,2,4 --max-train-sentences 2000
    muppets probe --model runs/elmo-small --probe mlp --no-control --threads 2
    muppets probe --model minilm --tasks sst2,cola,mrpc,rte --out runs/probe/minilm-sentences

Sentence tasks (any single-text classify task: sst2, cola, mr, youtube-spam, chnsenticorp) probe
one mean vector per text, pair tasks (mrpc, rte, qnli, xnli-<lang>, pawsx-<lang>) the pair
features of their two texts' vectors (:mod:`muppets.analysis.probe_sentences`).

Writes ``probe.json`` (per task and layer: test accuracy, control accuracy and selectivity, the
random encoder's numbers; the mix weights, γ and expected layer; UUAS and DSpr. per layer) and
``probe_layers.png`` / ``probe_mix.png`` beside it, and prints a summary table.
"""

from __future__ import annotations

import argparse

from muppets.analysis.probe_data import CHINESE_TASKS, ENGLISH_TASKS, STRUCTURAL, TASKS
from muppets.cliargs import add_model_argument, non_negative_int, settle_model


def add_parser(sub) -> argparse.ArgumentParser:
    """Add the ``probe`` subcommand to an argparse subparsers object; returns its parser."""
    p = sub.add_parser("probe", help="probe every layer of a frozen model: POS, chunk, NER (CoNLL-2003), UPOS, "
                       "relations and the structural probe (UD EWT), sentence and pair labels (SST-2, CoLA, "
                       "MRPC …); mix weights, expected layer, random encoder, control tasks")
    add_model_argument(p, "HF BERT/GPT directory, 'minilm', an ELMo/NNLM/word2vec run, or a vector file")
    p.add_argument("--tasks", default=",".join(ENGLISH_TASKS),
                   help=f"comma-separated, from {','.join(TASKS)} (default: the English ones, {','.join(ENGLISH_TASKS)}, "
                        f"whatever the model's language: a Chinese model needs {','.join(CHINESE_TASKS)}), or sentence tasks: any single-text classify task "
                        "(sst2, cola, mr, youtube-spam, chnsenticorp) or pair task (mrpc, rte, qnli, xnli-en …)")
    p.add_argument("--layers", default="all", help="layers to probe: all, or numbers like 0,2,-1")
    p.add_argument("--random-baseline", action=argparse.BooleanOptionalAction, default=True,
                   help="also probe a randomly initialised encoder of the same architecture (default: on; it doubles "
                        "the embedding and probing time)")
    p.add_argument("--control", action=argparse.BooleanOptionalAction, default=True,
                   help="control tasks (Hewitt & Liang 2019) for selectivity (default: on)")
    p.add_argument("--mix", action=argparse.BooleanOptionalAction, default=True, help="scalar-mix probe (default: on)")
    p.add_argument("--cumulative", action="store_true",
                   help="also Tenney et al.'s cumulative scoring: a mix over layers 0..l for every l, the gain of each "
                        "layer and its expected layer E_Δ (needs --mix, a probe other than logistic, and --layers from 0 up, e.g. all)")
    p.add_argument("--probe", choices=["linear", "mlp", "logistic"], default="linear",
                   help="probe kind: linear (Adam, early stopping), mlp, or logistic (L2 logistic regression solved to "
                        "its optimum, C chosen on the selection split; its mix probe trains as linear)")
    p.add_argument("--hidden", type=int, default=256, help="mlp probe: hidden units")
    p.add_argument("--rank", type=int, default=128, help="structural probe: rank of B")
    p.add_argument("--epochs", type=int, default=20, help="word probes: epochs at most (early stopping on dev)")
    p.add_argument("--sentence-batch-size", type=int, default=64, help="sentence tasks: texts per probe step")
    p.add_argument("--pooling", choices=["auto", "first", "mean", "last"], default="auto",
                   help="sub-word models: a word's vector (auto: last piece for GPT, first for BERT)")
    p.add_argument("--deprel-subtypes", action="store_true", help="deprel: keep subtypes (nmod:poss)")
    p.add_argument("--out", metavar="DIR", help="output folder (default runs/probe/<model>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a probe.json of other settings in the output folder (else refused, before any work)")
    p.add_argument("--cache-dir", default="runs/probe/cache", help="cached per-layer features")
    p.add_argument("--max-train-sentences", type=non_negative_int, default=0,
                   help="seeded sample of train sentences (0 = all)")
    p.add_argument("--max-eval-sentences", type=non_negative_int, default=0, help="the same for dev and test (0 = all)")
    p.add_argument("--data-dir", default="", help="the shared data folder (default: the usual one)")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: leave the default)")
    p.add_argument("--seed", type=int, default=0, help="one seed for the sentence samples, control tasks, random encoder and probes (default 0)")
    p.set_defaults(func=run)
    return p


def config_of(args: argparse.Namespace):
    """The :class:`~muppets.analysis.probing.ProbeConfig` the arguments describe."""
    from muppets.analysis.probing import ProbeConfig

    return ProbeConfig(model=settle_model(args), tasks=args.tasks, layers=args.layers,
                       random_baseline=args.random_baseline,
                       control=args.control, mix=args.mix, cumulative=args.cumulative, probe=args.probe,
                       hidden=args.hidden, rank=args.rank,
                       max_epochs=args.epochs, sentence_batch_size=args.sentence_batch_size, pooling=args.pooling,
                       deprel_subtypes=args.deprel_subtypes,
                       out=args.out or "", cache_dir=args.cache_dir,
                       max_train_sentences=args.max_train_sentences, max_eval_sentences=args.max_eval_sentences,
                       data_dir=args.data_dir, seed=args.seed, progress=True)


def summary_lines(report: dict) -> list[str]:
    """One line per task: best layer (by dev), its test score, mix and expected layer, random encoder."""
    lines = []
    for name, result in report["tasks"].items():
        trained, random = result.get("pretrained"), result.get("random_encoder")
        if trained is None:
            continue
        key = "uuas" if name in STRUCTURAL else "accuracy"
        best = trained["best_layer"]
        text = f"{name:>10}  best layer {best['layer']}: {key} {best[key]:.4f}"
        if result.get("task_metric") in best:
            text += f", {result['task_metric']} {best[result['task_metric']]:.4f}"
        if "selectivity" in best:
            text += f" (selectivity {best['selectivity']:+.4f})"
        if "mix" in trained:
            text += f"  mix {trained['mix']['accuracy']:.4f}, E[l] = {trained['mix']['expected_layer']:.2f}"
        if "cumulative" in trained:
            text += f", E_Δ[l] = {trained['cumulative']['accuracy']['expected_layer']:.2f}"
        if random is not None:
            text += f"  random encoder {random['best_layer'][key]:.4f}"
        if "majority_accuracy" in result:
            text += f"  majority {result['majority_accuracy']:.4f}"
        lines.append(text)
    return lines


def run(args: argparse.Namespace) -> int:
    """Do what ``args`` ask; prints the summary and where the report went. Returns the exit code."""
    from muppets.analysis.probing import run_probing

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cfg = config_of(args)
    report = run_probing(cfg, overwrite=args.overwrite)
    for line in summary_lines(report):
        print(line)
    print(f"wrote {cfg.out_dir() / 'probe.json'} and {', '.join(report['plots'])} ({report['seconds']:.0f} s)")
    return 0
