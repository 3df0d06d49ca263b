"""GLUE tasks as staged in the shared data (``glue/``; data README §2).

Each reader takes the data root and the error policy and returns a :class:`TaskData`. The
label strings are the files' own, except RTE, whose numeric labels are mapped to GLUE's names
so that RTE and QNLI share the label set ``["entailment", "not_entailment"]``; the 0/1 labels of
SST-2, CoLA and MRPC carry GLUE's names as :attr:`TaskSpec.label_names` (shown in predictions).

=======  ==========================================  =============  ===================  ======
task     files → splits                              kind           labels               metric
=======  ==========================================  =============  ===================  ======
sst2     stsa.binary.{train,dev}: ``<label> <text>``  classify       0=negative 1=pos…    acc
cola     in_domain_train / in_domain_dev +            classify       0=unacceptable 1=…   mcc
         out_of_domain_dev (4-column tsv, no header)
mrpc     {train,dev}.tsv (BOM in header, quotes       pair           0=not_equivalent,    f1
         are plain characters)                                     1=equivalent
stsb     {train,dev}.tsv (10 columns, score last)     regress        float 0–5            pearson
rte      {train,dev}.tsv (CSV-quoted, 0=entailment)   pair           entailment, not_…    acc
qnli     dev.tsv only, split 80/20 → train/dev        pair           entailment, not_…    acc
=======  ==========================================  =============  ===================  ======
"""

from __future__ import annotations

from pathlib import Path

from muppets.errors import DataError
from muppets.tasks.source import Line, Problems, iter_lines, short
from muppets.tasks.spec import SENTIMENT_NAMES, TaskData, TaskSpec, TextExample
from muppets.tasks.splits import hash_split
from muppets.tasks.table import Columns, LabelRule, read_text_file

__all__ = ["load_sst2", "load_cola", "load_mrpc", "load_stsb", "load_rte", "load_qnli",
           "QNLI_DEV_FRACTION"]

BINARY = ["0", "1"]
NLI2 = ["entailment", "not_entailment"]
COLA_NAMES = ("unacceptable", "acceptable")  # GLUE's (and the HF dataset's) names of CoLA's 0/1
MRPC_NAMES = ("not_equivalent", "equivalent")  # ... of MRPC's 0/1
QNLI_DEV_FRACTION = 0.2  # share of QNLI dev.tsv held out as our "dev" split


def _sst_example(line: Line, path: Path) -> TextExample:
    if line.error is not None:
        raise line.error
    label, _, sentence = line.text.partition(" ")
    if label not in BINARY:
        raise DataError(f"unknown label (expected '<label> <sentence>' with label in {BINARY})",
                        path=path, line=line.number, value=short(label))
    if not sentence.strip():
        raise DataError("empty sentence", path=path, line=line.number, value=line.text)
    return TextExample(f"{path.stem}-{line.number}", sentence.strip(), None, label,
                       f"{path}:{line.number}")


def read_sst(path: str | Path, problems: Problems) -> list[TextExample]:
    """Read a harvardnlp ``stsa.binary.*`` file: one ``<label> <sentence>`` per line."""
    path = Path(path)
    examples = []
    for line in iter_lines(path, problems):
        if not line.text.strip():
            continue
        try:
            examples.append(_sst_example(line, path))
        except DataError as err:
            problems.report(err)
    return examples


def load_sst2(root: Path, problems: Problems) -> TaskData:
    """SST-2 at sentence level: 6,920 train / 872 dev (not GLUE's 67k phrases)."""
    folder = root / "glue" / "SST-2"
    splits = {s: read_sst(folder / f"stsa.binary.{s}", problems) for s in ("train", "dev")}
    spec = TaskSpec("sst2", "classify", BINARY, "accuracy", ("sentence",), SENTIMENT_NAMES)
    return TaskData(spec, splits, notes="SST-2 sentence-level split (Kim 2014): train has "
                    "6,920 sentences, not GLUE's 67,349 phrases; label 1 = positive.")


def load_cola(root: Path, problems: Problems) -> TaskData:
    """CoLA: train = in_domain_train (8,551); dev = in_domain_dev + out_of_domain_dev (1,043)."""
    folder = root / "glue" / "CoLA"
    cols, rule = Columns(text=3, label=1), LabelRule("classify", BINARY)

    def read(name: str) -> list[TextExample]:
        return read_text_file(folder / name, "tsv", cols, rule, problems, header=False, width=4)

    splits = {"train": read("in_domain_train.tsv"),
              "dev": read("in_domain_dev.tsv") + read("out_of_domain_dev.tsv")}
    spec = TaskSpec("cola", "classify", BINARY, "mcc", ("sentence",), COLA_NAMES)
    return TaskData(spec, splits, notes="GLUE CoLA: dev = in-domain dev followed by "
                    "out-of-domain dev; label 1 = acceptable.")


def _two_files(folder: Path, fmt: str, cols: Columns, rule: LabelRule,
               problems: Problems) -> dict[str, list[TextExample]]:
    return {s: read_text_file(folder / f"{s}.tsv", fmt, cols, rule, problems)
            for s in ("train", "dev")}


def load_mrpc(root: Path, problems: Problems) -> TaskData:
    """MRPC (GLUE tsv): 3,668 train / 408 dev; quote characters are part of the text."""
    cols = Columns(text="#1 String", text_b="#2 String", label="Quality")
    splits = _two_files(root / "glue" / "MRPC", "tsv", cols, LabelRule("pair", BINARY),
                        problems)
    spec = TaskSpec("mrpc", "pair", BINARY, "f1", ("#1 String", "#2 String"), MRPC_NAMES)
    return TaskData(spec, splits, notes="GLUE MRPC; label 1 = paraphrase; F1 of class 1.")


def load_stsb(root: Path, problems: Problems) -> TaskData:
    """STS-B (GLUE tsv, 10 columns, score last): 5,749 train / 1,500 dev, scores 0–5."""
    cols = Columns(text="sentence1", text_b="sentence2", label="score", id="index")
    splits = _two_files(root / "glue" / "STS-B", "tsv", cols, LabelRule("regress"), problems)
    spec = TaskSpec("stsb", "regress", [], "pearson_spearman", ("sentence1", "sentence2"))
    return TaskData(spec, splits, notes="GLUE STS-B; similarity score 0-5 as a float.")


def load_rte(root: Path, problems: Problems) -> TaskData:
    """RTE (HF export, CSV-quoted, 0=entailment): 2,490 train / 277 dev."""
    cols = Columns(text="sentence1", text_b="sentence2", label="label", id="idx")
    rule = LabelRule("pair", NLI2, {"0": "entailment", "1": "not_entailment"})
    splits = _two_files(root / "glue" / "RTE", "tsv-quoted", cols, rule, problems)
    spec = TaskSpec("rte", "pair", NLI2, "accuracy", ("sentence1", "sentence2"))
    return TaskData(spec, splits, notes="GLUE RTE from the HF export: numeric labels mapped "
                    "0 -> entailment, 1 -> not_entailment.")


def load_qnli(root: Path, problems: Problems) -> TaskData:
    """QNLI: only GLUE dev is staged (5,463); it is split 80/20 into train / dev.

    The held-out 20% (1,093 pairs) are the rows whose MD5 of ``"<salt>:<index>"`` is
    smallest (:func:`~muppets.tasks.splits.hash_split`): deterministic everywhere.
    """
    cols = Columns(text="question", text_b="sentence", label="label", id="index")
    path = root / "glue" / "QNLI" / "dev.tsv"
    examples = read_text_file(path, "tsv", cols, LabelRule("pair", NLI2), problems)
    train, dev = hash_split(examples, [ex.id for ex in examples], QNLI_DEV_FRACTION)
    spec = TaskSpec("qnli", "pair", NLI2, "accuracy", ("question", "sentence"))
    return TaskData(spec, {"train": train, "dev": dev}, notes=(
        f"QNLI train is not staged: GLUE dev.tsv ({len(examples)} pairs) is split by "
        f"muppets.tasks.splits.hash_split on the index column, {QNLI_DEV_FRACTION:.0%} held "
        f"out as dev ({len(dev)}), the rest as train ({len(train)}). Not comparable to "
        "published QNLI dev scores."))
