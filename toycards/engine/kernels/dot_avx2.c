/* The few-token int8 products' row kernels with AVX2 (see dot.c for the sums they take, tc.h for when
 * a build has them: a CPU with AVX2, FMA and F16C but not AVX-512 VNNI).
 * Leaves out: the AVX-512 kernels (dot_avx512.c), the threads and x's quantisation (dot.c, xquant.c),
 * and the helpers on a packed group's lanes that the GEMM shares (tc.h). */
#include "tc.h"

#if LANES
/* AVX2 (no 512-bit registers): a weight as stored is multiplied one row at a time (DOT_ROW; four
 * rows at once, each from its own stream, are slower). A packed weight of Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q4_K, Q5_K or Q6_K (LANES, see tc_pack; the K-quants' kernels are with theirs below) holds
 * its rows in groups of eight with their blocks interleaved four bytes at a time, so that one 256-bit
 * vector holds the same four quants of eight rows, a row a lane: the four x values they multiply are
 * one broadcast, a block's integer sums of eight rows come out in one vector with no horizontal sum,
 * and its eight scales are one load. Q4: the eight maddubs of a
 * block add up in int16 (at most 8 · 2 · 15 · 127 = 30480) before one widening; Q8_0 (quants −128 …
 * 127 through the sign trick, pairs up to 2 · 128 · 127) widens each. */

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

DOT_ROWS(dot_q8_0, Q8_0)
DOT_ROWS(dot_q4_0, Q4_0)
DOT_ROWS(dot_q4_1, Q4_1)
DOT_ROWS(dot_q5_0, Q5_0)
DOT_ROWS(dot_q5_1, Q5_1)

/* the K-quants (see dot.c) */
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
        ahead(g + 8 * 210, 8 * 210); /* its reads hop about the group's block: the hardware
                                      * prefetchers fall behind */
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

/* the row kernel of a type whose x is quantized (see dot.c) */
rows_fn int8_rows(int type) {
    return type == Q8_0   ? dot_q8_0
           : type == Q4_0 ? dot_q4_0
           : type == Q4_1 ? dot_q4_1
           : type == Q5_0 ? dot_q5_0
           : type == Q5_1 ? dot_q5_1
           : type == Q4_K ? dot_q4_k
           : type == Q5_K ? dot_q5_k
                          : dot_q6_k_rows;
}
#endif
