"""The ``muppets`` command line as a whole."""

from __future__ import annotations

import subprocess
import sys


def test_help_lists_every_command_without_importing_torch_or_the_server():
    code = ("import sys\nfrom muppets.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('LOADED', *sorted(m for m in ('torch', 'starlette', 'uvicorn', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pretrain" in out and "serve" in out and "export" in out
    assert out.strip().splitlines()[-1] == "LOADED"  # none of them: --help answers at once
