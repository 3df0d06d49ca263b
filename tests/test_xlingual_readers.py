"""The multilingual corpus readers rejoin each collection's wrapped lines into paragraphs
(tiny hand-written files that mimic the quirks of the shared data README §13–14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from muppets.data.languages import clean_zhwiki, is_heading, tei_paragraphs
from muppets.data.readers import iter_documents, list_files


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def _read(path: Path, fmt: str) -> list[list[str]]:
    return [doc.paragraphs for doc in iter_documents([path], fmt)]


def test_german_hard_wrapped_lines_are_joined_and_cut_at_headings(tmp_path: Path) -> None:
    # ELTeC-deu: an empty first line, lines wrapped at <= 85 characters, no blank lines, headings alone.
    text = ("\nErstes Kapitel\nEs war einmal ein Müller, der hatte drei Söhne, und daß er arm war,\n"
            "wußte das ganze Dorf. »Geht«, sagte er.\nII.\nDrittes Kapitel\nDer jüngste blieb zu Hause.")
    docs = _read(_write(tmp_path / "de.txt", text), "novel-wrapped")
    assert docs == [["Erstes Kapitel",
                     "Es war einmal ein Müller, der hatte drei Söhne, und daß er arm war, wußte das ganze Dorf. "
                     "»Geht«, sagte er.",
                     "Drittes Kapitel", "Der jüngste blieb zu Hause."]]


def test_french_one_paragraph_per_line_with_trailing_spaces_and_no_break_spaces(tmp_path: Path) -> None:
    text = " \n \n\nLe 18 mai 1859, Mr Renault arriva. \n«\u00a0Bonjour\u00a0!\u00a0» dit-il\u00a0; puis il partit. \n \n"
    docs = _read(_write(tmp_path / "fr.txt", text), "novel-lines")
    assert docs == [["Le 18 mai 1859, Mr Renault arriva.", "« Bonjour ! » dit-il ; puis il partit."]]


def test_spanish_markup_breaks_are_rejoined_and_tab_lines_split_only_at_sentence_ends(tmp_path: Path) -> None:
    # CLiGS Spanish: empty first line, TAB-only lines, inline markup as line breaks, no final newline.
    text = ("\n\t\n\t\nÉl leía la\nRevue de Psychiatrie\n, intonso aún. Se llamaba\ndon Lope de Sosa\n"
            ", nombre que\n\t\ncontinuaba aquí.\n\t\n-¡Nené! -exclamó él.\n\t\n¿Quién la manda venir?")
    docs = _read(_write(tmp_path / "es.txt", text), "novel-tei")
    assert docs == [["Él leía la Revue de Psychiatrie, intonso aún. Se llamaba don Lope de Sosa, nombre que "
                     "continuaba aquí.", "-¡Nené! -exclamó él.", "¿Quién la manda venir?"]]


def test_spanish_tab_line_before_a_lowercase_line_does_not_split() -> None:
    lines = enumerate(["Llegó tarde.", "\t", "y nadie lo vio.", "\t", "Otro párrafo."])
    assert tei_paragraphs(lines) == ["Llegó tarde. y nadie lo vio.", "Otro párrafo."]


def test_zhwiki_leftovers_are_cleaned_and_title_only_articles_skipped(tmp_path: Path) -> None:
    text = ('<doc id="1" url="https://zh.wikipedia.org/wiki?curid=1" title="甲">\n甲\n\n'
            '甲（）是-{zh-hans:露脐上衣; zh-hant:露腹短上衣;}-的一种&lt;ref name="a"&gt;书&lt;/ref&gt;。\n'
            '位于[[北京市|北京]]与[[天津]]之间，面积formula_1平方公里。\n歷史.\n</doc>\n'
            '<doc id="2" url="https://zh.wikipedia.org/wiki?curid=2" title="乙">\n乙\n\n</doc>\n')
    docs = _read(_write(tmp_path / "zhwiki_00.txt", text), "zhwiki")
    assert docs == [["甲是露脐上衣的一种。", "位于北京与天津之间，面积formula_1平方公里。", "歷史."]]


@pytest.mark.parametrize("raw, clean", [
    ("A&amp;B公司", "A&B公司"),
    ("进球<ref name=\"sp36647\"/。", "进球。"),
    ("祖[[歐斌；父歐廉", "祖歐斌；父歐廉"),
    ("[[Category:王姓]", ""),
    ("-{A|简体}-字", "简体字"),
])
def test_zhwiki_broken_leftovers(raw: str, clean: str) -> None:
    assert clean_zhwiki(raw) == clean


def test_headings() -> None:
    assert is_heading("Zwölftes Kapitel") and is_heading("12") and is_heading("IV.")
    assert not is_heading("Er kam am 12. Mai.") and not is_heading("Den Studenten")


def test_manifests_are_skipped(tmp_path: Path) -> None:
    _write(tmp_path / "MANIFEST.tsv", "file\tbytes\n")
    _write(tmp_path / "a.txt", "Eine Zeile.")
    assert [p.name for p in list_files([tmp_path], "novel-wrapped")] == ["a.txt"]


@pytest.mark.parametrize("module", ["muppets.data.languages", "muppets.data.language_sampling",
                                    "muppets.objectives.multilingual"])
def test_doctests(module: str) -> None:
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(module)).failed == 0
