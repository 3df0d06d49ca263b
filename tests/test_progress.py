"""Progress of long work (:mod:`muppets.progress`): a bar on a terminal; elsewhere no carriage
returns, only a log line now and then (none for short work, none when the caller logs its own)."""

from __future__ import annotations

import io
import logging
import sys
import time
from pathlib import Path

import pytest

from muppets.progress import is_terminal, progress_bar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_backbones import tiny_vectors  # noqa: E402


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_redrawn_bar() -> None:
    stream = Terminal()
    for _ in progress_bar(range(5), desc="work", file=stream):
        pass
    assert "\r" in stream.getvalue() and "5/5" in stream.getvalue()  # what a log file must not get


def test_a_log_file_gets_lines_now_and_then_and_no_carriage_return(caplog: pytest.LogCaptureFixture) -> None:
    stream = io.StringIO()
    with caplog.at_level(logging.INFO, logger="muppets.progress"):
        for _ in progress_bar(range(30), desc="embed", unit="batch", file=stream, log_every_s=0.02):
            time.sleep(0.003)
    lines = [r.getMessage() for r in caplog.records if r.name == "muppets.progress"]
    assert stream.getvalue() == ""  # nothing drawn on the stream itself
    assert len(lines) >= 2 and not any("\r" in line or "\n" in line for line in lines)
    assert all(line.startswith("embed: ") for line in lines) and "100% 30/30" in lines[-1]
    assert len({line.partition(" [")[0] for line in lines}) == len(lines)  # close() repeats no count


def test_without_a_total_the_lines_count_without_a_percentage(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="muppets.progress"):
        bar = progress_bar(total=None, desc="counting words", unit=" texts", file=io.StringIO(), log_every_s=0.02)
        for _ in range(20):
            time.sleep(0.003)
            bar.update(1)
        bar.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "muppets.progress"]
    assert lines and lines[-1].startswith("counting words: 20 [") and "%" not in lines[-1]


@pytest.mark.parametrize("options", [{}, {"log_every_s": 0.0}, {"enabled": False, "log_every_s": 0.01}])
def test_short_work_off_or_self_logging_callers_show_nothing(options, caplog: pytest.LogCaptureFixture) -> None:
    """The default logs only work that outlasts 30 s; ``log_every_s=0`` (the trainer, which logs
    its own steps) and ``enabled=False`` never log. The object still iterates and counts."""
    stream = io.StringIO()
    with caplog.at_level(logging.INFO, logger="muppets.progress"):
        assert sum(progress_bar(range(12), desc="x", file=stream, **options)) == sum(range(12))
        time.sleep(0.02)
    assert stream.getvalue() == "" and not [r for r in caplog.records if r.name == "muppets.progress"]


def test_disabled_on_a_terminal_draws_nothing() -> None:
    stream = Terminal()
    bar = progress_bar(total=3, file=stream, enabled=False)
    bar.update(3)
    bar.set_postfix_str("ETA ?")
    bar.close()
    assert stream.getvalue() == ""


def test_is_terminal_of_odd_streams() -> None:
    closed = io.StringIO()
    closed.close()
    assert is_terminal(Terminal()) and not is_terminal(io.StringIO()) and not is_terminal(closed)
    assert not is_terminal(object())


def test_embedding_for_a_probe_writes_no_bar_into_a_redirected_stderr(tmp_path: Path, capfd) -> None:
    """``muppets probe`` embeds with ``progress=True``: its bar used to land in log files."""
    from muppets.transfer.embed import embed_sentences
    from muppets.transfer.embedders import load_embedder

    embedder = load_embedder(tiny_vectors(tmp_path / "w2v.txt"))
    capfd.readouterr()
    embed_sentences(embedder, [["the", "bank"], ["a", "river"]] * 5, batch_size=2, progress=True)
    assert "\r" not in capfd.readouterr().err  # pytest's stderr is not a terminal
