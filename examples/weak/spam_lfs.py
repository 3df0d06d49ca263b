"""Labeling functions for YouTube comment spam: the deterministic LFs of Snorkel's spam
tutorial (``snorkel-tutorials/spam/01_spam_tutorial.py``), written with muppets' API.

Run them (``--task spam`` is the tutorial's own split and raw text; ``--task youtube-spam`` the
registry's other split and cleaned text; any text file works too)::

    muppets weak analyze examples/weak/spam_lfs.py --task spam --split dev --plot lfs.png
    muppets weak label examples/weak/spam_lfs.py --task spam --model snorkel --out labels.jsonl

``benchmarks/weak_spam.py`` compares the label models on them with Snorkel's.

The tutorial's three model-based LFs (spaCy's PERSON entities, TextBlob polarity and
subjectivity) are left out here: ``spam_model_lfs.py`` adds muppets models in their place (a
fine-tuned SST-2 classifier and CoNLL-2003 tagger with thresholds, optionally a zero-shot GPT
prompt).
"""

from muppets.weak import keyword_lf, length_lf, regex_lf

HAM, SPAM = 0, 1

keyword_my = keyword_lf("keyword_my", ["my"], SPAM)  # "my channel", "my video"
keyword_subscribe = keyword_lf("keyword_subscribe", ["subscribe"], SPAM)
keyword_link = keyword_lf("keyword_http", ["http"], SPAM)  # links to other channels
keyword_please = keyword_lf("keyword_please", ["please", "plz"], SPAM)  # requests
keyword_song = keyword_lf("keyword_song", ["song"], HAM)  # talks about the video itself
regex_check_out = regex_lf("regex_check_out", r"check.*out", SPAM)  # "check (me|it) out"
short_comment = length_lf("short_comment", HAM, below=5)  # "cool video!"


LFS = [keyword_my, keyword_subscribe, keyword_link, keyword_please, keyword_song,
       regex_check_out, short_comment]
