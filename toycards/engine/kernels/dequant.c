/* Dequantisation (see tc.h): a row of each type's blocks to float32, exactly as gguf.quants does it
 * (products and sums in float32), for the caller (tc_dequant_rows: a tile of rows for a float GEMM,
 * or the whole matrix; tc_gather_rows: embedding lookups) and for version 2 of the product
 * (dequant_linear: the types and token counts no faster version takes).
 * Leaves out: the products on a weight's own elements or on int8 (float.c, dot.c, gemm.c), and the
 * packed layout (pack.c: stored_row puts a packed row back together first). */
#include "tc.h"

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

/* MXFP4 (OCP microscaling): a block is one E8M0 exponent e and 32 four-bit E2M1 numbers, low nibbles
 * elements 0…15, high 16…31; x = v · 2^(e − 127) with v one of ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, here
 * as ggml writes it: the doubled values times half the scale (ggml_e8m0_to_fp32_half), both exact */
static float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static void row_mxfp4(const uint8_t *b, float *y, int64_t k) {
    static const int8_t doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int64_t s = 0; s < k; s += 32, b += 17) {
        const float d = e8m0_half(b[0]);
        const uint8_t *q = b + 1;
        for (int j = 0; j < 16; j++) {
            y[s + j] = (float)doubled[q[j] & 0x0F] * d;
            y[s + j + 16] = (float)doubled[q[j] >> 4] * d;
        }
    }
}

/* the row kernel of `type`, NULL where it has none */
row_fn row_kernel(int type) {
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
    case MXFP4: return row_mxfp4;
    default: return 0;
    }
}

/* 1 when `type` has a kernel here */
int tc_supported(int type) { return row_kernel(type) != 0; }

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

/* Version 2: y [T, N] = x [T, K] · Wᵀ for a weight as stored (not packed), each thread dequantizing
 * one row at a time into its buffer (in L1) and taking its dot product with every token; 0, or −2
 * when out of memory */
int dequant_linear(const tc_weight *p, row_fn row, const float *x, int64_t T, float *y) {
    const uint8_t *W = p->w;
    const int64_t row_bytes = p->row_bytes, N = p->n, K = p->k;
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
