#!/usr/bin/env bash
# Set up (or refresh) the project's virtualenv at .venv: the CPU build of torch 2.13.0 first —
# so that no later requirement can pull a CUDA build —, then muppets with its extras and the
# `muppets` command. Safe to run again: everything already installed is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if [ "$(uname -s)" = Linux ]; then
  # PyPI's Linux torch is the CUDA build (gigabytes of nvidia-* packages): ask for the CPU build,
  # from a wheel pip already finds (a local wheel directory or index), else PyTorch's CPU index
  "${PIP[@]}" "torch==2.13.0+cpu" 2>/dev/null ||
    "${PIP[@]}" "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
else
  "${PIP[@]}" "torch==2.13.0"  # macOS and Windows wheels on PyPI are CPU builds
fi
"${PIP[@]}" -e ".[dev,docs,tensorboard,mlflow,wandb,serve,onnx,chinese,columnar,zstd]"
.venv/bin/python -c "import torch, muppets; assert torch.__version__.startswith('2.13.0'), torch.__version__"
# CI only, from the system's packages (installed once; kept after): Chromium for the attention
# page's headless-browser test (tests/test_attention_page.py), tcmalloc for the malloc tests
# (tests/test_malloc.py), iproute2 for the two-node rehearsal in network namespaces
# (tests/test_multinode.py); none of those tests may skip under CI=true. Elsewhere `muppets` uses tcmalloc
# when it is installed (`apt-get install libtcmalloc-minimal4`; README).
case "${CI:-}" in
  1|true|TRUE|True|yes)
    PACKAGES=""
    if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
      PACKAGES="chromium"
    fi
    # the test's own check (tests/test_malloc.py), so that set-up and test cannot disagree
    if ! .venv/bin/python -c "import sys; from muppets.malloc import find_malloc, library_dirs; sys.exit(find_malloc('tcmalloc', library_dirs()) is None)"; then
      PACKAGES="$PACKAGES libtcmalloc-minimal4"
    fi
    if ! command -v ip >/dev/null 2>&1; then
      PACKAGES="$PACKAGES iproute2"
    fi
    if [ -n "$PACKAGES" ]; then
      SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
      $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $PACKAGES
    fi ;;
esac
