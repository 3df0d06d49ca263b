"""The manual (``mkdocs.yml``, ``docs/``): it builds in strict mode from the repo, every page
opens from disk in headless Chromium with no failed request and no request leaving the machine,
and the generated reference covers every command option, config key and public class. The
front door's limits: README ≤ 200 lines, linking its screenshots.

The tutorials' commands run in ``tests/test_docs_tutorials.py``; BENCHMARKS.md's table in
``tests/test_benchmarks_md.py``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from docs_browser import Browser, chromium_binary, site_pages  # noqa: E402
from docs_reference import RUN_CONFIGS, _subcommands, cli_page, config_page, packages  # noqa: E402


def browser() -> Browser:
    """Headless Chromium (scripts/setup.sh installs it under CI, where this may not skip)."""
    if chromium_binary() is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium; scripts/setup.sh installs it "
                    "under CI=true)")
    return Browser()


def build_site(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)


def public_classes(module_path: Path) -> list[str]:
    tree = ast.parse(module_path.read_text(encoding="utf-8"))
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]


def module_file(module: str) -> Path:
    base = ROOT / "src" / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def test_site_builds_strict_and_every_page_loads_offline(tmp_path) -> None:
    """One build (a minute: every module's docstrings are rendered), then every page in the
    browser, then every public class on its package's API page."""
    site = tmp_path / "site"
    done = build_site(site)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    pages = site_pages(site)
    names = {p.relative_to(site).as_posix() for p in pages}
    for expected in ("index.html", "getting-started.html", "reference/cli.html", "reference/config.html",
                     "reference/api/index.html", "tutorials/index.html", "concepts/index.html", "results/index.html"):
        assert expected in names, f"the site has no {expected}"
    problems = []
    with browser() as chromium:
        for page in pages:
            problems += [f"{page.relative_to(site)}: {p}" for p in chromium.load(page.resolve().as_uri()).problems()]
    assert not problems, "\n".join(problems[:40])
    missing = []
    for package, modules in packages().items():
        html = (site / "reference" / "api" / f"{package}.html").read_text(encoding="utf-8")
        for module in modules:
            missing += [f"{module}.{c}" for c in public_classes(module_file(module))
                        if f'id="{module}.{c}"' not in html]
    assert not missing, f"public classes missing from the API pages: {missing[:20]}"


def test_browser_check_sees_failed_and_external_requests(tmp_path) -> None:
    """The page check is not blind: a missing local script, a script from a CDN and a thrown
    error are each reported."""
    page = tmp_path / "bad.html"
    page.write_text('<html><body><script src="missing.js"></script><script src="https://cdn.example.org/x.js">'
                    '</script><script>throw new Error("boom")</script></body></html>', encoding="utf-8")
    good = tmp_path / "good.html"
    good.write_text("<html><body><p>fine</p></body></html>", encoding="utf-8")
    with browser() as chromium:
        problems = chromium.load(page.as_uri()).problems()
        clean = chromium.load(good.as_uri()).problems()
    text = "\n".join(problems)
    assert "missing.js" in text and "external request https://cdn.example.org/x.js" in text and "boom" in text, text
    assert clean == []


def test_cli_reference_lists_every_command_and_option() -> None:
    from muppets.cli import build_parser

    page = cli_page()
    sections = re.split(r"^## ", page, flags=re.M)[1:]
    by_command = {s.split("{", 1)[0].strip(): s for s in sections}
    for words, parser in _subcommands(build_parser(), []):
        section = by_command.get(f"muppets {' '.join(words)}")
        assert section is not None, f"no section for muppets {' '.join(words)}"
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings or [action.dest]:
                assert f"`{option}`" in section, f"muppets {' '.join(words)}: {option} missing from the reference"


def config_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints.get(f.name, f.type)
        if not f.init:
            continue
        keys += config_keys(kind, f"{prefix}{f.name}.") if dataclasses.is_dataclass(kind) else [f"{prefix}{f.name}"]
    return keys


def test_config_reference_lists_every_key_with_its_comment() -> None:
    page = config_page()
    for _, target, _ in RUN_CONFIGS:
        module, name = target.split(":")
        for key in config_keys(getattr(importlib.import_module(module), name)):
            assert f"| `{key}` |" in page, f"{target}: key {key} missing from the config reference"
    # the comment beside a field in the source is its meaning on the page
    assert "| `train.batch_size` | `int` | `32` | GLOBAL sequences per optimizer step" in page


def test_readme_is_the_front_door() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200, f"README.md has {len(readme.splitlines())} lines (≤ 200)"
    shots = re.findall(r"\]\((docs/images/screenshots/[^)]+\.png)\)", readme)
    assert len(shots) >= 3, f"README.md links {shots}: the home page and two tutorials"
    for shot in shots:
        assert (ROOT / shot).stat().st_size > 10_000, f"{shot}: missing or empty"
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), f"README.md links {link}, which does not exist"
