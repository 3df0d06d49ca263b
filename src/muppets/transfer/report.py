"""What a transfer run's figures were computed on, in the words its summary prints.

A figure with no split and size beside it invites misreading: "dev accuracy 0.4750" on 200 of
872 dev examples, a selection slice drawn as if it were dev, 14 lines of 0.0000 from a tagger that
predicts only ``O``. So every reported metric of ``muppets finetune`` / ``muppets features``
comes with a :class:`Scored` (split, examples scored, examples in the split, whether they chose
the model), and predictions that are all one label or one tag get a note saying so.

>>> Scored("dev", 200, 872).describe()
'dev (200 of 872 examples)'
>>> Scored("train-slice", 692, 6920, selected_on=True, source="train").describe()
'train-slice (692 of 6,920 train examples, selected on)'
>>> header_line({"task": "sst2", "steps": 120, "best_step": 80, "primary": "accuracy",
...              "best_selection_score": 0.85, "selected_on": {"split": "train-slice", "examples": 692,
...                                                            "of": 6920, "selected_on": True, "source": "train"}})
'sst2: 120 steps, best step 80 selected on train-slice (692 of 6,920 train examples): accuracy 0.8500 there'
>>> one_answer_note("tag", "dev", [["O", "O"], ["O"]])
"dev: every word of the 2 sentences is tagged 'O' (no entity predicted, so every entity score is 0): train longer or with another learning rate"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Scored", "one_answer_note", "figure_lines", "header_line", "seed_lines"]


@dataclass(frozen=True)
class Scored:
    """The examples behind a set of figures."""

    split: str  # "dev", "test", "train-slice"
    examples: int  # labelled examples scored
    of: int  # examples in the split they come from (before max_eval_examples / the slice)
    selected_on: bool = False  # these examples chose the model (best step, early stopping)
    source: str = ""  # the split a slice was drawn from ("train"), named in the size

    def describe(self, mark: bool = True) -> str:
        """``dev (200 of 872 examples)``; ``…, selected on)`` when these examples chose the
        model (and ``mark``: a line that says "selected on" already passes False)."""
        size = f"{self.examples:,}" if self.examples == self.of else f"{self.examples:,} of {self.of:,}"
        source = f" {self.source}" if self.source else ""
        return f"{self.split} ({size}{source} examples{', selected on' if self.selected_on and mark else ''})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scored:
        return cls(**{k: data[k] for k in ("split", "examples", "of", "selected_on", "source") if k in data})


def one_answer_note(kind: str, split: str, predictions: Sequence[Any], names: Mapping[str, str] | None = None) -> str | None:
    """A note when every prediction of ``split`` is the same label (classify, pair) or every word
    gets the same tag (tag): the figures then measure a constant, not the model; None otherwise."""
    if kind in ("classify", "pair") and len(predictions) > 1 and len(set(map(str, predictions))) == 1:
        label = str(predictions[0])
        return (f"{split}: the model predicts {(names or {}).get(label, label)!r} for all {len(predictions):,} "
                "examples (a constant: train longer or with another learning rate)")
    if kind == "tag" and predictions:
        tags = {t for sentence in predictions for t in sentence}
        if len(tags) == 1:
            tag = next(iter(tags))
            what = " (no entity predicted, so every entity score is 0)" if tag == "O" else ""
            n = len(predictions)
            return (f"{split}: every word of the {n:,} sentence{'s' if n != 1 else ''} is tagged {tag!r}{what}: "
                    "train longer or with another learning rate")
    return None


def header_line(summary: Mapping[str, Any], name: str = "") -> str:
    """``sst2: 120 steps (stopped early), best step 80 selected on train-slice (…): accuracy 0.8512
    there`` (``name`` instead of the task's)."""
    text = f"{name or summary['task']}: {summary['steps']} steps{' (stopped early)' if summary.get('stopped_early') else ''}"
    chosen = summary.get("selected_on")
    if not chosen:
        return text + "; no selection: the model after the last step is kept"
    text += f", best step {summary['best_step']} selected on {Scored.from_dict(chosen).describe(mark=False)}"
    best = summary.get("best_selection_score")
    known = isinstance(best, (int, float)) and summary.get("primary")
    return text + (f": {summary['primary']} {best:.4f} there" if known else "")


def figure_lines(summary: Mapping[str, Any], splits: Sequence[str] = ("dev", "test")) -> list[str]:
    """One line per reported figure, naming its split and size: ``dev (200 of 872 examples)
    accuracy 0.4750``; then the run's notes."""
    scored = summary.get("scored_on", {})
    rows = []
    for split in splits:
        if split not in summary:
            continue
        where = Scored.from_dict(scored[split]).describe() if split in scored else split
        metrics = summary[split]
        rows += [(where, name, f"{value:10.4f}") for name, value in metrics.items()] or [(where, "(no gold labels)", "")]
    width = max((len(r[0]) for r in rows), default=0)
    lines = [f"  {where:<{width}}  {name:<16} {value}".rstrip() for where, name, value in rows]
    return lines + [f"note: {note}" for note in summary.get("notes", [])]


def seed_lines(summary: Mapping[str, Any]) -> list[str]:
    """``muppets finetune --seeds``: mean ± sample std per split and metric, each naming its split
    and size, and how the model of each seed was chosen; then the seeds' notes."""
    scored = summary.get("scored_on", {})
    chosen = summary.get("selected_on")
    lines = [f"  model of each seed selected on {Scored.from_dict(chosen).describe(mark=False)}" if chosen
             else "  no selection: each seed's model after the last step"]
    rows = []
    for split in ("dev", "test"):
        where = Scored.from_dict(scored[split]).describe() if split in scored else split
        rows += [(where, name, stats) for name, stats in summary.get(split, {}).items()]
    width = max((len(r[0]) for r in rows), default=0)
    lines += [f"  {where:<{width}}  {name:<16} {stats['mean']:10.4f} ± {stats['std']:.4f}" for where, name, stats in rows]
    return lines + [f"note: {note}" for note in summary.get("notes", [])]
