/* tc.h: what the C kernels' files share. Matrix products with GGUF weights kept in their blocks, and
 * the per-token glue around them: engine/ckernels.py compiles every .c file beside this header into
 * one shared library with the system C compiler (one set of flags, -march=native by default) and
 * calls it through ctypes.
 *
 * The files, one concern each; a file named after an instruction set compiles to nothing on a CPU
 * without it (the build's -march decides: see "the instruction set" below):
 *   dequant.c       a row of each type dequantized to float32; rows for the caller (version 2)
 *   xquant.c        x (the activations) quantized to int8 blocks for the int8 products
 *   dot.c           the few-token int8 products (version 3): a weight's parts, the threads
 *   dot_avx512.c    their row kernels with AVX-512 VNNI (ROWS = 4)
 *   dot_avx2.c      their row kernels with AVX2 (LANES, ROWS = 8)
 *   pack.c          the packed layout (tc_pack), a packed row as stored again, reading a file ahead
 *   gemm.c          the many-token int8 GEMM (version 4): its tiles and threads
 *   gemm_avx512.c   its tile kernels with AVX-512 VNNI
 *   gemm_avx2.c     its tile kernels with AVX2
 *   float.c         F32, F16 and BF16 weights read in place (version 2f)
 *   linear.c        the products' entry points: which version multiplies, the limits, the prefetch flag
 *   blockops.c      SwiGLU, RMSNorm, RoPE and attention (the per-token glue)
 * This header holds the limits, the ggml types and their block layouts, the instruction set the
 * build has, the inline helpers that more than one file uses, and the declarations: the library's
 * entry points (tc_…, exported) and what one file lends another (hidden: not in the library's
 * symbol table). structs.h holds the structs the entry points take (shared with glue.cpp).
 *
 * Buffers, for every product (a weight comes as its tc_weight: type, shape, where its bytes are):
 *   W   uint8   [N, row_bytes]  the weight as the file stores it: N rows of K elements, each row
 *                               K / block blocks of the type's bytes (ggml-common.h layouts below),
 *                               or the same blocks packed (tc_pack, for the few-token products)
 *   x   float32 [T, K]          activations, one row per token
 *   y   float32 [T, N]          y[t][n] = Σ_k W[n][k] · x[t][k], W dequantized to float32 exactly
 *                               as gguf.quants does it (products and sums in float32)
 *   out float32 [n_blocks · block]  dequantized blocks
 *
 * Versions of the product: 1, the reference, is gguf.quants.dequantize then a float matmul (in the
 * tests); 2 (dequant.c) dequantizes one row at a time into a thread's buffer (it stays in L1) and
 * takes its dot product with every token, so the weight's bytes are read once per call; 2f (float.c)
 * reads F32, F16 and BF16 elements in place; 3 (dot*.c) quantizes x to int8 and sums integers, as
 * llama.cpp does; 4 (gemm*.c) is an int8 GEMM for many tokens. The tests
 * (tests/engine/test_quant_kernels.py) tie each to version 1 for every type here.
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
#ifndef TOYCARDS_TC_H
#define TOYCARDS_TC_H

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

/* ── limits ───────────────────────────────────────────────────────────────────────────────────── */

/* a product reading fewer bytes of weight than this runs on the calling thread: waking the other
 * threads costs more than it saves (far more when another process holds a core) */
#define PARALLEL_BYTES (32 * 1024)

/* the most tokens a product takes with the few-token int8 kernels (version 3); more take version 4
 * where it exists (engine.ckernels.FEW_TOKENS, which tc_limit checks at load) */
#define FEW_TOKENS 8

/* the most tokens the in-place float product takes (version 2f); the caller uses a float GEMM for
 * more (engine.ckernels.FEW_FLOAT_TOKENS, which tc_limit checks at load) */
#define MAX_FLOAT_TOKENS 8

/* Element-wise glue (a norm's rows, SiLU·up) is spread over the OpenMP threads from this many
 * entries on (a prompt's) */
#define PARALLEL_ROWS 65536

/* Software prefetch: the weight streams of the few-token products ask for their lines this many bytes
 * ahead of use (locality 0, non-temporal where the CPU has it: a weight is read once a step, so it
 * should not push the interpreter's data out of the caches). Whether it pays depends on the host: on
 * some the hardware prefetchers alone keep too few lines in flight, on others the extra requests
 * cost more than they bring. So the K-quants always prefetch (where it was measured, it never cost
 * them), and the other types when tc_set_prefetch(1) says so: engine.ckernels.PrefetchChoice times a
 * model's first decoding steps both ways and keeps the faster (TOYCARDS_QUANT_PREFETCH=on or off
 * fixes it instead). */
#ifndef PF_DIST
#define PF_DIST 1536
#endif
static inline void ahead(const void *p, int64_t n) {
    if (PF_DIST)
        for (int64_t j = 0; j < n; j += 64) __builtin_prefetch((const char *)p + PF_DIST + j, 0, 0);
}
#pragma GCC visibility push(hidden)
extern int prefetch_others; /* the types other than the K-quants prefetch too (tc_set_prefetch, linear.c) */
#pragma GCC visibility pop
static inline void ahead_other(const void *p, int64_t n) {
    if (prefetch_others) ahead(p, n);
}

/* ── the ggml types and their blocks ──────────────────────────────────────────────────────────── */

enum { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14,
       BF16 = 30, MXFP4 = 39 };
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

/* *buf with room for `bytes`: a thread's scratch buffer, grown as needed and kept from call to call
 * (no malloc per product); NULL when out of memory */
static inline void *grown(void **buf, int64_t *cap, int64_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        *buf = malloc((size_t)bytes);
        *cap = *buf ? bytes : 0;
    }
    return *buf;
}

/* ── the instruction set: what the build's -march gives, decided once for every file ─────────────
 * HAVE_INT8_DOT: the int8 products (versions 3 and 4), with AVX2, FMA and F16C (every AVX2 CPU has
 * F16C: the packed kernels widen eight rows' float16 scales at once). Their kernels are AVX-512 VNNI's
 * (dot_avx512.c, gemm_avx512.c: ROWS = 4, a packed weight's groups of four rows, see tc_pack) where
 * the CPU has AVX-512 F, BW and VNNI, else AVX2's (dot_avx2.c, gemm_avx2.c: LANES, groups of eight
 * rows with their blocks interleaved, a row a lane). HAVE_FLOAT_DOT: the in-place float products and
 * the vectorized glue (float.c, blockops.c), with AVX-512 F or with AVX2, FMA and F16C. */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define HAVE_INT8_DOT 1
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define INT8_AVX512 1
#define ROWS 4
#define LANES 0
#else
#define INT8_AVX512 0
#define ROWS 8
#define LANES 1
#endif
#else
#define HAVE_INT8_DOT 0
#define INT8_AVX512 0
#define ROWS 1
#define LANES 0
#endif
#if LANES /* the types packed in lanes */
#define LANE_TYPE(TYPE) ((TYPE) == Q4_0 || (TYPE) == Q4_1 || (TYPE) == Q5_0 || (TYPE) == Q5_1 || (TYPE) == Q8_0 || \
                         (TYPE) == Q4_K || (TYPE) == Q5_K || (TYPE) == Q6_K)
#else
#define LANE_TYPE(TYPE) 0
#endif

/* the six-bit quants of a Q6_K block (dequant.c's AVX-512 rows, the int8 kernels) */
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

/* ── the int8 products' helpers (dot*.c, gemm*.c): a block's quants and its integer sums ────────── */
#if HAVE_INT8_DOT
/* Σ over 32 lanes of u[j]·s[j] (u unsigned bytes, s signed), as 8 int32 partial sums */
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
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

/* one block's Σ q·qx as 8 int32 partial sums (256 bits: the AVX2 path, and AVX-512's odd last block) */
static inline __m256i block_products(int type, const uint8_t *w, __m256i y) {
    if (type == Q8_0) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w + 2));
        return dot_u8s8(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
    }
    return dot_u8s8(unsigned_quants(type, w), y);
}

#if INT8_AVX512
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
#endif
#endif

/* ── the AVX2 kernels' packed groups of eight rows, a row a lane (dot_avx2.c, gemm.c, pack.c) ── */
#if LANES
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
#endif

/* ── the int8 GEMM's tiles (gemm*.c, see gemm.c) ─────────────────────────────────────────────── */
#if HAVE_INT8_DOT
#if LANES
enum { GEMM_ROWS = 8, GEMM_TOKENS = 4 };
#else
enum { GEMM_ROWS = 16, GEMM_TOKENS = 8 };
#endif

/* the group length L of a type's tile (see gemm.c) */
static inline int gemm_group(int type) { return type == Q6_K ? 16 : 32; }

/* whether a type's GEMM takes x in runs of 256 sharing their dx (gemm_tokens_k: Q4_K on AVX2) */
static inline int gemm_x_runs(int type) { return LANES && type == Q4_K; }

/* a tile's products with TT tokens (TT = 1 … GEMM_TOKENS: a kernel for each, gemm_fns) */
typedef void (*gemm_fn)(const uint8_t *, const float *, const float *, const float *, int64_t, const int8_t *,
                        const float *, const float *, float *, int64_t, int);
#endif

/* ── float vectors (float.c, blockops.c): VL lanes of float32, the widest the build has ──────────── */
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

/* ── what one file lends another (hidden) ─────────────────────────────────────────────────────── */
#pragma GCC visibility push(hidden)

/* dequant.c: a row of `type`'s blocks → float32 [k] */
typedef void (*row_fn)(const uint8_t *, float *, int64_t);
row_fn row_kernel(int type);                    /* NULL where the type has none */
int dequant_linear(const tc_weight *p, row_fn row, const float *x, int64_t T, float *y); /* version 2 */

/* pack.c */
const uint8_t *stored_row(const tc_weight *p, int64_t n, uint8_t *buf);
uint8_t *row_buffer(const tc_weight *p);

#if HAVE_INT8_DOT
/* xquant.c */
int scratch_x(int64_t n_q, int64_t n_blocks, int8_t **qx, float **dx, float **sx);
void quantize_x(const float *x, int64_t n_blocks, int8_t *qx, float *dx, float *sx);
void quantize_x_256(const float *x, int64_t n_blocks, int8_t *qx, float *dx, float *sx);

/* dot_avx512.c or dot_avx2.c: R rows of a weight against one token's x blocks (see dot.c) */
typedef void (*rows_fn)(const uint8_t *, int64_t, int64_t, const uint8_t *, int64_t, int, int64_t, const int8_t *,
                        const float *, const float *, float *);
rows_fn int8_rows(int type);

/* dot.c */
int int8_product(int type, const uint8_t *W, int64_t row_bytes, int64_t N, int64_t K, int packed, const float *x,
                 int64_t T, float *y);

/* gemm.c, and its tile kernels in gemm_avx512.c or gemm_avx2.c */
int gemm_int8(const tc_weight *p, const float *x, int64_t T, float *y, int64_t one_thread);
const gemm_fn *gemm_fns(int type);
#endif

/* dot.c and float.c: y_i = x · W_iᵀ for n ≤ 3 weights of one x [T, K] in one parallel loop where
 * their kind of product allows: 1 (and *code set), else 0 (the caller multiplies one at a time) */
int int8_together(const tc_weight *const *ws, float *const *ys, int n, const float *x, int64_t T, int *code);
int float_together(const tc_weight *const *ws, float *const *ys, int n, const float *x, int64_t T, int *code);

#if HAVE_FLOAT_DOT
/* float.c: y [T, N] = x [T, K] · Wᵀ for F32, F16 and BF16, T ≤ MAX_FLOAT_TOKENS (version 2f) */
void float_linear(const tc_weight *p, const float *x, int64_t T, float *y);
#endif

#pragma GCC visibility pop

/* ── the entry points (exported; ctypes binds them in engine/ckernels.py, glue.cpp calls some) ───── */

/* dequant.c */
int tc_supported(int type);
int tc_dequant_rows(const tc_weight *p, int64_t r0, int64_t r1, float *out, int64_t one_thread);
int tc_gather_rows(const tc_weight *p, const int64_t *ids, int64_t n_ids, float *out);

/* pack.c */
int tc_packs(int type);
int tc_pack_regroups(int type);
int tc_pack(const tc_weight *p, int64_t r0, int64_t r1, uint8_t *out, int64_t one_thread);
int tc_pack_weights(const tc_weight *plans, uint8_t *const *outs, const uint8_t *hand_back, int64_t count,
                    int64_t slice, int64_t one_thread);
int tc_read_ahead(int64_t fd, int64_t offset, int64_t length, int64_t chunk);

/* linear.c */
void tc_set_prefetch(int on);
int tc_prefetch(void);
int tc_limit(int which);
int tc_float_direct(int type);
int tc_quantizes_x(int type);
int tc_gemm_x_block(int type);
int tc_gemm_linear(const tc_weight *p, const float *x, int64_t T, float *y, int64_t one_thread);
int tc_linear(const tc_weight *p, const float *x, int64_t T, float *y);
int tc_linears(const tc_weight *a, const tc_weight *b, const tc_weight *c, const float *x, int64_t T, float *ya,
               float *yb, float *yc);

/* blockops.c */
int tc_swiglu(const tc_weight *gate, const tc_weight *up, const tc_weight *down, const float *x, int64_t T,
              float *y);
int tc_silu_mul(float *g, const float *u, int64_t n);
int tc_rms_norm(const float *x, const float *g, int64_t R, int64_t d, double eps, float *y);
int tc_rope(const float *x, const float *c, const float *s, int64_t R, int64_t T, int64_t d, int64_t half,
            int pairs, float *y);
int tc_attention(const float *Q, const float *K, const float *V, int64_t B, int64_t H, int64_t Tq, int64_t S,
                 int64_t d, int64_t kb, int64_t kh, int64_t vb, int64_t vh, const int64_t *kv,
                 const uint8_t *allowed, double scale, float *out);
int tc_gqa(const gqa_args *a);

#endif
