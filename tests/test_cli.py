"""The ``muppets`` command line as a whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def test_help_lists_every_command_without_importing_torch_or_the_server():
    code = ("import sys\nfrom muppets.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', *sorted(m for m in ('torch', 'starlette', 'uvicorn', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pretrain" in out and "serve" in out and "export" in out
    assert out.strip().splitlines()[-1] == "LOADED"  # none of them: --help answers at once


@pytest.mark.parametrize("argv", [
    ["pretrain", "configs/quickstart.yaml", "train.steps=7"],
    ["pretrain", "configs/gpt-mini.yaml"],
    ["pretrain", "configs/elmo-small.yaml"],
    ["pretrain", "configs/tapt-minilm.yaml"],
    ["word2vec", "train", "configs/word2vec-sg.yaml", "word2vec.epochs=2"],
    ["nnlm", "train", "configs/nnlm-small.yaml"],
    ["multitask", "configs/multitask-conll.yaml", "weighting=dwa"],
    ["finetune", "rte", "lr=3e-5", "--model", "minilm"],
    ["features", "conll2003", "epochs=2"],
], ids=lambda argv: " ".join(argv[:2]))
def test_print_config_prints_every_setting_as_a_file_that_loads_back_the_same(argv, tmp_path, capsys, monkeypatch):
    from muppets import cli

    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the configs/ folder
    monkeypatch.setenv("MUPPETS_DATA", str(tmp_path / "no-data"))  # a run would fail at once: none may start
    assert cli.main([*argv, "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert printed and yaml.safe_load(printed)  # YAML, not a run: no run directory appeared
    saved = tmp_path / "full.yaml"
    saved.write_text(printed, encoding="utf-8")
    again = ([*argv[:2], "--config", str(saved)] if argv[0] in ("finetune", "features")
             else [*argv[:argv.index(next(a for a in argv if a.endswith(".yaml")))], str(saved)])
    assert cli.main([*again, "--print-config"]) == 0
    assert capsys.readouterr().out == printed  # nothing lost or changed on the way back


def test_tokenizer_train_replaces_a_tokenizer_only_when_asked_and_nothing_else(tmp_path, capsys):
    from muppets import cli

    (tmp_path / "raw.txt").write_text("the cat sat on the mat.\n\na dog sat on a log.\n" * 20, encoding="utf-8")

    def train(out, *extra):
        return cli.main(["tokenizer", "train", "--input", str(tmp_path / "raw.txt"), "--out", str(out),
                         "--vocab-size", "120", "--min-frequency", "1", *extra])

    (tmp_path / "tok").mkdir()  # an empty directory is filled
    assert train(tmp_path / "tok") == 0
    vocab = (tmp_path / "tok" / "vocab.txt").read_text()
    (tmp_path / "tok" / "vocab.txt").write_text("[PAD]\n")  # so a replacement shows
    assert train(tmp_path / "tok") == 2
    assert "--overwrite" in capsys.readouterr().err and (tmp_path / "tok" / "vocab.txt").read_text() == "[PAD]\n"
    assert train(tmp_path / "tok", "--overwrite") == 0
    assert (tmp_path / "tok" / "vocab.txt").read_text() == vocab
    model = tmp_path / "final"  # a model directory holds a tokenizer's files beside its weights
    model.mkdir()
    for name in ("vocab.txt", "tokenizer.json", "model.safetensors", "config.json"):
        (model / name).write_text(name)
    assert train(model, "--overwrite") == 2
    assert "holds other files than a tokenizer's (config.json, model.safetensors)" in capsys.readouterr().err
    assert sorted(p.read_text() for p in model.iterdir()) == sorted(p.name for p in model.iterdir())
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()  # an empty directory behind a link is written through
    assert train(tmp_path / "link") == 0 and (tmp_path / "link").is_symlink()
    assert (tmp_path / "elsewhere" / "vocab.txt").read_text() == vocab


def _readme_commands(pages: list[str] | None = None) -> list[list[str]]:
    """The argv of every ``muppets …`` line in the bash blocks of README.md and of every page of
    the manual (``docs/**/*.md``; continuations joined, comments and output redirection dropped)."""
    import re
    import shlex

    root = Path(__file__).resolve().parents[1]
    pages = [root / p for p in pages] if pages else [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    text = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            program = next((w for w in words if w in ("muppets", "muppets.cli") or w.endswith("/muppets")), None)
            if program is not None:
                argv = words[words.index(program) + 1:]
                commands.append(argv[:argv.index(">")] if ">" in argv else argv)
    return commands


def test_every_readme_command_parses_and_its_settings_load(monkeypatch, capsys):
    """What the README and the manual tell a user to type: every subcommand and option exists, and every
    config file with its key=value overrides loads (--print-config: nothing is run or written)."""
    from muppets import cli

    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # configs/… as the README writes them
    commands = _readme_commands()
    readme = _readme_commands(pages=["README.md"])
    assert len(commands) > 30 and readme
    made = {argv[argv.index("--out") + 1] for argv in commands if "--out" in argv}  # files earlier lines write
    parser = cli.build_parser()
    for argv in commands:
        args, extra = parser.parse_known_args(argv)
        assert all("=" in x for x in extra) and (not extra or getattr(args, "overrides", None) is not None), argv
        configured = argv[0] in ("pretrain", "finetune", "multitask", "features") or argv[:2] in (
            ["word2vec", "train"], ["nnlm", "train"])
        # the README's configured commands load their settings here; the manual's run for real,
        # after the steps of their page that make their files (tests/test_docs_tutorials.py)
        if configured and argv in readme and getattr(args, "task", None) not in made:
            assert cli.main([*argv, "--print-config"]) == 0, (argv, capsys.readouterr().err)


def test_an_option_is_taken_only_as_written_in_full(capsys):
    from muppets import cli

    with pytest.raises(SystemExit) as stop:  # not --seeds 3: a seeds run where one run was meant
        cli.main(["finetune", "sst2", "--seed", "3", "--print-config"])
    assert stop.value.code == 2 and "unrecognized arguments: --seed 3" in capsys.readouterr().err
    assert cli.main(["finetune", "sst2", "seed=3", "--print-config"]) == 0
    assert "seed: 3" in capsys.readouterr().out


@pytest.mark.parametrize("options, named", [(["--temperature", "0.7"], "--temperature"),
                                            (["--top-k", "5", "--seed", "1"], "--top-k, --seed"),
                                            (["--sample", "--length-penalty", "0.5"], "--length-penalty")])
def test_generate_refuses_options_that_would_change_nothing(options, named, capsys):
    from muppets import cli

    assert cli.main(["generate", "Once", "--model", "no-such-model", *options]) == 2  # before any loading
    assert f"muppets: error: {named} only change" in capsys.readouterr().err


def test_verbose_goes_before_or_after_the_subcommand():
    from muppets import cli

    parser = cli.build_parser()
    for argv, verbose in ((["-v", "finetune", "sst2"], True), (["finetune", "sst2", "-v"], True),
                          (["weak", "label", "l.py", "--task", "t", "--out", "o", "--verbose"], True),
                          (["finetune", "sst2"], False)):
        args, extra = parser.parse_known_args(argv)
        assert (args.verbose, extra) == (verbose, []), argv


def test_every_option_of_every_command_says_what_it_does():
    import argparse

    from muppets import cli

    silent = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, [*path, name])
            elif not action.help and not isinstance(action, argparse._HelpAction):
                silent.append(" ".join([*path, *(action.option_strings or [action.dest])]))

    walk(cli.build_parser(), ["muppets"])
    assert not silent, silent


def test_polysemy_refuses_out_with_a_word_before_loading_anything(capsys):
    from muppets import cli

    assert cli.main(["polysemy", "bank", "--model", "no-such-model", "--out", "scores.json"]) == 2
    assert "--out writes the sense set's scores" in capsys.readouterr().err
    assert cli.main(["polysemy", "--model", "no-such-model", "--corpus", "text.txt"]) == 2
    assert "--corpus is searched for a WORD's occurrences" in capsys.readouterr().err


@pytest.mark.parametrize("argv, named", [(["summarize", "--out", "m.json"], "--out does not apply"),
                                         (["hellaswag", "--shots", "2"], "--shots does not apply"),
                                         (["squad", "--input", "t.txt", "--limit", "5"], "--input does not apply")])
def test_zeroshot_refuses_options_its_task_would_ignore(argv, named, capsys):
    from muppets import cli

    assert cli.main(["zeroshot", *argv, "--model", "no-such-model"]) == 2  # before any loading
    assert named in capsys.readouterr().err


def test_print_config_with_seeds_says_so_and_still_loads_back(tmp_path, capsys):
    from muppets import cli
    from muppets.transfer.finetune import FinetuneConfig
    from muppets.config import load_typed

    assert cli.main(["finetune", "sst2", "--seeds", "1,2", "--print-config"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# with --seeds 1,2: one run per seed")
    (tmp_path / "c.yaml").write_text(text)
    assert load_typed(FinetuneConfig, tmp_path / "c.yaml", []).task.name == "sst2"


@pytest.mark.parametrize("argv", [
    ["vectors", "convert", "--vectors", "v.txt", "--to", "text", "--out", "OUT"],
    ["vectors", "evaluate", "--vectors", "v.txt", "--out", "OUT"],
    ["evaluate", "sst2", "--model", "no-such-model", "--predictions", "OUT"],
    ["zeroshot", "hellaswag", "--model", "no-such-model", "--out", "OUT"],
    ["polysemy", "--model", "no-such-model", "--out", "OUT"],
    ["attention", "no-such-model", "the bank", "--out", "OUT"],
    ["weak", "analyze", "lfs.py", "--task", "texts.txt", "--plot", "OUT"],
    ["embed", "--model", "no-such-model", "--input", "in.txt", "--out", "OUT.npy"],
])
def test_a_file_that_exists_is_replaced_only_with_overwrite_and_refused_before_any_work(argv, tmp_path, capsys):
    from muppets import cli

    out = tmp_path / ("OUT.json" if argv[0] == "embed" else "OUT")  # embed's .npy comes with a .json
    out.write_text("mine")
    argv = [str(tmp_path / a) if a.startswith("OUT") else a for a in argv]
    assert cli.main(argv) == 2  # nothing loaded: the model, vectors and inputs named do not exist
    assert f"{out} exists: pass --overwrite" in capsys.readouterr().err and out.read_text() == "mine"
    assert cli.main([*argv, "--overwrite"]) == 2  # now it gets as far as the missing input
    assert "exists: pass --overwrite" not in capsys.readouterr().err


def test_seeds_must_name_a_seed(capsys):
    from muppets import cli

    assert cli.main(["finetune", "sst2", "--seeds", ",", "--print-config"]) == 2
    assert "--seeds ',': no seed given" in capsys.readouterr().err


MODEL_FORMS = [  # (the documented form, the same with MODEL as the first argument)
    (["probe", "--model", "m", "--tasks", "pos"], ["probe", "m", "--tasks", "pos"]),
    (["attention", "--model", "m", "the text", "--out", "p.html"], ["attention", "m", "the text", "--out", "p.html"]),
    (["serve", "--model", "m", "--port", "0"], ["serve", "m", "--port", "0"]),
    (["export", "onnx", "--model", "m", "--out", "o"], ["export", "onnx", "m", "--out", "o"]),
    (["export", "sentence-transformers", "--model", "m", "--out", "o"],
     ["export", "sentence-transformers", "m", "--out", "o"]),
    (["finetune", "sst2", "--model", "m", "lr=3e-5"], ["finetune", "m", "sst2", "lr=3e-5"]),
    (["evaluate", "sst2", "--model", "m", "--split", "test"], ["evaluate", "m", "sst2", "--split", "test"]),
    (["features", "conll2003", "--model", "m", "epochs=1"], ["features", "m", "conll2003", "epochs=1"]),
    (["generate", "--model", "m", "one", "two"], ["generate", "m", "one", "two"]),
    (["zeroshot", "squad", "--model", "m", "--limit", "5"], ["zeroshot", "m", "squad", "--limit", "5"]),
    (["embed", "--model", "m", "--input", "i.txt", "--out", "o.npy"], ["embed", "m", "--input", "i.txt", "--out", "o.npy"]),
    (["polysemy", "bank", "--model", "m"], ["polysemy", "m", "bank"]),
    # MODEL first, then options, then the other arguments (argparse alone would take MODEL for them)
    (["generate", "--model", "m", "--max-new-tokens", "3", "one"], ["generate", "m", "--max-new-tokens", "3", "one"]),
    (["zeroshot", "--model", "m", "--limit", "5", "squad"], ["zeroshot", "m", "--limit", "5", "squad"]),
    (["attention", "--model", "m", "--out", "p.html", "the text"], ["attention", "m", "--out", "p.html", "the text"]),
]


def _model_commands(parser, path=()) -> set[tuple[str, ...]]:
    """Every subcommand whose parser declares a model (muppets.cliargs.add_model_argument)."""
    import argparse

    found = {tuple(path)} if parser.get_default("model_slots") is not None else set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found |= _model_commands(child, [*path, name])
    return found


def test_every_command_takes_its_model_as_an_option_or_first_and_the_same_either_way():
    from muppets import cli
    from muppets.cliargs import settle_model

    def settled(argv):
        args = cli.parse_args(argv)
        settle_model(args)
        return vars(args)

    for documented, first in MODEL_FORMS:
        one, other = settled(documented), settled(first)
        assert one == other and one["model"] == "m", first
    covered = {tuple(a for a in argv if a not in ("--model", "m"))[:2 if argv[0] == "export" else 1]
               for argv, _ in MODEL_FORMS}
    assert _model_commands(cli.build_parser()) == covered  # a new command with a model is listed above
    assert settled(["finetune", "sst2", "lr=3e-5"])["model"] is None  # finetune's default: the config's model
    assert settled(["generate", "--model", "m", "m", "two"])["prompts"] == ["m", "two"]  # with --model: prompts


@pytest.mark.parametrize("argv, message", [
    (["probe", "a", "--model", "b"], "probe: the model is given twice, as 'a' and as --model 'b'"),
    (["attention", "a", "the text", "--model", "b", "--out", "p.html"], "attention: the model is given twice"),
    (["finetune", "a", "sst2", "--model", "b", "--print-config"], "finetune: the model is given twice"),
    (["probe", "--tasks", "pos"], "probe: which model? give --model MODEL (or MODEL as the first argument)"),
    (["zeroshot", "m", "sq"], "zeroshot: task 'sq': choose one of hellaswag, squad, translate, summarize"),
    (["generate", "Once upon a time"], "generate: which model?"),
    (["finetune", "sst2", "minilm", "--print-config"], "write finetune minilm sst2 (MODEL first)"),
])
def test_a_model_given_twice_or_not_at_all_is_a_one_line_error(argv, message, capsys):
    from muppets import cli

    assert cli.main(argv) == 2  # before anything is loaded
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("barrier_fails", [False, True])
def test_a_command_that_succeeded_leaves_the_process_group(tmp_path, monkeypatch, caplog, barrier_fails):
    """Under torchrun, main() leaves the process group after a command that returned 0: at a
    barrier with the other ranks, or, when that fails (a peer gone or slower than the group's
    timeout), alone with a warning, still returning 0 (a one-process gloo group stands in)."""
    import torch.distributed as dist

    from muppets import cli
    from muppets.train import distributed

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        if barrier_fails:
            def broken() -> None:
                raise RuntimeError("connection closed by peer")

            monkeypatch.setattr(distributed, "shutdown_distributed", broken)
        with caplog.at_level("WARNING"):
            cli._leave_process_group()
        assert not dist.is_initialized()
        assert ("without the other ranks" in caplog.text) == barrier_fails
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


WORKER = """
import atexit, logging, sys
import torch.distributed as dist
import muppets.malloc
from muppets import cli
muppets.malloc.use_malloc = lambda: None  # no re-execution on another malloc
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
cli.main = lambda argv=None: (logging.getLogger("muppets").warning("the command's last log line"),
                              print("its last output", end=""), cli._leave_process_group(), int(sys.argv[2]))[-1]
atexit.register(print, "an exit handler ran", file=sys.stderr)
logging.basicConfig(level=logging.INFO)
sys.exit(cli.run())
"""


@pytest.mark.parametrize("code", [0, 3])
def test_a_torchrun_worker_that_succeeded_ends_without_finalisation(tmp_path, code):
    """After a command that succeeded and left its process group, run() ends the process at once
    (os._exit: no interpreter finalisation, where torch's runtime was seen to abort), with the
    logs and output flushed; a failed command exits the usual way."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")}
    proc = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path / "store"), str(code)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert proc.stdout == "its last output"
    assert "the command's last log line" in proc.stderr
    assert ("an exit handler ran" in proc.stderr) == (code != 0)  # 0: ended without finalisation
