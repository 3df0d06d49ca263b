"""Labeling functions for movie-review sentiment (SST-2) written without looking at SST-2's
labels: a hand-written sentiment lexicon (general English opinion words, written for this
file; no list was downloaded or derived from a labelled corpus), negation-aware scoring,
a contrast rule ("X, but Y": Y decides) and phrase patterns common in film criticism.
``benchmarks/weak_sst2.py`` adds a zero-shot GPT prompt LF and trains the end model.

Text is read lower-cased; SST's tokenisation splits clitics (``does n't``), which the word
pattern keeps as one token (``n't``)::

    muppets weak analyze examples/weak/sst2_lfs.py --task sst2 --split dev
"""

from __future__ import annotations

import re

from muppets.weak import ABSTAIN, labeling_function, lexicon_lf, regex_lf

NEG, POS = 0, 1  # SST-2: 0 = negative, 1 = positive

POSITIVE = frozenset("""
good great excellent superb wonderful marvelous marvellous terrific fantastic brilliant
outstanding remarkable impressive splendid magnificent exceptional extraordinary stunning
beautiful beautifully lovely gorgeous elegant graceful charming delightful enjoyable
entertaining fun funny hilarious witty clever smart intelligent thoughtful insightful
moving touching poignant heartfelt tender warm affecting powerful compelling gripping
engaging engrossing absorbing riveting fascinating intriguing thrilling exciting suspenseful
haunting memorable masterpiece masterful masterfully accomplished assured polished
inventive original fresh imaginative creative inspired inspiring uplifting joyous joy
best finest love loved loves lovable likable likeable appealing pleasant pleasure pleasing
satisfying rewarding worthwhile refreshing rich richly vivid solid strong sharp sweet
honest sincere authentic genuine perfect perfectly wonderfully excellently admirable
winning triumph triumphant succeeds success successful treat gem delight delights
hypnotic luminous radiant sublime amazing awesome incredible irresistible unforgettable
intense nuanced subtle layered ambitious smartly deftly skillfully wise wry well-made
well-acted well-crafted well-written beguiling fine nice cool enjoy enjoyed
""".split())

NEGATIVE = frozenset("""
bad awful terrible horrible dreadful atrocious abysmal lousy poor poorly weak lame dull
boring bored bore tedious tiresome tired monotonous repetitive slow sluggish plodding
bland flat lifeless listless stale trite cliched clichéd cliche clichés predictable
formulaic derivative generic hackneyed unoriginal uninspired uninspiring uninteresting
pointless meaningless mindless senseless silly stupid dumb idiotic inane ridiculous
absurd laughable embarrassing pathetic pretentious self-indulgent overwrought overlong
long-winded bloated muddled messy mess confusing confused incoherent disjointed sloppy
shallow hollow empty thin superficial mediocre forgettable disappointing disappointment
disappoints fails failed failure flop waste wasted worst unfunny annoying irritating
grating obnoxious unpleasant ugly clumsy awkward heavy-handed contrived implausible
unconvincing unbelievable forced strained hate hated mistake problem problems sadly
unfortunately lacking lacks worse crap junk garbage mess dud drivel tripe
sentimental mawkish manipulative sappy cheesy schmaltzy preachy heavy-handed amateurish
inept incompetent misguided misfire misfires sour nasty vile offensive ugly unwatchable
""".split())

NEGATORS = frozenset("not n't no never nothing hardly barely neither nor without".split())
_WORD = re.compile(r"[\w-]+(?:'\w+)?|n't")


def polarity(tokens: list[str], window: int = 3) -> int:
    """Lexicon hits, positive minus negative; a hit preceded by a negator within ``window``
    tokens counts for the other side ("not good" is negative, "never boring" positive)."""
    score = 0
    for i, token in enumerate(tokens):
        sign = 1 if token in POSITIVE else -1 if token in NEGATIVE else 0
        if sign and any(t in NEGATORS for t in tokens[max(0, i - window):i]):
            sign = -sign
        score += sign
    return score


def _vote(score: int) -> int:
    return POS if score > 0 else NEG if score < 0 else ABSTAIN


lexicon = lexicon_lf("lexicon", {**{w: POS for w in POSITIVE}, **{w: NEG for w in NEGATIVE}})


@labeling_function()
def lexicon_negation(x):
    """Lexicon polarity with negation flipping; abstains on a tie."""
    return _vote(polarity(_WORD.findall(x.text.lower())))


@labeling_function()
def but_clause(x):
    """Contrast: in "A but B" the reviewer's verdict is usually B; B's polarity decides."""
    tokens = _WORD.findall(x.text.lower())
    if "but" not in tokens:
        return ABSTAIN
    last = len(tokens) - 1 - tokens[::-1].index("but")
    return _vote(polarity(tokens[last + 1:]))


neg_phrases = regex_lf("neg_phrases", r"\b(waste of (time|money)|(too|overly) (long|slow|much|"
                       r"little)|falls? flat|does n't (work|add up)|not (funny|good|worth|"
                       r"much)|nothing (new|more|special)|(should|could) have been|run(s)? out "
                       r"of|lacks? (any|the)|what a (mess|waste)|(no|little) sense of)\b", NEG)
pos_phrases = regex_lf("pos_phrases", r"\b((one of )?the (best|finest) |must[- ]see|(well|"
                       r"beautifully|brilliantly|wonderfully|superbly) (made|acted|written|"
                       r"crafted|done|observed)|a (real )?(treat|joy|delight|pleasure|gem)|"
                       r"worth (seeing|watching|the)|(never|not) (boring|dull|bad)|you 'll "
                       r"(love|enjoy|laugh)|at (its|their) best)", POS)

LFS = [lexicon, lexicon_negation, but_clause, neg_phrases, pos_phrases]
