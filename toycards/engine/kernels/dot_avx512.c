/* The few-token int8 products' row kernels with AVX-512 VNNI (see dot.c for the sums they take, tc.h
 * for when a build has them): R rows against one token's x blocks, R = ROWS (4) for a packed
 * weight's group (tc_pack's layout: a group's steps side by side, the SPLIT types' scales apart from
 * their quants), else one row as stored. A row's sum does not depend on R or on the layout.
 * Leaves out: the AVX2 kernels (dot_avx2.c), the threads and x's quantisation (dot.c, xquant.c). */
#include "tc.h"

#if INT8_AVX512
static inline float hsum(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* what the block adds besides d·dx·Σ q·qx: −bias·d·dx·Σ qx, or m·dx·Σ qx */
static inline float block_extra(int type, const uint8_t *w, float d, float s) {
    return HAS_MIN(type) ? f16(w + 2) * s : -BIAS(type) * d * s;
}

/* one row's dot product with one token, for each type (TYPE is a compile-time constant) */
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

DOT_ROWS(dot_q8_0, Q8_0)
DOT_ROWS(dot_q4_0, Q4_0)
DOT_ROWS(dot_q4_1, Q4_1)
DOT_ROWS(dot_q5_0, Q5_0)
DOT_ROWS(dot_q5_1, Q5_1)

/* the K-quants (see dot.c) */
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
