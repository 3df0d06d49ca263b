"""The batch-1 decoding step of a GPT model as one compiled call, and the int8 screen it ends in.

Why: at batch 1 a decoding step reads every weight once and does little arithmetic with it, so
its floor is the time to read the weights (``benchmarks/gpt_speed.py`` prints it). Dispatched
from Python, a gpt-mini step is ~150 small torch operators (layer norms, the cache writes,
attention over a few dozen keys, GELU, residuals, the screen's bookkeeping), and on a 2-core
Xeon they cost more than the weight reads themselves (BENCHMARKS.md, issue 54). Here the whole
step is one C call: token + position embedding, each block (pre- or post-LN, causal attention
over the :class:`~muppets.nn.kv_cache.KVCache`, the feed-forward with GELU / tanh-GELU / ReLU),
the final LayerNorm, and the int8 screen: for greedy decoding the argmax, for top-k sampling the
tokens that may be among the k largest logits.

* **Same arithmetic kind as the torch path.** Every product is a float32 dot product of a weight
  row (``nn.Linear``'s own ``(out, in)`` storage: the live parameters, no copy) with the input,
  so the hidden state equals :meth:`~muppets.models.gpt.GPTBackbone.decode_step`'s within
  float32 rounding (the sums run in another order), and a token can differ from the full
  logits' argmax only among logits equal within that rounding, as everywhere else in decoding
  (:mod:`muppets.nn.decode`). Each output element is summed by one thread in a fixed order, so
  the result does not depend on the thread count.
* **The screen** (:class:`~muppets.nn.decode.GreedyScreen` ``kind="int8f"``): the int8 copy of
  the output weight with one scale per row, multiplied here by the float32 hidden state with
  float32 sums (no bfloat16 rounding of the input or the result, unlike torch's int8 kernel), so
  its error bound is tighter: ``E = |h| |w - w~| + 2 g |h| max|w| + 2^-22 max|y|`` (``g`` bounding
  float32 summation over ``H`` terms), with the same relative margin. Candidates (``y >= max y -
  2E``) are recomputed from the float32 output weight; the largest wins, the lowest id on equal
  values. For top-k, each thread keeps a min-heap of the k largest ``y`` of its rows, every thread
  merges the heaps into the k-th largest ``t`` alike, and the candidates are ``y >= t - 2E``
  (:meth:`~muppets.nn.decode.GreedyScreen.top_k`'s rule and proof), returned in id order.
  :meth:`GreedyScreen.build` checks this kernel against float64 products like the others.
* **Threads.** The library is compiled with OpenMP and joins torch's own intra-op pool
  (:mod:`muppets.native`): one parallel region per step, the caller's
  ``torch.get_num_threads()`` threads (at most 64), rows of each product split between them, the
  attention heads split, barriers between the phases. With one thread (as in a forked child,
  which :mod:`muppets.nn.decode` gives one) no parallel region is entered; where torch's parallel
  backend is not OpenMP the library is built without it and runs on one thread. It starts no
  thread beyond those torch's own operators would start on the calling thread (libgomp's pool
  of that thread), changes no setting and releases the GIL.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import weakref
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from muppets import native

log = logging.getLogger(__name__)

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#define L 16          /* floats per vector: one AVX-512 register, two AVX2 ones */
#define MAX_THREADS 64

typedef float vec __attribute__((vector_size(L * sizeof(float))));

static inline vec ld(const float *p) { vec x; memcpy(&x, p, sizeof x); return x; }
/* 16 int8 -> 16 floats (__builtin_convertvector of int8 lanes compiles to one scalar convert a lane) */
static inline vec ldq(const int8_t *p) {
    vec x;
#if defined(__AVX512F__)
    __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
    memcpy(&x, &f, sizeof x);
#elif defined(__AVX2__)
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8))));
    memcpy(&x, &lo, sizeof lo);
    memcpy((char *)&x + sizeof lo, &hi, sizeof hi);
#else
    for (int i = 0; i < L; i++) x[i] = (float)p[i];
#endif
    return x;
}
/* the lanes' sum as a fixed tree: lanes i and i + 8, then + 4, + 2, + 1 (the same order everywhere) */
static inline float hsum(vec x) {
#if defined(__clang__) || __GNUC__ >= 12
    x += __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    x += __builtin_shufflevector(x, x, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
    x += __builtin_shufflevector(x, x, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    x += __builtin_shufflevector(x, x, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    return x[0];
#else
    float t[L];
    memcpy(t, &x, sizeof t);
    for (int w = L / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) t[i] += t[i + w];
    return t[0];
#endif
}

/* Every dot product below sums in one order, whichever function, thread or group of rows computes
   it: vectors 0, 2, 4 ... into one accumulator and 1, 3, 5 ... into another (two chains hide the
   FMA latency), a last odd vector into the first, the two added and reduced by hsum, then the
   scalar tail. Float32 weights (W*) and int8 ones (Q*) alike; four rows share the loads of x. */
#define DOT4(LD, T, p, x, n, out) do {                                                            \
    const T *p0 = (p), *p1 = p0 + (n), *p2 = p1 + (n), *p3 = p2 + (n);                             \
    vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};            \
    int64_t i = 0;                                                                                  \
    for (; i + 2 * L <= (n); i += 2 * L) {                                                          \
        vec x0 = ld((x) + i), x1 = ld((x) + i + L);                                                 \
        a0 += LD(p0 + i) * x0; a1 += LD(p1 + i) * x0; a2 += LD(p2 + i) * x0; a3 += LD(p3 + i) * x0; \
        b0 += LD(p0 + i + L) * x1; b1 += LD(p1 + i + L) * x1; b2 += LD(p2 + i + L) * x1; b3 += LD(p3 + i + L) * x1; \
    }                                                                                               \
    if (i + L <= (n)) {                                                                             \
        vec x0 = ld((x) + i);                                                                       \
        a0 += LD(p0 + i) * x0; a1 += LD(p1 + i) * x0; a2 += LD(p2 + i) * x0; a3 += LD(p3 + i) * x0; \
        i += L;                                                                                     \
    }                                                                                               \
    float s0 = hsum(a0 + b0), s1 = hsum(a1 + b1), s2 = hsum(a2 + b2), s3 = hsum(a3 + b3);           \
    for (; i < (n); i++) {                                                                          \
        s0 += (float)p0[i] * (x)[i]; s1 += (float)p1[i] * (x)[i]; s2 += (float)p2[i] * (x)[i]; s3 += (float)p3[i] * (x)[i]; \
    }                                                                                               \
    (out)[0] = s0; (out)[1] = s1; (out)[2] = s2; (out)[3] = s3;                                     \
} while (0)

#define DOT1(LD, T, p, x, n, out) do {                                                            \
    const T *p0 = (p);                                                                              \
    vec a0 = {0}, b0 = {0};                                                                         \
    int64_t i = 0;                                                                                  \
    for (; i + 2 * L <= (n); i += 2 * L) { a0 += LD(p0 + i) * ld((x) + i); b0 += LD(p0 + i + L) * ld((x) + i + L); } \
    if (i + L <= (n)) { a0 += LD(p0 + i) * ld((x) + i); i += L; }                                   \
    float s0 = hsum(a0 + b0);                                                                       \
    for (; i < (n); i++) s0 += (float)p0[i] * (x)[i];                                               \
    *(out) = s0;                                                                                    \
} while (0)

static void rows4(const float *W, const float *x, int64_t n, int64_t r, float *out) { DOT4(ld, float, W + r * n, x, n, out); }
static float row1(const float *w, const float *x, int64_t n) { float s; DOT1(ld, float, w, x, n, &s); return s; }
static void qrows4(const int8_t *q, const float *x, int64_t n, float *out) { DOT4(ldq, int8_t, q, x, n, out); }
static float qrow1(const int8_t *q, const float *x, int64_t n) { float s; DOT1(ldq, int8_t, q, x, n, &s); return s; }

/* y[r0:r1] = W[r0:r1] x (+ b) */
static void gemv(const float *W, const float *b, const float *x, int64_t n, int64_t r0, int64_t r1, float *y) {
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) rows4(W, x, n, r, y + r);
    for (; r < r1; r++) y[r] = row1(W + r * n, x, n);
    if (b) for (r = r0; r < r1; r++) y[r] += b[r];
}

/* the rows [*r0, *r1) of `rows` that thread t of nt takes: whole groups of 4 */
static void share(int64_t rows, int t, int nt, int64_t *r0, int64_t *r1) {
    int64_t groups = (rows + 3) / 4, per = groups / nt, extra = groups % nt;
    int64_t g0 = t * per + (t < extra ? t : extra), g1 = g0 + per + (t < extra);
    *r0 = g0 * 4 < rows ? g0 * 4 : rows;
    *r1 = g1 * 4 < rows ? g1 * 4 : rows;
}

/* y = LayerNorm(x) (biased variance, as torch); y may be x */
static void layer_norm(const float *x, const float *w, const float *b, float eps, int64_t n, float *y) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int64_t i = 0; i < n; i++) { double d = x[i] - mean; var += d * d; }
    float inv = (float)(1.0 / sqrt(var / n + eps)), m = (float)mean;
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * inv * w[i] + b[i];
}

static inline float act(float x, int64_t kind) {
    if (kind == 0) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));  /* gelu */
    if (kind == 1) return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));  /* tanh */
    return x > 0.0f ? x : 0.0f;  /* relu */
}

typedef struct {
    const float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *out_w, *out_b, *ln2_w, *ln2_b, *up_w, *up_b, *down_w, *down_b;
} gpt_layer;

typedef struct {
    int64_t H, heads, hd, I, layers, positions, V, pre, act;
    double eps;
    const float *tok, *pos, *fin_w, *fin_b;  /* fin_w NULL: no final LayerNorm */
    const gpt_layer *layer;
    /* the screen (q NULL: none): int8 (V, H), bfloat16 scales (V,), the float32 output weight (V, H) */
    const int8_t *q; const uint16_t *scale; const float *out_w;
    double error_norm, weight_norm, gamma;
    int64_t max_candidates;
} gpt_step;

typedef struct { float high, peak, best; int64_t best_id, count, kept; } screen_part;

static inline float bf16_to_float(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }

/* y[r0:r1] = scale * (q x) with float32 sums; the part's max y and max |y| (NaN if any is NaN) */
static void screen_rows(const gpt_step *s, const float *x, int64_t r0, int64_t r1, float *y, screen_part *p) {
    const int64_t H = s->H;
    float high = -INFINITY, peak = 0.0f, d[4];
    int bad = 0;
    for (int64_t r = r0; r < r1; r += 4) {
        int k = r1 - r < 4 ? (int)(r1 - r) : 4;
        if (k == 4) qrows4(s->q + r * H, x, H, d);
        else for (int j = 0; j < k; j++) d[j] = qrow1(s->q + (r + j) * H, x, H);
        for (int j = 0; j < k; j++) {
            float v = d[j] * bf16_to_float(s->scale[r + j]);
            y[r + j] = v;
            bad |= v != v;
            if (v > high) high = v;
            if (fabsf(v) > peak) peak = fabsf(v);
        }
    }
    p->high = bad ? NAN : high; p->peak = bad ? NAN : peak;
}

/* E: every logit of x, exact or from any float32 evaluation, is within E of y (see the module) */
static double screen_bound(const gpt_step *s, const float *x, double peak) {
    double hn = 0.0;
    for (int64_t i = 0; i < s->H; i++) hn += (double)x[i] * x[i];
    hn = sqrt(hn);
    double e = hn * s->error_norm + 2.0 * s->gamma * hn * s->weight_norm + ldexp(peak, -22);
    return e * (1.0 + ldexp(1.0, -10)) + 1e-30;
}

/* the part's candidates (y >= thr) recomputed in float32; the largest, the lowest id on ties */
static void screen_candidates(const gpt_step *s, const float *x, const float *y, double thr,
                              int64_t r0, int64_t r1, screen_part *p) {
    p->count = 0; p->best = -INFINITY; p->best_id = -1;
    for (int64_t r = r0; r < r1; r++) {
        if ((double)y[r] < thr) continue;
        if (++p->count > s->max_candidates) return;
        float e = row1(s->out_w + r * s->H, x, s->H);
        if (p->best_id < 0 || e > p->best) { p->best = e; p->best_id = r; }
    }
}

/* h: a min-heap of the n largest of the values offered so far (at most k): h[0] the smallest */
static void heap_offer(float *h, int64_t *n, int64_t k, float v) {
    int64_t i;
    if (*n < k) {
        for (i = (*n)++; i > 0 && h[(i - 1) / 2] > v; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
        h[i] = v;
    } else if (v > h[0]) {
        for (i = 0;;) {
            int64_t c = 2 * i + 1;
            if (c >= k) break;
            if (c + 1 < k && h[c + 1] < h[c]) c++;
            if (h[c] >= v) break;
            h[i] = h[c]; i = c;
        }
        h[i] = v;
    }
}

/* the part's candidates (y >= thr) and their float32 logits, ascending ids; count > max: too many */
static void screen_top_k(const gpt_step *s, const float *x, const float *y, double thr, int64_t r0, int64_t r1,
                         screen_part *p, int64_t *ids, float *logits) {
    p->count = 0;
    for (int64_t r = r0; r < r1; r++) {
        if ((double)y[r] < thr) continue;
        if (p->count == s->max_candidates) { p->count++; return; }
        ids[p->count] = r;
        logits[p->count++] = row1(s->out_w + r * s->H, x, s->H);
    }
}

static void barrier(int nt) {
#ifdef _OPENMP
    if (nt > 1) {
        #pragma omp barrier
    }
#else
    (void)nt;
#endif
}

typedef struct {
    int64_t token, position, end, cache_len;
    float *scratch, *y, *hidden;
    float *const *kv;  /* per layer: the cache's k and v buffers (heads, cache_len, hd) */
    screen_part parts[MAX_THREADS];
    int team, screen;
    int64_t k;         /* top-k: k (0: greedy) */
    float *heaps;      /* top-k: per thread 2k floats, its part's k largest y, then the merge's */
    int64_t *ids;      /* top-k: per thread max_candidates ids and logits */
    float *logits;
} call;

/* thread t's share of the step (all nt threads run it) */
static void step_body(const gpt_step *s, call *c, int t, int nt) {
    const int64_t H = s->H, hd = s->hd, I = s->I, end = c->end;
    float *xs[2] = {c->scratch, c->scratch + H};  /* the residual stream, double-buffered */
    float *qkv = c->scratch + 2 * H, *att = qkv + 3 * H, *u = att + H;
    float *own = u + I + (int64_t)t * (H + s->positions), *scores = own + H;  /* this thread's */
    const float *norm_w = NULL, *norm_b = NULL;  /* post-LN: the norm x still needs (NULL: none) */
    const float scale = (float)(1.0 / sqrt((double)hd));
    const float eps = (float)s->eps;
    int cur = 0;
    int64_t r0, r1;

    if (t == 0) {
        c->team = nt;
        for (int64_t i = 0; i < H; i++) xs[0][i] = s->tok[c->token * H + i] + s->pos[c->position * H + i];
    }
    barrier(nt);
    for (int64_t l = 0; l < s->layers; l++) {
        const gpt_layer *ly = s->layer + l;
        float *K = c->kv[2 * l], *Vc = c->kv[2 * l + 1];
        for (int half = 0; half < 2; half++) {  /* 0: attention, 1: feed-forward */
            const float *res = xs[cur], *h = res;  /* residual base, sub-layer input */
            if (norm_w) { layer_norm(xs[cur], norm_w, norm_b, eps, H, own); res = h = own; }
            if (s->pre) { layer_norm(res, half ? ly->ln2_w : ly->ln1_w, half ? ly->ln2_b : ly->ln1_b, eps, H, own); h = own; }
            const float *in;
            if (half == 0) {
                share(3 * H, t, nt, &r0, &r1);
                gemv(ly->qkv_w, ly->qkv_b, h, H, r0, r1, qkv);
                barrier(nt);
                for (int64_t head = t; head < s->heads; head += nt) {
                    const float *q = qkv + head * hd;
                    float *Kh = K + head * c->cache_len * hd, *Vh = Vc + head * c->cache_len * hd;
                    memcpy(Kh + (end - 1) * hd, qkv + H + head * hd, hd * sizeof(float));
                    memcpy(Vh + (end - 1) * hd, qkv + 2 * H + head * hd, hd * sizeof(float));
                    float m = -INFINITY, sum = 0.0f;
                    for (int64_t j = 0; j < end; j++) {
                        scores[j] = row1(Kh + j * hd, q, hd) * scale;
                        if (scores[j] > m) m = scores[j];
                    }
                    for (int64_t j = 0; j < end; j++) { scores[j] = expf(scores[j] - m); sum += scores[j]; }
                    float *o = att + head * hd;
                    for (int64_t d = 0; d < hd; d++) o[d] = 0.0f;
                    for (int64_t j = 0; j < end; j++) {
                        const float p = scores[j] / sum, *vj = Vh + j * hd;
                        for (int64_t d = 0; d < hd; d++) o[d] += p * vj[d];
                    }
                }
                in = att;
            } else {
                share(I, t, nt, &r0, &r1);
                gemv(ly->up_w, ly->up_b, h, H, r0, r1, u);
                for (int64_t r = r0; r < r1; r++) u[r] = act(u[r], s->act);
                in = u;
            }
            barrier(nt);
            share(H, t, nt, &r0, &r1);
            gemv(half ? ly->down_w : ly->out_w, half ? ly->down_b : ly->out_b, in, half ? I : H, r0, r1, xs[1 - cur]);
            for (int64_t r = r0; r < r1; r++) xs[1 - cur][r] += res[r];
            cur = 1 - cur;
            norm_w = s->pre ? NULL : (half ? ly->ln2_w : ly->ln1_w);
            norm_b = s->pre ? NULL : (half ? ly->ln2_b : ly->ln1_b);
            barrier(nt);
        }
    }
    const float *top = xs[cur];  /* every thread: the top hidden state, in its own buffer */
    if (norm_w) { layer_norm(top, norm_w, norm_b, eps, H, own); top = own; }
    if (s->fin_w) { layer_norm(top, s->fin_w, s->fin_b, eps, H, own); top = own; }
    if (t == 0) memcpy(c->hidden, top, H * sizeof(float));
    if (!s->q || !c->screen) return;
    screen_part *p = c->parts + t;
    const int64_t k = c->k;
    share(s->V, t, nt, &r0, &r1);
    screen_rows(s, top, r0, r1, c->y, p);
    p->kept = 0;
    if (k > 0)  /* a NaN may enter the heap: screen_rows has flagged it, and the step decides nothing */
        for (int64_t r = r0; r < r1; r++) heap_offer(c->heaps + 2 * t * k, &p->kept, k, c->y[r]);
    barrier(nt);
    float high = -INFINITY, peak = 0.0f;
    int bad = 0;
    for (int i = 0; i < nt; i++) {  /* count and best are written below: other fields */
        bad |= isnan(c->parts[i].high) || isnan(c->parts[i].peak);
        if (c->parts[i].high > high) high = c->parts[i].high;
        if (c->parts[i].peak > peak) peak = c->parts[i].peak;
    }
    if (k > 0) {  /* every thread merges the parts' heaps alike: the k-th largest y */
        float *merged = c->heaps + (2 * t + 1) * k;
        int64_t n = 0;
        for (int i = 0; i < nt; i++)
            for (int64_t j = 0; j < c->parts[i].kept; j++) heap_offer(merged, &n, k, c->heaps[2 * i * k + j]);
        high = n == k ? merged[0] : -INFINITY;
    }
    double thr = (double)high - 2.0 * screen_bound(s, top, peak);
    if (bad || !isfinite(thr)) { p->count = -1; return; }
    if (k > 0)
        screen_top_k(s, top, c->y, thr, r0, r1, p, c->ids + t * s->max_candidates, c->logits + t * s->max_candidates);
    else
        screen_candidates(s, top, c->y, thr, r0, r1, p);
}

/* One decoding step of one row: writes its keys and values into the cache at slot end - 1, marks
   the slot in key_mask, advances next_position, writes the top hidden state (H,). With `screen`
   (and a screen attached), k == 0: returns the greedy token (>= 0); k > 0 (k < V): returns the
   number n >= k of tokens that may be among the k largest logits, their ids in ids[0:n] (ascending)
   and their float32 logits in logits[0:n] (ids and logits hold threads * max_candidates). Returns
   -1 without `screen` or a screen, or where it cannot decide (the caller takes the full logits of
   `hidden`); -2 on a token, position or length out of range (nothing written). */
int64_t muppets_gpt_step(const gpt_step *s, const int64_t *token, int64_t *next_position, uint8_t *key_mask,
                         int64_t end, int64_t cache_len, float *const *kv, float *scratch, float *y,
                         float *hidden, int screen, int threads, int64_t k, float *heaps, int64_t *ids,
                         float *logits) {
    call c;
    c.token = *token; c.position = *next_position; c.end = end; c.cache_len = cache_len;
    c.scratch = scratch; c.y = y; c.hidden = hidden; c.kv = kv; c.team = 1; c.screen = screen;
    c.k = screen ? k : 0; c.heaps = heaps; c.ids = ids; c.logits = logits;
    if (c.token < 0 || c.token >= s->V || c.position < 0 || c.position >= s->positions || end < 1
            || end > cache_len || end > s->positions || c.k < 0 || c.k >= s->V)
        return -2;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
#ifdef _OPENMP
    if (threads > 1) {
        #pragma omp parallel num_threads(threads)
        step_body(s, &c, omp_get_thread_num(), omp_get_num_threads());
    } else
#endif
        step_body(s, &c, 0, 1);
    key_mask[end - 1] = 1;
    *next_position = c.position + 1;
    if (!s->q || !screen) return -1;
    int64_t count = 0, best_id = -1;
    float best = -INFINITY;
    for (int i = 0; i < c.team; i++) {  /* parts in row order: strict > keeps the lowest id */
        const screen_part *p = c.parts + i;
        if (p->count < 0 || p->count > s->max_candidates) return -1;
        count += p->count;
        if (c.k == 0 && p->best_id >= 0 && (best_id < 0 || p->best > best)) { best = p->best; best_id = p->best_id; }
    }
    if (count > s->max_candidates) return -1;
    if (c.k > 0) {  /* the parts' candidates, one after another (row order) */
        int64_t n = 0;
        for (int i = 0; i < c.team; i++) {
            const int64_t m = c.parts[i].count, at = i * s->max_candidates;
            if (at != n) {
                memmove(ids + n, ids + at, m * sizeof *ids);
                memmove(logits + n, logits + at, m * sizeof *logits);
            }
            n += m;
        }
        return n >= c.k ? n : -1;
    }
    if (best_id < 0 || best != best) return -1;
    return best_id;
}

/* The screen alone (GreedyScreen kind int8f and its probe): y (V,) of x (H,); returns the bound E. */
double muppets_screen_scores(const gpt_step *s, const float *x, float *y) {
    screen_part p;
    screen_rows(s, x, 0, s->V, y, &p);
    return screen_bound(s, x, p.peak);
}
"""

ENABLED = True  # False: decode with torch operators only (benchmarks compare the two)
_LAYER_FIELDS = ("ln1_w", "ln1_b", "qkv_w", "qkv_b", "out_w", "out_b", "ln2_w", "ln2_b", "up_w", "up_b",
                 "down_w", "down_b")
_ACTS = {"gelu": 0, "gelu_new": 1, "gelu_tanh": 1, "gelu_pytorch_tanh": 1, "relu": 2}
MAX_THREADS = 64  # MAX_THREADS in SOURCE


class _Layer(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in _LAYER_FIELDS]


class _Step(ctypes.Structure):
    _fields_ = ([(name, ctypes.c_int64) for name in ("H", "heads", "hd", "I", "layers", "positions", "V", "pre", "act")]
                + [("eps", ctypes.c_double)]
                + [(name, ctypes.c_void_p) for name in ("tok", "pos", "fin_w", "fin_b", "layer", "q", "scale", "out_w")]
                + [(name, ctypes.c_double) for name in ("error_norm", "weight_norm", "gamma")]
                + [("max_candidates", ctypes.c_int64)])


_P = ctypes.c_void_p
_SIGNATURES = {
    "muppets_gpt_step": (ctypes.c_int64, [_P, _P, _P, _P, ctypes.c_int64, ctypes.c_int64, _P, _P, _P, _P, ctypes.c_int,
                                          ctypes.c_int, ctypes.c_int64, _P, _P, _P]),
    "muppets_screen_scores": (ctypes.c_double, [_P, _P, _P]),
}


def load() -> ctypes.CDLL | None:
    """The compiled step (built on first use; :mod:`muppets.native`), or None without a C compiler."""
    return native.load("gptstep", SOURCE, _SIGNATURES, openmp=True, reassociate=False)


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _usable(t: torch.Tensor, dtype: torch.dtype = torch.float32) -> bool:
    return t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous()


def screen_scores(lib: ctypes.CDLL, screen, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``int8f`` screen's logits ``y (B, V)`` of ``hidden (B, H)`` float32 and the bound
    ``E (B,)``, one compiled call a row (:meth:`~muppets.nn.decode.GreedyScreen.scores`)."""
    V, H = screen.weight.shape
    step = _Step(H=H, V=V, q=screen.q.data_ptr(), scale=screen.scale.data_ptr(), out_w=screen.weight.data_ptr(),
                 error_norm=screen.error_norm, weight_norm=screen.weight_norm, gamma=screen.gamma)
    h = hidden.float().contiguous()  # (B, H)
    y = torch.empty(h.shape[0], V)  # (B, V)
    bound = torch.tensor([lib.muppets_screen_scores(ctypes.byref(step), h[b].data_ptr(), y[b].data_ptr())
                          for b in range(h.shape[0])], dtype=torch.float64)  # (B,)
    return y, bound


class StepOut(NamedTuple):
    """What :class:`GPTStep` returns: the top hidden state ``(1, H)``, and what its screen decided
    (None where it did not): the greedy ``token``, or ``top``, the top-k candidates' float32 logits
    and ids ``((1, N), (1, N))`` as :meth:`~muppets.nn.decode.GreedyScreen.top_k` returns them."""

    hidden: torch.Tensor
    token: int | None
    top: tuple[torch.Tensor, torch.Tensor] | None


class GPTStep:
    """One decoding step of one unpadded row of a GPT backbone in one compiled call.

    Built from the live parameters (their storage, no copy): valid exactly as long as the
    :class:`~muppets.nn.decode.DecodeWeights` it is derived from, which watches every parameter
    the step reads (storage, version, probes). Greedy and top-k steps end in that plan's ``int8f``
    screen (:meth:`attach_screen`, made on the first such step). Thread-safe: every calling thread gets
    its own scratch.

    Args:
        lib: :func:`load`'s library.
        backbone: a :class:`~muppets.models.gpt.GPTBackbone` in float32 on the CPU.
    """

    def __init__(self, lib: ctypes.CDLL, backbone: nn.Module) -> None:
        cfg = backbone.cfg
        self.lib, self.H, self.positions = lib, cfg.hidden_size, cfg.max_position_embeddings
        self.heads, self.head_dim = cfg.num_heads, cfg.head_dim
        emb, blocks = backbone.embeddings, list(backbone.layers)
        keep: list[torch.Tensor] = []  # every tensor a pointer is taken from stays alive with the step

        def ptr(t: torch.Tensor | None) -> int | None:
            if t is not None:
                keep.append(t)
            return _ptr(t)

        self.layers = (_Layer * len(blocks))()
        for i, b in enumerate(blocks):
            for name, t in zip(_LAYER_FIELDS, (b.attn_norm.weight, b.attn_norm.bias, b.attn.qkv.weight, b.attn.qkv.bias,
                                               b.attn.out.weight, b.attn.out.bias, b.ffn_norm.weight, b.ffn_norm.bias,
                                               b.ffn.up.weight, b.ffn.up.bias, b.ffn.down.weight, b.ffn.down.bias)):
                setattr(self.layers[i], name, ptr(t.detach()))
        final = backbone.final_norm
        self.step = _Step(H=cfg.hidden_size, heads=cfg.num_heads, hd=cfg.head_dim, I=cfg.intermediate_size,
                          layers=len(blocks), positions=cfg.max_position_embeddings, V=cfg.vocab_size,
                          pre=int(cfg.variant == "gpt2"), act=_ACTS[cfg.hidden_act], eps=cfg.layer_norm_eps,
                          tok=ptr(emb.tokens.weight.detach()), pos=ptr(emb.positions.weight.detach()),
                          fin_w=ptr(None if final is None else final.weight.detach()),
                          fin_b=ptr(None if final is None else final.bias.detach()),
                          layer=ctypes.cast(self.layers, ctypes.c_void_p).value)
        self.keep = keep
        self.screened = False  # attach_screen has run (the screen itself may be None)
        self.decided = 0  # steps whose token (greedy) or top-k candidates the compiled screen decided
        self._local = threading.local()  # .scratch, .y: this thread's buffers; .kv: its cache's pointers

    @classmethod
    def build(cls, backbone: nn.Module) -> "GPTStep | None":
        """The step for ``backbone``, or None where it does not apply: no compiler, parameters that
        are not contiguous float32 CPU tensors, an embedding LayerNorm or token types (not GPT's),
        an activation the kernel does not have, biases missing."""
        cfg = backbone.cfg
        emb = backbone.embeddings
        if getattr(cfg, "hidden_act", None) not in _ACTS or emb.norm is not None or emb.segments is not None:
            return None
        linears = [m for b in backbone.layers for m in (b.attn.qkv, b.attn.out, b.ffn.up, b.ffn.down)]
        if any(m.bias is None for m in linears) or not all(_usable(p) for p in backbone.parameters()):
            return None
        lib = load()
        return None if lib is None else cls(lib, backbone)

    def attach_screen(self, make: Callable[[], object]) -> None:
        """Give greedy and top-k steps the ``int8f`` screen ``make()`` returns (None: they decide
        nothing), once; the struct's fields are all written before any greedy step reads them."""
        if self.screened:
            return
        from muppets.nn.decode import BUILD_LOCK, SCREEN_MAX_CANDIDATES

        with BUILD_LOCK:
            if not self.screened:
                screen = make()
                if screen is not None:
                    step = self.step
                    step.error_norm, step.weight_norm, step.gamma = screen.error_norm, screen.weight_norm, screen.gamma
                    step.max_candidates = SCREEN_MAX_CANDIDATES
                    step.scale, step.out_w = screen.scale.data_ptr(), screen.weight.data_ptr()
                    self.keep += [screen.q, screen.scale, screen.weight]
                    step.q = screen.q.data_ptr()  # last: q set means the screen is there
                self.screened = True

    def accepts(self, input_ids: torch.Tensor, cache) -> bool:
        """Can this step take ``input_ids`` and ``cache``: one int64 CPU id, a one-row float32 CPU
        cache laid out ``(1, heads, L, head_dim)`` with its mask and positions (checked once per
        thread and cache). Anything else goes to the torch step."""
        if input_ids.dtype != torch.long or input_ids.device.type != "cpu" or input_ids.shape != (1, 1) \
                or not input_ids.is_contiguous():
            return False
        return self._pointers(cache) is not None

    def _pointers(self, cache) -> ctypes.Array | None:
        """The pointer array of ``cache``'s key and value buffers (this thread's, remade when the
        cache or its buffers change; weak references, so no cache is kept alive), or None when
        the kernel cannot use them."""
        local = self._local
        tensors = [t for lc in cache.layers for t in (lc.k, lc.v)]
        held = getattr(local, "kv", None)
        if held is not None and len(held[0]) == len(tensors) and all(r() is t for r, t in zip(held[0], tensors)):
            return held[1]
        mask, pos = cache.key_mask, cache.next_position
        L = mask.shape[-1]
        shape = (1, self.heads, L, self.head_dim)
        if (len(cache.layers) != self.step.layers or not all(_usable(t) and t.shape == shape for t in tensors)
                or not _usable(mask, torch.bool) or mask.shape != (1, L) or not _usable(pos, torch.long)
                or pos.shape != (1,)):
            return None
        array = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
        local.kv = (tuple(weakref.ref(t) for t in tensors), array)
        return array

    def _scratch(self, threads: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This thread's scratch (SOURCE's layout: shared, then per thread) and screen output."""
        local = self._local
        need = 6 * self.H + self.step.I + threads * (self.H + self.positions)
        scratch = getattr(local, "scratch", None)
        if scratch is None or scratch.numel() < need:
            local.scratch = scratch = torch.empty(need)
            local.y = torch.empty(self.step.V)
        return scratch, local.y

    def _top_k_buffers(self, threads: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This thread's top-k buffers: heaps ``(threads * 2k,)``, candidate ids and logits
        ``(threads * max_candidates,)`` each (SOURCE's ``call``)."""
        local = self._local
        held = getattr(local, "top_k", None)
        n = threads * self.step.max_candidates
        if held is None or held[0].numel() < threads * 2 * k or held[1].numel() < n:
            local.top_k = held = (torch.empty(threads * 2 * k), torch.empty(n, dtype=torch.long), torch.empty(n))
        return held

    def __call__(self, input_ids: torch.Tensor, cache, threads: int, greedy: bool = False,
                 top_k: int = 0) -> StepOut:
        """Feed ``input_ids (1, 1)`` through ``cache`` (:meth:`accepts` both; the cache gains one
        slot, given back if the step fails). With the screen attached (:meth:`attach_screen`),
        ``greedy`` asks it for the greedy token, ``top_k`` for the tokens that may be among the
        ``top_k`` largest logits and their float32 logits (:meth:`~muppets.nn.decode.GreedyScreen.top_k`'s
        candidates); where it cannot decide, or for a ``top_k`` it does not take (not below the
        vocabulary size or above the candidate limit), those fields are None."""
        threads = max(1, min(threads, MAX_THREADS))
        kv = self._pointers(cache)
        if kv is None:
            raise ValueError("the compiled decoding step cannot use this cache (see GPTStep.accepts)")
        scratch, y = self._scratch(threads)
        k = top_k if not greedy and 0 < top_k < self.step.V and top_k <= self.step.max_candidates else 0
        heaps = ids = logits = None
        if k:
            heaps, ids, logits = self._top_k_buffers(threads, k)
        hidden = torch.empty(1, self.H)  # (1, H)
        end = cache.claim()
        found = -2
        try:
            found = self.lib.muppets_gpt_step(ctypes.byref(self.step), input_ids.data_ptr(),
                                              cache.next_position.data_ptr(), cache.key_mask.data_ptr(), end,
                                              cache.key_mask.shape[1], kv, scratch.data_ptr(), y.data_ptr(),
                                              hidden.data_ptr(), int(greedy or k > 0), threads, k, _ptr(heaps),
                                              _ptr(ids), _ptr(logits))
        finally:
            if found == -2:  # failed before writing anything: give the slot back
                cache.length = end - 1
                for layer in cache.layers:
                    layer.length = end - 1
        if found == -2:
            raise IndexError(f"token {int(input_ids)} is not in the vocabulary of {self.step.V}, or position "
                             f"{int(cache.next_position[0])} not below {self.positions}")
        if found < 0:
            return StepOut(hidden, None, None)
        self.decided += 1
        if k:  # copies: the buffers are this thread's, reused by its next step
            return StepOut(hidden, None, (logits[:found].clone()[None], ids[:found].clone()[None]))
        return StepOut(hidden, found, None)
