"""The applier: run labeling functions over examples into a label matrix ``L`` of shape
``(n, m)`` (int64; ``L[i, j]`` is LF ``j``'s vote on example ``i``, ``ABSTAIN`` = -1).

* **Parallel:** ``n_jobs > 1`` splits the examples into contiguous chunks run by forked worker
  processes (the LFs are inherited, not pickled, so LFs defined in a notebook or an LF file
  work); the rows come back in order, so the matrix equals the sequential one. Without
  ``fork`` (Windows, macOS' default) it runs sequentially and says so in the log.
* **Progress:** a tqdm bar over examples when stderr is a terminal, a log line now and then
  when it is not (:mod:`muppets.progress`); none with ``progress=False``.
* **Cache:** with ``cache_dir``, the matrix is stored as ``<key>.npy`` where the key is a
  SHA-256 of every LF's :meth:`~muppets.weak.lf.LabelingFunction.cache_key` (name, source
  code, resources), the cardinality and the examples' ids and texts; written atomically
  (temporary file + rename), read back with ``allow_pickle=False``. Change one LF's code and
  the key changes; a second identical call reads the file and runs no LF.
* **Batched LFs** (model-based: :mod:`muppets.weak.model_lfs`): an LF with a
  ``label_batch(examples)`` method is run once over all the examples, in this process (a model
  is not forked into workers), instead of once per example; with ``cache_dir`` its column is
  also cached on its own (``col-<key>.npy``, key = its ``cache_key()`` and the data), so
  editing a keyword LF beside it does not rerun the model.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from muppets.config import save_npy_atomic
from muppets.errors import ConfigError, DataError, LabelingFunctionError
from muppets.progress import progress_bar
from muppets.tasks.source import Problems, iter_lines
from muppets.tasks.spec import TextExample
from muppets.weak.lf import ABSTAIN, check_vote
from muppets.weak.matrix import check_label_matrix

__all__ = ["apply_lfs", "read_texts", "matrix_key", "is_batched"]

logger = logging.getLogger(__name__)

_WORK: tuple[Sequence[Any], Sequence[TextExample], int] | None = None  # set before forking


def read_texts(path: str | Path) -> list[TextExample]:
    """One example per non-blank line of a UTF-8 text file (id and source ``file:line``); an
    undecodable byte is a :class:`~muppets.errors.DataError` naming the file and line."""
    path = Path(path)
    examples = [TextExample(f"{path.name}:{line.number}", line.text.strip(), None, None,
                            f"{path}:{line.number}")
                for line in iter_lines(path, Problems("strict")) if line.text.strip()]
    if not examples:
        raise DataError("no text lines", path=path)
    return examples


def matrix_key(lfs: Sequence[Any], examples: Sequence[TextExample], cardinality: int) -> str:
    """The cache key of ``L``: the LFs' cache keys, the cardinality and the data."""
    digest = hashlib.sha256(f"muppets-weak-v2|{cardinality}|{len(lfs)}|{len(examples)}".encode())
    for lf in lfs:
        digest.update(lf.cache_key().encode())
    for ex in examples:
        meta = sorted(getattr(ex, "meta", {}).items())  # LFs may read it (author, video …)
        for part in (ex.id, ex.text, ex.text_b or "", repr(meta)):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
    return digest.hexdigest()[:32]


def _label_rows(lfs: Sequence[Any], examples: Sequence[TextExample], cardinality: int,
                start: int, stop: int, bar: Any = None) -> np.ndarray:
    """Rows ``start:stop`` of L. Errors name the LF and the example's global index."""
    out = np.full((stop - start, len(lfs)), ABSTAIN, dtype=np.int64)
    for i in range(start, stop):
        ex = examples[i]
        for j, lf in enumerate(lfs):
            try:
                vote = lf(ex)
            except Exception as err:
                raise LabelingFunctionError(f"raised {type(err).__name__}: {err}", lf=lf.name,
                                            index=i, example_id=ex.id, source=ex.source) from err
            out[i - start, j] = check_vote(lf.name, vote, cardinality, i, ex)
        if bar is not None:
            bar.update(1)
    return out


def _worker(bounds: tuple[int, int]) -> np.ndarray:
    assert _WORK is not None, "worker started without work"
    lfs, examples, cardinality = _WORK
    return _label_rows(lfs, examples, cardinality, *bounds)


def _parallel(lfs: Sequence[Any], examples: Sequence[TextExample], cardinality: int,
              n_jobs: int, bar: Any) -> np.ndarray:
    global _WORK
    n = len(examples)
    chunk = max(1, -(-n // (n_jobs * 8)))  # ~8 chunks per worker keep the bar moving
    bounds = [(s, min(n, s + chunk)) for s in range(0, n, chunk)]
    _WORK = (lfs, examples, cardinality)
    try:
        with multiprocessing.get_context("fork").Pool(n_jobs) as pool:
            parts = []
            for part in pool.imap(_worker, bounds):
                parts.append(part)
                if bar is not None:
                    bar.update(len(part))
    finally:
        _WORK = None
    return np.concatenate(parts, axis=0)


def is_batched(lf: Any) -> bool:
    """Whether ``lf`` labels many examples in one call (``label_batch``)."""
    return callable(getattr(lf, "label_batch", None))


def _batch_column(lf: Any, examples: Sequence[TextExample], cardinality: int,
                  cache_dir: Path | None) -> np.ndarray:
    """``(n,)`` votes of a batched LF: from its column cache, or one ``label_batch`` call."""
    path = None
    if cache_dir is not None:
        path = cache_dir / f"col-{matrix_key([lf], examples, cardinality)}.npy"
        if path.exists() and (cached := _load_cached(path, (len(examples), 1), cardinality)) is not None:
            logger.info("labeling function %s read from cache %s", lf.name, path)
            return cached[:, 0]
    try:
        votes = list(lf.label_batch(examples))
    except LabelingFunctionError:
        raise
    except Exception as err:
        raise LabelingFunctionError(f"raised {type(err).__name__}: {err}", lf=lf.name) from err
    if len(votes) != len(examples):
        raise LabelingFunctionError(f"label_batch returned {len(votes)} votes for "
                                    f"{len(examples)} examples", lf=lf.name)
    column = np.array([check_vote(lf.name, v, cardinality, i, ex)
                       for i, (v, ex) in enumerate(zip(votes, examples))], dtype=np.int64)
    if path is not None:
        save_npy_atomic(path, column[:, None])
    return column


def _compute(lfs: Sequence[Any], examples: Sequence[TextExample], cardinality: int,
             n_jobs: int, progress: bool | None, cache_dir: Path | None = None) -> np.ndarray:
    """``L``: batched LFs column by column, the others example by example."""
    batched = [j for j, lf in enumerate(lfs) if is_batched(lf)]
    plain = [j for j in range(len(lfs)) if j not in batched]
    out = np.full((len(examples), len(lfs)), ABSTAIN, dtype=np.int64)
    for j in batched:
        out[:, j] = _batch_column(lfs[j], examples, cardinality, cache_dir)
    if plain:
        out[:, plain] = _compute_plain([lfs[j] for j in plain], examples, cardinality, n_jobs,
                                       progress)
    return out


def _compute_plain(lfs: Sequence[Any], examples: Sequence[TextExample], cardinality: int,
                   n_jobs: int, progress: bool | None) -> np.ndarray:
    bar = progress_bar(total=len(examples), desc="labeling functions", unit="ex", enabled=progress is not False)
    try:
        if n_jobs > 1 and len(examples) > 1:
            if "fork" in multiprocessing.get_all_start_methods():
                return _parallel(lfs, examples, cardinality, n_jobs, bar)
            logger.info("no fork on this platform: applying LFs in one process")
        return _label_rows(lfs, examples, cardinality, 0, len(examples), bar)
    finally:
        bar.close()


def _load_cached(path: Path, shape: tuple[int, int], cardinality: int) -> np.ndarray | None:
    """The cached matrix at ``path``, or None (with a warning naming the file and the fault, so
    the votes are computed again) when it is unreadable or not what the applier writes."""
    try:
        matrix = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        logger.warning("ignoring unreadable label-matrix cache %s: %s", path, err)
        return None
    if matrix.shape != shape or matrix.dtype != np.int64:
        logger.warning("ignoring label-matrix cache %s: shape %s %s, expected %s int64", path,
                       matrix.shape, matrix.dtype, shape)
        return None
    try:
        check_label_matrix(matrix, cardinality)
    except ConfigError as err:
        logger.warning("ignoring label-matrix cache %s: %s", path, err)
        return None
    return matrix


def apply_lfs(lfs: Sequence[Any], examples: Sequence[TextExample], cardinality: int = 2, *,
              n_jobs: int = 1, cache_dir: str | Path | None = None,
              progress: bool | None = None) -> np.ndarray:
    """``L`` (n, m) int64: LF ``j``'s vote on example ``i`` (see the module docstring).

    An LF that raises, or votes outside ``{ABSTAIN, 0..cardinality-1}``, stops the run with a
    :class:`~muppets.errors.LabelingFunctionError` naming the LF and the example.

    >>> from muppets.weak.lf import keyword_lf
    >>> ex = [TextExample(str(i), t, None, None, "-") for i, t in enumerate(["buy it", "hi"])]
    >>> apply_lfs([keyword_lf("buy", ["buy"], 1)], ex).tolist()
    [[1], [-1]]
    """
    if not lfs:
        raise ConfigError("apply_lfs: no labeling functions")
    if cardinality < 2:
        raise ConfigError(f"apply_lfs: cardinality must be >= 2, got {cardinality}")
    if n_jobs < 1:
        raise ConfigError(f"apply_lfs: n_jobs must be >= 1, got {n_jobs}")
    shape = (len(examples), len(lfs))
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"L-{matrix_key(lfs, examples, cardinality)}.npy"
        if path.exists() and (cached := _load_cached(path, shape, cardinality)) is not None:
            logger.info("label matrix %s read from cache %s", shape, path)
            return cached
    matrix = _compute(lfs, examples, cardinality, n_jobs, progress,
                      Path(cache_dir) if cache_dir is not None else None)
    if path is not None:
        save_npy_atomic(path, matrix)
    return matrix
