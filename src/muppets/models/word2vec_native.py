"""The skip-gram update as a small C loop, compiled once per machine with the system C compiler.

Why: ``torch.compile`` turns :func:`~muppets.models.word2vec.sgns_step` into five loop nests
per batch (scores, errors, the ``g u`` products written to a ``(B, 1+K, d)`` buffer, the two
scatters), so every output row a batch touches is fetched from memory three times, a batch
apart, and a 600 KB temporary goes through the cache each update. This loop computes the same
batched update (every error from the parameters before the batch, duplicates adding up) in two
passes: the first reads each pair's input row and its 1 + K output rows once, scores them and
keeps the pair's input vector and its summed gradient in a ``(B, d)`` scratch; the second adds
the updates. Rows are prefetched a few pairs ahead, since the time goes to waiting on random
rows of two large matrices. A whole chunk is one call (no Python between batches), and the call
releases the GIL.

The shared library is built with ``cc -O3 -march=native`` into ``$MUPPETS_CACHE/native`` (default
``~/.cache/muppets/native``), named by a hash of the source, the flags and the CPU, so each
machine compiles it once (under a second); :func:`load` returns None when no compiler works.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

__all__ = ["load", "sgns_chunk", "scratch_for"]

log = logging.getLogger(__name__)

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

#define AHEAD 4  /* pairs prefetched ahead */
#define L 8      /* floats per vector */

typedef float vec __attribute__((vector_size(L * sizeof(float))));  /* GCC/clang vector extension */

static inline vec ld(const float *p) { vec x; memcpy(&x, p, sizeof x); return x; }
static inline void st(float *p, vec x) { memcpy(p, &x, sizeof x); }
static inline vec splat(float a) { vec x; for (int i = 0; i < L; i++) x[i] = a; return x; }
static inline float hsum(vec x) { float s = 0.0f; for (int i = 0; i < L; i++) s += x[i]; return s; }

static inline void prefetch_row(const float *row, int64_t d) {
    const char *p = (const char *)row;
    for (int64_t off = 0; off < d * (int64_t)sizeof(float); off += 64) __builtin_prefetch(p + off);
}

static inline void prefetch_pair(const float *w_in, const float *w_out, int64_t d, const int64_t *in,
                                 const int64_t *tg, const float *wt, int64_t b, int64_t T) {
    if (wt[b * T] == 0.0f) return;  /* padding */
    prefetch_row(w_in + in[b] * d, d);
    for (int64_t t = 0; t < T; t++) prefetch_row(w_out + tg[b * T + t] * d, d);
}

/* s[j] = u_j . v for three rows at once: three independent chains, v loaded once */
static inline void dot3(const float *u0, const float *u1, const float *u2, const float *v, int64_t d, float *s) {
    vec a0 = splat(0.0f), a1 = a0, a2 = a0;
    int64_t i = 0;
    for (; i + L <= d; i += L) {
        vec x = ld(v + i);
        a0 += ld(u0 + i) * x; a1 += ld(u1 + i) * x; a2 += ld(u2 + i) * x;
    }
    float r0 = hsum(a0), r1 = hsum(a1), r2 = hsum(a2);
    for (; i < d; i++) { r0 += u0[i] * v[i]; r1 += u1[i] * v[i]; r2 += u2[i] * v[i]; }
    s[0] = r0; s[1] = r1; s[2] = r2;
}

static inline float dot1(const float *u, const float *v, int64_t d) {
    vec a = splat(0.0f);
    int64_t i = 0;
    for (; i + L <= d; i += L) a += ld(u + i) * ld(v + i);
    float r = hsum(a);
    for (; i < d; i++) r += u[i] * v[i];
    return r;
}

static inline void axpy(float *y, float a, const float *x, int64_t d) {  /* y += a x */
    vec av = splat(a);
    int64_t i = 0;
    for (; i + L <= d; i += L) st(y + i, ld(y + i) + av * ld(x + i));
    for (; i < d; i++) y[i] += a * x[i];
}

/* n_batches batched SGNS updates; returns the summed -L. inputs (n, B), targets and weights
   (n, B, T), alphas (n,); scratch: B * (2 d + T) floats; T <= 64. */
double muppets_sgns_batches(float *w_in, float *w_out, int64_t d, const int64_t *inputs,
                            const int64_t *targets, const float *weights, const float *alphas,
                            int64_t n_batches, int64_t B, int64_t T, float *scratch) {
    float *v_old = scratch, *grad = scratch + B * d, *g = scratch + 2 * B * d;
    const float *u[64];
    float s[64];
    double loss = 0.0;
    for (int64_t n = 0; n < n_batches; n++) {
        const int64_t *in = inputs + n * B, *tg = targets + n * B * T;
        const float *wt = weights + n * B * T;
        const float alpha = alphas[n];
        for (int64_t b = 0; b < B; b++) {  /* pass 1: read, score, keep v and its gradient */
            if (b + AHEAD < B) prefetch_pair(w_in, w_out, d, in, tg, wt, b + AHEAD, T);
            float *vo = v_old + b * d, *gr = grad + b * d, *gb = g + b * T;
            const float *wb = wt + b * T;
            if (wb[0] == 0.0f) {  /* padding: the positive weight is 0 only there */
                for (int64_t t = 0; t < T; t++) gb[t] = 0.0f;
                continue;
            }
            memcpy(vo, w_in + in[b] * d, d * sizeof(float));
            for (int64_t t = 0; t < T; t++) u[t] = w_out + tg[b * T + t] * d;
            int64_t t = 0;
            for (; t + 3 <= T; t += 3) dot3(u[t], u[t + 1], u[t + 2], vo, d, s + t);
            for (; t < T; t++) s[t] = dot1(u[t], vo, d);
            float pair_loss = 0.0f;
            for (t = 0; t < T; t++) {
                const float w = wb[t], e = expf(-fabsf(s[t]));
                const float sig = s[t] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
                const float x = t == 0 ? s[t] : -s[t];  /* log σ(x) = min(0, x) - log1p(exp(-|x|)) */
                pair_loss += w * (log1pf(e) - fminf(0.0f, x));
                gb[t] = ((t == 0 ? 1.0f : 0.0f) - sig) * w * alpha;  /* 0 where the weight is 0 */
            }
            loss += pair_loss;
            int64_t i = 0;  /* gr = sum_t g_t u_t */
            for (; i + L <= d; i += L) {
                vec a = splat(0.0f), c = a;
                for (t = 0; t + 1 < T; t += 2) { a += splat(gb[t]) * ld(u[t] + i); c += splat(gb[t + 1]) * ld(u[t + 1] + i); }
                if (t < T) a += splat(gb[t]) * ld(u[t] + i);
                st(gr + i, a + c);
            }
            for (; i < d; i++) {
                float a = 0.0f;
                for (t = 0; t < T; t++) a += gb[t] * u[t][i];
                gr[i] = a;
            }
        }
        for (int64_t b = 0; b < B; b++) {  /* pass 2: apply, from the values before the batch */
            if (b + AHEAD < B) prefetch_pair(w_in, w_out, d, in, tg, wt, b + AHEAD, T);
            if (wt[b * T] == 0.0f) continue;
            axpy(w_in + in[b] * d, 1.0f, grad + b * d, d);
            const float *vo = v_old + b * d, *gb = g + b * T;
            for (int64_t t = 0; t < T; t++)
                if (gb[t] != 0.0f) axpy(w_out + tg[b * T + t] * d, gb[t], vo, d);
        }
    }
    return loss;
}
"""

# no -ffast-math: linked into a shared library it would switch the whole process to flushing
# denormals; the reassociation flags are what lets the dot products vectorise
FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros",
         "-fno-trapping-math"]
_loaded: dict[str, ctypes.CDLL | None] = {}


def _cache_dir() -> Path:
    root = os.environ.get("MUPPETS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "muppets")
    return Path(root) / "native"


def _cpu() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
        return next((line for line in text.splitlines() if line.startswith(("model name", "flags"))), "")
    except OSError:
        return platform.processor()


def _compile(compiler: str, target: Path) -> bool:
    """Compile SOURCE to ``target`` (atomically: several worker processes may race)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / "sgns.c", Path(tmp) / target.name
        src.write_text(SOURCE)
        for arch in (["-march=native"], []):
            done = subprocess.run([compiler, *FLAGS, *arch, str(src), "-o", str(out), "-lm"],
                                  capture_output=True, text=True)
            if done.returncode == 0:
                os.replace(out, target)
                return True
        log.warning("%s could not compile the word2vec kernel: %s", compiler, done.stderr.strip()[:300])
        return False


def load() -> ctypes.CDLL | None:
    """The compiled kernel (built on first use), or None when there is no working C compiler."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return None
    key = hashlib.sha256("\0".join([SOURCE, *FLAGS, compiler, _cpu(), platform.machine()]).encode()).hexdigest()[:16]
    if key in _loaded:
        return _loaded[key]
    target = _cache_dir() / f"sgns-{key}.so"
    lib = None
    try:
        if target.is_file() or _compile(compiler, target):
            lib = ctypes.CDLL(str(target))
            fn = lib.muppets_sgns_batches
            fn.restype = ctypes.c_double
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_void_p]
    except OSError as err:
        log.warning("the compiled word2vec kernel could not be loaded: %s", err)
        lib = None
    _loaded[key] = lib
    return lib


def scratch_for(batch_size: int, d: int, targets: int) -> np.ndarray:
    """The kernel's work space: B x (2 d + 1 + K) floats."""
    return np.empty(batch_size * (2 * d + targets), dtype=np.float32)


def sgns_chunk(lib: ctypes.CDLL, w_in: torch.Tensor, w_out: torch.Tensor, inputs: torch.Tensor,
               targets: torch.Tensor, weights: torch.Tensor, alphas: torch.Tensor, scratch: np.ndarray) -> float:
    """Apply every batch of a chunk (inputs (N, B), targets and weights (N, B, 1+K), alphas (N,)),
    in place, as ``N`` :func:`~muppets.models.word2vec.sgns_step` calls would; returns the summed -L."""
    N, B, T = targets.shape
    d = w_in.shape[1]
    for t, dtype in ((w_in, torch.float32), (w_out, torch.float32), (inputs, torch.int64), (targets, torch.int64),
                     (weights, torch.float32), (alphas, torch.float32)):
        if t.dtype != dtype or not t.is_contiguous() or t.device.type != "cpu":
            raise ValueError(f"the native word2vec kernel needs contiguous CPU {dtype} tensors, got {t.dtype}")
    if inputs.shape != (N, B) or weights.shape != targets.shape or alphas.shape != (N,) or w_out.shape != w_in.shape:
        raise ValueError("the native word2vec kernel got tensors of mismatched shapes")
    if T > 64:
        raise ValueError(f"the native word2vec kernel takes at most 63 noise words, not {T - 1}")
    if scratch.size < B * (2 * d + T):
        raise ValueError("scratch too small")
    V = w_in.shape[0]
    for ids in (inputs, targets):  # the C loop does not check its indices
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
            raise IndexError(f"word index out of range 0..{V - 1}")
    return lib.muppets_sgns_batches(w_in.data_ptr(), w_out.data_ptr(), d, inputs.data_ptr(), targets.data_ptr(),
                                    weights.data_ptr(), alphas.data_ptr(), N, B, T, scratch.ctypes.data)
