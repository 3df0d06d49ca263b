"""The malloc the ``muppets`` command runs on (``$MUPPETS_MALLOC``, muppets.malloc): which library
each setting asks for, the re-executed process, and the release call each malloc gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from muppets.errors import ConfigError
from muppets.malloc import MALLOC_ENV, find_malloc, library_dirs, malloc_to_preload

TCMALLOC = find_malloc("tcmalloc", library_dirs())


def _fake_lib(directory: Path, name: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(b"")
    return str(directory / name)


def test_each_setting_asks_for_its_library(tmp_path: Path) -> None:
    tc = _fake_lib(tmp_path / "a", "libtcmalloc_minimal.so.4")
    je = _fake_lib(tmp_path / "b", "libjemalloc.so.2")
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert malloc_to_preload({}, dirs) == tc  # auto is the default
    assert malloc_to_preload({MALLOC_ENV: "auto"}, dirs) == tc
    assert malloc_to_preload({MALLOC_ENV: "jemalloc"}, dirs) == je
    assert malloc_to_preload({MALLOC_ENV: "system"}, dirs) is None
    assert malloc_to_preload({MALLOC_ENV: je}, dirs) == je  # a path
    # auto without tcmalloc: the system's malloc, no error
    assert malloc_to_preload({MALLOC_ENV: "auto"}, [str(tmp_path / "b")]) is None


def test_a_malloc_already_preloaded_is_left_alone(tmp_path: Path) -> None:
    dirs = [str(Path(_fake_lib(tmp_path, "libtcmalloc_minimal.so.4")).parent)]
    assert malloc_to_preload({"LD_PRELOAD": "/opt/libjemalloc.so.2"}, dirs) is None  # the user's choice
    assert malloc_to_preload({"LD_PRELOAD": "/opt/libfoo.so"}, dirs) is not None  # not a malloc
    assert malloc_to_preload({"LD_PRELOAD": "/opt/x/libmimalloc.so.2"}, dirs) is None
    # judged by the library's name, not by the directories it sits in
    assert malloc_to_preload({"LD_PRELOAD": "/opt/malloc-tools/libfoo.so"}, dirs) is not None


def test_bad_settings_are_errors_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"MUPPETS_MALLOC='tcmaloc': expected auto, system"):
        malloc_to_preload({MALLOC_ENV: "tcmaloc"}, [])
    with pytest.raises(ConfigError, match="none of libjemalloc.so.2 is in .*apt-get install libjemalloc2"):
        malloc_to_preload({MALLOC_ENV: "jemalloc"}, [str(tmp_path)])
    with pytest.raises(ConfigError, match="no such file"):
        malloc_to_preload({MALLOC_ENV: str(tmp_path / "libnone.so")}, [])
    with pytest.raises(ConfigError, match="a space or a colon"):
        malloc_to_preload({MALLOC_ENV: "/opt/a:b/libtcmalloc.so.4"}, [])


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("LD_PRELOAD", MALLOC_ENV, "MUPPETS_MALLOC_PRELOADED") and not k.startswith("TCMALLOC_")}
    return subprocess.run([sys.executable, *args], env={**clean, **env}, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux's")
def test_the_command_runs_on_the_malloc_it_is_told_to() -> None:
    if TCMALLOC is None:  # under CI=true a skip fails: scripts/setup.sh installs libtcmalloc-minimal4 there
        pytest.skip("tcmalloc is not installed (apt-get install libtcmalloc-minimal4)")
    info = json.loads(_run(["-m", "muppets.cli", "info", "--json"]).stdout)
    assert "libtcmalloc" in info["malloc"] and info["malloc_setting"] == "auto"
    info = json.loads(_run(["-m", "muppets.cli", "info", "--json"], MUPPETS_MALLOC="system").stdout)
    assert info["malloc"] == "system"
    bad = _run(["-m", "muppets.cli", "info"], MUPPETS_MALLOC="bogus")
    assert bad.returncode == 2 and "muppets: error: MUPPETS_MALLOC='bogus'" in bad.stderr
    # main() called by a program never re-executes it: only the entry point run() does
    code = "import sys; sys.argv = ['muppets', 'info', '--json']; from muppets.cli import main; main()"
    assert json.loads(_run(["-c", code]).stdout)["malloc"] == "system"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux's")
def test_the_re_executed_process_cleans_its_environment_and_releases_through_tcmalloc() -> None:
    if TCMALLOC is None:
        pytest.skip("tcmalloc is not installed (apt-get install libtcmalloc-minimal4)")
    code = ("import os, json; from muppets import heap, malloc; malloc.use_malloc(); f = heap._release_function(); "
            "print(json.dumps([malloc.malloc_in_use(), os.environ.get('LD_PRELOAD'), "
            "os.environ.get('MUPPETS_MALLOC_PRELOADED'), os.environ.get('TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD'), "
            "getattr(f, '__name__', None)]))")
    malloc, preload, marker, threshold, release = json.loads(_run(["-c", code]).stdout)
    assert "libtcmalloc" in malloc
    # the library stays loaded; the programs this one starts do not inherit it
    assert preload is None and marker is None and threshold is None
    assert release == "MallocExtension_ReleaseFreeMemory"
    malloc, _, _, _, release = json.loads(_run(["-c", code], MUPPETS_MALLOC="system").stdout)
    assert malloc == "system" and release == "<lambda>"  # glibc's malloc_trim(0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux's")
def test_a_process_restarts_at_most_once_and_says_when_the_library_did_not_load(tmp_path: Path) -> None:
    if TCMALLOC is None:
        pytest.skip("tcmalloc is not installed (apt-get install libtcmalloc-minimal4)")
    starts = tmp_path / "starts"
    code = (f"open({str(starts)!r}, 'a').write('x'); from muppets import malloc; "
            "malloc.use_malloc(); malloc.use_malloc(); print(malloc.malloc_in_use())")
    out = _run(["-c", code], MUPPETS_MALLOC="tcmalloc")
    assert out.returncode == 0 and "libtcmalloc" in out.stdout
    assert starts.read_text() == "xx"  # the first start and one re-execution, not more
    fake = _fake_lib(tmp_path, "libfakemalloc.so")  # not a library: the loader ignores it
    out = _run(["-c", "from muppets import malloc; malloc.use_malloc(); print(malloc.malloc_in_use())"],
               MUPPETS_MALLOC=fake)
    assert out.returncode == 0 and out.stdout.strip() == "system"
    assert f"MUPPETS_MALLOC={fake}: {fake} was not loaded" in out.stderr
