"""muppets: pretrained language representations you can train on a CPU.

Layout (see DESIGN.md): ``tokenizers/`` → ``data/`` → ``objectives/`` → ``nn/`` + ``models/`` →
``train/``; ``interop/`` reads and writes Hugging Face directories; ``cli.py`` is a thin shell.
"""

__version__ = "0.1.0"
