"""``muppets distill``: teach a fine-tuned model to a smaller student (:mod:`muppets.distill`).

::

    muppets distill runs/sst2/best --student teacher student_layers=[0,2,4]
    muppets distill runs/sst2/best --student bert-mini unlabeled=[data:sentiment/mr] --seeds 1,2,3
    muppets distill runs/conll/best --student teacher student_num_layers=2 hidden_weight=1 attention_weight=1
    muppets distill runs/sst2/best --student teacher alpha=0          # the student fine-tuned alone (baseline)

Prints the selection and the dev (and test) figures, as ``finetune`` does; ``<run_dir>/best`` is
the student, a task directory for ``evaluate``, ``serve`` and ``export``.
"""

from __future__ import annotations

import argparse


def add_parser(sub) -> argparse.ArgumentParser:
    """Add the ``distill`` subcommand to an argparse subparsers object; returns its parser."""
    p = sub.add_parser("distill", help="distil a fine-tuned task model into a smaller student (soft targets, gold "
                       "labels, intermediate layers) on its training text, unlabeled text and augmented copies")
    p.add_argument("teacher", help="the fine-tuned task directory that teaches (muppets finetune's <run_dir>/best)")
    p.add_argument("--student", help="teacher (its layers dropped: student_layers=[0,2,4]), a BERT preset (bert-tiny, "
                   "bert-mini …; student_config={hidden_size: 384} sets fields), bilstm, or a model directory with the "
                   "teacher's vocabulary (default: teacher)")
    p.add_argument("--config", metavar="FILE", help="YAML/JSON DistillConfig (see muppets.distill.config); the "
                   "overrides apply on top")
    p.add_argument("overrides", nargs="*", help="key=value settings, e.g. alpha=0.7 temperature=4 "
                   "unlabeled=[data:sentiment/mr/rt-polarity.pos] augment=4 train.lr=1e-4 train.epochs=5")
    p.add_argument("--seeds", help="comma-separated seeds: one run each (run_dir/seed-N) + mean ± std")
    p.add_argument("--fresh", action="store_true", help="start over: ignore the run directory's checkpoints")
    p.add_argument("--print-config", action="store_true", help="print the resolved settings as YAML and exit")
    p.set_defaults(func=main)
    return p


def config_of(args: argparse.Namespace):
    """The :class:`~muppets.distill.config.DistillConfig` the arguments describe."""
    from muppets.distill.config import load_config

    overrides = [f"teacher={args.teacher}", *([f"student={args.student}"] if args.student else []), *args.overrides]
    return load_config(args.config, overrides)


def main(args: argparse.Namespace) -> int:
    from muppets.cli import _print_config, _seed_list
    from muppets.distill import run as distill
    from muppets.train.distributed import dist_info
    from muppets.transfer.report import figure_lines, header_line, seed_lines

    cfg = config_of(args)
    if args.print_config:
        return _print_config(cfg, args.seeds)
    if args.seeds:
        summary = distill.run_seeds(cfg, _seed_list(args.seeds), resume=not args.fresh)
        if dist_info().is_main:
            print(f"\n{summary['task']}: student {summary['student']['kind']}, {len(summary['seeds'])} seeds "
                  f"{summary['seeds']} (mean ± sample std)")
            print("\n".join(seed_lines(summary)))
        return 0
    summary = distill.run(cfg, resume=not args.fresh)
    if dist_info().is_main:
        student = summary["student"]
        print("\n" + header_line(summary))
        print(f"  student: {student['kind']}, {student['parameters']:,} parameters (teacher "
              f"{summary['teacher_parameters']:,}); learned from {', '.join(summary['losses']['terms'])} on "
              + ", ".join(f"{v} {k}" for k, v in summary["transfer_set"].items()
                          if k in ("train", "unlabeled", "augmented") and v))
        print("\n".join(figure_lines(summary)))
        print(f"best model: {summary['best']}")
    return 0
