/* Matrix products with GGUF weights kept in their blocks (toycards/runtime/quant_kernels.py builds
 * this file with the system C compiler and calls it through ctypes).
 *
 * Buffers, for every entry point (a weight comes as its tc_weight: type, shape, where its bytes are):
 *   W   uint8   [N, row_bytes]  the weight as the file stores it: N rows of K elements, each row
 *                               K / block blocks of the type's bytes (ggml-common.h layouts below),
 *                               or the same blocks packed (tc_pack, for the few-token products)
 *   x   float32 [T, K]          activations, one row per token
 *   y   float32 [T, N]          y[t][n] = Σ_k W[n][k] · x[t][k], W dequantized to float32 exactly
 *                               as gguf.quants does it (products and sums in float32)
 *   out float32 [n_blocks · block]  dequantized blocks
 *
 * Version 1 of the product (the reference) is gguf.quants.dequantize then a float matmul; this is
 * version 2: each thread dequantizes one row into a float buffer on its stack (it stays in L1) and
 * takes its dot product with every token, so the weight's bytes are read once per call (version 2f
 * below reads F32, F16 and BF16 elements in place instead; version 3 quantizes x to int8). The
 * tests (tests/engine/test_quant_kernels.py) tie the two for every type here.
 *
 * Types (d, m, dmin float16; q unsigned unless said):
 *   F16   x = h                      BF16  x = upper half of a float32
 *   Q8_0  d q[32]:int8     x = d·q   Q4_0  d qs[16]   x = d·(q − 8)
 *   Q4_1  d m qs[16]       x = d·q + m
 *   Q5_0  d qh qs[16]      x = d·(q + 16·bit − 16)    Q5_1  d m qh qs[16]  x = d·(q + 16·bit) + m
 *   Q4_K  d dmin sc[12] qs[128]   256 elements, 8 groups of 32 with 6-bit scales and mins
 *   Q5_K  d dmin sc[12] qh[32] qs[128]
 *   Q6_K  ql[128] qh[64] sc[16]:int8 d   16 groups of 16 with int8 scales
 */
#define _DEFAULT_SOURCE /* madvise and sysconf under -std=c11 */
#define _POSIX_C_SOURCE 200112L /* posix_fadvise */
#include <stdint.h>

#include "structs.h"
#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

/* a product reading fewer bytes of weight than this runs on the calling thread: waking the other
 * threads costs more than it saves (a few µs, far more when another process holds a core) */
#define PARALLEL_BYTES (32 * 1024)

/* the most tokens a product takes with the few-token kernels (versions 2f, 3); more take version 4
 * where it exists (quant_kernels.FEW_TOKENS, which tc_limit checks at load) */
#define FEW_TOKENS 8

/* Element-wise glue (a norm's rows, SiLU·up) is spread over the OpenMP threads from this many
 * entries on (a prompt's) */
#define PARALLEL_ROWS 65536

/* Software prefetch: the weight streams of the few-token products ask for their lines this many bytes
 * ahead of use (locality 0, non-temporal where the CPU has it: a weight is read once a step, so it
 * should not push the interpreter's data out of the caches). Whether it pays depends on the host. On
 * one two-core AMD EPYC (Zen 4) the hardware prefetchers alone kept too few lines in flight, and
 * SwiGLU on one token ran ~1.4× faster with it on F32 and Q8_0. On another (decoding steps of one
 * model alternating between builds in one process), SmolLM2-135M decoded 1.10–1.29× slower with it
 * on Q8_0, Q4_1, F16 and F32 and the same on Q4_0, and a Llama-3.2-1B-shaped Q4_K file ~1.5% faster.
 * On a third (a two-core EPYC with AVX-512 VNNI) SmolLM2-135M decoded 1.3–1.5× faster with it on
 * F32 and Q8_0. So the K-quants prefetch, and the other types when tc_set_prefetch(1) says so:
 * quant_kernels.PrefetchChoice times a model's first decoding steps both ways and keeps the faster
 * (TOYCARDS_QUANT_PREFETCH=on or off fixes it instead). */
#ifndef PF_DIST
#define PF_DIST 1536
#endif
static inline void ahead(const void *p, int64_t n) {
    if (PF_DIST)
        for (int64_t j = 0; j < n; j += 64) __builtin_prefetch((const char *)p + PF_DIST + j, 0, 0);
}
static int prefetch_others = 0; /* the types other than the K-quants prefetch too */
void tc_set_prefetch(int on) { prefetch_others = on; }
int tc_prefetch(void) { return prefetch_others; }
static inline void ahead_other(const void *p, int64_t n) {
    if (prefetch_others) ahead(p, n);
}

enum { F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14,
       BF16 = 30 };
/* the block layout of each type whose x is quantized (TYPE a compile-time constant where used) */
#define BLOCK_BYTES(TYPE) (TYPE == Q8_0 ? 34 : TYPE == Q4_0 ? 18 : TYPE == Q4_1 ? 20 : TYPE == Q5_0 ? 22 : 24)
#define HAS_MIN(TYPE) (TYPE == Q4_1 || TYPE == Q5_1)
#define BIAS(TYPE) (TYPE == Q4_0 ? 8.0f : TYPE == Q5_0 ? 16.0f : 0.0f)
/* the types whose packed steps keep their scales apart from their quants (see tc_pack) */
#define SPLIT(TYPE) ((TYPE) == Q4_0 || (TYPE) == Q4_1 || (TYPE) == Q5_0 || (TYPE) == Q5_1 || (TYPE) == Q8_0)
/* the types whose blocks hold fifth bits (a uint32 qh after d, m: bit j for element j) */
#define HAS_QH(TYPE) ((TYPE) == Q5_0 || (TYPE) == Q5_1)
/* whether a packed group's tail (its rows' bytes past their last whole step) is split too: a SPLIT
 * type whose rows end in two blocks past their last step (K mod 256 = 64, as SmolLM2's 576), four
 * rows to a group, so that the tail is 8 blocks, split as one step would be (rows 0 … 3: slots 2r,
 * 2r + 1), and the four rows' tails multiply as one step does */
#define SPLIT_TAIL(TYPE, K) (SPLIT(TYPE) && ROWS == 4 && (K) % 256 == 64)


/* the bytes of 256 elements (a step of the few-token kernels: 8 blocks of a 32-element type, one block
 * of a K-quant) of the types whose x is quantized, 0 for the others */
static inline int64_t step_bytes(int64_t type) {
    switch (type) {
    case Q8_0: return 8 * 34;
    case Q4_0: return 8 * 18;
    case Q4_1: return 8 * 20;
    case Q5_0: return 8 * 22;
    case Q5_1: return 8 * 24;
    case Q4_K: return 144;
    case Q5_K: return 176;
    case Q6_K: return 210;
    default: return 0;
    }
}

#ifdef __F16C__
static inline float f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
#else
static inline float f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF, bits;
    if (e == 0x1F) {
        bits = sign | 0x7F800000u | (m << 13);
    } else if (e != 0) {
        bits = sign | ((e + 112) << 23) | (m << 13);
    } else if (m == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400)) { m <<= 1; e--; }
        bits = sign | (e << 23) | ((m & 0x3FF) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
#endif

#ifdef __F16C__
static void row_f16(const uint8_t *b, float *y, int64_t k) {
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 2 * i))));
    for (; i < k; i++) y[i] = f16(b + 2 * i);
}
#else
static void row_f16(const uint8_t *b, float *y, int64_t k) {
    for (int64_t i = 0; i < k; i++) y[i] = f16(b + 2 * i);
}
#endif

static void row_bf16(const uint8_t *b, float *y, int64_t k) {
    const uint16_t *h = (const uint16_t *)b;
    uint32_t *u = (uint32_t *)y;
    for (int64_t i = 0; i < k; i++) u[i] = (uint32_t)h[i] << 16;
}

static void row_q8_0(const uint8_t *b, float *y, int64_t k) {
    for (int64_t s = 0; s < k; s += 32, b += 34) {
        const float d = f16(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) y[s + j] = (float)q[j] * d;
    }
}

static void row_q4_0(const uint8_t *b, float *y, int64_t k) {
    for (int64_t s = 0; s < k; s += 32, b += 18) {
        const float d = f16(b);
        const uint8_t *q = b + 2;
        for (int j = 0; j < 16; j++) {
            y[s + j] = (float)((int)(q[j] & 0x0F) - 8) * d;
            y[s + j + 16] = (float)((int)(q[j] >> 4) - 8) * d;
        }
    }
}

static void row_q4_1(const uint8_t *b, float *y, int64_t k) {
    for (int64_t s = 0; s < k; s += 32, b += 20) {
        const float d = f16(b), m = f16(b + 2);
        const uint8_t *q = b + 4;
        for (int j = 0; j < 16; j++) {
            y[s + j] = (float)(q[j] & 0x0F) * d + m;
            y[s + j + 16] = (float)(q[j] >> 4) * d + m;
        }
    }
}

static void row_q5(const uint8_t *b, float *y, int64_t k, int with_min) {
    const int size = with_min ? 24 : 22;
    for (int64_t s = 0; s < k; s += 32, b += size) {
        const float d = f16(b), m = with_min ? f16(b + 2) : 0.0f;
        uint32_t qh;
        memcpy(&qh, b + (with_min ? 4 : 2), 4);
        const uint8_t *q = b + (with_min ? 8 : 6);
        const int offset = with_min ? 0 : 16;
        for (int j = 0; j < 16; j++) {
            const int lo = (q[j] & 0x0F) | (((qh >> j) & 1) << 4);
            const int hi = (q[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            if (with_min) {
                y[s + j] = (float)lo * d + m;
                y[s + j + 16] = (float)hi * d + m;
            } else {
                y[s + j] = (float)(lo - offset) * d;
                y[s + j + 16] = (float)(hi - offset) * d;
            }
        }
    }
}

static void row_q5_0(const uint8_t *b, float *y, int64_t k) { row_q5(b, y, k, 0); }
static void row_q5_1(const uint8_t *b, float *y, int64_t k) { row_q5(b, y, k, 1); }

/* the 6-bit scale and min of group j (0…7) of a Q4_K / Q5_K block */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void row_q4_k(const uint8_t *b, float *y, int64_t k) {
    for (int64_t s = 0; s < k; s += 256, b += 144) {
        const float d = f16(b), dmin = f16(b + 2);
        const uint8_t *scales = b + 4, *q = b + 16;
        float *out = y + s;
        for (int j = 0; j < 8; j += 2, q += 32, out += 64) {
            int sc1, m1, sc2, m2;
            scale_min_k4(j, scales, &sc1, &m1);
            scale_min_k4(j + 1, scales, &sc2, &m2);
            const float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
            const float d2 = d * (float)sc2, mm2 = dmin * (float)m2;
            for (int l = 0; l < 32; l++) {
                out[l] = d1 * (float)(q[l] & 0xF) - mm1;
                out[l + 32] = d2 * (float)(q[l] >> 4) - mm2;
            }
        }
    }
}

static void row_q5_k(const uint8_t *b, float *y, int64_t k) {
    for (int64_t s = 0; s < k; s += 256, b += 176) {
        const float d = f16(b), dmin = f16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *q = b + 48;
        float *out = y + s;
        for (int j = 0; j < 8; j += 2, q += 32, out += 64) {
            int sc1, m1, sc2, m2;
            scale_min_k4(j, scales, &sc1, &m1);
            scale_min_k4(j + 1, scales, &sc2, &m2);
            const float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
            const float d2 = d * (float)sc2, mm2 = dmin * (float)m2;
            const uint8_t u1 = (uint8_t)(1u << j), u2 = (uint8_t)(2u << j);
            for (int l = 0; l < 32; l++) {
                out[l] = d1 * (float)((q[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - mm1;
                out[l + 32] = d2 * (float)((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - mm2;
            }
        }
    }
}

#if defined(__AVX2__)
static inline __m256i low_nibbles32(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
static inline __m256i high_nibbles32(__m256i v) {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}

/* the four chunks of 32 six-bit quants (0…63) of half a Q6_K block: low nibbles from ql [64], two
 * high bits each from qh [32] */
static inline void q6_chunks(const uint8_t *ql, const uint8_t *qh, __m256i q[4]) {
    const __m256i three = _mm256_set1_epi8(3);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    q[0] = _mm256_or_si256(low_nibbles32(l0), _mm256_slli_epi16(_mm256_and_si256(h, three), 4));
    q[1] = _mm256_or_si256(low_nibbles32(l1), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), three), 4));
    q[2] = _mm256_or_si256(high_nibbles32(l0), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), three), 4));
    q[3] = _mm256_or_si256(high_nibbles32(l1), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), three), 4));
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* AVX-512: half a block (128 elements) a step, its four chunks of 32 from q6_chunks, each chunk's two
 * groups of 16 widened to floats and multiplied by (d · scale) as the scalar loop below does */
static void row_q6_k(const uint8_t *b, float *y, int64_t k) {
    const __m256i bias = _mm256_set1_epi8(32);
    for (int64_t s = 0; s < k; s += 256, b += 210) {
        const float d = f16(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < 2; n++) {
            __m256i q[4];
            q6_chunks(b + 64 * n, b + 128 + 32 * n, q);
            float *out = y + s + 128 * n;
            for (int c = 0; c < 4; c++) { /* elements 32c … 32c + 31: scales sc[2c] and sc[2c + 1] */
                const __m256i v = _mm256_sub_epi8(q[c], bias);
                const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v)));
                const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1)));
                _mm512_storeu_ps(out + 32 * c, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[8 * n + 2 * c]), lo));
                _mm512_storeu_ps(out + 32 * c + 16,
                                 _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[8 * n + 2 * c + 1]), hi));
            }
        }
    }
}
#else
static void row_q6_k(const uint8_t *b, float *y, int64_t k) {
    for (int64_t s = 0; s < k; s += 256, b += 210) {
        const float d = f16(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float *out = y + s;
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, out += 128)
            for (int is = 0; is < 2; is++) { /* elements l = 16·is … 16·is + 15 share their 4 scales */
                const float s1 = d * (float)sc[is], s2 = d * (float)sc[is + 2];
                const float s3 = d * (float)sc[is + 4], s4 = d * (float)sc[is + 6];
                for (int l = 16 * is; l < 16 * is + 16; l++) { /* (d · scale) · q, as gguf.quants */
                    const int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    out[l] = s1 * (float)q1;
                    out[l + 32] = s2 * (float)q2;
                    out[l + 64] = s3 * (float)q3;
                    out[l + 96] = s4 * (float)q4;
                }
            }
    }
}
#endif

typedef void (*row_fn)(const uint8_t *, float *, int64_t);

static row_fn row_kernel(int type) {
    switch (type) {
    case F16: return row_f16;
    case BF16: return row_bf16;
    case Q8_0: return row_q8_0;
    case Q4_0: return row_q4_0;
    case Q4_1: return row_q4_1;
    case Q5_0: return row_q5_0;
    case Q5_1: return row_q5_1;
    case Q4_K: return row_q4_k;
    case Q5_K: return row_q5_k;
    case Q6_K: return row_q6_k;
    default: return 0;
    }
}

/* 1 when `type` has a kernel here */
int tc_supported(int type) { return row_kernel(type) != 0; }

/* *buf with room for `bytes`: a thread's scratch buffer, grown as needed and kept from call to call
 * (no malloc per product); NULL when out of memory */
static void *grown(void **buf, int64_t *cap, int64_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        *buf = malloc((size_t)bytes);
        *cap = *buf ? bytes : 0;
    }
    return *buf;
}

static _Thread_local void *scratch_row, *scratch_bytes;
static _Thread_local int64_t scratch_row_cap, scratch_bytes_cap;

/* ── version 3, for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants on CPUs with AVX2: integer dot products, as llama.cpp does ──
 * x is quantized per block of 32 to int8 first (qx = round(x / dx), dx = max|x| / 127, dx kept in
 * float32), so a block's dot product is one integer sum:
 *   Q8_0  Σ w·x ≈ dw·dx·Σ q·qx          Q4_0  dw·dx·(Σ q·qx − 8·Σ qx)     Q4_1  dw·dx·Σ q·qx + m·dx·Σ qx
 *   Q5_0  dw·dx·(Σ q·qx − 16·Σ qx)      Q5_1  dw·dx·Σ q·qx + m·dx·Σ qx    (q: nibble + 16·fifth bit)
 * The tests hold this to dequantize(W) · dequantize(quantize(x)) within float32 rounding, and the
 * logits it gives to llama.cpp's own deviation from exact arithmetic (which quantizes x the same way).
 * Buffers: qx int8 [T, K], dx float32 [T, K/32], sx float32 [T, K/32] (dx · Σ qx of the block).
 * (F16C too: the packed kernels widen eight rows' float16 scales at once; every AVX2 CPU has it.)
 */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>
#define HAVE_INT8_DOT 1

/* the calling thread's buffers for quantized x, grown as needed and kept (no malloc per product) */
static _Thread_local void *scratch_q, *scratch_f;
static _Thread_local int64_t scratch_q_cap, scratch_f_cap;

static int scratch_x(int64_t n_q, int64_t n_blocks, int8_t **qx, float **dx, float **sx) {
    *qx = (int8_t *)grown(&scratch_q, &scratch_q_cap, n_q);
    *dx = (float *)grown(&scratch_f, &scratch_f_cap, (int64_t)sizeof(float) * 2 * n_blocks);
    if (!*qx || !*dx) return 0;
    *sx = *dx + n_blocks;
    return 1;
}

/* x [n_blocks · 32] → qx = round(x / dx) (halves away from zero), dx = max|x| / 127 over each run of
 * `span` blocks (1: a block's own; 8: the 256 elements of a K-quant block, as llama.cpp's q8_K
 * blocks, see gemm_tokens_k), given for every block, and sx = dx · Σ qx per block; a run holding
 * NaN gets dx = sx = NaN in each of its blocks, so that the products stay NaN. n_blocks is a
 * multiple of span. */
static inline __attribute__((always_inline)) void quantize_x_runs(const float *x, int64_t n_blocks, const int span,
                                                                  int8_t *qx, float *dx, float *sx) {
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f);
    for (int64_t b0 = 0; b0 < n_blocks; b0 += span, x += 32 * span, qx += 32 * span) {
        __m256 amax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
        for (int k = 0; k < 4 * span; k++) {
            const __m256 v = _mm256_loadu_ps(x + 8 * k);
            amax = _mm256_max_ps(_mm256_andnot_ps(sign, v), amax);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float d = _mm_cvtss_f32(m) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        if (_mm256_movemask_ps(nan)) {
            memset(qx, 0, (size_t)(32 * span));
            for (int i = 0; i < span; i++) dx[b0 + i] = sx[b0 + i] = NAN;
            continue;
        }
        const __m256 ids = _mm256_set1_ps(id);
        for (int i = 0; i < span; i++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * i + 8 * k), ids);
                const __m256 r = _mm256_round_ps(_mm256_add_ps(t, _mm256_or_ps(_mm256_and_ps(t, sign), half)),
                                                 _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
                q[k] = _mm256_cvttps_epi32(r);
            }
            const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
            /* int32 → int8 in order: packs interleave the 128-bit lanes, the permute puts them back */
            const __m256i a = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8); /* 16 × int16 */
            const __m256i c = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xD8);
            const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(a, c), 0xD8);
            _mm256_storeu_si256((__m256i *)(qx + 32 * i), bytes);
            dx[b0 + i] = d;
            sx[b0 + i] = d * (float)_mm_cvtsi128_si32(s4);
        }
    }
}

/* x [n_blocks · 32] → qx, each block its own dx (quantize_x_runs) */
static void quantize_x(const float *x, int64_t n_blocks, int8_t *qx, float *dx, float *sx) {
    quantize_x_runs(x, n_blocks, 1, qx, dx, sx);
}

/* the same with runs of 8 blocks (256 elements) sharing their dx (Q4_K's int8 GEMM on AVX2) */
static void quantize_x_256(const float *x, int64_t n_blocks, int8_t *qx, float *dx, float *sx) {
    quantize_x_runs(x, n_blocks, 8, qx, dx, sx);
}

/* Σ over 32 lanes of u[j]·s[j] (u unsigned bytes, s signed), as 8 int32 partial sums */
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

static inline float hsum(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline __m256i nibbles(const uint8_t *qs) { /* low nibbles: elements 0…15, high: 16…31 */
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

static inline __m256i fifth_bits(const uint8_t *qh) { /* byte j: 16 when bit j of the uint32 qh is set */
    uint32_t v;
    memcpy(&v, qh, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)v), spread), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(0x10));
}


/* the unsigned quants of a Q4_* / Q5_* block, elements 0…31 */
static inline __m256i unsigned_quants(int type, const uint8_t *w) {
    switch (type) {
    case Q4_0: return nibbles(w + 2);
    case Q4_1: return nibbles(w + 4);
    case Q5_0: return _mm256_or_si256(nibbles(w + 6), fifth_bits(w + 2));
    default: return _mm256_or_si256(nibbles(w + 8), fifth_bits(w + 4)); /* Q5_1 */
    }
}

/* what the block adds besides d·dx·Σ q·qx: −bias·d·dx·Σ qx, or m·dx·Σ qx */
static inline float block_extra(int type, const uint8_t *w, float d, float s) {
    return HAS_MIN(type) ? f16(w + 2) * s : -BIAS(type) * d * s;
}

/* one block's Σ q·qx as 8 int32 partial sums (256 bits: the AVX2 path, and AVX-512's odd last block) */
static inline __m256i block_products(int type, const uint8_t *w, __m256i y) {
    if (type == Q8_0) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w + 2));
        return dot_u8s8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
    }
    return dot_u8s8(unsigned_quants(type, w), y);
}

/* one row's dot product with one token, for each type (TYPE is a compile-time constant) */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
/* two blocks per 512-bit step, two accumulators (the FMA latency, not its throughput, bounds one) */
static inline __m512i pair512(__m256i a, __m256i b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

static inline __m512 scales512(float s0, float s1) {
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

static inline __m512 lanes_of(__m256 v, int j, int k) { /* lanes 0…7: v[j], lanes 8…15: v[k] */
    const __m512i idx = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(j), _mm512_set1_epi32(k));
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v));
}

static inline __m512 halves_of(__m256 v, int j) { /* lanes 0…7: v[j], lanes 8…15: v[j + 1] */
    return lanes_of(v, j, j + 1);
}

/* the unsigned quants of two consecutive Q4_* / Q5_* blocks (w, w + bs), elements 0…31 of each; a
 * Q5 block's fifth bits (bit j: element j) become a byte mask for both blocks at once */
static inline __m512i unsigned_pair512(int type, const uint8_t *w, int bs) {
    if (type != Q5_0 && type != Q5_1) return pair512(unsigned_quants(type, w), unsigned_quants(type, w + bs));
    const int qh = type == Q5_0 ? 2 : 4, qs = qh + 4;
    uint32_t h0, h1;
    memcpy(&h0, w + qh, 4), memcpy(&h1, w + bs + qh, 4);
    const __m512i u = pair512(nibbles(w + qs), nibbles(w + bs + qs));
    return _mm512_mask_add_epi8(u, _cvtu64_mask64((uint64_t)h0 | (uint64_t)h1 << 32), u, _mm512_set1_epi8(16));
}

/* Σ q·y of 64 signed quants q (two Q8_0 blocks) against x blocks y, 8 int32 partial sums a block */
static inline __m512i signed_products(__m512i q, __m512i y) {
    const __m512i sy = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(q), _mm512_setzero_si512(), y);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(q), sy);
}

/* one pair of blocks' Σ q·qx (w and w + bs, against x blocks y), 8 int32 partial sums each */
static inline __m512i pair_products(int type, const uint8_t *w, int bs, __m512i y) {
    if (type == Q8_0)
        return signed_products(pair512(_mm256_loadu_si256((const __m256i *)(w + 2)),
                                       _mm256_loadu_si256((const __m256i *)(w + bs + 2))), y);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), unsigned_pair512(type, w, bs), y);
}

/* −128 · Σ of each 4 bytes of x blocks y (a lane each, as vpdpbusd sums them): what a packed Q8_0
 * step's quants, stored plus 128 (see tc_pack), add to Σ q·qx, to start its sums from */
static inline __m512i minus_128_sums(__m512i y) {
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                                         _mm512_set1_epi8((char)0x80), y));
}

/* a packed step of a SPLIT type (see tc_pack) against its four pairs of x blocks ys: p[j] = Σ q·qx
 * of blocks 2j and 2j + 1; *d = the eight blocks' scales, *m = their mins (Q4_1, Q5_1). Q8_0's
 * quants are stored plus 128 (unsigned, one vpdpbusd a pair), its sums started from base[j] =
 * minus_128_sums(ys[j]): the same integers as signed_products gives the file's quants. */
static inline void split_products(int type, const uint8_t *wr, const __m512i ys[4], const __m512i base[4],
                                  __m512i p[4], __m256 *d, __m256 *m) {
    *d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wr));
    if (HAS_MIN(type)) *m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wr + 16)));
    const uint8_t *q = wr + (HAS_MIN(type) ? 32 : 16), *qh = q;
    if (type == Q8_0) {
        for (int j = 0; j < 4; j++) p[j] = _mm512_dpbusd_epi32(base[j], _mm512_loadu_si512((const void *)(q + 64 * j)), ys[j]);
        return;
    }
    if (HAS_QH(type)) q += 32;
    const __m512i low4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    for (int h = 0; h < 2; h++) { /* byte i: element i of blocks 4h, 4h + 1 (low nibble), of 4h + 2, 4h + 3 (high) */
        const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * h));
        __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        if (HAS_QH(type)) { /* the fifth bits of those blocks: their qh side by side, 64 bits a pair */
            uint64_t b0, b1;
            memcpy(&b0, qh + 16 * h, 8), memcpy(&b1, qh + 16 * h + 8, 8);
            lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(b0), lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(b1), hi, sixteen);
        }
        p[2 * h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, ys[2 * h]);
        p[2 * h + 1] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, ys[2 * h + 1]);
    }
}

/* the float16 at p, p + stride, …, p + 7·stride (eight blocks' d, or m) as eight floats */
static inline __m256 f16x8(const uint8_t *p, int stride) {
    uint16_t h[8];
    for (int j = 0; j < 8; j++) memcpy(&h[j], p + j * stride, 2);
    return _mm256_cvtph_ps(_mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3], (short)h[4],
                                          (short)h[5], (short)h[6], (short)h[7]));
}

/* a step's x: its eight int8 blocks of 32 (256 elements), two blocks a vector */
static inline void x_step(const int8_t *q, __m512i y[4]) {
    for (int j = 0; j < 4; j++) y[j] = _mm512_loadu_si512((const void *)(q + 64 * j));
}

/* R rows at once against one token (R = ROWS for a packed weight's groups, else 1): the x blocks and
 * their scales are loaded once for all R rows, whose sums stay independent. Row r's blocks 8s … 8s + 7
 * are at w + r·rs + s·ss, its last n_blocks mod 8 blocks at tw + r·ts (a weight as stored: rs = ts =
 * row_bytes, ss = 8 blocks; packed: see tc_pack), or, for a packed group with a split tail
 * (SPLIT_TAIL), the group's 8 tail blocks as one split step at tw. Eight blocks per step: their
 * scales d and the x blocks' dx as one vector product, spread to each pair's two halves by a
 * permute; the bias or min part, Σ d·sx or Σ m·sx, as one vector FMA (a block's scalar scale
 * arithmetic cost as much as its 32 products). Then the last pairs, then an odd last block in 256
 * bits. Two accumulators a row: the FMA
 * latency, not its throughput, bounds one. A row's sum does not depend on R or on the layout. */
#define ROWS 4
static inline __attribute__((always_inline)) void dot_rows(const int type, const int R, const uint8_t *w,
                                                           int64_t rs, int64_t ss, const uint8_t *tw, int64_t ts,
                                                           int64_t n_blocks, const int8_t *qx, const float *dx,
                                                           const float *sx, float *y) {
    const int bs = BLOCK_BYTES(type);
    __m512 acc0[ROWS], acc1[ROWS];
    __m256 accx[ROWS]; /* Σ d·sx (Q4_0, Q5_0) or Σ m·sx (Q4_1, Q5_1) */
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps(), accx[r] = _mm256_setzero_ps();
    const int64_t steps = n_blocks / 8;
    for (int64_t st = 0; st < steps; st++) {
        const int64_t b = 8 * st;
        const __m256 dxv = _mm256_loadu_ps(dx + b), sxv = _mm256_loadu_ps(sx + b);
        __m512i ys[4], base[4];
        x_step(qx + 32 * b, ys);
        if (R == ROWS && type == Q8_0)
            for (int j = 0; j < 4; j++) base[j] = minus_128_sums(ys[j]);
        ahead_other(w + st * ss, ss);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *wr = w + r * rs + st * ss;
            __m512i p[4];
            __m256 d, m = _mm256_setzero_ps();
            if (R == ROWS && SPLIT(type)) { /* a packed group's step: scales apart from the quants */
                split_products(type, wr, ys, base, p, &d, &m);
            } else {
                d = f16x8(wr, bs);
                if (HAS_MIN(type)) m = f16x8(wr + 2, bs);
                for (int j = 0; j < 4; j++) p[j] = pair_products(type, wr + 2 * j * bs, bs, ys[j]);
            }
            const __m256 s = _mm256_mul_ps(d, dxv);
            if (type != Q8_0) accx[r] = _mm256_fmadd_ps(HAS_MIN(type) ? m : d, sxv, accx[r]);
            acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[0]), halves_of(s, 0), acc0[r]);
            acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[1]), halves_of(s, 2), acc1[r]);
            acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[2]), halves_of(s, 4), acc0[r]);
            acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[3]), halves_of(s, 6), acc1[r]);
        }
    }
    float split_extra[ROWS]; /* a packed group's two-block tail as one split step (see tc_pack) */
    const int split_tail = R == ROWS && SPLIT_TAIL(type, 32 * n_blocks);
    if (split_tail) {
        const int64_t c = 8 * steps;
        const __m512i xt = _mm512_loadu_si512((const void *)(qx + 32 * c)), ys[4] = {xt, xt, xt, xt};
        const __m512i bt = type == Q8_0 ? minus_128_sums(xt) : _mm512_setzero_si512(), base[4] = {bt, bt, bt, bt};
        __m512i p[4];
        __m256 d, m;
        split_products(type, tw, ys, base, p, &d, &m); /* p[r]: row r's two tail blocks */
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const float d0 = f16(tw + 4 * r), d1 = f16(tw + 4 * r + 2);
            /* each block's part as block_extra gives it, a statement each (no contraction across the
             * two: the sum stays the unpacked path's, whatever the compiler fuses) */
            const float e0 = HAS_MIN(type) ? f16(tw + 16 + 4 * r) * sx[c] : -BIAS(type) * d0 * sx[c];
            const float e1 = HAS_MIN(type) ? f16(tw + 18 + 4 * r) * sx[c + 1] : -BIAS(type) * d1 * sx[c + 1];
            split_extra[r] = type == Q8_0 ? 0.0f : e0 + e1;
            acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[r]), scales512(d0 * dx[c], d1 * dx[c + 1]), acc0[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const uint8_t *wr = tw + r * ts;
        const int8_t *q = qx + 32 * 8 * steps;
        float extra = 0.0f, tail = 0.0f;
        if (split_tail) extra += split_extra[r]; /* as the pair loop below adds a pair's part */
        int64_t c = split_tail ? n_blocks : 8 * steps;
        for (; c + 2 <= n_blocks; c += 2, wr += 2 * bs, q += 64) {
            const float d0 = f16(wr), d1 = f16(wr + bs);
            const __m512i p = pair_products(type, wr, bs, _mm512_loadu_si512((const void *)q));
            if (type != Q8_0) extra += block_extra(type, wr, d0, sx[c]) + block_extra(type, wr + bs, d1, sx[c + 1]);
            acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales512(d0 * dx[c], d1 * dx[c + 1]), acc0[r]);
        }
        for (; c < n_blocks; c++, wr += bs, q += 32) { /* an odd last block: 256 bits */
            const float d = f16(wr);
            const __m256i p = block_products(type, wr, _mm256_loadu_si256((const __m256i *)q));
            if (type != Q8_0) extra += block_extra(type, wr, d, sx[c]);
            tail += hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * dx[c])));
        }
        const float vx = type == Q8_0 ? 0.0f : (HAS_MIN(type) ? 1.0f : -BIAS(type)) * hsum(accx[r]);
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])) + tail + (extra + vx);
    }
}

/* y[r] for r < R: R = ROWS for a packed group, else one row (see dot_rows for the strides) */
#define DOT_ROWS(NAME, TYPE)                                                                           \
    static void NAME(const uint8_t *w, int64_t rs, int64_t ss, const uint8_t *tw, int64_t ts, int R,  \
                     int64_t n_blocks, const int8_t *qx, const float *dx, const float *sx, float *y) { \
        if (R == ROWS)                                                                                 \
            dot_rows(TYPE, ROWS, w, rs, ss, tw, ts, n_blocks, qx, dx, sx, y);                          \
        else                                                                                           \
            for (int r = 0; r < R; r++)                                                                \
                dot_rows(TYPE, 1, w + r * rs, rs, ss, tw + r * ts, ts, n_blocks, qx, dx, sx, y + r);   \
    }
#else
/* AVX2 (no 512-bit registers): a weight as stored is multiplied one row at a time (DOT_ROW: four rows
 * at once, each from its own stream, ran 1.0-1.3x slower on a Zen 1). A packed weight of Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K (LANES, see tc_pack; the K-quants' kernels are with theirs below)
 * holds its rows in groups of eight with their blocks interleaved four bytes at a time, so that one
 * 256-bit vector holds the same four quants of eight rows, a row a lane:
 * the four x values they multiply are one broadcast, a block's integer sums of eight rows come out in
 * one vector with no horizontal sum, and its eight scales are one load. Q4: the eight maddubs of a
 * block add up in int16 (at most 8 · 2 · 15 · 127 = 30480) before one widening; Q8_0 (quants −128 …
 * 127 through the sign trick, pairs up to 2 · 128 · 127) widens each. On a Zen 1 core, from cache:
 * 2.7x (Q4_0), 2.2x (Q4_1), 2.0x (Q5_0, Q5_1) and 1.8x (Q8_0) the one-row speed (Q4_K 1.8x, Q6_K
 * 1.5x; Q5_K 1.75x, an 8192 × 2048 product on two threads). */
#define ROWS 8
#define LANES 1
#define LANE_TYPE(TYPE) ((TYPE) == Q4_0 || (TYPE) == Q4_1 || (TYPE) == Q5_0 || (TYPE) == Q5_1 || (TYPE) == Q8_0 || \
                         (TYPE) == Q4_K || (TYPE) == Q5_K || (TYPE) == Q6_K)
/* byte i of each 32-bit lane: 16 where bit `shift` + i of the lane's word w is set, else 0 (i < 4) */
static inline __m256i fifth_bits_of_lanes(__m256i w, int shift) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
                                            0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m256i bit = _mm256_set1_epi32(0x08040201);
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_srl_epi32(w, _mm_cvtsi32_si128(shift)), spread), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(0x10));
}
/* 8 rows of 8 int32 each (rows[r], a row stride apart) transposed into out [8][8]: out[i][r] = rows[r][i] */
static inline void transpose_rows(const uint8_t *rows, int64_t stride, uint8_t *out) {
    __m256i a[8], t[8];
    for (int r = 0; r < 8; r++) a[r] = _mm256_loadu_si256((const __m256i *)(rows + r * stride));
    for (int r = 0; r < 8; r += 2) { /* words i, i + 1 (i = 0, 2 of each 128-bit half) of rows r, r + 1 */
        t[r] = _mm256_unpacklo_epi32(a[r], a[r + 1]);
        t[r + 1] = _mm256_unpackhi_epi32(a[r], a[r + 1]);
    }
    for (int r = 0; r < 8; r += 4) /* rows r … r + 3: words 0 and 4, 1 and 5, 2 and 6, 3 and 7 */
        for (int k = 0; k < 2; k++) {
            a[r + 2 * k] = _mm256_unpacklo_epi64(t[r + k], t[r + 2 + k]);
            a[r + 2 * k + 1] = _mm256_unpackhi_epi64(t[r + k], t[r + 2 + k]);
        }
    for (int i = 0; i < 4; i++) { /* the halves: word i of the eight rows, then word i + 4 */
        _mm256_storeu_si256((__m256i *)(out + 32 * i), _mm256_permute2x128_si256(a[i], a[4 + i], 0x20));
        _mm256_storeu_si256((__m256i *)(out + 32 * (i + 4)), _mm256_permute2x128_si256(a[i], a[4 + i], 0x31));
    }
}

static inline __attribute__((always_inline)) void dot_lanes(const int type, const uint8_t *g, int64_t n_blocks,
                                                            const int8_t *qx, const float *dx, const float *sx,
                                                            float *y) {
    const int64_t gb = 8 * BLOCK_BYTES(type), hb = HAS_MIN(type) ? 4 : 2; /* a group's block; its d (and m) */
    const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; b++, g += gb, qx += 32) {
        const uint8_t *q = g + 8 * hb;
        __m256i sum;
        if (type == Q8_0) { /* chunk c: elements 4c … 4c + 3 of the eight rows */
            __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
            for (int c = 0; c < 8; c += 2) {
                int32_t x0, x1;
                memcpy(&x0, qx + 4 * c, 4), memcpy(&x1, qx + 4 * c + 4, 4);
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(q + 32 * c));
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(q + 32 * c + 32));
                const __m256i p0 = _mm256_maddubs_epi16(_mm256_sign_epi8(v0, v0), _mm256_sign_epi8(_mm256_set1_epi32(x0), v0));
                const __m256i p1 = _mm256_maddubs_epi16(_mm256_sign_epi8(v1, v1), _mm256_sign_epi8(_mm256_set1_epi32(x1), v1));
                s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, ones));
                s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, ones));
            }
            sum = _mm256_add_epi32(s0, s1);
        } else if (HAS_QH(type)) { /* Q5: the rows' qh words, then chunk j of their quants (as below); a
                                    * quant's fifth bit (16) from bit 4j + i or 16 + 4j + i of its row's
                                    * word; two chunks' products (at most 4 · 2 · 31 · 127 = 31496) a widening */
            const __m256i H = _mm256_loadu_si256((const __m256i *)q);
            __m256i s32 = _mm256_setzero_si256();
            for (int j = 0; j < 4; j += 2) {
                __m256i s16 = _mm256_setzero_si256();
                for (int u = j; u < j + 2; u++) {
                    int32_t xl, xh;
                    memcpy(&xl, qx + 4 * u, 4), memcpy(&xh, qx + 16 + 4 * u, 4);
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 + 32 * u));
                    const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, low), fifth_bits_of_lanes(H, 4 * u));
                    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low),
                                                       fifth_bits_of_lanes(H, 16 + 4 * u));
                    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo, _mm256_set1_epi32(xl)));
                    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi, _mm256_set1_epi32(xh)));
                }
                s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(s16, ones));
            }
            sum = s32;
        } else { /* chunk j: bytes 4j … 4j + 3 of the rows' quants: elements 4j + i (low), 16 + 4j + i (high) */
            __m256i s16 = _mm256_setzero_si256();
            for (int j = 0; j < 4; j++) {
                int32_t xl, xh;
                memcpy(&xl, qx + 4 * j, 4), memcpy(&xh, qx + 16 + 4 * j, 4);
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * j));
                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(v, low), _mm256_set1_epi32(xl)));
                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), low),
                                                                 _mm256_set1_epi32(xh)));
            }
            sum = _mm256_madd_epi16(s16, ones);
        }
        const __m256 p = _mm256_cvtepi32_ps(sum), d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        if (HAS_MIN(type)) { /* d·dx·Σ q·qx + m·sx */
            acc = _mm256_fmadd_ps(d, _mm256_mul_ps(p, _mm256_set1_ps(dx[b])), acc);
            acc_m = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16))), _mm256_set1_ps(sx[b]), acc_m);
        } else { /* d·(dx·Σ q·qx − bias·sx) */
            acc = _mm256_fmadd_ps(d, _mm256_fmadd_ps(p, _mm256_set1_ps(dx[b]), _mm256_set1_ps(-BIAS(type) * sx[b])), acc);
        }
    }
    _mm256_storeu_ps(y, _mm256_add_ps(acc, acc_m));
}
static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}
/* One row as stored: a block's integer sum whole and then the float steps of its lane in dot_lanes,
 * in the same order (a row's sum does not depend on the layout: a packed weight's products equal the
 * stored one's to the bit). */
#define DOT_ROW(NAME, TYPE)                                                                            \
    static float NAME##_one(const uint8_t *w, int64_t n_blocks, const int8_t *qx, const float *dx,    \
                            const float *sx) {                                                         \
        float sum = 0.0f, sum_m = 0.0f;                                                                \
        for (int64_t b = 0; b < n_blocks; b++, qx += 32, w += BLOCK_BYTES(TYPE)) {                     \
            const float d = f16(w);                                                                    \
            const float ps = (float)hsum_epi32(block_products(TYPE, w, _mm256_loadu_si256((const __m256i *)qx))); \
            if (HAS_MIN(TYPE))                                                                         \
                sum = fmaf(d, ps * dx[b], sum), sum_m = fmaf(f16(w + 2), sx[b], sum_m);                \
            else                                                                                       \
                sum = fmaf(d, fmaf(ps, dx[b], -BIAS(TYPE) * sx[b]), sum);                              \
        }                                                                                              \
        return sum + sum_m;                                                                            \
    }
/* the rows interface (as DOT_ROWS) of a type packed in lanes: a packed group's eight rows at
 * once by LANES_CALL (R = ROWS), else R rows as stored one at a time by ONE */
#define LANE_ROWS(NAME, ONE, LANES_CALL)                                                               \
    static void NAME(const uint8_t *w, int64_t rs, int64_t ss, const uint8_t *tw, int64_t ts, int R,  \
                     int64_t n_blocks, const int8_t *qx, const float *dx, const float *sx, float *y) { \
        (void)ss, (void)tw, (void)ts;                                                                  \
        if (R == ROWS)                                                                                 \
            LANES_CALL;                                                                                \
        else                                                                                           \
            for (int r = 0; r < R; r++) y[r] = ONE(w + r * rs, n_blocks, qx, dx, sx);                  \
    }
#define DOT_ROWS(NAME, TYPE) DOT_ROW(NAME, TYPE) LANE_ROWS(NAME, NAME##_one, dot_lanes(TYPE, w, n_blocks, qx, dx, sx, y))
#endif
DOT_ROWS(dot_q8_0, Q8_0)
DOT_ROWS(dot_q4_0, Q4_0)
DOT_ROWS(dot_q4_1, Q4_1)
DOT_ROWS(dot_q5_0, Q5_0)
DOT_ROWS(dot_q5_1, Q5_1)

typedef void (*rows_fn)(const uint8_t *, int64_t, int64_t, const uint8_t *, int64_t, int, int64_t, const int8_t *,
                        const float *, const float *, float *);


/* The K-quants against x in int8 blocks of 32 (finer than llama.cpp's q8_K blocks of 256, so no
 * less exact): a Q4_K / Q5_K sub-block of 32 is one x block,
 *   Σ w·x ≈ d·sc_j·dx·Σ q·qx − dmin·m_j·dx·Σ qx
 * and a Q6_K chunk of 32 (two groups of 16 with their own int8 scales) is one x block,
 *   Σ w·x ≈ d·dx·(sc_a·Σ_{first 16} (q − 32)·qx + sc_b·Σ_{last 16} (q − 32)·qx). */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
/* AVX-512: two sub-blocks of 32 (one x block each) per 512-bit step, their scales d·sc_j·dx as one
 * vector per weight block (8 lanes) spread to the step's two halves by a permute, the mins' part
 * dmin·Σ_j m_j·sx_j as a vector FMA per weight block; two accumulators. A step's quants are read 64
 * bytes at a time: their low nibbles are sub-blocks 4i and 4i + 2, their high nibbles 4i + 1 and
 * 4i + 3, against x blocks paired the same way once a step for the R rows (one load, two masks and a
 * shift for 128 quants, where 32 bytes at a time took two loads, two shifts, two inserts and two
 * masks). */
/* the eight 6-bit scales and mins of a Q4_K / Q5_K block (its 12 bytes q) as floats, computed on
 * 32-bit words of four bytes (scale_min_k4 for all j at once):
 *   scales 0…3: q[0…3] & 63; 4…7: (q[8…11] & 15) | (q[0…3] >> 6) << 4
 *   mins   0…3: q[4…7] & 63; 4…7: (q[8…11] >> 4) | (q[4…7] >> 6) << 4 */
static inline void scales_mins_k4(const uint8_t *q, __m256 *sc, __m256 *m) {
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4), memcpy(&w1, q + 4, 4), memcpy(&w2, q + 8, 4);
    const uint32_t six = 0x3F3F3F3Fu, four = 0x0F0F0F0Fu, two = 0x03030303u;
    const uint64_t s = (uint64_t)(w0 & six) | (uint64_t)((w2 & four) | (((w0 >> 6) & two) << 4)) << 32;
    const uint64_t n = (uint64_t)(w1 & six) | (uint64_t)(((w2 >> 4) & four) | (((w1 >> 6) & two) << 4)) << 32;
    *sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s)));
    *m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)n)));
}

/* R rows at once (see dot_rows: the x blocks loaded once for the R rows; row r's weight block s at
 * w + r·rs + s·ss), one weight block of 256 (eight x blocks) per step */
static inline __attribute__((always_inline)) void dot_rows_q45_k(const int five, const int R, const uint8_t *w,
                                                                 int64_t rs, int64_t ss, int64_t n_blocks,
                                                                 const int8_t *qx, const float *dx, const float *sx,
                                                                 float *y) {
    __m512 acc0[ROWS], acc1[ROWS];
    __m256 mins[ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps(), mins[r] = _mm256_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int64_t st = 0; st < n_blocks / 8; st++) { /* 8 x blocks: one weight block of 256 */
        const int64_t b = 8 * st;
        const __m256 dxv = _mm256_loadu_ps(dx + b), sxv = _mm256_loadu_ps(sx + b);
        __m512i ys[4], xs[4];
        x_step(qx + 32 * b, ys);
        for (int i = 0; i < 2; i++) { /* xs[2i]: x blocks 4i, 4i + 2; xs[2i + 1]: 4i + 1, 4i + 3 */
            xs[2 * i] = _mm512_shuffle_i64x2(ys[2 * i], ys[2 * i + 1], 0x44);
            xs[2 * i + 1] = _mm512_shuffle_i64x2(ys[2 * i], ys[2 * i + 1], 0xEE);
        }
        ahead(w + st * ss, ss);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *wr = w + r * rs + st * ss;
            __m256 sc, m;
            scales_mins_k4(wr + 4, &sc, &m);
            const __m256 scale = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(f16(wr)), dxv), sc);
            mins[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(f16(wr + 2)), sxv), m, mins[r]);
            const uint8_t *qs = wr + (five ? 48 : 16);
            const __m256i hbits = five ? _mm256_loadu_si256((const __m256i *)(wr + 16)) : _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++, qs += 64) { /* 64 bytes: sub-blocks 4i, 4i + 2 (low nibbles), 4i + 1, 4i + 3 */
                const __m512i v = _mm512_loadu_si512((const void *)qs);
                __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                if (five) { /* the fifth bit of sub-block j is bit j of qh's byte for the element */
                    const __m512i one = _mm512_set1_epi8(1);
                    const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(hbits, 4 * i)),
                                                         _mm256_srli_epi16(hbits, 4 * i + 2), 1);
                    lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(h, one), 4));
                    hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 1), one), 4));
                }
                const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xs[2 * i]);
                const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, xs[2 * i + 1]);
                acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), lanes_of(scale, 4 * i, 4 * i + 2), acc0[r]);
                acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), lanes_of(scale, 4 * i + 1, 4 * i + 3), acc1[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])) - hsum(mins[r]);
}

/* Q6_K, R rows at once: two chunks of 32 (x blocks xb, xb + 1; four groups of 16 with their own
 * scales) per 512-bit step. The quants q (0 … 63) multiply x as they are, one vpdpbusd a pair, from
 * sums started at −32·Σ of each lane's four x (computed once a step for the R rows, as Q8_0's −128):
 * Σ (q − 32)·qx, the same integers as the sign trick on q − 32 gives, four instructions fewer a pair
 * and row. */
static inline __attribute__((always_inline)) void dot_rows_q6_k(const int R, const uint8_t *w, int64_t rs,
                                                                int64_t ss, int64_t n_blocks, const int8_t *qx,
                                                                const float *dx, float *y) {
    __m512 acc0[ROWS], acc1[ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
    /* lane l of a step reads scale l / 4 of its four (dpbusd's lane l sums elements 4l … 4l + 3) */
    const __m512i rep4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i m32 = _mm512_set1_epi8(32);
    for (int64_t st = 0; st < n_blocks / 8; st++) {
        const int64_t b = 8 * st;
        const __m256 dxv = _mm256_loadu_ps(dx + b);
        __m512i ys[4], base[4];
        x_step(qx + 32 * b, ys);
        for (int j = 0; j < 4; j++) /* −32 · Σ of each lane's four x */
            base[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), m32, ys[j]));
        ahead(w + st * ss, ss);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *wr = w + r * rs + st * ss;
            const __m256 ddx = _mm256_mul_ps(_mm256_set1_ps(f16(wr + 208)), dxv); /* d·dx, 8 x blocks */
            const uint8_t *ql = wr, *qh = wr + 128;
            const int8_t *sc = (const int8_t *)(wr + 192);
#pragma GCC unroll 2
            for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8) {
                __m256i q[4];
                q6_chunks(ql, qh, q);
                const __m512 scales = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sc)));
#pragma GCC unroll 2
                for (int k = 0; k < 4; k += 2) {
                    const __m512i p = _mm512_dpbusd_epi32(base[2 * n + k / 2], pair512(q[k], q[k + 1]), ys[2 * n + k / 2]);
                    const __m512 f = _mm512_mul_ps(halves_of(ddx, 4 * n + k),
                                                   _mm512_permutexvar_ps(_mm512_add_epi32(rep4, _mm512_set1_epi32(2 * k)), scales));
                    if (k)
                        acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), f, acc1[r]);
                    else
                        acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), f, acc0[r]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

/* the rows interface (see DOT_ROWS) for the K-quants: no tail, K is a multiple of 256 */
#define K_ROWS(NAME, CALL)                                                                             \
    static void NAME(const uint8_t *w, int64_t rs, int64_t ss, const uint8_t *tw, int64_t ts, int R,  \
                     int64_t n_blocks, const int8_t *qx, const float *dx, const float *sx, float *y) { \
        (void)tw, (void)ts, (void)sx;                                                                  \
        if (R == ROWS)                                                                                 \
            CALL(ROWS, w, y);                                                                          \
        else                                                                                           \
            for (int r = 0; r < R; r++) CALL(1, w + r * rs, y + r);                                    \
    }
#define Q4_K_CALL(R, W, Y) dot_rows_q45_k(0, R, W, rs, ss, n_blocks, qx, dx, sx, Y)
#define Q5_K_CALL(R, W, Y) dot_rows_q45_k(1, R, W, rs, ss, n_blocks, qx, dx, sx, Y)
#define Q6_K_CALL(R, W, Y) dot_rows_q6_k(R, W, rs, ss, n_blocks, qx, dx, Y)
K_ROWS(dot_q4_k, Q4_K_CALL)
K_ROWS(dot_q5_k, Q5_K_CALL)
K_ROWS(dot_q6_k_rows, Q6_K_CALL)

#else
/* One row of Q4_K or Q5_K as stored: a sub-block's integer sum whole, then its float steps in the
 * order of dot_lanes_q45_k's lanes (Σ_j d·sc_j · (p_j·dx_j), less Σ_j dmin·m_j · sx_j), so that a packed
 * Q4_K or Q5_K weight's products equal the stored one's to the bit. */
static float dot_q45_k(const uint8_t *w, int64_t n_blocks, const int8_t *qx, const float *dx, const float *sx,
                       int five) {
    float acc = 0.0f, acc_m = 0.0f;
    const int bs = five ? 176 : 144;
    for (int64_t b = 0; b < n_blocks; b += 8, w += bs) { /* 8 x blocks: one weight block of 256 */
        const float d = f16(w), dmin = f16(w + 2);
        const uint8_t *scales = w + 4, *qh = w + 16, *qs = w + (five ? 48 : 16);
        const __m256i hbits = five ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
        for (int j = 0; j < 8; j += 2, qs += 32) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)qs);
            __m256i q[2] = {low_nibbles32(v), high_nibbles32(v)};
            if (five) {
                const __m256i sixteen = _mm256_set1_epi8(0x10);
                for (int h = 0; h < 2; h++) {
                    const __m256i u = _mm256_set1_epi8((char)((1u + h) << j));
                    q[h] = _mm256_or_si256(q[h], _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, u), u), sixteen));
                }
            }
            for (int h = 0; h < 2; h++) {
                const int64_t xb = b + j + h;
                int sc, m;
                scale_min_k4(j + h, scales, &sc, &m);
                const float p = (float)hsum_epi32(dot_u8s8(q[h], _mm256_loadu_si256((const __m256i *)(qx + 32 * xb))));
                acc = fmaf(d * (float)sc, p * dx[xb], acc);
                acc_m = fmaf(dmin * (float)m, sx[xb], acc_m);
            }
        }
    }
    return acc - acc_m;
}

/* the six-bit scales sc and mins m of sub-block j of eight rows of a packed Q4_K group (a row a
 * lane), from the three 32-bit words w0, w1, w2 of their 12 bytes, as scale_min_k4 takes them */
static inline void lanes_scale_min_k4(int j, __m256i w0, __m256i w1, __m256i w2, __m256i *sc, __m256i *m) {
    const __m256i six = _mm256_set1_epi32(63), four = _mm256_set1_epi32(15), two = _mm256_set1_epi32(3);
    const int k = 8 * (j & 3);
    const __m128i at = _mm_cvtsi32_si128(k), hi_at = _mm_cvtsi32_si128(k + 6), m_at = _mm_cvtsi32_si128(k + 4);
    if (j < 4) {
        *sc = _mm256_and_si256(_mm256_srl_epi32(w0, at), six);
        *m = _mm256_and_si256(_mm256_srl_epi32(w1, at), six);
    } else {
        *sc = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi32(w2, at), four),
                              _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(w0, hi_at), two), 4));
        *m = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi32(w2, m_at), four),
                             _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(w1, hi_at), two), 4));
    }
}

/* bytes of 16 where bit `bit` (0 … 7) of the byte in v is set, else 0: one 16-bit shift (at most 4
 * places, so no bit crosses into the other byte of its word) and a mask */
static inline __m256i bit_as_16(__m256i v, int bit) {
    const __m256i moved = bit <= 4 ? _mm256_sll_epi16(v, _mm_cvtsi32_si128(4 - bit))
                                   : _mm256_srl_epi16(v, _mm_cvtsi32_si128(bit - 4));
    return _mm256_and_si256(moved, _mm256_set1_epi8(0x10));
}

/* the quants of chunk c (elements 4c … 4c + 3) of sub-blocks 2i (lo) and 2i + 1 (hi) of eight rows
 * of a packed Q4_K / Q5_K group's block g (a row a lane): the low and high nibbles of their quant
 * bytes, with Q5_K's fifth bits (bits 2i and 2i + 1 of the rows' qh bytes for those elements) */
static inline __attribute__((always_inline)) void lanes_q45_k(const int five, const uint8_t *g, int i, int c,
                                                              __m256i *lo, __m256i *hi) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(g + (five ? 384 : 128) + 256 * i + 32 * c));
    *lo = _mm256_and_si256(v, low), *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    if (five) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)(g + 128 + 32 * c));
        *lo = _mm256_or_si256(*lo, bit_as_16(h, 2 * i)), *hi = _mm256_or_si256(*hi, bit_as_16(h, 2 * i + 1));
    }
}

/* Eight rows of a packed Q4_K or Q5_K group (see tc_pack) at once, a row a lane: per weight block,
 * the rows' six-bit scales and mins of sub-block j from the three 32-bit words of their 12 bytes (as
 * scale_min_k4 takes them), and per pair of sub-blocks (2i, 2i + 1: the low and high nibbles of 32
 * quant bytes, lanes_q45_k) eight chunks of four bytes of each row, each multiplied by one broadcast
 * of four x values, summed in int16 while they cannot overflow (Q4_K: all eight, 8 · 2 · 15 · 127 =
 * 30480; Q5_K: four, 4 · 2 · 31 · 127 = 31496), then widened. */
static inline __attribute__((always_inline)) void dot_lanes_q45_k(const int five, const uint8_t *g, int64_t n_blocks,
                                                                  const int8_t *qx, const float *dx,
                                                                  const float *sx, float *y) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int depth = five ? 4 : 8;
    __m256 acc = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; b += 8, g += 8 * (five ? 176 : 144)) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(g + 32)), w1 = _mm256_loadu_si256((const __m256i *)(g + 64));
        const __m256i w2 = _mm256_loadu_si256((const __m256i *)(g + 96));
        for (int i = 0; i < 4; i++) {
            __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            const int8_t *xl = qx + 32 * (b + 2 * i), *xh = xl + 32;
            for (int c0 = 0; c0 < 8; c0 += depth) {
                __m256i s16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                for (int c = c0; c < c0 + depth; c++) {
                    int32_t a, e;
                    memcpy(&a, xl + 4 * c, 4), memcpy(&e, xh + 4 * c, 4);
                    __m256i lo, hi;
                    lanes_q45_k(five, g, i, c, &lo, &hi);
                    s16[0] = _mm256_add_epi16(s16[0], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(a)));
                    s16[1] = _mm256_add_epi16(s16[1], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(e)));
                }
                for (int h = 0; h < 2; h++) s[h] = _mm256_add_epi32(s[h], _mm256_madd_epi16(s16[h], ones));
            }
            for (int h = 0; h < 2; h++) {
                const int j = 2 * i + h;
                __m256i sc, m;
                lanes_scale_min_k4(j, w0, w1, w2, &sc, &m);
                const int64_t xb = b + j;
                const __m256 p = _mm256_cvtepi32_ps(s[h]);
                acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)), _mm256_mul_ps(p, _mm256_set1_ps(dx[xb])), acc);
                acc_m = _mm256_fmadd_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m)), _mm256_set1_ps(sx[xb]), acc_m);
            }
        }
    }
    _mm256_storeu_ps(y, _mm256_sub_ps(acc, acc_m));
}

static inline int32_t hsum_epi32x4(__m128i s) {
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

/* One row of Q6_K as stored: per half block and chunk of 32 (x block xb) the exact Σ (q − 32)·qx of
 * its two groups of 16 (the sign trick), then their float steps in dot_lanes_q6_k's order (the
 * groups of a half block's first 16 elements of each chunk, then of its last 16), so that a packed
 * Q6_K weight's products equal the stored one's to the bit. */
static float dot_q6_k(const uint8_t *w, int64_t n_blocks, const int8_t *qx, const float *dx, const float *sx) {
    (void)sx;
    float acc = 0.0f;
    const __m256i m32 = _mm256_set1_epi8(32);
    for (int64_t b = 0; b < n_blocks; b += 8, w += 210) {
        const float d = f16(w + 208);
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192);
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8) {
            __m256i q[4];
            int32_t sums[4][2];
            q6_chunks(ql, qh, q);
            for (int k = 0; k < 4; k++) {
                const __m256i s = _mm256_sub_epi8(q[k], m32); /* −32 … 31 */
                const __m256i y = _mm256_loadu_si256((const __m256i *)(qx + 32 * (b + 4 * n + k)));
                const __m256i p = dot_u8s8(_mm256_sign_epi8(s, s), _mm256_sign_epi8(y, s));
                sums[k][0] = hsum_epi32x4(_mm256_castsi256_si128(p)), sums[k][1] = hsum_epi32x4(_mm256_extracti128_si256(p, 1));
            }
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 4; k++)
                    acc = fmaf(d * (float)sc[2 * k + h], (float)sums[k][h] * dx[b + 4 * n + k], acc);
        }
    }
    return acc;
}

/* the six-bit quants (0 … 63) of elements 32k + 4c … 32k + 4c + 3 of half n of eight rows' block of
 * a packed Q6_K group (a row a lane), k = 0 … 3, from chunk c of the half's two ql runs and its qh
 * (ch: the block's chunks, past its d) */
static inline void lanes_q6_k(const uint8_t *ch, int n, int c, __m256i q[4]) {
    const __m256i low = _mm256_set1_epi8(0x0F), fifth = _mm256_set1_epi8(0x30);
    const __m256i a = _mm256_loadu_si256((const __m256i *)(ch + 32 * (16 * n + c)));
    const __m256i e = _mm256_loadu_si256((const __m256i *)(ch + 32 * (16 * n + 8 + c)));
    const __m256i hb = _mm256_loadu_si256((const __m256i *)(ch + 32 * (32 + 8 * n + c)));
    q[0] = _mm256_or_si256(_mm256_and_si256(a, low), _mm256_and_si256(_mm256_slli_epi16(hb, 4), fifth));
    q[1] = _mm256_or_si256(_mm256_and_si256(e, low), _mm256_and_si256(_mm256_slli_epi16(hb, 2), fifth));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low), _mm256_and_si256(hb, fifth));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(e, 4), low), _mm256_and_si256(_mm256_srli_epi16(hb, 2), fifth));
}

/* the int8 scales of group gi (0 … 15) of eight rows' block of a packed Q6_K group, a row a lane:
 * byte gi % 4 of chunk 48 + gi / 4 */
static inline __m256i lanes_q6_k_scale(const uint8_t *ch, int gi) {
    const __m256i words = _mm256_loadu_si256((const __m256i *)(ch + 32 * (48 + gi / 4)));
    return _mm256_sra_epi32(_mm256_sll_epi32(words, _mm_cvtsi32_si128(24 - 8 * (gi % 4))), _mm_cvtsi32_si128(24));
}

/* Σ of 16 int8 (x + 128 as unsigned bytes, summed by psadbw) */
static inline int sum16_i8(const int8_t *x) {
    const __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)x), _mm_set1_epi8((char)0x80));
    const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
    return _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128;
}

/* Eight rows of a packed Q6_K group (see tc_pack) at once, a row a lane: per half block and half of
 * its chunks' elements (l < 16, then l ≥ 16: a group of 16 of each chunk k, with its own int8 scale),
 * four bytes of each row's ql (twice) and qh give the six-bit quants q (0 … 63) of the four chunks,
 * each multiplied by one broadcast of four x values; two such products sum in int16 (at most
 * 2 · 2 · 63 · 127 = 32004) before each widening, and a group's Σ (q − 32)·qx is that sum less
 * 32 · Σ qx of its 16 x values. */
static void dot_lanes_q6_k(const uint8_t *g, int64_t n_blocks, const int8_t *qx, const float *dx, float *y) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; b += 8, g += 8 * 210) {
        ahead(g + 8 * 210, 8 * 210); /* its reads hop about the group's block: the hardware prefetchers
                                      * fell behind (a 65536 × 2048 product from memory on two threads,
                                      * Zen 1: 22.9 ms without, 10–16 ms with) */
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        const uint8_t *ch = g + 16; /* four bytes of each row: ql's chunks 0 … 31, qh's 32 … 47, scales' 48 … 51 */
        for (int n = 0; n < 2; n++)
            for (int h = 0; h < 2; h++) {
                __m256i s32[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                                  _mm256_setzero_si256()};
                for (int c2 = 0; c2 < 4; c2 += 2) {
                    __m256i s16[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                                      _mm256_setzero_si256()};
                    for (int u = 0; u < 2; u++) {
                        const int c = 4 * h + c2 + u; /* bytes 4c … 4c + 3 of the half's ql runs and qh */
                        __m256i q[4];
                        lanes_q6_k(ch, n, c, q);
                        for (int k = 0; k < 4; k++) {
                            int32_t x4;
                            memcpy(&x4, qx + 32 * (b + 4 * n + k) + 4 * c, 4);
                            s16[k] = _mm256_add_epi16(s16[k], _mm256_maddubs_epi16(q[k], _mm256_set1_epi32(x4)));
                        }
                    }
                    for (int k = 0; k < 4; k++) s32[k] = _mm256_add_epi32(s32[k], _mm256_madd_epi16(s16[k], ones));
                }
                for (int k = 0; k < 4; k++) {
                    const int64_t xb = b + 4 * n + k;
                    const __m256i sc = lanes_q6_k_scale(ch, 8 * n + 2 * k + h);
                    const __m256i sum = _mm256_sub_epi32(s32[k], _mm256_set1_epi32(32 * sum16_i8(qx + 32 * xb + 16 * h)));
                    acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)),
                                          _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(dx[xb])), acc);
                }
            }
    }
    _mm256_storeu_ps(y, acc);
}
static float dot_q4_k_one(const uint8_t *w, int64_t nb, const int8_t *qx, const float *dx, const float *sx) {
    return dot_q45_k(w, nb, qx, dx, sx, 0);
}
static float dot_q5_k_one(const uint8_t *w, int64_t nb, const int8_t *qx, const float *dx, const float *sx) {
    return dot_q45_k(w, nb, qx, dx, sx, 1);
}
LANE_ROWS(dot_q4_k, dot_q4_k_one, dot_lanes_q45_k(0, w, n_blocks, qx, dx, sx, y))
LANE_ROWS(dot_q5_k, dot_q5_k_one, dot_lanes_q45_k(1, w, n_blocks, qx, dx, sx, y))
LANE_ROWS(dot_q6_k_rows, dot_q6_k, dot_lanes_q6_k(w, n_blocks, qx, dx, y))
#endif

/* One weight's part of a few-token int8 product: its "calls" are its packed groups of ROWS rows, then
 * its rows as stored (the last N mod ROWS, or every row of a weight that is not packed). */
typedef struct {
    const uint8_t *W;
    int64_t row_bytes, N, sb, steps, tail, R, full, calls;
    rows_fn rows;
    float *y;
} int8_part;

static void int8_part_of(int type, const uint8_t *W, int64_t row_bytes, int64_t N, int64_t K, int packed, float *y,
                         int8_part *part) {
    part->W = W, part->row_bytes = row_bytes, part->N = N, part->y = y;
    part->rows = type == Q8_0   ? dot_q8_0
                 : type == Q4_0 ? dot_q4_0
                 : type == Q4_1 ? dot_q4_1
                 : type == Q5_0 ? dot_q5_0
                 : type == Q5_1 ? dot_q5_1
                 : type == Q4_K ? dot_q4_k
                 : type == Q5_K ? dot_q5_k
                                : dot_q6_k_rows;
    part->sb = step_bytes(type), part->steps = K / 256;
    part->tail = row_bytes - part->steps * part->sb; /* 0 for the K-quants */
    part->R = packed ? ROWS : 1, part->full = N - N % part->R;
    part->calls = part->full / part->R + (N - part->full);
}

/* call c of a part, for each of the T tokens (y [T, N]) */
static inline void int8_call(const int8_part *p, int64_t c, int64_t T, int64_t K, const int8_t *qx, const float *dx,
                             const float *sx) {
    const int64_t nb = K / 32, R = p->R, full = p->full, sb = p->sb, steps = p->steps;
    const int64_t n = c < full / R ? c * R : full + (c - full / R);
    const uint8_t *w = p->W + n * p->row_bytes;
    for (int64_t t = 0; t < T; t++) {
        const int8_t *q = qx + t * K;
        const float *d = dx + t * nb, *s = sx + t * nb;
        if (n < full && R > 1)
            p->rows(w, sb, ROWS * sb, w + steps * ROWS * sb, p->tail, ROWS, nb, q, d, s, p->y + t * p->N + n);
        else
            p->rows(w, p->row_bytes, sb, w + steps * sb, p->row_bytes, 1, nb, q, d, s, p->y + t * p->N + n);
    }
}

/* y_i [T, N_i] = x [T, K] · W_iᵀ for the n_parts weights of one x: x quantized once, and one parallel
 * loop over every part's calls (one fork and join for the Q, K and V of attention, say) */
static int int8_products(const int8_part *parts, int n_parts, int64_t K, const float *x, int64_t T) {
    const int64_t nb = K / 32;
    int8_t *qx;
    float *dx, *sx;
    if (!scratch_x(T * K, T * nb, &qx, &dx, &sx)) return -2;
    for (int64_t t = 0; t < T; t++) quantize_x(x + t * K, nb, qx + t * K, dx + t * nb, sx + t * nb);
    int64_t calls = 0, bytes = 0;
    for (int i = 0; i < n_parts; i++) calls += parts[i].calls, bytes += parts[i].N * parts[i].row_bytes;
#pragma omp parallel for schedule(static) if (bytes >= PARALLEL_BYTES)
    for (int64_t c = 0; c < calls; c++) {
        int i = 0;
        int64_t local = c;
        while (local >= parts[i].calls) local -= parts[i++].calls;
        int8_call(&parts[i], local, T, K, qx, dx, sx);
    }
    return 0;
}

static int tc_matmul_int8(int type, const uint8_t *W, int64_t row_bytes, int64_t N, int64_t K, int packed,
                          const float *x, int64_t T, float *y) {
    int8_part part;
    int8_part_of(type, W, row_bytes, N, K, packed, y, &part);
    return int8_products(&part, 1, K, x, T);
}
#else
#define HAVE_INT8_DOT 0
#endif
#ifndef ROWS
#define ROWS 1
#endif
#ifndef LANES
#define LANES 0
#define LANE_TYPE(TYPE) 0
#endif

/* ── packed weights: ROWS rows side by side, so that a few-token product reads one stream ─────────
 * With the AVX-512 kernels (ROWS = 4), a weight of a type whose x is quantized may be copied once into
 * this layout (tc_pack): rows n < N − N mod ROWS in groups of ROWS, each group in the same bytes as its
 * rows as stored (from g·ROWS·row_bytes); within a group, for each step s of 256 elements (8 blocks of
 * a 32-element type, one K-quant block), row 0's bytes of that step, then row 1's, …, then row
 * ROWS − 1's; then each row's bytes past its last whole step (the last K/32 mod 8 blocks of a
 * 32-element type), row after row. The last N mod ROWS rows stay as stored.
 * A row's bytes of one step are its 8 (or 1) blocks as stored, except for the SPLIT types (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0), whose step holds the same bytes regrouped (pack_step): the 8 blocks' float16
 * scales d, then (Q4_1, Q5_1) their 8 mins m, then (Q5_0, Q5_1) their 8 uint32 qh of fifth bits, then
 * their quants: Q8_0's 8 × 32 in order, each v stored as v + 128 (v XOR 0x80: unsigned, so that one
 * vpdpbusd multiplies 64 of them); the others' low four bits as two runs of 64 bytes, run h holding
 * element i (0 … 63) of blocks 4h, 4h + 1 in byte i's low nibble and element i of blocks 4h + 2, 4h + 3
 * in its high nibble (so that two blocks' qh, side by side, are the 64-bit mask of a nibble half).
 * When each row ends in two blocks past its last step (SPLIT_TAIL), the group's 8 tail blocks (row
 * 0's two, row 1's, …) are split likewise.
 * Why: the kernels multiply ROWS rows against the same x blocks at once (x is loaded once, and the
 * rows' closing reductions overlap), but reading ROWS rows as stored means ROWS interleaved streams,
 * which ran at half speed here once the weight was not in cache; packed, a group is read front to
 * back. Split, a step's scales are one load instead of eight, and 64 quants unpack with one mask
 * where the file's blocks take two loads, two shifts and three inserts per pair of blocks.
 * With the AVX2 kernels (LANES, ROWS = 8) the packed types are those whose x is quantized too,
 * and a group of eight rows holds, for each block b (K/32 of them, K/256 for the K-quants; no steps
 * or tail), the eight rows' float16 scales d of block b (row 0's first; Q6_K's from the end of its
 * blocks), then (Q4_1, Q5_1, Q4_K, Q5_K) their eight mins m or dmin, then the rest of the blocks four bytes
 * at a time: bytes 4c … 4c + 3 of row 0's block b (past its d and m), of row 1's, …, of row 7's, for
 * c = 0, 1, … (Q4_0, Q4_1: the 16 quant bytes, c < 4; Q5_0, Q5_1: the qh word, then those, c < 5;
 * Q8_0: 32, c < 8; Q4_K: its 12 bytes of scales and mins, c < 3, then its 128 quant bytes; Q5_K: the
 * same 12 bytes, its 32 bytes qh of fifth bits, then its 128 quant bytes, c < 43; Q6_K: ql, qh, then
 * the 16 int8 scales, c < 52). See dot_lanes, dot_lanes_q45_k and dot_lanes_q6_k. */

/* for the types that pack in lanes: a block's elements and bytes, the bytes of its float16 fields (d;
 * d and m or dmin) and where they are in a block as stored (at its start; Q6_K's d at its end), and
 * where the rest of it starts */
static inline int lane_elements(int type) { return type == Q4_K || type == Q5_K || type == Q6_K ? 256 : 32; }
static inline int lane_block_bytes(int type) {
    return type == Q4_K ? 144 : type == Q5_K ? 176 : type == Q6_K ? 210 : BLOCK_BYTES(type);
}
static inline int lane_head(int type) { return HAS_MIN(type) || type == Q4_K || type == Q5_K ? 4 : 2; }
static inline int lane_head_at(int type) { return type == Q6_K ? 208 : 0; }
static inline int lane_rest_at(int type) { return type == Q6_K ? 0 : lane_head(type); }

/* row r's block b of a lanes group (LANES) g → the block as stored (blk) */
static void lanes_block(int type, const uint8_t *g, int64_t b, int r, uint8_t *blk) {
    const int bs = lane_block_bytes(type), hb = lane_head(type), h0 = lane_head_at(type), q0 = lane_rest_at(type);
    const uint8_t *o = g + b * 8 * bs;
    for (int f = 0; f < hb; f += 2) memcpy(blk + h0 + f, o + 8 * f + 2 * r, 2); /* d, then m */
    for (int c = 0; c < (bs - hb) / 4; c++) memcpy(blk + q0 + 4 * c, o + 8 * hb + 32 * c + 4 * r, 4);
}

#if LANES
/* eight rows as stored (rows, a row every rb bytes) → their lanes group g: per block, the rows'
 * float16 fields, then the rest of their blocks, eight chunks of four bytes of the eight rows at a
 * time by one transpose of 32-bit words (the inverse of lanes_block for all eight rows) */
static void lanes_group(int type, const uint8_t *rows, int64_t rb, uint8_t *g, int64_t n_blocks) {
    const int bs = lane_block_bytes(type), hb = lane_head(type), h0 = lane_head_at(type), q0 = lane_rest_at(type);
    const int chunks = (bs - hb) / 4;
    for (int64_t b = 0; b < n_blocks; b++) {
        const uint8_t *blk = rows + b * bs;
        uint8_t *o = g + b * 8 * bs, *rest = o + 8 * hb;
        for (int r = 0; r < 8; r++)
            for (int f = 0; f < hb; f += 2) memcpy(o + 8 * f + 2 * r, blk + r * rb + h0 + f, 2);
        int c = 0;
        for (; c + 8 <= chunks; c += 8) transpose_rows(blk + q0 + 4 * c, rb, rest + 32 * c);
        for (; c < chunks; c++)
            for (int r = 0; r < 8; r++) memcpy(rest + 32 * c + 4 * r, blk + r * rb + q0 + 4 * c, 4);
    }
}
#endif

/* the inverse of pack_step (below): a packed step of a SPLIT type (o) → its 8 blocks as stored (b) */
static void unpack_step(int type, const uint8_t *o, uint8_t *b) {
    const int bs = BLOCK_BYTES(type), hb = HAS_MIN(type) ? 4 : 2, qb = hb + (HAS_QH(type) ? 4 : 0);
    const uint8_t *qh = o + 8 * hb, *q = qh + (HAS_QH(type) ? 32 : 0);
    for (int j = 0; j < 8; j++) {
        uint8_t *blk = b + j * bs;
        for (int f = 0; f < hb; f += 2) memcpy(blk + f, o + 8 * f + 2 * j, 2);
        if (HAS_QH(type)) memcpy(blk + hb, qh + 4 * j, 4);
        if (type == Q8_0)
            for (int e = 0; e < 32; e++) blk[2 + e] = (uint8_t)(q[32 * j + e] ^ 0x80);
    }
    if (type == Q8_0) return;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 2; k++) { /* swap_nibbles undone: lo, hi → blocks 4h + k and 4h + k + 2 */
            const uint8_t *lo = q + 64 * h + 32 * k, *hi = lo + 16;
            uint8_t *x = b + (4 * h + k) * bs + qb, *y = b + (4 * h + k + 2) * bs + qb;
#if defined(__AVX2__) /* immintrin.h is included */
            const __m128i l = _mm_loadu_si128((const __m128i *)lo), u = _mm_loadu_si128((const __m128i *)hi);
            const __m128i f = _mm_set1_epi8(0x0F), high = _mm_set1_epi8((char)0xF0);
            _mm_storeu_si128((__m128i *)x, _mm_or_si128(_mm_and_si128(l, f), _mm_slli_epi16(_mm_and_si128(u, f), 4)));
            _mm_storeu_si128((__m128i *)y, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(l, 4), f), _mm_and_si128(u, high)));
#else
            for (int e = 0; e < 16; e++)
                x[e] = (uint8_t)((lo[e] & 15) | (hi[e] & 15) << 4), y[e] = (uint8_t)((lo[e] >> 4) | (hi[e] & 0xF0));
#endif
        }
}

/* the rows of a packed group (ROWS) when weights of `type` are multiplied faster packed (the types
 * whose x is quantized, with the AVX-512 and the AVX2 kernels alike), else 0 */
int tc_packs(int type) {
    return ROWS > 1 && HAVE_INT8_DOT && (LANES ? LANE_TYPE(type) : step_bytes(type) > 0) ? ROWS : 0;
}

/* whether a packed copy of this type regroups a step's bytes (SPLIT: scales apart from the quants;
 * LANES: blocks interleaved), rather than only placing ROWS rows' steps side by side */
int tc_pack_regroups(int type) { return tc_packs(type) && (LANES || SPLIT(type)); }

#if !LANES
/* 16 bytes x, y → 16 bytes each of lo, hi: lo[e] = x[e]'s low nibble | y[e]'s low nibble << 4,
 * hi[e] = x[e]'s high nibble | y[e]'s high nibble << 4. For two Q4 blocks' quants x, y (elements e,
 * e + 16 of a block in byte e) it gives a run's 32 bytes (lo: element e of both blocks, hi: element
 * e + 16). */
static inline void swap_nibbles(const uint8_t *x, const uint8_t *y, uint8_t *lo, uint8_t *hi) {
    for (int e = 0; e < 16; e++) {
        const uint8_t a = x[e], c = y[e];
        lo[e] = (uint8_t)((a & 15) | (c & 15) << 4), hi[e] = (uint8_t)((a >> 4) | (c & 0xF0));
    }
}

/* one row's step of 8 blocks of a SPLIT type as stored (b) → its packed bytes (o), as the comment
 * above describes */
static void pack_step(int type, const uint8_t *b, uint8_t *o) {
    const int bs = BLOCK_BYTES(type), hb = HAS_MIN(type) ? 4 : 2; /* a block's bytes, its d (and m) */
    const int qb = hb + (HAS_QH(type) ? 4 : 0);                      /* where a block's quants start */
    uint8_t *qh = o + 8 * hb, *q = qh + (HAS_QH(type) ? 32 : 0);
    for (int j = 0; j < 8; j++) {
        const uint8_t *blk = b + j * bs;
        for (int f = 0; f < hb; f += 2) memcpy(o + 8 * f + 2 * j, blk + f, 2); /* d, then m (Q4_1, Q5_1) */
        if (HAS_QH(type)) memcpy(qh + 4 * j, blk + hb, 4);
        if (type == Q8_0)
            for (int e = 0; e < 32; e++) q[32 * j + e] = (uint8_t)(blk[2 + e] ^ 0x80); /* v + 128 */
    }
    if (type == Q8_0) return;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 2; k++) { /* blocks 4h + k (low nibbles) and 4h + k + 2 (high) */
            uint8_t *run = q + 64 * h + 32 * k;
            swap_nibbles(b + (4 * h + k) * bs + qb, b + (4 * h + k + 2) * bs + qb, run, run + 16);
        }
}

/* ROWS rows as stored (rows: the plan's, one after another) → their packed group: for each step,
 * each row's bytes of it (SPLIT: regrouped, pack_step), then each row's bytes past its last step
 * (SPLIT_TAIL: the group's 8 tail blocks split as one step) */
static void steps_group(const tc_weight *p, const uint8_t *rows, uint8_t *group) {
    const int type = (int)p->type;
    const int64_t rb = p->row_bytes, sb = step_bytes(type), steps = p->k / 256, tail = rb - steps * sb;
    for (int64_t r = 0; r < ROWS; r++) {
        const uint8_t *row = rows + r * rb;
        for (int64_t st = 0; st < steps; st++) {
            uint8_t *to = group + (st * ROWS + r) * sb;
            if (SPLIT(type)) pack_step(type, row + st * sb, to);
            else memcpy(to, row + st * sb, (size_t)sb);
        }
        memcpy(group + steps * ROWS * sb + r * tail, row + steps * sb, (size_t)tail);
    }
    if (SPLIT_TAIL(type, p->k)) { /* the group's 8 tail blocks, split */
        uint8_t blocks[8 * 34], *at = group + steps * ROWS * sb;
        memcpy(blocks, at, (size_t)(ROWS * tail));
        pack_step(type, blocks, at);
    }
}
#endif

/* rows [r0, r1) of the plan's weight (as stored) in the packed layout, into the same bytes of out
 * [N · row_bytes] that they take in it (a group's bytes are its rows' bytes as stored); r0 and r1 are
 * multiples of ROWS, or r1 = N; on the calling thread alone when `one_thread` (as tc_dequant_rows) */
int tc_pack(const tc_weight *p, int64_t r0, int64_t r1, uint8_t *out, int64_t one_thread) {
    if (!tc_packs((int)p->type) || p->packed || r0 % ROWS || (r1 % ROWS && r1 != p->n) || r0 > r1 || r1 > p->n)
        return -1;
    const int64_t rb = p->row_bytes, full = p->n - p->n % ROWS, last = r1 < full ? r1 : full;
    if (r1 > full) memcpy(out + full * rb, p->w + full * rb, (size_t)((r1 - full) * rb));
#pragma omp parallel for schedule(static) if (!one_thread && (last - r0) * rb >= PARALLEL_BYTES)
    for (int64_t n0 = r0; n0 < last; n0 += ROWS)
#if LANES
        lanes_group((int)p->type, p->w + n0 * rb, rb, out + n0 * rb, p->k / lane_elements((int)p->type));
#else
        steps_group(p, p->w + n0 * rb, out + n0 * rb);
#endif
    return 0;
}

/* ask the OS to read bytes [offset, offset + length) of the file open as fd into its page cache,
 * `chunk` bytes a request, and return once all are asked (the reads go on without this thread);
 * 0, or the error number. Linux clamps one request to the device's readahead size, so one request
 * for a whole file reads only its start (8 MiB here). Called through ctypes on a thread of its own
 * (mapped.read_ahead): the requests block for a while, and without Python's lock they do not slow
 * the loader, nor it them. */
int tc_read_ahead(int64_t fd, int64_t offset, int64_t length, int64_t chunk) {
#ifdef __linux__
    for (int64_t at = offset; at < offset + length; at += chunk) {
        const int64_t n = offset + length - at < chunk ? offset + length - at : chunk;
        const int e = posix_fadvise((int)fd, (off_t)at, (off_t)n, POSIX_FADV_WILLNEED);
        if (e) return e;
    }
    return 0;
#else
    (void)fd, (void)offset, (void)length, (void)chunk;
    return -1;
#endif
}

/* count weights copied one after another: weight i (plans[i], as stored) into outs[i] (as many
 * bytes), packed as tc_pack makes it where its type packs (tc_packs), else as stored (the float types
 * the products read in place: a copy in the process's own memory), about `slice` bytes at a time;
 * where hand_back[i] (its bytes a read-only view of a file: packing.py decides) the whole pages under
 * each slice are unmapped once it is copied (read again, they map again from the file), so that a
 * weight costs its size once while it is copied. One call for many weights: a thread packing a
 * model's weights ahead of its first products (packing.pack_ahead) takes Python's lock only before
 * and after them. */
int tc_pack_weights(const tc_weight *plans, uint8_t *const *outs, const uint8_t *hand_back, int64_t count,
                    int64_t slice, int64_t one_thread) {
#ifdef __linux__
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
#endif
    for (int64_t i = 0; i < count; i++) {
        const tc_weight *p = &plans[i];
        const int64_t rows = tc_packs((int)p->type) ? ROWS : 1, group = rows * p->row_bytes;
        const int64_t step = (slice / group > 1 ? slice / group : 1) * rows;
        if (p->packed) return -1;
        for (int64_t r0 = 0; r0 < p->n; r0 += step) {
            const int64_t r1 = p->n - r0 < step ? p->n : r0 + step;
            if (rows > 1) {
                const int code = tc_pack(p, r0, r1, outs[i], one_thread);
                if (code != 0) return code;
            } else {
                memcpy(outs[i] + r0 * p->row_bytes, p->w + r0 * p->row_bytes, (size_t)((r1 - r0) * p->row_bytes));
            }
#ifdef __linux__
            if (hand_back[i]) {
                const uintptr_t a = (uintptr_t)(p->w + r0 * p->row_bytes), b = (uintptr_t)(p->w + r1 * p->row_bytes);
                const uintptr_t start = (a + page - 1) / page * page, end = b / page * page;
                if (end > start) madvise((void *)start, end - start, MADV_DONTNEED);
            }
#else
            (void)hand_back;
#endif
        }
    }
    return 0;
}

/* row n of the plan's weight as the file stores it (row_bytes): in place, or put back together into
 * buf [row_bytes] from its packed group (a step of 256 elements at a time, then its bytes past the
 * last whole step); NULL when buf is NULL and the row needs it */
static const uint8_t *stored_row(const tc_weight *p, int64_t n, uint8_t *buf) {
    const int64_t rb = p->row_bytes, full = p->n - p->n % ROWS;
    if (!p->packed || n >= full) return p->w + n * rb;
    if (!buf) return 0;
    const int type = (int)p->type;
    const int64_t sb = step_bytes(type), steps = p->k / 256, r = n % ROWS, tail = rb - steps * sb;
    const uint8_t *group = p->w + (n - r) * rb, *at = group + steps * ROWS * sb;
    if (LANES) {
        for (int64_t b = 0; b < p->k / lane_elements(type); b++)
            lanes_block(type, group, b, (int)r, buf + b * lane_block_bytes(type));
        return buf;
    }
    for (int64_t st = 0; st < steps; st++) {
        const uint8_t *from = group + (st * ROWS + r) * sb;
        if (SPLIT(type)) unpack_step(type, from, buf + st * sb);
        else memcpy(buf + st * sb, from, (size_t)sb);
    }
    if (SPLIT_TAIL(type, p->k)) { /* row r's two blocks of the group's split tail step */
        uint8_t blocks[8 * 34];
        unpack_step(type, at, blocks);
        memcpy(buf + steps * sb, blocks + r * tail, (size_t)tail);
    } else {
        memcpy(buf + steps * sb, at + r * tail, (size_t)tail);
    }
    return buf;
}

/* the calling thread's buffer for one row as stored (stored_row), NULL when out of memory */
static uint8_t *row_buffer(const tc_weight *p) {
    return (uint8_t *)grown(&scratch_bytes, &scratch_bytes_cap, p->row_bytes);
}

/* row n of the plan's weight dequantized into out [K] (the row kernel on its bytes as stored); 0, or
 * −2 when out of memory */
static int dequant_row(const tc_weight *p, row_fn row, int64_t n, float *out) {
    const uint8_t *b = stored_row(p, n, p->packed ? row_buffer(p) : 0);
    if (!b) return -2;
    row(b, out, p->k);
    return 0;
}

/* rows [r0, r1) of the plan's weight dequantized to out [(r1 − r0), K], on the calling thread alone
 * when `one_thread` (a caller whose next step runs on another thread pool: NumPy's BLAS, whose
 * threads and these would spin against each other on the same cores) */
int tc_dequant_rows(const tc_weight *p, int64_t r0, int64_t r1, float *out, int64_t one_thread) {
    row_fn row = row_kernel((int)p->type);
    if (!row) return -1;
    int failed = 0;
#pragma omp parallel for schedule(static) if (!one_thread)
    for (int64_t r = r0; r < r1; r++)
        if (dequant_row(p, row, r, out + (r - r0) * p->k)) failed = 1;
    return failed ? -2 : 0;
}

/* rows of the plan's weight picked by ids [n_ids] (embedding lookups) dequantized to out [n_ids, K] */
int tc_gather_rows(const tc_weight *p, const int64_t *ids, int64_t n_ids, float *out) {
    row_fn row = row_kernel((int)p->type);
    if (!row) return -1;
    for (int64_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= p->n) return -3; /* before anything is written */
    for (int64_t i = 0; i < n_ids; i++)
        if (dequant_row(p, row, ids[i], out + i * p->k)) return -2;
    return 0;
}


/* ── version 4, many tokens of the types whose x is quantized: an int8 GEMM ──────────────────────
 * x is quantized as for version 3 (quantize_x: int8 blocks of 32, dx, sx = dx · Σ qx), so many tokens
 * get the sums few tokens get, up to the order of float32 additions; but Q4_K's with the AVX2 kernels
 * in runs of 256 sharing dx (gemm_tokens_k, below), as llama.cpp's q8_K for every K-quant product.
 * Each weight row is first written as unsigned quants q ∈ [0, 255] with a float scale d and a float
 * offset m per group of L elements
 * (L = 32; 16 for Q6_K, whose int8 scales change every 16), so that w = d·q + m:
 *   Q8_0  q = v + 128, m = −128·d      Q4_0  q = nibble, m = −8·d       Q4_1  q = nibble, m as stored
 *   Q5_0  m = −16·d                    Q5_1  m as stored                 (q: nibble + 16·fifth bit)
 *   Q4_K / Q5_K  d = d·sc_j, m = −dmin·m_j     Q6_K  d = d·sc_g, q = 6-bit quant, m = −32·d·sc_g
 * (with the AVX2 kernels Q8_0's q is v itself, −128 … 127, and m = 0: see below). Then a group's
 * part of Σ w·x is d·dx·Σ q·qx + m·dx·Σ qx, the integer sums Σ q·qx exact. The rows go GEMM_ROWS at
 * a time (one int32 lane a row) into a tile, q as [K/4][GEMM_ROWS rows][4] (four consecutive quants
 * of a row in a lane), d and m as [K/L][GEMM_ROWS]; each thread builds its tiles in L2 and multiplies
 * them by every token, GEMM_TOKENS at a time: per group and token, L/4 vector products (the tile's
 * quads of all its rows against the token's quad broadcast), then its sum converted to float and
 * scaled by one FMA, its offset part by another. A tile costs a byte an element, built once for all
 * the tokens.
 * AVX-512 VNNI: tiles of 16 rows, 8 tokens, vpdpbusd sums straight into int32. On a two-core AMD
 * EPYC (Zen 4) a 1536×576 Q4_0 product of 128 tokens runs at ~600 GOPS at best, ~400 typically,
 * tiles included (torch's bfloat16 GEMM on dequantized tiles: ~250 GFLOPS, the tiles apart).
 * AVX2 (LANES): tiles of 8 rows, 4 tokens. A packed group is a tile already but for unpacking: each
 * 32-bit lane of its chunks holds one row's four bytes, so its nibbles (with Q5's fifth bits and Q6_K's
 * high bits) are the tile's vectors, with no transpose; rows as stored go through gemm_row and an
 * 8 × 8 transpose of 32-bit words. With no vpdpbusd, vpmaddubsw's int16 pairs add up in int16 while
 * they cannot overflow: eight quads of Q4 (q ≤ 15: 8 · 2 · 15 · 127 = 30480), four of Q5 (q ≤ 31),
 * two of Q6_K (q ≤ 63), then one vpmaddwd widens them. Q8_0's q would overflow one pair (2 · 255 ·
 * 127), so its tile keeps v with m = 0 and multiplies |v| by x with v's sign, each quad widened. */
#if HAVE_INT8_DOT /* LANES (AVX2), or the AVX-512 VNNI kernels: every build with the int8 kernels */
#if LANES
enum { GEMM_ROWS = 8, GEMM_TOKENS = 4 };
#else
enum { GEMM_ROWS = 16, GEMM_TOKENS = 8 };
#endif

/* the group length L of a type's tile (see above) */
static inline int gemm_group(int type) { return type == Q6_K ? 16 : 32; }

/* whether a type's GEMM takes x in runs of 256 sharing their dx (gemm_tokens_k: Q4_K on AVX2) */
static inline int gemm_x_runs(int type) { return LANES && type == Q4_K; }

/* one row as stored (b, K elements) → its quants q [K], and d, m [K / L] (see above), with the
 * version 3 kernels' unpacking (nibbles, unsigned_quants, q6_chunks) */
static void gemm_row(int type, const uint8_t *b, int64_t K, uint8_t *q, float *d, float *m) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    switch (type) {
    case Q8_0: /* AVX2: v, m = 0; AVX-512: v + 128, m = −128·d */
        for (int64_t g = 0; g < K / 32; g++, b += 34, q += 32) {
            d[g] = f16(b), m[g] = LANES ? 0.0f : -128.0f * d[g];
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b + 2));
            _mm256_storeu_si256((__m256i *)q, LANES ? v : _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
        }
        return;
    case Q4_0:
    case Q4_1:
    case Q5_0:
    case Q5_1:
        for (int64_t g = 0; g < K / 32; g++, b += BLOCK_BYTES(type), q += 32) {
            d[g] = f16(b), m[g] = HAS_MIN(type) ? f16(b + 2) : -BIAS(type) * d[g];
            _mm256_storeu_si256((__m256i *)q, unsigned_quants(type, b));
        }
        return;
    case Q4_K:
    case Q5_K:
        for (int64_t s = 0; s < K; s += 256, d += 8, m += 8) {
            const int five = type == Q5_K;
            const float dd = f16(b), dmin = f16(b + 2);
            const uint8_t *qs = b + (five ? 48 : 16);
            const __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16)); /* Q5_K: bit j of byte l → sub-block j */
            for (int j = 0; j < 8; j++, q += 32) { /* sub-block j: nibbles of qs[32 · (j / 2) …], low for even j */
                int sc, mn;
                scale_min_k4(j, b + 4, &sc, &mn);
                d[j] = gemm_x_runs(type) ? (float)sc : dd * (float)sc, m[j] = -(dmin * (float)mn); /* runs: gemm_tile */
                const __m256i c = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 2)));
                __m256i v = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(c, 4) : c, low4);
                if (five) { /* bit j of each qh byte → 16 */
                    const __m256i bit = _mm256_set1_epi8((char)(1 << j));
                    v = _mm256_or_si256(v, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit),
                                                            _mm256_set1_epi8(16)));
                }
                _mm256_storeu_si256((__m256i *)q, v);
            }
            b += five ? 176 : 144;
        }
        return;
    default: /* Q6_K: element e of half n (128 elements) takes scale 8n + e / 16 */
        for (int64_t s = 0; s < K; s += 256, b += 210, d += 16, m += 16) {
            const float dd = f16(b + 208);
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int g = 0; g < 16; g++) d[g] = dd * (float)sc[g], m[g] = -32.0f * d[g];
            for (int n = 0; n < 2; n++, q += 128) {
                __m256i c[4];
                q6_chunks(b + 64 * n, b + 128 + 32 * n, c);
                for (int j = 0; j < 4; j++) _mm256_storeu_si256((__m256i *)(q + 32 * j), c[j]);
            }
        }
    }
}

typedef void (*gemm_fn)(const uint8_t *, const float *, const float *, const float *, int64_t, const int8_t *,
                        const float *, const float *, float *, int64_t, int);

#if LANES
/* a packed group of eight rows (g, see tc_pack) → its tile: wq [K/4][8][4], dt and mt [K/L][8] (and
 * for Q4_K ds [K/256][8], see gemm_tile), each vector as gemm_row and the transpose would give it
 * (the same q, the same d and m) */
static void gemm_lanes_tile(int type, const uint8_t *g, int64_t K, uint8_t *wq, float *dt, float *mt, float *ds) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256 negate = _mm256_set1_ps(-0.0f);
    if (type == Q4_K || type == Q5_K) { /* per block: 8 sub-blocks of 32, their scales and mins as dot_lanes_q45_k takes them */
        const int five = type == Q5_K, runs = gemm_x_runs(type);
        for (int64_t b = 0; b < K / 256; b++, g += 8 * (five ? 176 : 144), wq += 8 * 256, dt += 64, mt += 64) {
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(g + 32)), w1 = _mm256_loadu_si256((const __m256i *)(g + 64));
            const __m256i w2 = _mm256_loadu_si256((const __m256i *)(g + 96));
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
            if (runs) _mm256_storeu_ps(ds + 8 * b, d);
            for (int j = 0; j < 8; j++) {
                __m256i sc, mn;
                lanes_scale_min_k4(j, w0, w1, w2, &sc, &mn);
                if (runs) /* sc in both halves of each lane (gemm_tokens_k) */
                    _mm256_storeu_si256((__m256i *)(dt + 8 * j), _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16)));
                else
                    _mm256_storeu_ps(dt + 8 * j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
                _mm256_storeu_ps(mt + 8 * j, _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mn)), negate));
            }
            for (int i = 0; i < 4; i++) /* sub-blocks 2i (low nibbles), 2i + 1 (high) */
                for (int c = 0; c < 8; c++) {
                    __m256i lo, hi;
                    lanes_q45_k(five, g, i, c, &lo, &hi);
                    _mm256_storeu_si256((__m256i *)(wq + 32 * (16 * i + c)), lo);
                    _mm256_storeu_si256((__m256i *)(wq + 32 * (16 * i + 8 + c)), hi);
                }
        }
        return;
    }
    if (type == Q6_K) { /* per block: 16 groups of 16, their int8 scales; the quants as dot_lanes_q6_k builds them */
        for (int64_t b = 0; b < K / 256; b++, g += 8 * 210, wq += 8 * 256, dt += 128, mt += 128) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
            const uint8_t *ch = g + 16;
            for (int gi = 0; gi < 16; gi++) {
                const __m256 ds = _mm256_mul_ps(d, _mm256_cvtepi32_ps(lanes_q6_k_scale(ch, gi)));
                _mm256_storeu_ps(dt + 8 * gi, ds);
                _mm256_storeu_ps(mt + 8 * gi, _mm256_mul_ps(_mm256_set1_ps(-32.0f), ds));
            }
            for (int n = 0; n < 2; n++)
                for (int c = 0; c < 8; c++) { /* elements 128n + 32k + 4c … + 3 of the eight rows */
                    __m256i q[4];
                    lanes_q6_k(ch, n, c, q);
                    for (int k = 0; k < 4; k++) _mm256_storeu_si256((__m256i *)(wq + 32 * (32 * n + 8 * k + c)), q[k]);
                }
        }
        return;
    }
    const int64_t gb = 8 * BLOCK_BYTES(type), hb = HAS_MIN(type) ? 4 : 2; /* a group's block; its d (and m) */
    for (int64_t b = 0; b < K / 32; b++, g += gb, wq += 256) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        _mm256_storeu_ps(dt + 8 * b, d);
        _mm256_storeu_ps(mt + 8 * b, type == Q8_0    ? _mm256_setzero_ps()
                                     : HAS_MIN(type) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)))
                                                     : _mm256_mul_ps(_mm256_set1_ps(-BIAS(type)), d));
        const uint8_t *c = g + 8 * hb;
        if (type == Q8_0) { /* chunk c: elements 4c … 4c + 3 of the eight rows, v as stored */
            memcpy(wq, c, 256);
            continue;
        }
        const __m256i H = HAS_QH(type) ? _mm256_loadu_si256((const __m256i *)c) : _mm256_setzero_si256();
        if (HAS_QH(type)) c += 32;
        for (int j = 0; j < 4; j++) { /* chunk j: elements 4j + i (low nibbles), 16 + 4j + i (high) */
            const __m256i v = _mm256_loadu_si256((const __m256i *)(c + 32 * j));
            __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            if (HAS_QH(type))
                lo = _mm256_or_si256(lo, fifth_bits_of_lanes(H, 4 * j)), hi = _mm256_or_si256(hi, fifth_bits_of_lanes(H, 16 + 4 * j));
            _mm256_storeu_si256((__m256i *)(wq + 32 * j), lo);
            _mm256_storeu_si256((__m256i *)(wq + 32 * (4 + j)), hi);
        }
    }
}

/* y [TT tokens][8 rows of the tile] (row stride N, the first R rows stored) from a tile and TT
 * tokens' qx [TT][K], dxg and sxg [TT][K/L] (each group's dx and dx · Σ qx): per group, DEPTH quads'
 * pairs added in int16 before each widening (see above; DEPTH = 1: Q8_0's sign trick) */
static inline __attribute__((always_inline)) void gemm_tokens(const int L, const int DEPTH, const int TT,
                                                              const uint8_t *wq, const float *dt, const float *mt,
                                                              int64_t K, const int8_t *qx, const float *dxg,
                                                              const float *sxg, float *y, int64_t N, int R) {
    const int64_t ng = K / L;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[GEMM_TOKENS];
    for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m256i s32[GEMM_TOKENS];
        for (int j0 = 0; j0 < L / 4; j0 += DEPTH) {
            __m256i s16[GEMM_TOKENS];
            for (int j = j0; j < j0 + DEPTH; j++) { /* quad j of the group: its vector, against each token's */
                const __m256i w = _mm256_loadu_si256((const __m256i *)(wq + 32 * (g * (L / 4) + j)));
                const __m256i u = DEPTH == 1 ? _mm256_sign_epi8(w, w) : w; /* Q8_0: |v| */
                for (int t = 0; t < TT; t++) {
                    int32_t quad;
                    memcpy(&quad, qx + t * K + g * L + 4 * j, 4);
                    __m256i xq = _mm256_set1_epi32(quad);
                    if (DEPTH == 1) xq = _mm256_sign_epi8(xq, w); /* x with v's sign */
                    const __m256i p = _mm256_maddubs_epi16(u, xq);
                    s16[t] = j == j0 ? p : _mm256_add_epi16(s16[t], p);
                }
            }
            for (int t = 0; t < TT; t++) {
                const __m256i wide = _mm256_madd_epi16(s16[t], ones);
                s32[t] = j0 == 0 ? wide : _mm256_add_epi32(s32[t], wide);
            }
        }
        const __m256 d = _mm256_loadu_ps(dt + GEMM_ROWS * g), m = _mm256_loadu_ps(mt + GEMM_ROWS * g);
        for (int t = 0; t < TT; t++) {
            const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(dxg[t * ng + g]));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[t]), scale, acc[t]);
            acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(sxg[t * ng + g]), acc[t]);
        }
    }
    const __m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(R), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int t = 0; t < TT; t++) _mm256_maskstore_ps(y + t * N, rows, acc[t]);
}

/* Q4_K: x quantized in runs of 256 that share their dx (quantize_x_256, as llama.cpp's q8_K), so
 * that the eight sub-blocks of a weight block sum in int32 before any float step: the int16 pair
 * sums widen by vpmaddwd against the sub-block's six-bit scale sc (dt: sc in both halves of a row's
 * lane) instead of ones, Σ_j sc_j · Σ q·qx over the block (|·| ≤ 8 · 2 · 30480 · 63 < 2^25), then
 * one conversion and one FMA by d · dx for the block (ds, gemm_tile); the mins' part stays one FMA
 * a sub-block (m_j · dx · Σ qx, mt and sxg; in integers too it was no faster). Per sub-block and
 * token that is one float step where gemm_tokens takes four: on a two-core Zen 1, an 8192 × 2048
 * Q4_K product of 128 tokens 47.6 → 43.6 ms (the builds alternating in one process; without any
 * float step at all, 40.4). Q5_K gained 2% so (48.3 → 47.3 ms), Q6_K 6% (61.2 → 57.3); but x in runs
 * rounds coarser: a Llama-3.2-1B-shaped Q4_K_M file's prompt logits (4 prompts of 48 tokens) deviate
 * from exact math by 0.69–0.73× llama.cpp's rms with x in blocks of 32, 0.86–0.89× with Q4_K's in runs,
 * 1.01–1.03× with Q6_K's too; so both keep their blocks of 32. */
static inline __attribute__((always_inline)) void gemm_tokens_k(const int DEPTH, const int TT, const uint8_t *wq,
                                                                const float *dt, const float *mt, const float *ds,
                                                                int64_t K, const int8_t *qx, const float *dxg,
                                                                const float *sxg, float *y, int64_t N, int R) {
    const int64_t ng = K / 32;
    __m256 acc[GEMM_TOKENS];
    for (int t = 0; t < TT; t++) acc[t] = _mm256_setzero_ps();
    __m256i s32[GEMM_TOKENS];
    for (int t = 0; t < TT; t++) s32[t] = _mm256_setzero_si256(); /* (for the compiler: g = 0 sets them) */
    for (int64_t g = 0; g < ng; g++) {
        const __m256i sc = _mm256_loadu_si256((const __m256i *)(dt + GEMM_ROWS * g));
        for (int j0 = 0; j0 < 8; j0 += DEPTH) {
            __m256i s16[GEMM_TOKENS];
            for (int j = j0; j < j0 + DEPTH; j++) { /* quad j of sub-block g, against each token's */
                const __m256i w = _mm256_loadu_si256((const __m256i *)(wq + 32 * (8 * g + j)));
                for (int t = 0; t < TT; t++) {
                    int32_t quad;
                    memcpy(&quad, qx + t * K + 32 * g + 4 * j, 4);
                    const __m256i p = _mm256_maddubs_epi16(w, _mm256_set1_epi32(quad));
                    s16[t] = j == j0 ? p : _mm256_add_epi16(s16[t], p);
                }
            }
            for (int t = 0; t < TT; t++) { /* a block's first widening starts its sums (zeroing them after
                                              * each block's float step instead ran ~3% slower) */
                const __m256i wide = _mm256_madd_epi16(s16[t], sc);
                s32[t] = (g % 8 == 0 && j0 == 0) ? wide : _mm256_add_epi32(s32[t], wide);
            }
        }
        const __m256 m = _mm256_loadu_ps(mt + GEMM_ROWS * g);
        for (int t = 0; t < TT; t++) acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(sxg[t * ng + g]), acc[t]);
        if (g % 8 == 7) {
            const __m256 d = _mm256_loadu_ps(ds + GEMM_ROWS * (g / 8));
            for (int t = 0; t < TT; t++) {
                const __m256 scale = _mm256_mul_ps(d, _mm256_set1_ps(dxg[t * ng + g]));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[t]), scale, acc[t]);
            }
        }
    }
    const __m256i rows = _mm256_cmpgt_epi32(_mm256_set1_epi32(R), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int t = 0; t < TT; t++) _mm256_maskstore_ps(y + t * N, rows, acc[t]);
}

#define GEMM_FN(NAME, L, DEPTH, TT)                                                                     \
    static void NAME##_##TT(const uint8_t *wq, const float *dt, const float *mt, const float *ds, int64_t K, \
                            const int8_t *qx, const float *dxg, const float *sxg, float *y, int64_t N, int R) { \
        (void)ds;                                                                                       \
        gemm_tokens(L, DEPTH, TT, wq, dt, mt, K, qx, dxg, sxg, y, N, R);                                \
    }
#define GEMM_FNS(NAME, L, DEPTH)                                                                        \
    GEMM_FN(NAME, L, DEPTH, 1) GEMM_FN(NAME, L, DEPTH, 2) GEMM_FN(NAME, L, DEPTH, 3) GEMM_FN(NAME, L, DEPTH, 4) \
    static const gemm_fn NAME[GEMM_TOKENS + 1] = {0, NAME##_1, NAME##_2, NAME##_3, NAME##_4};
GEMM_FNS(gemm_q4, 32, 8)
GEMM_FNS(gemm_q5, 32, 4)
GEMM_FNS(gemm_q6, 16, 2)
GEMM_FNS(gemm_q8, 32, 1)
#define GEMM_K_FN(NAME, DEPTH, TT)                                                                      \
    static void NAME##_##TT(const uint8_t *wq, const float *dt, const float *mt, const float *ds, int64_t K, \
                            const int8_t *qx, const float *dxg, const float *sxg, float *y, int64_t N, int R) { \
        gemm_tokens_k(DEPTH, TT, wq, dt, mt, ds, K, qx, dxg, sxg, y, N, R);                            \
    }
#define GEMM_K_FNS(NAME, DEPTH)                                                                         \
    GEMM_K_FN(NAME, DEPTH, 1) GEMM_K_FN(NAME, DEPTH, 2) GEMM_K_FN(NAME, DEPTH, 3) GEMM_K_FN(NAME, DEPTH, 4) \
    static const gemm_fn NAME[GEMM_TOKENS + 1] = {0, NAME##_1, NAME##_2, NAME##_3, NAME##_4};
GEMM_K_FNS(gemm_q4_k, 8)

/* a type's kernels by token count (see gemm_tokens, gemm_tokens_k) */
static const gemm_fn *gemm_fns(int type) {
    if (type == Q4_K) return gemm_q4_k;
    if (type == Q8_0) return gemm_q8;
    if (type == Q6_K) return gemm_q6;
    return type == Q5_0 || type == Q5_1 || type == Q5_K ? gemm_q5 : gemm_q4;
}
#else
/* one packed step of a SPLIT type (o: its 8 scales d, the 8 mins m of Q4_1 and Q5_1, the 8 qh of Q5_0
 * and Q5_1, then its quants, see tc_pack), blocks j0 … j1 − 1 of it → those blocks' unsigned quants q
 * [32 per block] and d, m as gemm_row gives them, read in place: Q8_0's quants are stored as v + 128
 * already, and a run's low nibbles are two consecutive blocks (4h, 4h + 1), its high nibbles the next
 * two, each plus 16 where its block's qh has the element's bit */
static void gemm_split_step(int type, const uint8_t *o, int j0, int j1, uint8_t *q, float *d, float *m) {
    const int hb = HAS_MIN(type) ? 4 : 2;
    const uint8_t *qh = o + 8 * hb, *qs = qh + (HAS_QH(type) ? 32 : 0);
    for (int j = j0; j < j1; j++) {
        d[j - j0] = f16(o + 2 * j);
        m[j - j0] = type == Q8_0 ? -128.0f * d[j - j0] : HAS_MIN(type) ? f16(o + 16 + 2 * j) : -BIAS(type) * d[j - j0];
    }
    if (type == Q8_0) {
        memcpy(q, qs + 32 * j0, (size_t)(32 * (j1 - j0)));
        return;
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int j = j0; j < j1; j += 2) { /* blocks j, j + 1: half (j / 2) % 2 of run j / 4 */
        const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * (j / 4)));
        __m512i u = _mm512_and_si512((j / 2) % 2 ? _mm512_srli_epi16(v, 4) : v, low4);
        if (HAS_QH(type)) { /* the fifth bits of blocks j, j + 1 */
            uint64_t bits;
            memcpy(&bits, qh + 4 * j, 8);
            u = _mm512_mask_add_epi8(u, _cvtu64_mask64(bits), u, _mm512_set1_epi8(16));
        }
        _mm512_storeu_si512((void *)(q + 32 * (j - j0)), u);
    }
}

/* row n of a packed weight of a SPLIT type → gemm_row's q, d, m, read from its group in place (no
 * row put back together as stored first) */
static void gemm_packed_row(const tc_weight *p, int64_t n, uint8_t *q, float *d, float *m) {
    const int type = (int)p->type;
    const int64_t rb = p->row_bytes, sb = step_bytes(type), steps = p->k / 256, r = n % ROWS;
    const int64_t tail = rb - steps * sb;
    const uint8_t *group = p->w + (n - r) * rb, *at = group + steps * ROWS * sb;
    for (int64_t st = 0; st < steps; st++, q += 256, d += 8, m += 8)
        gemm_split_step(type, group + (st * ROWS + r) * sb, 0, 8, q, d, m);
    if (SPLIT_TAIL(type, p->k)) /* row r's two blocks: slots 2r, 2r + 1 of the group's split tail */
        gemm_split_step(type, at, (int)(2 * r), (int)(2 * r + 2), q, d, m);
    else if (tail)
        gemm_row(type, at + r * tail, p->k - 256 * steps, q, d, m);
}

/* 16 rows of 16 int32 each (rows[r], a row stride apart) transposed into out [16][16]: out[i][r] =
 * rows[r][i], four rounds of shuffles */
static inline void transpose_rows(const uint8_t *rows, int64_t stride, uint8_t *out) {
    __m512i a[16], t[16];
    for (int r = 0; r < 16; r++) a[r] = _mm512_loadu_si512((const void *)(rows + r * stride));
    for (int r = 0; r < 16; r += 2) { /* 32-bit pairs of rows r, r + 1 */
        t[r] = _mm512_unpacklo_epi32(a[r], a[r + 1]);
        t[r + 1] = _mm512_unpackhi_epi32(a[r], a[r + 1]);
    }
    for (int r = 0; r < 16; r += 4) /* 64-bit: rows r … r + 3 */
        for (int k = 0; k < 2; k++) {
            a[r + k] = _mm512_unpacklo_epi64(t[r + k], t[r + 2 + k]);
            a[r + 2 + k] = _mm512_unpackhi_epi64(t[r + k], t[r + 2 + k]);
        }
    for (int r = 0; r < 16; r += 8) /* 128-bit lanes: rows r … r + 7 */
        for (int k = 0; k < 4; k++) {
            t[r + k] = _mm512_shuffle_i32x4(a[r + k], a[r + 4 + k], 0x88);
            t[r + 4 + k] = _mm512_shuffle_i32x4(a[r + k], a[r + 4 + k], 0xDD);
        }
    for (int k = 0; k < 8; k++) { /* the two halves of 16 rows */
        a[k] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0x88);
        a[k + 8] = _mm512_shuffle_i32x4(t[k], t[k + 8], 0xDD);
    }
    for (int k = 0; k < 16; k++) /* a[k], lane r: rows[r][i], i = k with its two low bits swapped */
        _mm512_storeu_si512((void *)(out + 64 * ((k & 12) | (k & 1) << 1 | (k >> 1 & 1))), a[k]);
}

/* y [TT tokens][16 rows of the tile] (row stride N, the first R rows stored) from a tile and TT
 * tokens' qx [TT][K], dxg and sxg [TT][K/L] (each group's dx and dx · Σ qx): per group, the L/4
 * quads of the tile against each token's quad broadcast, then one FMA for d·dx·Σ q·qx and one for
 * m·dx·Σ qx (TYPE-free: L and TT are compile-time constants) */
static inline __attribute__((always_inline)) void gemm_tokens(const int L, const int TT, const uint8_t *wq,
                                                              const float *dt, const float *mt, int64_t K,
                                                              const int8_t *qx, const float *dxg,
                                                              const float *sxg, float *y, int64_t N, int R) {
    const int64_t ng = K / L;
    __m512 acc[GEMM_TOKENS];
    for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m512i s[GEMM_TOKENS];
        for (int t = 0; t < TT; t++) s[t] = _mm512_setzero_si512();
        for (int j = 0; j < L / 4; j++) {
            const __m512i w = _mm512_loadu_si512((const void *)(wq + 64 * (g * (L / 4) + j)));
            for (int t = 0; t < TT; t++) {
                int32_t quad;
                memcpy(&quad, qx + t * K + g * L + 4 * j, 4);
                s[t] = _mm512_dpbusd_epi32(s[t], w, _mm512_set1_epi32(quad));
            }
        }
        const __m512 d = _mm512_loadu_ps(dt + GEMM_ROWS * g), m = _mm512_loadu_ps(mt + GEMM_ROWS * g);
        for (int t = 0; t < TT; t++) {
            const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(dxg[t * ng + g]));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), scale, acc[t]);
            acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(sxg[t * ng + g]), acc[t]);
        }
    }
    const __mmask16 rows = (__mmask16)((1u << R) - 1);
    for (int t = 0; t < TT; t++) _mm512_mask_storeu_ps(y + t * N, rows, acc[t]);
}

#define GEMM_FN(L, TT)                                                                                      \
    static void gemm_##L##_##TT(const uint8_t *wq, const float *dt, const float *mt, const float *ds, int64_t K, \
                                const int8_t *qx, const float *dxg, const float *sxg, float *y, int64_t N,   \
                                int R) {                                                                     \
        (void)ds;                                                                                            \
        gemm_tokens(L, TT, wq, dt, mt, K, qx, dxg, sxg, y, N, R);                                            \
    }
#define GEMM_FNS(L) GEMM_FN(L, 1) GEMM_FN(L, 2) GEMM_FN(L, 3) GEMM_FN(L, 4) GEMM_FN(L, 5) GEMM_FN(L, 6) \
    GEMM_FN(L, 7) GEMM_FN(L, 8)
GEMM_FNS(32)
GEMM_FNS(16)
static const gemm_fn gemm_32[GEMM_TOKENS + 1] = {0, gemm_32_1, gemm_32_2, gemm_32_3, gemm_32_4,
                                                 gemm_32_5, gemm_32_6, gemm_32_7, gemm_32_8};
static const gemm_fn gemm_16[GEMM_TOKENS + 1] = {0, gemm_16_1, gemm_16_2, gemm_16_3, gemm_16_4,
                                                 gemm_16_5, gemm_16_6, gemm_16_7, gemm_16_8};

/* a type's kernels by token count (see gemm_tokens) */
static const gemm_fn *gemm_fns(int type) { return gemm_group(type) == 16 ? gemm_16 : gemm_32; }
#endif

/* a thread's tile and row buffers (see gemm_tile), and the calling thread's half-block scales of x
 * (Q6_K, see gemm_int8), grown as needed and kept */
static _Thread_local void *tile_q, *tile_f, *halves_f;
static _Thread_local int64_t tile_q_cap, tile_f_cap, halves_f_cap;

/* rows n0 … n0 + R − 1 (R ≤ GEMM_ROWS) of the plan's weight as a tile: wq [K/4][GEMM_ROWS][4], dt and
 * mt [K/L][GEMM_ROWS] (rows R … GEMM_ROWS − 1 zero); where x comes in runs of 256 (gemm_x_runs: Q4_K
 * and Q5_K on AVX2) dt holds each sub-block's scale sc as int16 in both halves of a row's lane and
 * ds [K/256][GEMM_ROWS] each block's d (gemm_tokens_k). 0, or −2 when out of memory. A packed
 * group of eight rows is unpacked straight into its tile (AVX2); otherwise each row's quants go to
 * a row buffer [GEMM_ROWS][K], transposed GEMM_ROWS quads at a time. */
static int gemm_tile(const tc_weight *p, int64_t n0, int R, uint8_t **wq, float **dt, float **mt, float **ds) {
    const int type = (int)p->type, runs = gemm_x_runs(type);
    const int64_t K = p->k, ng = K / gemm_group(type), nd = GEMM_ROWS * (K / 256);
    uint8_t *q = (uint8_t *)grown(&tile_q, &tile_q_cap, 2 * GEMM_ROWS * K);
    float *f = (float *)grown(&tile_f, &tile_f_cap, (int64_t)sizeof(float) * (2 * (GEMM_ROWS + 1) * ng + nd));
    if (!q || !f) return -2;
    uint8_t *rows = q + GEMM_ROWS * K;
    *wq = q, *dt = f, *mt = f + GEMM_ROWS * ng, *ds = f + 2 * GEMM_ROWS * ng;
    float *row_d = *ds + nd, *row_m = row_d + ng;
    const int64_t full = p->n - p->n % ROWS; /* packed rows (see tc_pack) */
#if LANES
    if (p->packed && n0 + GEMM_ROWS <= full) { /* n0 is a multiple of 8: one group */
        gemm_lanes_tile(type, p->w + n0 * p->row_bytes, K, q, *dt, *mt, *ds);
        return 0;
    }
#endif
    /* a packed row's bytes as stored (AVX-512; with LANES every packed row took the branch above) */
    uint8_t *bytes = p->packed && !LANES ? row_buffer(p) : 0;
    if (p->packed && !LANES && !bytes) return -2;
    if (R < GEMM_ROWS) {
        memset(rows + R * K, 0, (size_t)((GEMM_ROWS - R) * K));
        memset(f, 0, sizeof(float) * (size_t)(2 * GEMM_ROWS * ng + nd));
    }
    for (int r = 0; r < R; r++) {
        const uint8_t *row = 0;
#if !LANES
        if (p->packed && SPLIT(type) && n0 + r < full)
            gemm_packed_row(p, n0 + r, rows + r * K, row_d, row_m);
        else
#endif
            gemm_row(type, row = stored_row(p, n0 + r, bytes), K, rows + r * K, row_d, row_m);
        for (int64_t g = 0; g < ng; g++) (*dt)[GEMM_ROWS * g + r] = row_d[g], (*mt)[GEMM_ROWS * g + r] = row_m[g];
        if (runs) /* gemm_row gave each sub-block's sc: as int16 twice; each block's d from the row */
            for (int64_t g = 0; g < ng; g++) {
                const int32_t sc = (int32_t)row_d[g], both = sc | sc << 16;
                memcpy(*dt + GEMM_ROWS * g + r, &both, 4);
                if (g % 8 == 0) (*ds)[GEMM_ROWS * (g / 8) + r] = f16(row + (g / 8) * 144); /* Q4_K's blocks */
            }
    }
    int64_t i = 0; /* quads */
    for (; i + GEMM_ROWS <= K / 4; i += GEMM_ROWS) transpose_rows(rows + 4 * i, K, q + 4 * GEMM_ROWS * i);
    for (; i < K / 4; i++)
        for (int r = 0; r < GEMM_ROWS; r++) memcpy(q + 4 * GEMM_ROWS * i + 4 * r, rows + r * K + 4 * i, 4);
    return 0;
}

/* y [T, N] = x [T, K] · Wᵀ by tiles of GEMM_ROWS rows, each thread building its own (version 4); on
 * the calling thread alone when `one_thread` (as tc_dequant_rows) */
static int gemm_int8(const tc_weight *p, const float *x, int64_t T, float *y, int64_t one_thread) {
    const int type = (int)p->type, L = gemm_group(type);
    const int64_t N = p->n, K = p->k, nb = K / 32, ng = K / L, tiles = (N + GEMM_ROWS - 1) / GEMM_ROWS;
    const gemm_fn *fns = gemm_fns(type);
    const int runs = gemm_x_runs(type); /* x in runs of 256 (gemm_tokens_k) */
    int8_t *qx;
    float *dx, *sx, *dxg, *sxg;
    if (!scratch_x(T * K, T * nb, &qx, &dx, &sx)) return -2;
    float *halves = 0; /* L = 16: each half block's dx and dx · Σ qx */
    if (L == 16 && !(halves = (float *)grown(&halves_f, &halves_f_cap, (int64_t)sizeof(float) * 2 * T * ng)))
        return -2;
    dxg = L == 16 ? halves : dx, sxg = L == 16 ? halves + T * ng : sx;
    int failed = 0;
#pragma omp parallel if (!one_thread)
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < T; t++) {
            (runs ? quantize_x_256 : quantize_x)(x + t * K, nb, qx + t * K, dx + t * nb, sx + t * nb);
            if (L == 16)
                for (int64_t g = 0; g < ng; g++) {
                    int sum = 0;
                    for (int e = 0; e < 16; e++) sum += qx[t * K + 16 * g + e];
                    dxg[t * ng + g] = dx[t * nb + g / 2], sxg[t * ng + g] = dx[t * nb + g / 2] * (float)sum;
                }
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < tiles; i++) {
            const int64_t n0 = i * GEMM_ROWS;
            const int R = (int)(N - n0 < GEMM_ROWS ? N - n0 : GEMM_ROWS);
            uint8_t *wq;
            float *dt, *mt, *ds;
            if (gemm_tile(p, n0, R, &wq, &dt, &mt, &ds)) {
                failed = 1;
                continue;
            }
            for (int64_t t0 = 0; t0 < T; t0 += GEMM_TOKENS) {
                const int tt = (int)(T - t0 < GEMM_TOKENS ? T - t0 : GEMM_TOKENS);
                fns[tt](wq, dt, mt, ds, K, qx + t0 * K, dxg + t0 * ng, sxg + t0 * ng, y + t0 * N + n0, N, R);
            }
        }
    }
    return failed ? -2 : 0;
}
#endif


/* ── version 2f, for F32, F16 and BF16: the weight's own elements read in place ──────────────────
 * No dequantized row: each thread takes a contiguous range of rows and multiplies the stored
 * elements (F16 and BF16 widened in registers) by x with float32 FMAs, several independent sums at
 * once (four per row for one token; one row against every token for up to MAX_FLOAT_TOKENS). The
 * caller uses a float GEMM for more tokens. Sums are in float32, in an order of our own: the tests
 * hold them to a float64 product within float32 rounding.
 */
enum { F32 = 0, MAX_FLOAT_TOKENS = 8 };

/* the token limits above, which the Python side keeps too (quant_kernels.FEW_TOKENS and
 * FEW_FLOAT_TOKENS): it loads the library only where they agree */
int tc_limit(int which) { return which == 0 ? FEW_TOKENS : which == 1 ? MAX_FLOAT_TOKENS : -1; }

static inline float float_at(int type, const uint8_t *w, int64_t i) {
    if (type == F32) {
        float f;
        memcpy(&f, w + 4 * i, 4);
        return f;
    }
    if (type == F16) return f16(w + 2 * i);
    uint32_t u = (uint32_t)((const uint16_t *)w)[i] << 16; /* BF16 */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#if defined(__AVX512F__)
#define HAVE_FLOAT_DOT 1
typedef __m512 vf;
#define VL 16
static inline vf vload_w(int type, const uint8_t *w, int64_t i) {
    if (type == F32) return _mm512_loadu_ps((const float *)w + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)(w + 2 * i));
    if (type == F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#define VLOAD _mm512_loadu_ps
#define VFMA _mm512_fmadd_ps
#define VZERO _mm512_setzero_ps
#define VADD _mm512_add_ps
#define VSUM _mm512_reduce_add_ps
#define VSET1 _mm512_set1_ps
#define VMUL _mm512_mul_ps
#define VSUB _mm512_sub_ps
#define VDIV _mm512_div_ps
#define VSTORE _mm512_storeu_ps
static inline vf vload_half(const uint16_t *h) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h)); }
/* v where ok[lane] is not 0, else 0 */
static inline vf vkeep(vf v, const uint8_t *ok) {
    return _mm512_maskz_mov_ps(
        _mm512_cmpneq_epi32_mask(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)ok)), _mm512_setzero_si512()), v);
}
/* lanes 0 … n − 1 of v to p (n ≤ VL) */
static inline void vstore_first(float *p, vf v, int64_t n) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v); }
/* lanes that are NaN become 0 */
static inline vf vnan_to_0(vf v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v); }
static inline __m512i vround_to_int(vf v) { return _mm512_cvtps_epi32(v); }
static inline vf vpow2(__m512i n) { /* 2ⁿ from the exponent bits, n + 127 in 0 … 255 */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
}
#define VMAX _mm512_max_ps
#define VMIN _mm512_min_ps
#define VFNMA _mm512_fnmadd_ps
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define HAVE_FLOAT_DOT 1
typedef __m256 vf;
#define VL 8
static inline vf vload_w(int type, const uint8_t *w, int64_t i) {
    if (type == F32) return _mm256_loadu_ps((const float *)w + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)(w + 2 * i));
    if (type == F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline float vsum8(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
#define VLOAD _mm256_loadu_ps
#define VFMA _mm256_fmadd_ps
#define VZERO _mm256_setzero_ps
#define VADD _mm256_add_ps
#define VSUM vsum8
#define VSET1 _mm256_set1_ps
#define VMUL _mm256_mul_ps
#define VSUB _mm256_sub_ps
#define VDIV _mm256_div_ps
#define VSTORE _mm256_storeu_ps
static inline vf vload_half(const uint16_t *h) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)); }
static inline vf vkeep(vf v, const uint8_t *ok) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)ok));
    return _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(b, _mm256_setzero_si256())), v);
}
static inline void vstore_first(float *p, vf v, int64_t n) {
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
}
static inline vf vnan_to_0(vf v) { return _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); }
static inline __m256i vround_to_int(vf v) { return _mm256_cvtps_epi32(v); }
static inline vf vpow2(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}
#define VMAX _mm256_max_ps
#define VMIN _mm256_min_ps
#define VFNMA _mm256_fnmadd_ps
#else
#define HAVE_FLOAT_DOT 0
#endif

#if HAVE_FLOAT_DOT
/* exp_f32 on VL lanes (the same steps, NaN kept: min/max with the constant first return x when x
 * is NaN) */
static inline vf vexp(vf x) {
    x = VMAX(VSET1(-88.0f), VMIN(VSET1(88.8f), x));
    const vf shift = VSET1(12582912.0f);
    const vf n = vnan_to_0(VSUB(VFMA(x, VSET1(1.44269504088896341f), shift), shift));
    const vf r = VFMA(n, VSET1(2.12194440e-4f), VFNMA(n, VSET1(0.693359375f), x));
    vf q = VSET1(1.9875691500e-4f);
    q = VFMA(q, r, VSET1(1.3981999507e-3f));
    q = VFMA(q, r, VSET1(8.3334519073e-3f));
    q = VFMA(q, r, VSET1(4.1665795894e-2f));
    q = VFMA(q, r, VSET1(1.6666665459e-1f));
    q = VFMA(q, r, VSET1(5.0000001201e-1f));
    q = VADD(VFMA(q, VMUL(r, r), r), VSET1(1.0f));
    return VMUL(q, vpow2(vround_to_int(n)));
}

/* row w [K] of a float type times one x [K]: read in order (one stream: ~1.6× the bandwidth of four
 * rows interleaved on one core), four sums in flight, one horizontal sum; `type` is a constant where
 * this is inlined */
static inline __attribute__((always_inline)) float float_row1(int type, const uint8_t *w, int64_t K,
                                                              const float *x) {
    const int64_t kv = K / VL * VL, es = type == F32 ? 4 : 2; /* bytes an element */
    vf a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
    int64_t i = 0;
    for (; i + 4 * VL <= kv; i += 4 * VL) {
        ahead_other(w + es * i, 4 * VL * es);
        a0 = VFMA(vload_w(type, w, i), VLOAD(x + i), a0);
        a1 = VFMA(vload_w(type, w, i + VL), VLOAD(x + i + VL), a1);
        a2 = VFMA(vload_w(type, w, i + 2 * VL), VLOAD(x + i + 2 * VL), a2);
        a3 = VFMA(vload_w(type, w, i + 3 * VL), VLOAD(x + i + 3 * VL), a3);
    }
    for (; i < kv; i += VL) a0 = VFMA(vload_w(type, w, i), VLOAD(x + i), a0);
    float s = VSUM(VADD(VADD(a0, a1), VADD(a2, a3)));
    for (; i < K; i++) s += float_at(type, w, i) * x[i];
    return s;
}

/* row n of a float weight, w [K], times each of T tokens x [T, K] into y[t·N + n] */
static inline __attribute__((always_inline)) void float_row_tokens(int type, const uint8_t *w, int64_t K,
                                                                   const float *x, int64_t T, float *y,
                                                                   int64_t N, int64_t n) {
    const int64_t kv = K / VL * VL, es = type == F32 ? 4 : 2;
    vf acc[MAX_FLOAT_TOKENS];
    for (int64_t t = 0; t < T; t++) acc[t] = VZERO();
    for (int64_t i = 0; i < kv; i += VL) {
        if (i % (4 * VL) == 0) ahead_other(w + es * i, 4 * VL * es);
        const vf wv = vload_w(type, w, i);
        for (int64_t t = 0; t < T; t++) acc[t] = VFMA(wv, VLOAD(x + t * K + i), acc[t]);
    }
    for (int64_t t = 0; t < T; t++) {
        float s = VSUM(acc[t]);
        for (int64_t i = kv; i < K; i++) s += float_at(type, w, i) * x[t * K + i];
        y[t * N + n] = s;
    }
}

/* y [T, N] = x [T, K] · Wᵀ for a float type; `type` is a constant where this is inlined */
static inline __attribute__((always_inline)) void float_product(int type, const uint8_t *W, int64_t row_bytes,
                                                                int64_t N, int64_t K, const float *x,
                                                                int64_t T, float *y) {
    if (T == 1) {
#pragma omp parallel for schedule(static) if (N * row_bytes >= PARALLEL_BYTES)
        for (int64_t n = 0; n < N; n++) y[n] = float_row1(type, W + n * row_bytes, K, x);
        return;
    }
#pragma omp parallel for schedule(static) if (N * row_bytes >= PARALLEL_BYTES)
    for (int64_t n = 0; n < N; n++) float_row_tokens(type, W + n * row_bytes, K, x, T, y, N, n);
}

/* row n of weight p (a float type) times T tokens, as float_product computes it: the type a constant
 * in each branch */
static void float_row_of(const tc_weight *p, int64_t n, const float *x, int64_t T, float *y) {
    const uint8_t *w = p->w + n * p->row_bytes;
    if (T == 1) {
        y[n] = p->type == F32 ? float_row1(F32, w, p->k, x) : p->type == F16 ? float_row1(F16, w, p->k, x)
                                                                              : float_row1(BF16, w, p->k, x);
    } else if (p->type == F32) {
        float_row_tokens(F32, w, p->k, x, T, y, p->n, n);
    } else if (p->type == F16) {
        float_row_tokens(F16, w, p->k, x, T, y, p->n, n);
    } else {
        float_row_tokens(BF16, w, p->k, x, T, y, p->n, n);
    }
}

static void float_product_f32(const uint8_t *W, int64_t rb, int64_t N, int64_t K, const float *x, int64_t T,
                              float *y) {
    float_product(F32, W, rb, N, K, x, T, y);
}
static void float_product_f16(const uint8_t *W, int64_t rb, int64_t N, int64_t K, const float *x, int64_t T,
                              float *y) {
    float_product(F16, W, rb, N, K, x, T, y);
}
static void float_product_bf16(const uint8_t *W, int64_t rb, int64_t N, int64_t K, const float *x, int64_t T,
                               float *y) {
    float_product(BF16, W, rb, N, K, x, T, y);
}
#endif

/* 1 when `type` (F32, F16, BF16) has the in-place float product for up to MAX_FLOAT_TOKENS tokens */
int tc_float_direct(int type) {
    return HAVE_FLOAT_DOT && (type == F32 || type == F16 || type == BF16);
}

/* 1 when the product of `type` quantizes x to int8 (version 3), 0 when it is in float32 (version 2) */
int tc_quantizes_x(int type) {
    return HAVE_INT8_DOT && (type == Q8_0 || type == Q4_0 || type == Q4_1 || type == Q5_0 || type == Q5_1 ||
                             type == Q4_K || type == Q5_K || type == Q6_K);
}

/* how many elements of x share one int8 scale in a type's int8 GEMM: 256 where gemm_x_runs (Q4_K on
 * AVX2, as llama.cpp's q8_K), else 32 (as its few-token products); 0 where it has none */
int tc_gemm_x_block(int type) {
    if (!tc_quantizes_x(type)) return 0;
#if HAVE_INT8_DOT
    return gemm_x_runs(type) ? 256 : 32;
#else
    return 0;
#endif
}

/* y [T, N] = x [T, K] · Wᵀ by the int8 GEMM (a type of tc_quantizes_x, any T), on the calling thread
 * alone when `one_thread` (the NumPy target: see tc_dequant_rows) */
int tc_gemm_linear(const tc_weight *p, const float *x, int64_t T, float *y, int64_t one_thread) {
    if (!tc_quantizes_x((int)p->type) || (p->packed && !tc_packs((int)p->type))) return -1;
#if HAVE_INT8_DOT
    return gemm_int8(p, x, T, y, one_thread);
#else
    (void)x, (void)T, (void)y, (void)one_thread;
    return -1;
#endif
}

/* y [T, N] = x [T, K] · Wᵀ of the plan's weight: for few tokens (FEW_TOKENS at most), any type; for
 * more, the types of tc_quantizes_x, by the int8 GEMM (the caller uses a float GEMM on dequantized
 * tiles for the others) */
int tc_linear(const tc_weight *p, const float *x, int64_t T, float *y) {
    const int type = (int)p->type;
    const uint8_t *W = p->w;
    const int64_t row_bytes = p->row_bytes, N = p->n, K = p->k;
    if (p->packed && !tc_packs(type)) return -4;
#if HAVE_FLOAT_DOT
    if (tc_float_direct(type) && T <= MAX_FLOAT_TOKENS) {
        if (type == F32) float_product_f32(W, row_bytes, N, K, x, T, y);
        else if (type == F16) float_product_f16(W, row_bytes, N, K, x, T, y);
        else float_product_bf16(W, row_bytes, N, K, x, T, y);
        return 0;
    }
#endif
    row_fn row = row_kernel(type);
    if (!row) return -1;
#if HAVE_INT8_DOT
    if (tc_quantizes_x(type)) {
        if (T > FEW_TOKENS) return gemm_int8(p, x, T, y, 0);
        return tc_matmul_int8(type, W, row_bytes, N, K, (int)p->packed, x, T, y);
    }
#endif
    int failed = 0;
#pragma omp parallel if (N * row_bytes >= PARALLEL_BYTES)
    {
        float *buf = (float *)aligned_alloc(64, (size_t)((K + 15) / 16 * 64));  /* one row, in L1 */
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            if (!buf) continue;
            row(W + n * row_bytes, buf, K);
            for (int64_t t = 0; t < T; t++) {
                const float *xt = x + t * K;
                float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                for (int64_t i = 0; i < K; i++) acc += buf[i] * xt[i];
                y[t * N + n] = acc;
            }
        }
        free(buf);
    }
    return failed ? -2 : 0;
}

/* y_a, y_b, y_c = x · W_aᵀ, x · W_bᵀ, x · W_cᵀ (c, y_c may be NULL): consecutive card steps that
 * multiply one x (Q, K and V of attention), one call instead of one per weight */
/* y_i = x · W_iᵀ for n ≤ 3 weights of one x [T, K] as one int8 product (int8_products) when each is a
 * type whose x is quantized: returns 1 and sets *code; 0 when they are not (the caller multiplies one
 * weight at a time). Each y_i is what tc_linear gives: the same x blocks, the same sums. */
static int int8_together(const tc_weight *const *ws, float *const *ys, int n, const float *x, int64_t T, int *code) {
#if HAVE_INT8_DOT
    int8_part parts[3];
    for (int i = 0; i < n; i++) {
        const tc_weight *w = ws[i];
        if (!tc_quantizes_x((int)w->type) || w->k != ws[0]->k || (w->packed && !tc_packs((int)w->type))) return 0;
        int8_part_of((int)w->type, w->w, w->row_bytes, w->n, w->k, (int)w->packed, ys[i], &parts[i]);
    }
    *code = int8_products(parts, n, ws[0]->k, x, T);
    return 1;
#else
    (void)ws, (void)ys, (void)n, (void)x, (void)T, (void)code;
    return 0;
#endif
}

/* the same for n ≤ 3 weights of the float types read in place (F32, F16, BF16; few tokens): one
 * parallel loop over all their rows, each row as tc_linear computes it. Q, K and V of a small
 * model are short streams (SmolLM2's K and V: 221 KB each in F16) that each paid a fork, a join and
 * the prefetchers' start */
static int float_together(const tc_weight *const *ws, float *const *ys, int n, const float *x, int64_t T, int *code) {
#if HAVE_FLOAT_DOT
    int64_t first[4] = {0}, bytes = 0;
    if (T > MAX_FLOAT_TOKENS) return 0;
    for (int i = 0; i < n; i++) {
        const tc_weight *w = ws[i];
        if (!tc_float_direct((int)w->type) || w->packed || w->k != ws[0]->k) return 0;
        first[i + 1] = first[i] + w->n, bytes += w->n * w->row_bytes;
    }
#pragma omp parallel for schedule(static) if (bytes >= PARALLEL_BYTES)
    for (int64_t r = 0; r < first[n]; r++) {
        int i = 0;
        while (r >= first[i + 1]) i++;
        float_row_of(ws[i], r - first[i], x, T, ys[i]);
    }
    *code = 0;
    return 1;
#else
    (void)ws, (void)ys, (void)n, (void)x, (void)T, (void)code;
    return 0;
#endif
}

int tc_linears(const tc_weight *a, const tc_weight *b, const tc_weight *c, const float *x, int64_t T, float *ya,
               float *yb, float *yc) {
    const tc_weight *ws[3] = {a, b, c};
    float *ys[3] = {ya, yb, yc};
    int code;
    if (int8_together(ws, ys, c ? 3 : 2, x, T, &code) || float_together(ws, ys, c ? 3 : 2, x, T, &code)) return code;
    code = tc_linear(a, x, T, ya);
    if (code == 0) code = tc_linear(b, x, T, yb);
    if (code == 0 && c) code = tc_linear(c, x, T, yc);
    return code;
}

/* e^x in float32 to about 1 ulp, branch-free so that `omp simd` loops vectorize it (libm's expf is a
 * call per element, and floorf would need -fno-trapping-math): x = n·ln 2 + r with |r| ≤ ln 2 / 2 (ln 2
 * in two parts, Cody and Waite), e^r by a degree-7 polynomial (Cephes' expf coefficients), 2^n built
 * in the exponent bits. Overflows to +∞ past 88.73, gives 0 below about −87.7 (where e^x is a float32
 * subnormal, < 1e-38); NaN stays NaN. */
static inline float exp_f32(float x) {
    x = x > 88.8f ? 88.8f : x; /* → n = 128: the exponent bits of +∞ */
    x = x < -88.0f ? -88.0f : x; /* → n = −127 (as from −87.7 on): the bits of 0 */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* rounded by adding 1.5·2²³ */
    n = n == n ? n : 0.0f; /* NaN: r below stays NaN, and the integer conversion is defined */
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    union { uint32_t u; float f; } two_n = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return p * two_n.f;
}

static _Thread_local float *scratch_h;
static _Thread_local int64_t scratch_h_cap;

/* g [n] ← SiLU(g) · u = g / (1 + e^−g) · u, entry by entry */
static inline void silu_mul(float *g, const float *u, int64_t n) {
    int64_t i = 0;
#if HAVE_FLOAT_DOT /* VL lanes at a time by vexp (exp_f32's NaN test kept `omp simd` from vectorizing it) */
    for (; i + VL <= n; i += VL) {
        const vf x = VLOAD(g + i);
        VSTORE(g + i, VMUL(VDIV(x, VADD(VSET1(1.0f), vexp(VMUL(x, VSET1(-1.0f))))), VLOAD(u + i)));
    }
#endif
    for (; i < n; i++) g[i] = g[i] / (1.0f + exp_f32(-g[i])) * u[i];
}

/* The prelude's SwiGLU for few tokens: y [T, d_e] = W_down · (SiLU(W_gate · x) ⊙ (W_up · x)), x [T, d_e],
 * with each product as tc_linear computes it and SiLU(g) = g / (1 + e^−g). One call instead of three
 * products and two element-wise operations, each of which costs a Python call on every layer. */
int tc_swiglu(const tc_weight *gate, const tc_weight *up, const tc_weight *down, const float *x, int64_t T,
              float *y) {
    const int64_t F = gate->n;
    if (up->n != F || up->k != gate->k || down->k != F) return -3;
    if (2 * T * F > scratch_h_cap) {
        free(scratch_h);
        scratch_h = (float *)malloc(sizeof(float) * (size_t)(2 * T * F));
        scratch_h_cap = scratch_h ? 2 * T * F : 0;
    }
    if (!scratch_h) return -2;
    float *g = scratch_h, *u = scratch_h + T * F;
    const tc_weight *ws[2] = {gate, up};
    float *ys[2] = {g, u};
    int code;
    if (!int8_together(ws, ys, 2, x, T, &code) && !float_together(ws, ys, 2, x, T, &code)) {
        code = tc_linear(gate, x, T, g);
        if (code == 0) code = tc_linear(up, x, T, u);
    }
    if (code != 0) return code;
    silu_mul(g, u, T * F);
    return tc_linear(down, g, T, y);
}

/* g [n] ← SiLU(g) · u in place (SwiGLU's middle step on a prompt's rows, whose products ops_torch
 * makes one at a time), spread over the threads when long */
int tc_silu_mul(float *g, const float *u, int64_t n) {
    const int64_t run = 4096;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_ROWS)
    for (int64_t i = 0; i < n; i += run) silu_mul(g + i, u + i, n - i < run ? n - i : run);
    return 0;
}

/* ── the per-token glue (ops_torch calls these in place of torch's composite operators, which cost
 * 10–30 µs each on one token; on a prompt, rows spread over the threads; tests/engine/test_kernels.py ties
 * each to the card steps it replaces) ─────────────────────────────────────────────────────────────────── */

/* y [R, d] = x / √(Σ x² / d + ε) · γ, row by row */
int tc_rms_norm(const float *x, const float *g, int64_t R, int64_t d, double eps, float *y) {
#pragma omp parallel for schedule(static) if (R * d >= PARALLEL_ROWS)
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < d; i++) ss += xr[i] * xr[i];
        const float s = sqrtf(ss / (float)d + (float)eps);
#pragma omp simd
        for (int64_t i = 0; i < d; i++) yr[i] = xr[i] / s * g[i];
    }
    return 0;
}

/* One head vector x [d] rotated by cos, sin [half]: layout 1 pairs (2i, 2i + 1), 2 halves (i, i + half),
 * 0 none; entries from 2·half on pass unchanged. y may not alias x. */
static inline void rope_row(const float *x, const float *c, const float *s, int64_t d, int64_t half, int layout,
                            float *y) {
    int64_t i0 = 0;
    if (layout == 1) {
        for (int64_t i = 0; i < half; i++) {
            const float a = x[2 * i], b = x[2 * i + 1];
            y[2 * i] = a * c[i] - b * s[i];
            y[2 * i + 1] = a * s[i] + b * c[i];
        }
        i0 = 2 * half;
    } else if (layout == 2) {
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
            const float a = x[i], b = x[i + half];
            y[i] = a * c[i] - b * s[i];
            y[i + half] = a * s[i] + b * c[i];
        }
        i0 = 2 * half;
    }
    for (int64_t i = i0; i < d; i++) y[i] = x[i];
}

/* RoPE of x [R, T, d] (R rows of T positions of a head vector of d entries) with cos, sin [T, half]:
 * pairs (2i, 2i + 1) when `pairs`, else (i, i + half); entries from 2·half on pass unchanged */
int tc_rope(const float *x, const float *c, const float *s, int64_t R, int64_t T, int64_t d, int64_t half,
            int pairs, float *y) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t t = 0; t < T; t++, x += d, y += d) rope_row(x, c + t * half, s + t * half, d, half, pairs ? 1 : 2, y);
    return 0;
}

static _Thread_local float *scratch_s;
static _Thread_local int64_t scratch_s_cap;

static float *scores_scratch(int64_t n) {
    if (n > scratch_s_cap) {
        free(scratch_s);
        scratch_s = (float *)malloc(sizeof(float) * (size_t)n);
        scratch_s_cap = scratch_s ? n : 0;
    }
    return scratch_s;
}

/* ── the float16 KV cache (gqa_args.kv_half): each key and value row rounded to the nearest half
 * float (ties to even) once, as it is written, and read back exactly; llama.cpp's default cache
 * type, half the bytes each decoding step reads ── */

/* f rounded to an IEEE half float, ties to even (overflow to ±∞, NaN kept a NaN) */
static inline uint16_t half_of(float f) {
#ifdef __F16C__
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00; /* NaN */
    if (a >= 0x477FF000u) return sign | 0x7C00; /* 65520 and up (and ∞) round to ∞ */
    if (a < 0x38800000u) { /* under 2⁻¹⁴: a subnormal half. Added to 0.5, the float's last mantissa
                            * bit weighs 2⁻²⁴, a subnormal half's unit: the addition rounds to even */
        float t;
        memcpy(&t, &a, 4);
        t += 0.5f;
        uint32_t bits;
        memcpy(&bits, &t, 4);
        return sign | (uint16_t)(bits - 0x3F000000u);
    }
    /* a normal half: the exponent rebased from 127 to 15, the 13 dropped bits rounded to even */
    return sign | (uint16_t)((a - 0x38000000u + 0x0FFFu + ((a >> 13) & 1u)) >> 13);
#endif
}

static inline float float_of_half(uint16_t h) { return f16((const uint8_t *)&h); }

/* x [d] → y [d] halves */
static inline void round_to_halves(const float *x, uint16_t *y, int64_t d) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= d; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__F16C__)
    for (; i + 8 <= d; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < d; i++) y[i] = half_of(x[i]);
}

/* row j of a cache head's rows of d entries (float32, or halves when kv16) */
static inline const void *kv_row(const void *rows, int64_t j, int64_t d, int kv16) {
    return (const uint8_t *)rows + j * d * (kv16 ? 2 : 4);
}

/* q [d] · k [d] with k halves */
static inline float dot_half(const float *q, const uint16_t *k, int64_t d) {
    int64_t i = 0;
    float acc = 0.0f;
#if HAVE_FLOAT_DOT
    if (d >= VL) { /* two sums in flight */
        vf a = VZERO(), b = VZERO();
        for (; i + 2 * VL <= d; i += 2 * VL) {
            a = VFMA(VLOAD(q + i), vload_half(k + i), a);
            b = VFMA(VLOAD(q + i + VL), vload_half(k + i + VL), b);
        }
        if (i + VL <= d) a = VFMA(VLOAD(q + i), vload_half(k + i), a), i += VL;
        acc = VSUM(VADD(a, b));
    }
#endif
    for (; i < d; i++) acc += q[i] * float_of_half(k[i]);
    return acc;
}

/* The scores of one query row q [d] against keys Kh [S, d] into p [S]: q·k · scale, soft-capped to
 * cap · tanh(score / cap) when cap > 0, −∞ where ok[j] is 0; returns their maximum. */
static float scores_row(const float *q, const void *K_rows, int kv16, int64_t S, int64_t d, const uint8_t *ok,
                        float scale, float cap, float *p) {
    float m = -INFINITY;
    for (int64_t j = 0; j < S; j++) {
        float acc = 0.0f;
        if (kv16) {
            acc = dot_half(q, (const uint16_t *)K_rows + j * d, d);
        } else {
            const float *k = (const float *)K_rows + j * d;
#if HAVE_FLOAT_DOT
            if (d % VL == 0) {
                vf a = VMUL(VLOAD(q), VLOAD(k));
                for (int64_t i = VL; i < d; i += VL) a = VFMA(VLOAD(q + i), VLOAD(k + i), a);
                acc = VSUM(a);
            } else
#endif
            {
#pragma omp simd reduction(+ : acc)
                for (int64_t i = 0; i < d; i++) acc += q[i] * k[i];
            }
        }
        float sc = acc * scale;
        if (cap > 0.0f) sc = cap * tanhf(sc / cap);
        p[j] = ok[j] ? sc : -INFINITY;
        m = p[j] > m ? p[j] : m;
    }
    return m;
}

/* The keys a query row may read, from the first allowed one (*j0) to the last (*j1, exclusive): a
 * causal row of a prompt reads its own past, a sliding window its width; the others weigh 0 */
static inline void allowed_span(const uint8_t *ok, int64_t S, int64_t *j0, int64_t *j1) {
    int64_t a = 0, b = S;
    while (a < S && !ok[a]) a++;
    while (b > a && !ok[b - 1]) b--;
    *j0 = a, *j1 = b;
}

/* The rest of one query row once its scores p [n] over the keys of its span are known (scale, cap
 * and the −∞ of masked keys applied; m their maximum): a softmax over the allowed keys (ok [n]; NaN
 * when none is allowed, as the card's −∞ mask makes it), then the weighted sum of the values
 * Vh [n, d] (rows contiguous) into o [d]. p is overwritten. */
#if HAVE_FLOAT_DOT
/* the most vectors of an output row weigh_values holds in registers (AVX2 has 16 of them) */
#define HELD_VECTORS (VL == 16 ? 16 : 8)

/* o [VL·nv] = inv · Σ_j p[j] · V[j][c0 …] (V's rows of d entries, float32 or halves when kv16; the nv
 * vectors from entry c0 on), the vectors held in registers: kv16 and nv constants where it is called,
 * so that the loop over them unrolls */
static inline __attribute__((always_inline)) void weigh_values(const float *p, const void *V, const int kv16,
                                                               int64_t n, int64_t d, int64_t c0, float inv,
                                                               const int64_t nv, float *o) {
    vf ov[HELD_VECTORS];
    for (int64_t v = 0; v < nv; v++) ov[v] = VZERO();
    for (int64_t j = 0; j < n; j++) {
        const int64_t at = j * d + c0;
        const vf e = VSET1(p[j]);
        for (int64_t v = 0; v < nv; v++)
            ov[v] = VFMA(e, kv16 ? vload_half((const uint16_t *)V + at + VL * v) : VLOAD((const float *)V + at + VL * v),
                         ov[v]);
    }
    for (int64_t v = 0; v < nv; v++) VSTORE(o + VL * v, VMUL(ov[v], VSET1(inv)));
}
#endif

static void weigh_row(float *p, float m, const void *V_rows, int kv16, int64_t n, int64_t d, const uint8_t *ok,
                      float *o) {
    if (m == -INFINITY) { /* nothing allowed, or every score −∞: the card's softmax is NaN */
        for (int64_t i = 0; i < d; i++) o[i] = NAN;
        return;
    }
    float l = 0.0f;
    int64_t j = 0;
#if HAVE_FLOAT_DOT
    vf lv = VZERO();
    for (; j + VL <= n; j += VL) {
        const vf e = vkeep(vexp(VSUB(VLOAD(p + j), VSET1(m))), ok + j);
        VSTORE(p + j, e);
        lv = VADD(lv, e);
    }
    l = VSUM(lv);
#endif
    for (; j < n; j++) {
        p[j] = ok[j] ? exp_f32(p[j] - m) : 0.0f;
        l += p[j];
    }
    const float inv = 1.0f / l;
#if HAVE_FLOAT_DOT
    if (d % VL == 0) { /* the row in registers, HELD_VECTORS at a time; the count a constant where common */
        for (int64_t c0 = 0; c0 < d; c0 += HELD_VECTORS * VL) {
            const int64_t nv = (d - c0) / VL < HELD_VECTORS ? (d - c0) / VL : HELD_VECTORS;
#define WEIGH(kv16, nv) weigh_values(p, V_rows, kv16, n, d, c0, inv, nv, o + c0)
            if (kv16)
                nv == 4 ? WEIGH(1, 4) : nv == 8 ? WEIGH(1, 8) : nv == HELD_VECTORS ? WEIGH(1, HELD_VECTORS) : WEIGH(1, nv);
            else
                nv == 4 ? WEIGH(0, 4) : nv == 8 ? WEIGH(0, 8) : nv == HELD_VECTORS ? WEIGH(0, HELD_VECTORS) : WEIGH(0, nv);
#undef WEIGH
        }
        return;
    }
#endif
    if (kv16) {
        const uint16_t *Vh = (const uint16_t *)V_rows;
        for (int64_t i = 0; i < d; i++) o[i] = 0.0f;
        for (j = 0; j < n; j++)
            for (int64_t i = 0; i < d; i++) o[i] += p[j] * float_of_half(Vh[j * d + i]);
        for (int64_t i = 0; i < d; i++) o[i] *= inv;
        return;
    }
    const float *Vh = (const float *)V_rows;
    for (int64_t i = 0; i < d; i++) o[i] = 0.0f;
    j = 0;
    for (; j + 4 <= n; j += 4) { /* four rows of V per pass over o */
        const float *v0 = Vh + j * d, *v1 = v0 + d, *v2 = v1 + d, *v3 = v2 + d;
        const float e0 = p[j], e1 = p[j + 1], e2 = p[j + 2], e3 = p[j + 3];
#pragma omp simd
        for (int64_t i = 0; i < d; i++) o[i] += (e0 * v0[i] + e1 * v1[i]) + (e2 * v2[i] + e3 * v3[i]);
    }
    for (; j < n; j++) {
        const float *v = Vh + j * d;
        const float e = p[j];
#pragma omp simd
        for (int64_t i = 0; i < d; i++) o[i] += e * v[i];
    }
    for (int64_t i = 0; i < d; i++) o[i] *= inv;
}

/* One query row q [d] against keys Kh, values Vh [S, d] (rows contiguous; halves when kv16), allowed
 * keys ok [S]: the scores of its span (scores_row), then weigh_row into o [d]. p: scratch of S floats. */
static void attend_row(const float *q, const void *Kh, const void *Vh, int kv16, int64_t S, int64_t d,
                       const uint8_t *ok, float scale, float cap, float *p, float *o) {
    int64_t j0, j1;
    allowed_span(ok, S, &j0, &j1);
    const float m =
        j1 > j0 ? scores_row(q, kv_row(Kh, j0, d, kv16), kv16, j1 - j0, d, ok + j0, scale, cap, p) : -INFINITY;
    weigh_row(p, m, kv_row(Vh, j0, d, kv16), kv16, j1 - j0, d, ok + j0, o);
}

#define QUERY_RUN 16 /* queries of one head per work item of tc_gqa */
#if HAVE_FLOAT_DOT
#define RUN_KEYS VL /* keys per block of attend_run: one vector of scores */

/* Keys Kh [S, d] in blocks of RUN_KEYS, each block transposed: Kt [⌈S/VL⌉][d][VL], Kt[b][i][c] =
 * Kh[VL·b + c][i] (past the last key, the block's first key again: lanes attend_run masks off) */
static void transpose_keys(const void *Kh, int kv16, int64_t S, int64_t d, float *Kt) {
    for (int64_t jb = 0; jb < S; jb += RUN_KEYS, Kt += d * RUN_KEYS)
        for (int64_t c = 0; c < RUN_KEYS; c++) {
            const int64_t j = jb + (jb + c < S ? c : 0);
            if (kv16) {
                const uint16_t *k = (const uint16_t *)Kh + j * d;
                for (int64_t i = 0; i < d; i++) Kt[i * RUN_KEYS + c] = float_of_half(k[i]);
            } else {
                const float *k = (const float *)Kh + j * d;
                for (int64_t i = 0; i < d; i++) Kt[i * RUN_KEYS + c] = k[i];
            }
        }
}

/* Up to QUERY_RUN query rows of one head at once, Qr [nr, d] (d a multiple of VL),
 * against keys Kh, values Vh [S, d]; allowed [nr, S] (row stride S); each row as attend_row, out
 * row r at o + r·o_stride. The scores of every row over the keys of the rows' spans together come
 * VL keys at a time from the head's transposed blocks of K (Kt, transpose_keys: made once a call of
 * tc_gqa, which every query head of the key head and every run reads), VL scores a vector with no
 * horizontal sums; P: scratch of nr·S floats (scores left of a row's span are written, never read). */
static void attend_run(const float *Qr, int64_t nr, const void *Vh, int kv16, int64_t S, int64_t d, const uint8_t *allowed,
                       float scale, float cap, float *P, const float *Kt_head, float *o, int64_t o_stride) {
    int64_t J0 = S, J1 = 0, j0[QUERY_RUN], j1[QUERY_RUN];
    for (int64_t r = 0; r < nr; r++) {
        allowed_span(allowed + r * S, S, &j0[r], &j1[r]);
        if (j1[r] > j0[r]) J0 = j0[r] < J0 ? j0[r] : J0, J1 = j1[r] > J1 ? j1[r] : J1;
    }
    for (int64_t jb = J0 / RUN_KEYS * RUN_KEYS; jb < J1; jb += RUN_KEYS) {
        const int64_t nb = J1 - jb < RUN_KEYS ? J1 - jb : RUN_KEYS;
        const float *Kt = Kt_head + jb * d; /* block jb / 16: d · 16 floats each */
        int64_t r = 0;
        for (; r < nr; r += 4) { /* four rows at a time, two sums each: eight chains of FMAs */
            const int64_t g = nr - r < 4 ? nr - r : 4;
            vf acc[4][2];
            for (int64_t u = 0; u < 4; u++) acc[u][0] = acc[u][1] = VZERO();
            for (int64_t i = 0; i < d; i += 2) {
                const vf k0 = VLOAD(Kt + i * RUN_KEYS), k1 = VLOAD(Kt + (i + 1) * RUN_KEYS);
                for (int64_t u = 0; u < 4; u++) {
                    const float *q = Qr + (r + (u < g ? u : 0)) * d;
                    acc[u][0] = VFMA(VSET1(q[i]), k0, acc[u][0]);
                    acc[u][1] = VFMA(VSET1(q[i + 1]), k1, acc[u][1]);
                }
            }
            for (int64_t u = 0; u < g; u++)
                vstore_first(P + (r + u) * S + jb, VMUL(VADD(acc[u][0], acc[u][1]), VSET1(scale)), nb);
        }
    }
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *ok = allowed + r * S + j0[r];
        float *p = P + r * S + j0[r], m = -INFINITY;
        const int64_t n = j1[r] - j0[r];
        for (int64_t j = 0; j < n; j++) {
            float sc = p[j];
            if (cap > 0.0f) sc = cap * tanhf(sc / cap);
            p[j] = ok[j] ? sc : -INFINITY;
            m = p[j] > m ? p[j] : m;
        }
        weigh_row(p, m, kv_row(Vh, j0[r], d, kv16), kv16, n, d, ok, o + r * o_stride);
    }
}
#endif

/* Heads are spread over the OpenMP threads once a step has this many score·entry products */
#define PARALLEL_ATTENTION 32768

/* Attention of few queries. Q [B, H, Tq, d] contiguous; K, V [B, Hkv, S, d] with rows contiguous and
 * strides (in floats) kb, kh for K's batch and head axes, vb, vh for V's; kv [H] the key/value head
 * of each query head; allowed [Tq, S] bytes (1: the query may read that key); see attend_row.
 * out [B, H, Tq, d]. */
int tc_attention(const float *Q, const float *K, const float *V, int64_t B, int64_t H, int64_t Tq, int64_t S,
                 int64_t d, int64_t kb, int64_t kh, int64_t vb, int64_t vh, const int64_t *kv,
                 const uint8_t *allowed, double scale, float *out) {
    int failed = 0;
#pragma omp parallel for collapse(2) schedule(static) if (B * H * Tq * S * d >= PARALLEL_ATTENTION)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            float *p = scores_scratch(S);
            if (!p) {
                failed = 1;
                continue;
            }
            const float *Kh = K + b * kb + kv[h] * kh, *Vh = V + b * vb + kv[h] * vh;
            for (int64_t t = 0; t < Tq; t++)
                attend_row(Q + ((b * H + h) * Tq + t) * d, Kh, Vh, 0, S, d, allowed + t * S, (float)scale, 0.0f, p,
                           out + ((b * H + h) * Tq + t) * d);
        }
    return failed ? -2 : 0;
}

static _Thread_local float *scratch_head;
static _Thread_local int64_t scratch_head_cap;
#if HAVE_FLOAT_DOT
static _Thread_local void *keys_t; /* the calling thread's transposed keys (transpose_keys) */
static _Thread_local int64_t keys_t_cap;
#endif

/* tc_gqa's work item `it`: run it / (B·H) of the queries of head it % H of batch row it % (B·H) / H,
 * as tc_gqa describes (Kt: the transposed keys for a prompt's runs, or NULL); 0, or −2 when out of
 * memory */
static int gqa_item(const gqa_args *a, int64_t it, const float *Kt, int64_t head_keys) {
    const int64_t B = a->B, T = a->T, H = a->H, Hkv = a->Hkv, d = a->d, half = a->half, S = a->used + a->T;
    const int kv16 = a->kv_half != 0;
    const int64_t run = it / (B * H), b = it % (B * H) / H, h = it % H, kvh = a->kv[h];
    const int64_t t0 = run * QUERY_RUN, nr = T - t0 < QUERY_RUN ? T - t0 : QUERY_RUN;
    float *P = scores_scratch(nr * S);
    const int64_t head_floats = nr * d; /* the run's rotated queries */
    if (head_floats > scratch_head_cap) {
        free(scratch_head);
        scratch_head = (float *)malloc(sizeof(float) * (size_t)head_floats);
        scratch_head_cap = scratch_head ? head_floats : 0;
    }
    if (!P || !scratch_head) return -2;
    const void *Kh = kv_row(a->Kc, b * a->kb + kvh * a->kh, 1, kv16), *Vh = kv_row(a->Vc, b * a->vb + kvh * a->vh, 1, kv16);
    float *Qr = scratch_head, *o = a->out + ((b * T + t0) * H + h) * d;
    for (int64_t r = 0; r < nr; r++) {
        const int64_t t = t0 + r;
        rope_row(a->Q + ((b * T + t) * H + h) * d, a->cos + t * half, a->sin + t * half, d, half, (int)a->layout,
                 Qr + r * d);
    }
    const uint8_t *allowed = a->allowed;
    const float scale = (float)a->scale, cap = (float)a->cap;
#if HAVE_FLOAT_DOT
    if (Kt && nr >= 4) { /* a prompt's queries: scores a block of keys at a time */
        attend_run(Qr, nr, Vh, kv16, S, d, allowed + t0 * S, scale, cap, P, Kt + (b * Hkv + kvh) * head_keys, o, H * d);
        return 0;
    }
#else
    (void)Kt, (void)head_keys, (void)Hkv;
#endif
    for (int64_t r = 0; r < nr; r++)
        attend_row(Qr + r * d, Kh, Vh, kv16, S, d, allowed + (t0 + r) * S, scale, cap, P, o + r * H * d);
    return 0;
}

/* One step of grouped-query attention for the new tokens (the prelude's GQAttention: RoPE on every
 * head of Q and K, then each query head attends with its key/value head), keys and values kept in a
 * cache. Q [B, T, H·d], K, V [B, T, Hkv·d] contiguous (a token's heads side by side, as the
 * projections give them); cos, sin [T, half] at the new tokens' positions; layout as rope_row.
 * The T new keys (rotated) and values are written to rows used … used + T − 1 of the caches Kc, Vc
 * [B, Hkv, capacity, d] (strides kb, kh, vb, vh in entries, rows contiguous; float32, or halves when
 * kv_half), and every query reads the S = used + T rows there; kv [H], allowed [T, S], scale and cap
 * as attend_row.
 * out [B, T, H·d]: the heads' results side by side again.
 * The arguments come as one struct (gqa_args, structs.h): the layers of a pass share most of them,
 * so a call sets the few that differ instead of converting two dozen. */

int tc_gqa(const gqa_args *a) {
    const float *K = a->K, *V = a->V, *cos = a->cos, *sin = a->sin;
    const int64_t B = a->B, T = a->T, H = a->H, Hkv = a->Hkv, d = a->d, half = a->half, kb = a->kb, kh = a->kh,
                  vb = a->vb, vh = a->vh, used = a->used;
    const int layout = (int)a->layout;
    void *Kc = a->Kc, *Vc = a->Vc;
    const int kv16 = a->kv_half != 0;
    const int64_t one_thread = a->one_thread;
    float *rotated = 0; /* a key row rotated in float32, before it is rounded to halves */
    if (kv16 && !(rotated = (float *)grown(&scratch_row, &scratch_row_cap, (int64_t)sizeof(float) * d))) return -2;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < Hkv; j++) {
                const float *k = K + ((b * T + t) * Hkv + j) * d, *v = V + ((b * T + t) * Hkv + j) * d;
                const int64_t kr = b * kb + j * kh + (used + t) * d, vr = b * vb + j * vh + (used + t) * d;
                if (kv16) {
                    rope_row(k, cos + t * half, sin + t * half, d, half, layout, rotated);
                    round_to_halves(rotated, (uint16_t *)Kc + kr, d);
                    round_to_halves(v, (uint16_t *)Vc + vr, d);
                } else {
                    rope_row(k, cos + t * half, sin + t * half, d, half, layout, (float *)Kc + kr);
                    memcpy((float *)Vc + vr, v, sizeof(float) * (size_t)d);
                }
            }
    const int64_t S = used + T;
    /* the work: each head's queries in runs of QUERY_RUN (a prompt's many, a decoding step's one) */
    const int64_t runs = (T + QUERY_RUN - 1) / QUERY_RUN, items = B * H * runs;
    int failed = 0;
    float *Kt = 0; /* [B][Hkv][⌈S/VL⌉ · VL][d], for attend_run */
    int64_t head_keys = 0;
#if HAVE_FLOAT_DOT
    if (T >= 4 && d % VL == 0) {
        head_keys = (S + RUN_KEYS - 1) / RUN_KEYS * RUN_KEYS * d;
        if (!(Kt = (float *)grown(&keys_t, &keys_t_cap, (int64_t)sizeof(float) * B * Hkv * head_keys))) return -2;
#pragma omp parallel for collapse(2) schedule(static) if (!one_thread && B * Hkv * S * d >= PARALLEL_ATTENTION)
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < Hkv; j++)
                transpose_keys(kv_row(Kc, b * kb + j * kh, 1, kv16), kv16, S, d, Kt + (b * Hkv + j) * head_keys);
    }
#endif
    /* a decoding step's one run a head: the heads in contiguous shares (a thread reads the key/value
     * heads of its query heads, mostly its own: ~10% less time than heads handed out in turn);
     * a prompt's runs one at a time (a causal prompt's later runs read more keys) */
    if (runs == 1) {
#pragma omp parallel for schedule(static) if (!one_thread && B * H * T * S * d >= PARALLEL_ATTENTION)
        for (int64_t it = 0; it < items; it++)
            if (gqa_item(a, it, Kt, head_keys)) failed = 1;
    } else {
#pragma omp parallel for schedule(dynamic, 1) if (!one_thread && B * H * T * S * d >= PARALLEL_ATTENTION)
        for (int64_t it = 0; it < items; it++)
            if (gqa_item(a, it, Kt, head_keys)) failed = 1;
    }
    return failed ? -2 : 0;
}
