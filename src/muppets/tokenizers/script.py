"""Converting Chinese text to one script (Simplified or Traditional) before tokenization.

Chinese Wikipedia keeps each article in the script its editors wrote, so a corpus mixes
這/这, 國/国 …; ``bert-base-chinese``'s vocabulary has both forms, and a model then learns two
embeddings for one word. Converting everything (corpus, task text, served text) to one script
is a setting of the tokenizer (``WordPieceSettings.chinese_script``), so that a model and every
input it ever reads agree.

The conversion is OpenCC's (``t2s`` to Simplified; ``s2tw`` to Traditional in Taiwan's standard
forms, which ``bert-base-chinese``'s vocabulary covers better than OpenCC's own ``s2t`` forms,
so fewer characters become ``[UNK]``). Phrase
tables come first, then characters, and every entry of these tables maps a string to one of the
same length, so each character stays where it was; should a future table break that for some
text, the text is converted character by character instead. So token offsets, answer spans and
masking units computed on the converted text point at the same characters of the original.
Converting twice may change a few more characters (s2t reads 干 in a converted phrase anew):
convert once.

>>> convert = script_converter("simplified")
>>> convert("這個國家的頭髮")
'这个国家的头发'
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from muppets.errors import ConfigError

SCRIPTS = ("", "simplified", "traditional")  # "" = leave the text as it is
_OPENCC = {"simplified": "t2s", "traditional": "s2tw"}
# code points that OpenCC's character tables can change: the CJK ideograph blocks
_CJK_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2A6DF), (0x2A700, 0x3134F),
               (0x2F800, 0x2FA1F))


def check_script(script: str, where: str = "chinese_script") -> str:
    """``script`` if it is one of :data:`SCRIPTS`, else a :class:`ConfigError` naming ``where``."""
    if script not in SCRIPTS:
        raise ConfigError(f"{where}={script!r}: expected one of {', '.join(repr(s) for s in SCRIPTS)}")
    return script


@lru_cache(maxsize=None)
def _opencc(script: str):  # one converter per process and script
    try:
        import opencc
    except ImportError:
        raise ConfigError(f"chinese_script={script} needs OpenCC: pip install 'muppets[chinese]'") from None
    return opencc.OpenCC(_OPENCC[script])


@lru_cache(maxsize=None)
def _character_table(script: str) -> dict[int, str]:
    """``str.translate`` table: every ideograph OpenCC changes on its own, to its one-character
    form (followed to its end, so converting twice changes nothing more)."""
    cc = _opencc(script)
    table: dict[int, str] = {}
    for first, last in _CJK_RANGES:
        for cp in range(first, last + 1):
            out = cc.convert(chr(cp))
            if len(out) == 1 and out != chr(cp):
                table[cp] = out
    for cp, out in table.items():  # e.g. 薴 → 苧 → 苎
        seen = {cp}
        while ord(out) in table and ord(out) not in seen:
            seen.add(ord(out))
            out = table[ord(out)]
        table[cp] = out
    return table


def script_converter(script: str) -> Callable[[str], str] | None:
    """The length-preserving converter to ``script`` (None for ``""``: nothing to do)."""
    if not check_script(script):
        return None
    cc, table = _opencc(script), _character_table(script)

    def convert(text: str) -> str:
        out = cc.convert(text)
        return out if len(out) == len(text) else text.translate(table)

    return convert
