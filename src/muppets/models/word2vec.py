"""word2vec: skip-gram and CBOW with negative sampling (Mikolov et al. 2013a, 2013b), fast on CPU.

The model is two ``(V, d)`` matrices: input vectors v (the word vectors everyone uses) and
output vectors u. For an input x (skip-gram: a context word's v; CBOW: the mean of the context
words' v) and targets t_0 (the positive word, label y_0 = 1) and t_1..t_K (noise words, y_k = 0),
negative sampling maximises (2013b, eq. 4)

    L = log σ(u_{t_0}·x) + Σ_k log σ(-u_{t_k}·x).

Its gradient with respect to the score s_k = u_{t_k}·x is y_k - σ(s_k), so plain SGD with
learning rate α is, with g_k = α (y_k - σ(s_k)),

    u_{t_k} += g_k x            x += Σ_k g_k u_{t_k}     (CBOW: every context vector gets the
                                                        whole Σ_k g_k u_{t_k}, as word2vec.c)

**How it is fast.** word2vec.c and gensim apply these updates one pair at a time from several
threads without locks (Hogwild). Here a batch of ``batch_size`` pairs is gathered, scored and
scattered at once (``index_select`` → dot products → ``index_add_``), every g computed from the
parameters before the batch; duplicates in a batch add their updates. A batch takes one
example from each of ``batch_size`` stretches of the chunk (:func:`~muppets.objectives.word2vec.lanes`),
as if that many Hogwild threads each walked their own stretch one pair at a time: batches of
*consecutive* pairs, which share their centre and context words, moved WordSim-353 2-3 points
away from gensim, word2vec.c and one-pair updates at every batch size from 16 to 1024, and at
1024 cost 2 analogy points (BENCHMARKS.md, issue 5). ``updates_per_call`` consecutive batches run in
one call of a function that ``torch.compile`` turns into a single C++ loop nest per update
(``backend="auto"`` uses it when a compiler works, else the eager ops, about 2.5x slower); the
fusion amortises the ~30-60 µs Python/dispatch cost of a call. For skip-gram, ``auto`` prefers
a small C loop (:mod:`muppets.models.word2vec_native`, ``backend="native"``) that applies the same
batched update to a whole chunk in one call, reading each row once per batch. Examples are built a chunk at a
time with vectorised numpy (:mod:`muppets.objectives.word2vec`). With ``workers > 1``, that many
spawned processes train different chunks at once on matrices in shared memory
(:mod:`muppets.train.hogwild`; processes, because a compiled CPU kernel holds the GIL).

**Windows** (skip-gram, ``update=window`` or ``window-shared``, the native loop only). Instead of
batches of pairs, each centre's window is one update: its context rows are scored against the
centre and the noise words, and every row moves by the gradient computed from the values before
the window; windows then follow one another in text order, as a single Hogwild thread would
walk them. The window's rows stay in the cache from one pair to the next, the noise words are
drawn inside the loop (no example arrays are built), and ``window-shared`` gives every context
of a window the same K noise words (Ji et al. 2016, "Parallelizing Word2Vec in Shared and
Distributed Memory"), so a window reads 1 + K output rows instead of 1 + K per pair. It trains
more words per second than ``pair``; its scores against gensim's, per seed, are in BENCHMARKS.md.

**Schedule and resume.** α decays linearly from ``alpha`` to ``min_alpha`` over all corpus
tokens of all epochs (gensim). Chunk k of epoch e is a pure function of (seed, e, k), so a run
checkpointed at a chunk boundary (``<run_dir>/checkpoints``: both matrices + the position)
resumes exactly when ``workers=1``; with several workers, as with gensim, runs are not
bit-reproducible. The first SIGINT/SIGTERM stops training like the time budget: the chunks under
way are finished, a checkpoint is written and the vectors are exported; a second signal aborts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

from muppets.config import atomic_dir, from_dict, write_json_atomic
from muppets.data.shards import TokenCorpus
from muppets.errors import CheckpointError, ConfigError
from muppets.interop.safetensors_io import read_json_object
from muppets.tokenizers.words import read_word_counts
from muppets.models import word2vec_native
from muppets.nn.encoded import Encoded
from muppets.objectives.word2vec import LAYOUTS, UPDATES, ChunkWindows, TrainingVocab, Word2VecExamples
from muppets.train.checkpoint import remove_killed_saves, write_latest
from muppets.train.hogwild import HogwildPool, run_span_inline
from muppets.train.logger import RunLogger
from muppets.train.plots import write_run_plot
from muppets.train.rundir import earlier_run
from muppets.train.signals import stop_signal_handler
from muppets.vectors import WordVectors

__all__ = ["Word2VecConfig", "WORD2VEC_PRESETS", "Word2VecModel", "sgns_step", "cbow_step", "sgns_steps", "cbow_steps",
           "Word2VecTrainer", "Word2VecResult", "build_examples", "train_word2vec"]

logger = logging.getLogger(__name__)

CONFIG_FILE, VECTORS_FILE, WORDS_FILE, STATE_FILE = "config.json", "vectors.safetensors", "words.txt", "state.json"


@dataclass
class Word2VecConfig:
    """Hyper-parameters of word2vec training; the defaults are gensim 4's."""

    sg: bool = True  # skip-gram (True) or CBOW (False)
    vector_size: int = 100  # d, the dimension of the word vectors
    window: int = 5  # largest distance between a centre and a context word (reduced at random)
    negative: int = 5  # K, noise words per skip-gram pair / per CBOW centre word
    ns_exponent: float = 0.75  # noise distribution P_n(w) ∝ count(w)^ns_exponent
    sample: float = 1e-3  # subsampling threshold of frequent words (0 = no subsampling)
    min_count: int = 5  # words seen fewer times are dropped from the text
    max_vocab: int = 0  # keep only the most frequent words (0 = all with min_count)
    init_range: float = 1.0  # input vectors start U(-init_range/d, init_range/d): 1.0 gensim 4, 0.5 word2vec.c
    alpha: float = 0.025  # initial learning rate (word2vec.c uses 0.05 for CBOW; gensim 0.025)
    min_alpha: float = 0.0001  # learning rate reached at the end of the last epoch
    epochs: int = 5  # passes over the corpus
    seed: int = 1  # one seed for the initial vectors and every random draw
    workers: int = 1  # training threads (Hogwild); 1 = bit-reproducible runs
    batch_size: int = 256  # skip-gram pairs / CBOW centres per batched update (larger: faster, staler)
    batch_layout: str = "lanes"  # lanes: a batch takes one example per stretch of the chunk | consecutive
    updates_per_call: int = 8  # consecutive updates fused into one compiled call (amortises its overhead)
    chunk_tokens: int = 100_000  # corpus tokens per chunk (unit of work, resume and logging)
    backend: str = "auto"  # auto | native | compiled | eager (auto: native for skip-gram, else compiled, if they build)
    update: str = "pair"  # pair: batches of pairs, as above | window | window-shared: one update per centre (see below)
    max_minutes: float = 0.0  # wall-clock budget: stop at a chunk boundary, checkpoint, export (0 = none)
    checkpoint_every: int = 0  # chunks between checkpoints (0 = at the end of every epoch only)
    log_every_s: float = 30.0  # seconds between progress log lines

    def __post_init__(self) -> None:
        checks = [("vector_size", self.vector_size >= 1), ("window", self.window >= 1),
                  ("negative", self.negative >= 1), ("sample", self.sample >= 0),
                  ("min_count", self.min_count >= 1), ("max_vocab", self.max_vocab >= 0),
                  ("init_range", self.init_range > 0), ("alpha", self.alpha > 0),
                  ("min_alpha", 0 <= self.min_alpha <= self.alpha),
                  ("epochs", self.epochs >= 1), ("workers", self.workers >= 1),
                  ("batch_size", self.batch_size >= 1), ("updates_per_call", self.updates_per_call >= 1),
                  ("batch_layout", self.batch_layout in LAYOUTS),
                  ("update", self.update in UPDATES and not (self.update != "pair" and (
                      not self.sg or self.backend not in ("auto", "native") or self.window > 64
                      or self.negative > 63))),  # windows: the native loop (WINDOW_MAX 64, 63 noise words)
                  ("chunk_tokens", self.chunk_tokens >= 1),
                  ("backend", self.backend in ("auto", "native", "compiled", "eager")
                   and not (self.backend == "native" and not self.sg)),  # native: skip-gram only
                  ("max_minutes", self.max_minutes >= 0), ("checkpoint_every", self.checkpoint_every >= 0)]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"word2vec.{name}: invalid value {getattr(self, name)!r}")

    @classmethod
    def preset(cls, name: str, **overrides) -> Word2VecConfig:
        """A named setting (see :data:`WORD2VEC_PRESETS`) with field overrides."""
        if name not in WORD2VEC_PRESETS:
            raise ConfigError(f"unknown word2vec preset {name!r}; choose one of {', '.join(WORD2VEC_PRESETS)}")
        return from_dict(cls, {**WORD2VEC_PRESETS[name], **overrides})


WORD2VEC_PRESETS: dict[str, dict] = {
    "gensim-sg": {},  # gensim 4 defaults with sg=1
    "gensim-cbow": {"sg": False},  # gensim 4 defaults (CBOW, alpha 0.025)
    "word2vec-c-sg": {"init_range": 0.5},  # word2vec.c -cbow 0 (alpha 0.025)
    "word2vec-c-cbow": {"sg": False, "alpha": 0.05, "init_range": 0.5},  # word2vec.c defaults (-cbow 1)
}


# ----------------------------------------------------------------------------- update kernels


def _sum_over(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``x.sum(dim)`` over a short axis (the 1 + K targets, the 2 W contexts). Under
    ``torch.compile`` it is spelled as a chain of adds: inductor then vectorises along the
    contiguous d axis, where a reduction over an axis longer than ~8 gets vectorised across it,
    with a scalar gather per element (10x slower for CBOW's ten contexts)."""
    if not torch.compiler.is_compiling():
        return x.sum(dim)
    parts = x.unbind(dim)
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def sgns_step(w_in: torch.Tensor, w_out: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor,
              weights: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """One batched SGD step of skip-gram with negative sampling, in place; returns -Σ L.

    Args:
        w_in, w_out: (V, d) input and output vectors (updated in place).
        inputs: (B,) input (context) word of each pair.
        targets: (B, 1 + K) the positive (centre) word, then K noise words.
        weights: (B, 1 + K) 1, or 0 for padding and for a noise word equal to the positive.
        alpha: 0-d learning rate.
    """
    B, T = targets.shape
    v = w_in.index_select(0, inputs)  # (B, d)
    u = w_out.index_select(0, targets.reshape(-1)).view(B, T, -1)  # (B, 1+K, d)
    scores = (u * v.unsqueeze(1)).sum(-1)  # (B, 1+K)
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1.0
    g = (labels - torch.sigmoid(scores)) * weights * alpha  # (B, 1+K) α (y - σ(s))
    grad_v = _sum_over(g.unsqueeze(-1) * u, 1)  # (B, d)
    # v first: then only the small (B, d) copy of v must outlive its update, not the (B, 1+K, d) u
    w_in.index_add_(0, inputs, grad_v)
    w_out.index_add_(0, targets.reshape(-1), (g.unsqueeze(-1) * v.unsqueeze(1)).reshape(B * T, -1))
    return -(F.logsigmoid(scores * (2.0 * labels - 1.0)) * weights).sum()


def cbow_step(w_in: torch.Tensor, w_out: torch.Tensor, inputs: torch.Tensor, mask: torch.Tensor,
              targets: torch.Tensor, weights: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """One batched SGD step of CBOW with negative sampling (mean of the contexts), in place.

    Args:
        inputs: (B, 2W) context words of each centre; mask: (B, 2W) float, 1 for real contexts.
        targets, weights, alpha: as :func:`sgns_step` (the positive target is the centre word).
    """
    B, T = targets.shape
    C = inputs.shape[1]
    contexts = w_in.index_select(0, inputs.reshape(-1)).view(B, C, -1)  # (B, 2W, d)
    count = mask.sum(1, keepdim=True).clamp_min(1.0)  # (B, 1)
    h = _sum_over(contexts * mask.unsqueeze(-1), 1) / count  # (B, d) mean of the context vectors
    u = w_out.index_select(0, targets.reshape(-1)).view(B, T, -1)  # (B, 1+K, d)
    scores = (u * h.unsqueeze(1)).sum(-1)  # (B, 1+K)
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1.0
    g = (labels - torch.sigmoid(scores)) * weights * alpha  # (B, 1+K)
    grad_h = _sum_over(g.unsqueeze(-1) * u, 1)  # (B, d)
    w_in.index_add_(0, inputs.reshape(-1), (grad_h.unsqueeze(1) * mask.unsqueeze(-1)).reshape(B * C, -1))
    w_out.index_add_(0, targets.reshape(-1), (g.unsqueeze(-1) * h.unsqueeze(1)).reshape(B * T, -1))
    return -(F.logsigmoid(scores * (2.0 * labels - 1.0)) * weights).sum()


def sgns_steps(w_in: torch.Tensor, w_out: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor,
               weights: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    """N consecutive :func:`sgns_step` updates (inputs (N, B), targets and weights (N, B, 1+K),
    alphas (N,)): one compiled call instead of N; returns the summed -L."""
    loss = alphas.new_zeros(())
    for j in range(inputs.shape[0]):
        loss = loss + sgns_step(w_in, w_out, inputs[j], targets[j], weights[j], alphas[j])
    return loss


def cbow_steps(w_in: torch.Tensor, w_out: torch.Tensor, inputs: torch.Tensor, mask: torch.Tensor,
               targets: torch.Tensor, weights: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    """N consecutive :func:`cbow_step` updates (inputs and mask (N, B, 2W)); returns the summed -L."""
    loss = alphas.new_zeros(())
    for j in range(inputs.shape[0]):
        loss = loss + cbow_step(w_in, w_out, inputs[j], mask[j], targets[j], weights[j], alphas[j])
    return loss


class _Kernel:
    """``fn`` compiled with ``torch.compile`` (one static shape), or eager; ``auto`` falls back
    to eager when compiling fails (e.g. no C++ compiler)."""

    def __init__(self, fn: Callable[..., torch.Tensor], backend: str) -> None:
        self.fn, self.backend = fn, backend
        self.call = fn if backend == "eager" else torch.compile(fn, dynamic=False, fullgraph=True)

    def warm_up(self, *args: torch.Tensor) -> str:
        """Compile now (from one thread) on ``args`` (whose weights must be zero: no update)."""
        if self.call is self.fn:
            return "eager"
        try:
            self.call(*args)
            return "compiled"
        except Exception as err:  # noqa: BLE001 - any compiler failure means "use eager"
            if self.backend == "compiled":
                raise
            logger.warning("torch.compile of %s failed (%s); using eager ops", self.fn.__name__,
                           str(err).splitlines()[0] if str(err) else type(err).__name__)
            self.call = self.fn
            return "eager"


# ----------------------------------------------------------------------------- the model


class Word2VecModel(nn.Module):
    """Input and output vectors of a word list; a one-layer backbone (the ``Encoded`` contract of
    docs/concepts/architecture.md)."""

    def __init__(self, cfg: Word2VecConfig, words: Sequence[str], counts: Sequence[int]) -> None:
        super().__init__()
        if len(words) != len(counts):
            raise ConfigError(f"{len(words)} words but {len(counts)} counts")
        self.cfg, self.words = cfg, list(words)
        self.counts = np.asarray(counts, dtype=np.int64)
        V, d = len(self.words), cfg.vector_size
        self.register_buffer("input_vectors", torch.empty(V, d))  # (V, d) v: the word vectors
        self.register_buffer("output_vectors", torch.zeros(V, d))  # (V, d) u
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """v ~ U(-r/d, r/d) with r = ``init_range`` (gensim 4: r = 1; word2vec.c: r = 0.5), u = 0."""
        gen = torch.Generator().manual_seed(self.cfg.seed)
        d, r = self.cfg.vector_size, self.cfg.init_range
        self.input_vectors.copy_((torch.rand(self.input_vectors.shape, generator=gen) * 2 - 1) * (r / d))
        self.output_vectors.zero_()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> Encoded:
        """(B, T) word indices (-1 = unknown: a zero vector) -> Encoded with one (B, T, d) layer."""
        known = input_ids >= 0
        layer = self.input_vectors[input_ids.clamp_min(0)] * known.unsqueeze(-1)  # (B, T, d)
        mask = known if attention_mask is None else attention_mask.bool()
        return Encoded(layers=[layer], mask=mask)

    def word_vectors(self) -> WordVectors:
        """The input vectors as :class:`WordVectors` (most frequent word first)."""
        return WordVectors(self.words, self.input_vectors.numpy().copy(), self.counts)

    def save(self, directory: str | Path) -> Path:
        """``config.json``, ``words.txt`` (word<TAB>count) and ``vectors.safetensors``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(directory / CONFIG_FILE, asdict(self.cfg))
        lines = "".join(f"{w}\t{c}\n" for w, c in zip(self.words, self.counts.tolist()))
        (directory / WORDS_FILE).write_text(lines, encoding="utf-8")
        save_file({"input_vectors": self.input_vectors.contiguous(),
                   "output_vectors": self.output_vectors.contiguous()}, str(directory / VECTORS_FILE))
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> Word2VecModel:
        directory = Path(directory)
        for name in (CONFIG_FILE, WORDS_FILE, VECTORS_FILE):
            if not (directory / name).is_file():
                raise CheckpointError(f"{directory}: no {name} (not a saved word2vec model)")
        cfg = from_dict(Word2VecConfig, read_json_object(directory / CONFIG_FILE))
        words, counts = read_word_counts(directory / WORDS_FILE)
        model = cls(cfg, words, counts)
        try:
            model.load_state_dict(load_file(str(directory / VECTORS_FILE)))
        except RuntimeError as err:
            raise CheckpointError(f"{directory / VECTORS_FILE}: does not fit {len(words)} words x "
                                  f"{cfg.vector_size}: {err}") from err
        return model


# ----------------------------------------------------------------------------- training


@dataclass
class Word2VecResult:
    """What :meth:`Word2VecTrainer.train` returns (counts over the whole run, resumes included)."""

    epochs_done: float  # epochs completed, fractional when stopped inside one
    raw_words: int  # corpus tokens processed
    effective_words: int  # words trained after min_count and subsampling (gensim's definition)
    examples: int  # skip-gram pairs / CBOW centres trained
    seconds: float  # training wall time (resumes included; example building included)
    mean_loss: float  # mean -L per example over the run
    stopped_early: bool  # the time budget or a signal ended the run
    backend: str = "eager"  # the update kernel used: compiled | eager
    build_s: float = 0.0  # worker time spent building examples (numpy), summed over workers
    update_s: float = 0.0  # worker time spent in the update kernel, summed over workers
    cpu_s: float = 0.0  # CPU seconds used by the workers while training
    stopped_by: str = ""  # what ended the run early: "" (it did not) | "time" | "SIGINT" | "SIGTERM"

    @property
    def words_per_second(self) -> float:
        return self.effective_words / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Progress:
    epoch: int = 0  # next chunk to train: (epoch, chunk)
    chunk: int = 0
    raw_words: int = 0
    effective_words: int = 0
    examples: int = 0
    loss: float = 0.0
    elapsed_s: float = 0.0
    build_s: float = 0.0  # time spent building examples, summed over workers
    update_s: float = 0.0  # time spent in the update kernel, summed over workers
    cpu_s: float = 0.0  # CPU time of the workers
    extra: dict = field(default_factory=dict)


class _ChunkTrainer:
    """Trains one chunk on the shared matrices (a :class:`~muppets.train.hogwild.ChunkWorker`)."""

    def __init__(self, cfg: Word2VecConfig, examples: Word2VecExamples, w_in: torch.Tensor,
                 w_out: torch.Tensor) -> None:
        self.cfg, self.examples, self.w_in, self.w_out = cfg, examples, w_in, w_out
        self.kernel: _Kernel | None = None
        self.native = None  # the loaded native skip-gram loop (word2vec_native), when used
        self._scratch = None
        self._alias: tuple[np.ndarray, np.ndarray] | None = None  # the noise tables of the window loop
        self._shared_vocab: list[torch.Tensor] | None = None

    def __getstate__(self) -> dict:
        """Sent to a worker process: the config, the corpus directory, and shared-memory tensors
        (the two matrices and the training vocabulary, counted once, here). The worker maps the
        corpus, rebuilds the examples on that vocabulary and compiles its own kernel: a small
        message, so a worker that dies at start-up (e.g. a script without an ``if __name__ ==
        "__main__":`` guard) cannot block the parent on a full pipe."""
        if self._shared_vocab is None:  # one shared copy for every worker
            vocab = self.examples.vocab
            self._shared_vocab = [torch.from_numpy(a).share_memory_()
                                  for a in (vocab.corpus_ids, vocab.counts, vocab.remap)]
        return {"cfg": self.cfg, "corpus_dir": self.examples.corpus.directory, "w_in": self.w_in,
                "w_out": self.w_out, "vocab": self._shared_vocab}

    def __setstate__(self, state: dict) -> None:
        vocab = TrainingVocab(*(t.numpy() for t in state["vocab"]))
        self.__init__(state["cfg"], build_examples(TokenCorpus(state["corpus_dir"]), state["cfg"], vocab),
                      state["w_in"], state["w_out"])

    def setup(self) -> str:
        """Load the native skip-gram loop, or compile the update kernel for this process (on
        zero-weight inputs: no update)."""
        if self.cfg.update != "pair":
            self.native = word2vec_native.load()
            if self.native is None:
                raise ConfigError(f"word2vec.update={self.cfg.update}: no C compiler could build the native loop "
                                  "(set CC, or use update=pair)")
            noise = self.examples.noise
            self._alias = (np.ascontiguousarray(noise.threshold, dtype=np.float32),
                           np.ascontiguousarray(noise.alias, dtype=np.int32))
            self._scratch = word2vec_native.window_scratch(self.cfg.vector_size)
            self.kernel = _Kernel(sgns_steps, "eager")  # not called; marks setup() as done
            return "native"
        if self.cfg.sg and self.cfg.backend in ("auto", "native"):
            self.native = word2vec_native.load()
            if self.native is not None:
                self._scratch = word2vec_native.scratch_for(self.cfg.batch_size, self.cfg.vector_size,
                                                            1 + self.cfg.negative)
                self.kernel = _Kernel(sgns_steps, "eager")  # not called; marks setup() as done
                return "native"
            if self.cfg.backend == "native":
                raise ConfigError("word2vec.backend=native: no C compiler could build the kernel "
                                  "(set CC, or use backend=auto)")
        self.kernel = _Kernel(sgns_steps if self.cfg.sg else cbow_steps,
                              "auto" if self.cfg.backend == "native" else self.cfg.backend)
        return self.kernel.warm_up(*self._dummy_call())

    def run(self, epoch: int, chunk: int) -> dict[str, float]:
        """Build chunk ``chunk`` and apply its batches with the decaying learning rate."""
        assert self.kernel is not None, "setup() first"
        cpu, wall = time.process_time(), time.perf_counter()
        batches = self.examples.chunk(epoch, chunk)
        build_s = time.perf_counter() - wall
        if isinstance(batches, ChunkWindows):  # update=window: the whole chunk in one call
            n = len(batches.ids)
            loss_w, pairs = word2vec_native.sgns_windows(
                self.native, self.w_in, self.w_out, batches.ids, batches.sentence, batches.windows,
                learning_rates(self.cfg, self.examples, epoch, chunk, n), self.cfg.negative,
                self.cfg.update == "window-shared", *self._alias, batches.seed, self._scratch)
            return {"raw_words": batches.raw_words, "effective_words": batches.effective_words, "examples": pairs,
                    "loss": loss_w, "build_s": build_s, "update_s": time.perf_counter() - wall - build_s,
                    "cpu_s": time.process_time() - cpu}
        alphas = learning_rates(self.cfg, self.examples, epoch, chunk, batches.num_batches)  # (U,)
        N = self.cfg.updates_per_call
        loss = torch.zeros((), dtype=torch.float64)
        if self.native is not None:  # the whole chunk in one call
            loss += word2vec_native.sgns_chunk(self.native, self.w_in, self.w_out, batches.inputs, batches.targets,
                                               batches.weights, alphas, self._scratch)
        else:
            for start in range(0, batches.num_batches, N):
                calls = slice(start, start + N)  # N consecutive updates
                inputs = (batches.inputs[calls],) if self.cfg.sg else (batches.inputs[calls], batches.input_mask[calls])
                loss += self.kernel.call(self.w_in, self.w_out, *inputs, batches.targets[calls],
                                         batches.weights[calls], alphas[calls])
        return {"raw_words": batches.raw_words, "effective_words": batches.effective_words,
                "examples": batches.examples, "loss": float(loss), "build_s": build_s,
                "update_s": time.perf_counter() - wall - build_s, "cpu_s": time.process_time() - cpu}

    def _dummy_call(self) -> tuple[torch.Tensor, ...]:
        """Zero-weight tensors of the kernel's one static shape (used to compile it)."""
        N, B, K, W = self.cfg.updates_per_call, self.cfg.batch_size, self.cfg.negative, self.cfg.window
        targets, weights, alphas = torch.zeros(N, B, 1 + K, dtype=torch.long), torch.zeros(N, B, 1 + K), torch.zeros(N)
        if self.cfg.sg:
            return self.w_in, self.w_out, torch.zeros(N, B, dtype=torch.long), targets, weights, alphas
        contexts, mask = torch.zeros(N, B, 2 * W, dtype=torch.long), torch.zeros(N, B, 2 * W)
        return self.w_in, self.w_out, contexts, mask, targets, weights, alphas


def learning_rates(cfg: Word2VecConfig, examples: Word2VecExamples, epoch: int, chunk: int,
                   num_batches: int) -> torch.Tensor:
    """(N,) α of each batch (``update=window``: each centre) of a chunk: α_0 - (α_0 - α_min) x
    (share of the run's corpus tokens passed), as gensim (which updates it per job of 10,000
    words; here per batch)."""
    start, stop = int(examples.token_bounds[chunk]), int(examples.token_bounds[chunk + 1])
    within = start + (stop - start) * np.arange(num_batches) / max(num_batches, 1)  # (N,)
    progress = (epoch * examples.raw_words + within) / (cfg.epochs * examples.raw_words)
    alphas = cfg.alpha - (cfg.alpha - cfg.min_alpha) * progress
    return torch.from_numpy(np.maximum(alphas, cfg.min_alpha).astype(np.float32))


class Word2VecTrainer:
    """Trains a :class:`Word2VecModel` on a prepared corpus chunk by chunk (see the module doc).

    Args:
        model: the model; its word list must be ``examples.vocab``'s words.
        examples: the chunked example builder over the corpus.
        run_dir: checkpoints, ``log.jsonl`` and the exported model go here (None: nothing saved).
    """

    def __init__(self, model: Word2VecModel, examples: Word2VecExamples, run_dir: str | Path | None = None) -> None:
        self.model, self.examples, self.cfg = model, examples, model.cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.progress = _Progress()
        self._log = RunLogger(Path("."), enabled=False)
        self._last_log = 0.0
        self._stop_signal: int | None = None  # the first SIGINT/SIGTERM received during train()

    @property
    def checkpoint_dir(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "checkpoints"

    def train(self, resume: bool = True) -> Word2VecResult:
        """Train until ``epochs`` are done, ``max_minutes`` run out or a SIGINT/SIGTERM comes;
        checkpoint; return counts. A second signal raises KeyboardInterrupt (no checkpoint)."""
        if resume and self.checkpoint_dir is not None:
            self._restore()
        elif self.checkpoint_dir is not None and (self.checkpoint_dir / "latest").is_file():
            raise earlier_run(self.run_dir, self.checkpoint_dir / (self.checkpoint_dir / "latest").read_text().strip())
        if self.run_dir is not None:
            self._log = RunLogger(self.run_dir)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # parallelism = worker processes; each kernel runs on one core
        self._stop_signal = None
        try:
            with stop_signal_handler(self._on_signal, "word2vec training"):
                backend, stopped_by = self._train_with_workers()
        finally:
            torch.set_num_threads(threads)
            self._log.close()
        if self.run_dir is not None:
            write_run_plot(self.run_dir, x_label="chunk")  # the loss per chunk, like every Trainer run
        p = self.progress
        done = p.epoch + p.chunk / self.examples.num_chunks
        return Word2VecResult(done, p.raw_words, p.effective_words, p.examples, p.elapsed_s,
                              p.loss / max(p.examples, 1), bool(stopped_by), backend, p.build_s, p.update_s,
                              p.cpu_s, stopped_by)

    def _train_with_workers(self) -> tuple[str, str]:
        """Run the loop in this process (``workers=1``) or on a Hogwild pool of processes."""
        worker = _ChunkTrainer(self.cfg, self.examples, self.model.input_vectors, self.model.output_vectors)
        if self.cfg.workers == 1:
            backend = worker.setup()
            return backend, self._loop(partial(run_span_inline, worker))
        self.model.input_vectors.share_memory_()
        self.model.output_vectors.share_memory_()
        with HogwildPool(worker, self.cfg.workers) as pool:
            backend = pool.notes[0] if len(set(pool.notes)) == 1 else "eager"
            if backend == "eager" and self.cfg.backend in ("auto", "native"):
                logger.warning("the worker processes could not compile the update kernel; using eager ops")
            return backend, self._loop(pool.run_span)

    # ------------------------------------------------------------------ loop
    def _loop(self, run_span: Callable[..., int]) -> str:
        """Spans of chunks between checkpoints, epoch after epoch; returns what stopped the run
        early ("time", the signal's name) or "" when every epoch is done."""
        started, before = time.perf_counter(), self.progress.elapsed_s
        deadline = started + self.cfg.max_minutes * 60 if self.cfg.max_minutes > 0 else math.inf
        n, every = self.examples.num_chunks, self.cfg.checkpoint_every or self.examples.num_chunks
        self._last_log = started
        while self.progress.epoch < self.cfg.epochs:
            epoch, first = self.progress.epoch, self.progress.chunk
            stop = min(n, (first // every + 1) * every)
            if self._stop_signal is None:  # a signal during start-up: no chunk, only the checkpoint
                done = run_span(epoch, first, stop, partial(self._should_stop, deadline), self._account)
            else:
                done = first
            self.progress.elapsed_s = before + time.perf_counter() - started
            self.progress.epoch, self.progress.chunk = (epoch + 1, 0) if done == n else (epoch, done)
            self._save_checkpoint()
            if self._stop_signal is not None:
                return self._stopped_by_signal()
            if done < stop:
                logger.warning("time budget of %.1f min used: stopped at epoch %d chunk %d",
                               self.cfg.max_minutes, self.progress.epoch, self.progress.chunk)
                return "time"
        return ""

    def _should_stop(self, deadline: float) -> bool:
        return self._stop_signal is not None or time.perf_counter() >= deadline

    def _stopped_by_signal(self) -> str:
        name = signal.Signals(self._stop_signal).name
        where = f"checkpoint in {self.checkpoint_dir}; run the same command again (without --fresh) to resume" \
            if self.checkpoint_dir is not None else "no run_dir: nothing saved to resume from"
        logger.warning("%s: stopped at epoch %d chunk %d; %s", name, self.progress.epoch,
                       self.progress.chunk, where)
        return name

    def _on_signal(self, signum: int, frame: object) -> None:
        """The first SIGINT/SIGTERM: finish the chunks under way, checkpoint, return; a second aborts."""
        if self._stop_signal is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: aborting without a checkpoint")
        self._stop_signal = signum
        logger.warning("%s received: finishing the chunks under way, then checkpointing (again to abort)",
                       signal.Signals(signum).name)

    def _account(self, epoch: int, k: int, stats: dict[str, float]) -> None:
        p = self.progress
        p.raw_words += int(stats["raw_words"])
        p.effective_words += int(stats["effective_words"])
        p.examples += int(stats["examples"])
        p.loss += stats["loss"]
        p.build_s, p.update_s, p.cpu_s = p.build_s + stats["build_s"], p.update_s + stats["update_s"], p.cpu_s + stats["cpu_s"]
        per_example = stats["loss"] / max(stats["examples"], 1)
        now = time.perf_counter()
        if now - self._last_log >= self.cfg.log_every_s:
            self._last_log = now
            logger.info("word2vec epoch %d chunk %d/%d: %d words trained, loss %.4f per example",
                        epoch + 1, k + 1, self.examples.num_chunks, p.effective_words, per_example)
        self._log.log({"step": epoch * self.examples.num_chunks + k + 1, "loss": per_example,
                       "effective_words": p.effective_words})

    # ------------------------------------------------------------------ checkpoints
    def _fingerprint(self) -> str:
        vocab = self.examples.vocab
        digest = hashlib.sha256(vocab.corpus_ids.tobytes() + vocab.counts.tobytes())
        digest.update(str(self.examples.num_chunks).encode())
        return digest.hexdigest()

    def _save_checkpoint(self) -> None:
        """``checkpoints/epoch-EEE-chunk-CCCCCC``: vectors + position, atomically; older removed."""
        root = self.checkpoint_dir
        if root is None:
            return
        p = self.progress
        name = f"epoch-{p.epoch:03d}-chunk-{p.chunk:06d}"
        remove_killed_saves(root, "epoch-")
        with atomic_dir(root / name) as tmp:
            save_file({"input_vectors": self.model.input_vectors.contiguous(),
                       "output_vectors": self.model.output_vectors.contiguous()}, str(tmp / VECTORS_FILE))
            state = {**asdict(p), "config": asdict(self.cfg), "fingerprint": self._fingerprint()}
            write_json_atomic(tmp / STATE_FILE, state)
        write_latest(root, name)
        for old in root.glob("epoch-*-chunk-*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        logger.info("checkpoint %s", root / name)

    def _restore(self) -> None:
        root = self.checkpoint_dir
        pointer = root / "latest" if root is not None else None
        if pointer is None or not pointer.is_file():
            return
        path = root / pointer.read_text(encoding="utf-8").strip()
        try:
            state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
            tensors = load_file(str(path / VECTORS_FILE))
        except (OSError, ValueError) as err:
            raise CheckpointError(f"{path}: unreadable word2vec checkpoint ({err})") from err
        if state.get("fingerprint") != self._fingerprint():
            raise CheckpointError(f"{path}: written for another vocabulary or chunking of the corpus")
        written = {**_BEFORE_FIELD, **state["config"]}
        changed = {k: (v, getattr(self.cfg, k)) for k, v in written.items()
                   if k in _SHAPE_FIELDS and getattr(self.cfg, k) != v}
        if changed:
            raise CheckpointError(f"{path}: written with different settings {changed}")
        self.model.load_state_dict(tensors)
        self.progress = _Progress(**{k: v for k, v in state.items() if k in _Progress.__dataclass_fields__})
        logger.info("resumed from %s (epoch %d, chunk %d)", path, self.progress.epoch, self.progress.chunk)


_SHAPE_FIELDS = ("sg", "vector_size", "window", "negative", "ns_exponent", "sample", "min_count",
                 "max_vocab", "init_range", "alpha", "min_alpha", "epochs", "seed", "batch_size", "batch_layout", "updates_per_call",
                 "chunk_tokens", "update")
_BEFORE_FIELD = {"batch_layout": "consecutive", "update": "pair"}  # what checkpoints written before a field existed used


def build_examples(corpus: TokenCorpus, cfg: Word2VecConfig, vocab: TrainingVocab | None = None) -> Word2VecExamples:
    """The chunked example builder of ``corpus`` under ``cfg``, on ``vocab`` (None: the training
    vocabulary counted on ``corpus``)."""
    if vocab is None:
        vocab = TrainingVocab.from_corpus(corpus, cfg.min_count, max_size=cfg.max_vocab)
    return Word2VecExamples(corpus, vocab, sg=cfg.sg, window=cfg.window, negative=cfg.negative,
                            sample=cfg.sample, ns_exponent=cfg.ns_exponent, batch_size=cfg.batch_size,
                            chunk_tokens=cfg.chunk_tokens, seed=cfg.seed, updates_multiple=cfg.updates_per_call,
                            layout=cfg.batch_layout, update=cfg.update)


def train_word2vec(corpus: TokenCorpus, corpus_words: Sequence[str], cfg: Word2VecConfig,
                   run_dir: str | Path | None = None, resume: bool = True) -> tuple[Word2VecModel, Word2VecResult]:
    """Train word2vec on a prepared word corpus whose id ``i`` is ``corpus_words[i]`` (ids 0..3
    are WordVocab's specials and are never trained). With ``run_dir``, the model is exported to
    ``<run_dir>/model`` and ``<run_dir>/vectors.bin`` (word2vec binary)."""
    if len(corpus_words) < corpus.vocab_size:
        raise ConfigError(f"{corpus.directory}: {corpus.vocab_size} token ids but {len(corpus_words)} words")
    examples = build_examples(corpus, cfg)
    vocab = examples.vocab
    model = Word2VecModel(cfg, [corpus_words[i] for i in vocab.corpus_ids.tolist()], vocab.counts)
    logger.info("word2vec (%s): %d words, %d corpus tokens in %d chunks, %d epochs",
                "skip-gram" if cfg.sg else "CBOW", len(vocab), examples.raw_words, examples.num_chunks, cfg.epochs)
    result = Word2VecTrainer(model, examples, run_dir).train(resume=resume)
    logger.info("word2vec: %d effective words in %.1f s (%.0f words/s), loss %.4f",
                result.effective_words, result.seconds, result.words_per_second, result.mean_loss)
    if run_dir is not None:
        with atomic_dir(Path(run_dir) / "model") as tmp:
            model.save(tmp)
        model.word_vectors().save(Path(run_dir) / "vectors.bin", binary=True)
    return model, result
