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

The same library holds the window loop of ``update=window`` / ``window-shared``
(:func:`sgns_windows`): one update per centre window, windows in text order, noise words drawn
inside the loop from the alias tables (xorshift64*, seeded per chunk, so a chunk is still a pure
function of the seed, epoch and chunk) a few windows ahead, so that their rows are prefetched.

The shared library is built by :mod:`muppets.native` (``cc -O3 -march=native``, once per machine,
under a second); :func:`load` returns None when no compiler works.
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from muppets import native

__all__ = ["load", "sgns_chunk", "scratch_for", "sgns_windows", "window_scratch"]

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

#define AHEAD 4  /* pairs prefetched ahead */
#define L 8      /* floats per vector */

typedef float vec __attribute__((vector_size(L * sizeof(float))));  /* GCC/clang vector extension */

static inline vec ld(const float *p) { vec x; memcpy(&x, p, sizeof x); return x; }
static inline void st(float *p, vec x) { memcpy(p, &x, sizeof x); }
static inline vec splat(float a) { return (vec){0} + a; }  /* one broadcast (an element loop is not) */
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

/* Skip-gram by windows (update=window / window-shared). Centre i's contexts are the words within
   its reduced window win[i] and its sentence; each (context, centre) pair has the centre as its
   positive target and K noise words: its own (window) or the window's K shared by every context
   (window-shared, Ji et al. 2016). The whole window is one update: the scores of every context
   row v_j against its targets, g = alpha (y - sigma(s)) w, then v_j += sum_t g u_t and
   u_t += g v_j, every g and update from the rows before the window (duplicates add up). Windows
   run one after another, each on the rows the previous one wrote. Noise words are drawn here
   (Walker's alias tables thr, alias of V words; xorshift64* from seed), a few windows ahead,
   so that their rows are prefetched. ids, sent, win (n,) int32, alphas (n,); scratch: floats
   (2 W_MAX + 1) d + 2 W_MAX 64; ring: int32 RING (1 + 2 W_MAX + 2 W_MAX 64); *pairs gets the
   number of pairs. Returns the summed -L. */
#define W_MAX 64
#define RING (AHEAD + 1)
#define ENTRY (1 + 2 * W_MAX + 2 * W_MAX * 64)

static inline uint64_t next_u64(uint64_t *s) {  /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline int32_t draw(uint64_t *s, const float *thr, const int32_t *alias, uint64_t V) {
    const uint64_t r = next_u64(s);
    const uint64_t bucket = ((r >> 32) * V) >> 32;  /* uniform in 0..V-1 */
    const float coin = (float)(r & 0xFFFFFF) * (1.0f / 16777216.0f);
    return coin < thr[bucket] ? (int32_t)bucket : alias[bucket];
}

/* window a's contexts and noise words into a ring entry [m, ctx (2 W_MAX), noise], rows prefetched */
static void plan_window(int32_t *e, const float *w_in, const float *w_out, int64_t d, const int32_t *ids,
                        const int32_t *sent, const int32_t *win, int64_t n, int64_t a, int64_t K, int64_t shared,
                        const float *thr, const int32_t *alias, uint64_t V, uint64_t *rng) {
    int32_t *ctx = e + 1, *noise = e + 1 + 2 * W_MAX;
    int64_t m = 0;
    for (int64_t j = a - win[a]; j <= a + win[a]; j++)
        if (j >= 0 && j < n && j != a && sent[j] == sent[a]) ctx[m++] = ids[j];
    e[0] = (int32_t)m;
    if (m == 0) return;
    const int64_t draws = shared ? K : m * K;
    for (int64_t k = 0; k < draws; k++) noise[k] = draw(rng, thr, alias, V);
    prefetch_row(w_out + (int64_t)ids[a] * d, d);
    for (int64_t k = 0; k < draws; k++) prefetch_row(w_out + (int64_t)noise[k] * d, d);
    for (int64_t j = 0; j < m; j++) prefetch_row(w_in + (int64_t)ctx[j] * d, d);
}

double muppets_sgns_windows(float *w_in, float *w_out, int64_t d, const int32_t *ids, const int32_t *sent,
                            const int32_t *win, const float *alphas, int64_t n, int64_t K, int64_t shared,
                            const float *thr, const int32_t *alias, int64_t V, uint64_t seed,
                            float *scratch, int32_t *ring, int64_t *pairs) {
    const int64_t T = K + 1;
    float *dv = scratch, *du = scratch + 2 * W_MAX * d, *G = du + d;
    float *u[64], *v[2 * W_MAX], wt[64];
    float s[64];
    uint64_t rng = seed | 1;
    double loss = 0.0;
    int64_t count = 0;
    for (int64_t a = 0; a < AHEAD && a < n; a++)
        plan_window(ring + (a % RING) * ENTRY, w_in, w_out, d, ids, sent, win, n, a, K, shared, thr, alias, V, &rng);
    for (int64_t i = 0; i < n; i++) {
        if (i + AHEAD < n)
            plan_window(ring + ((i + AHEAD) % RING) * ENTRY, w_in, w_out, d, ids, sent, win, n, i + AHEAD, K,
                        shared, thr, alias, V, &rng);
        const int32_t *e = ring + (i % RING) * ENTRY, *ctx = e + 1, *noise = e + 1 + 2 * W_MAX;
        const int64_t m = e[0];
        if (m == 0) continue;
        const int32_t c = ids[i];
        const float alpha = alphas[i];
        u[0] = w_out + (int64_t)c * d;
        wt[0] = 1.0f;
        for (int64_t j = 0; j < m; j++) v[j] = w_in + (int64_t)ctx[j] * d;
        for (int64_t j = 0; j < m; j++) {  /* context j: scores, loss, gradients; dv_j */
            const int32_t *nz = noise + (shared ? 0 : j * K);
            for (int64_t k = 1; k < T; k++) {
                u[k] = w_out + (int64_t)nz[k - 1] * d;
                wt[k] = nz[k - 1] == c ? 0.0f : 1.0f;  /* a noise word equal to the centre: no update */
            }
            int64_t t = 0;
            for (; t + 3 <= T; t += 3) dot3(u[t], u[t + 1], u[t + 2], v[j], d, s + t);
            for (; t < T; t++) s[t] = dot1(u[t], v[j], d);
            float *gj = G + j * T;
            float prod = 1.0f, lin = 0.0f;  /* -log sigma(x) = log1p(exp(-|x|)) - min(0, x): one log a context */
            for (t = 0; t < T; t++) {
                const float ex = expf(-fabsf(s[t]));
                const float sig = s[t] >= 0.0f ? 1.0f / (1.0f + ex) : ex / (1.0f + ex);
                const float x = t == 0 ? s[t] : -s[t];
                if (wt[t] != 0.0f) { prod *= 1.0f + ex; lin -= fminf(0.0f, x); }  /* prod <= 2^64 */
                gj[t] = ((t == 0 ? 1.0f : 0.0f) - sig) * wt[t] * alpha;
            }
            loss += (double)logf(prod) + lin;
            float *out = dv + j * d;  /* dv_j = sum_t g_t u_t, from the rows before the window */
            int64_t x = 0;
            for (; x + L <= d; x += L) {
                vec acc = splat(0.0f), acc2 = acc;
                for (t = 0; t + 1 < T; t += 2) { acc += splat(gj[t]) * ld(u[t] + x); acc2 += splat(gj[t + 1]) * ld(u[t + 1] + x); }
                if (t < T) acc += splat(gj[t]) * ld(u[t] + x);
                st(out + x, acc + acc2);
            }
            for (; x < d; x++) { float acc = 0.0f; for (t = 0; t < T; t++) acc += gj[t] * u[t][x]; out[x] = acc; }
        }
        /* the targets' updates, from the context rows before the window */
        const int64_t shared_t = shared ? T : 1;  /* targets common to every context: the centre (and shared noise) */
        for (int64_t t = 0; t < shared_t; t++) {
            int64_t x = 0;
            for (; x + L <= d; x += L) {
                vec acc = splat(0.0f), acc2 = acc;
                int64_t j = 0;
                for (; j + 1 < m; j += 2) { acc += splat(G[j * T + t]) * ld(v[j] + x); acc2 += splat(G[(j + 1) * T + t]) * ld(v[j + 1] + x); }
                if (j < m) acc += splat(G[j * T + t]) * ld(v[j] + x);
                st(du + x, acc + acc2);
            }
            for (; x < d; x++) { float acc = 0.0f; for (int64_t j = 0; j < m; j++) acc += G[j * T + t] * v[j][x]; du[x] = acc; }
            const int32_t row = t == 0 ? c : noise[t - 1];
            if (t == 0 || row != c) axpy(w_out + (int64_t)row * d, 1.0f, du, d);
        }
        if (!shared)  /* each context's own noise words */
            for (int64_t j = 0; j < m; j++)
                for (int64_t k = 0; k < K; k++) {
                    const int32_t row = noise[j * K + k];
                    if (row != c) axpy(w_out + (int64_t)row * d, G[j * T + 1 + k], v[j], d);
                }
        for (int64_t j = 0; j < m; j++) axpy(v[j], 1.0f, dv + j * d, d);
        count += m;
    }
    *pairs = count;
    return loss;
}
"""

_SIGNATURES = {
    "muppets_sgns_batches": (ctypes.c_double, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                               ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                               ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]),
    "muppets_sgns_windows": (ctypes.c_double, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, *[ctypes.c_void_p] * 4,
                                               ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                               ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p,
                                               ctypes.c_void_p, ctypes.c_void_p]),
}


def load() -> ctypes.CDLL | None:
    """The compiled kernel (built on first use), or None when there is no working C compiler."""
    return native.load("sgns", SOURCE, _SIGNATURES)


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


WINDOW_MAX = 64  # the largest window (and noise words + 1) the window loop takes (W_MAX in SOURCE)
_AHEAD = 4  # AHEAD in SOURCE: windows planned (and prefetched) ahead


def window_scratch(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The window loop's work space: floats (2 W_MAX + 1) d + 2 W_MAX 64, and the int32 ring of
    the windows planned ahead."""
    return (np.empty((2 * WINDOW_MAX + 1) * d + 2 * WINDOW_MAX * 64, dtype=np.float32),
            np.empty((_AHEAD + 1) * (1 + 2 * WINDOW_MAX + 2 * WINDOW_MAX * 64), dtype=np.int32))


def sgns_windows(lib: ctypes.CDLL, w_in: torch.Tensor, w_out: torch.Tensor, ids: torch.Tensor,
                 sentence: torch.Tensor, windows: torch.Tensor, alphas: torch.Tensor, negative: int,
                 shared: bool, threshold: np.ndarray, alias: np.ndarray, seed: int,
                 scratch: tuple[np.ndarray, np.ndarray]) -> tuple[float, int]:
    """Train skip-gram window by window (``update=window`` or ``window-shared``), in place: centre
    ``i`` = ``ids[i]``, its contexts the words within ``windows[i]`` positions in the same
    ``sentence``, each with ``negative`` noise words of its own or (``shared``) the window's,
    drawn from the alias tables ``threshold``, ``alias`` (:class:`~muppets.objectives.word2vec.NoiseSampler`)
    by a generator seeded with ``seed``; learning rate ``alphas[i]``. Returns the summed -L and
    the number of (context, centre) pairs."""
    n, d, V = len(ids), w_in.shape[1], w_in.shape[0]
    for t, dtype in ((w_in, torch.float32), (w_out, torch.float32), (ids, torch.int32), (sentence, torch.int32),
                     (windows, torch.int32), (alphas, torch.float32)):
        if t.dtype != dtype or not t.is_contiguous() or t.device.type != "cpu":
            raise ValueError(f"the native word2vec window loop needs contiguous CPU {dtype} tensors, got {t.dtype}")
    if ids.shape != (n,) or sentence.shape != (n,) or windows.shape != (n,) or alphas.shape != (n,) \
            or w_out.shape != w_in.shape or threshold.shape != (V,) or alias.shape != (V,):
        raise ValueError("the native word2vec window loop got tensors of mismatched shapes")
    if not 1 <= negative < 64 or (n and (int(windows.min()) < 0 or int(windows.max()) > WINDOW_MAX)):
        raise ValueError(f"the native word2vec window loop takes windows of at most {WINDOW_MAX} words "
                         "and 1 to 63 noise words")
    if threshold.dtype != np.float32 or alias.dtype != np.int32 or not (threshold.flags.c_contiguous
                                                                        and alias.flags.c_contiguous):
        raise ValueError("the alias tables must be contiguous float32 thresholds and int32 aliases")
    for t in (ids, torch.from_numpy(alias)):  # the C loop does not check its indices
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= V):
            raise IndexError(f"word index out of range 0..{V - 1}")
    floats, ring = scratch
    if floats.dtype != np.float32 or ring.dtype != np.int32 or floats.size < (2 * WINDOW_MAX + 1) * d \
            + 2 * WINDOW_MAX * 64 or ring.size < (_AHEAD + 1) * (1 + 2 * WINDOW_MAX + 2 * WINDOW_MAX * 64):
        raise ValueError("scratch: use window_scratch(d)")
    pairs = ctypes.c_int64(0)
    loss = lib.muppets_sgns_windows(w_in.data_ptr(), w_out.data_ptr(), d, ids.data_ptr(), sentence.data_ptr(),
                                    windows.data_ptr(), alphas.data_ptr(), n, negative, int(shared),
                                    threshold.ctypes.data, alias.ctypes.data, V, seed % 2**64,
                                    floats.ctypes.data, ring.ctypes.data, ctypes.byref(pairs))
    return loss, pairs.value
