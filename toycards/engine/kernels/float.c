/* Version 2f of the product (see tc.h), for F32, F16 and BF16: the weight's own elements read in place.
 * No dequantized row: each thread takes a contiguous range of rows and multiplies the stored
 * elements (F16 and BF16 widened in registers) by x with float32 FMAs, several independent sums at
 * once (four per row for one token; one row against every token for up to MAX_FLOAT_TOKENS). The
 * caller uses a float GEMM for more tokens. Sums are in float32, in an order of our own: the tests
 * hold them to a float64 product within float32 rounding.
 * Leaves out: the float vectors' operations (tc.h), which type takes this product (linear.c). */
#include "tc.h"

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

#if HAVE_FLOAT_DOT
/* row w [K] of a float type times one x [K]: read in order (one stream, which the prefetchers follow
 * better than four rows interleaved), four sums in flight, one horizontal sum; `type` is a constant
 * where this is inlined */
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

/* y [T, N] = x [T, K] · Wᵀ for the plan's weight (F32, F16 or BF16; T ≤ MAX_FLOAT_TOKENS) */
void float_linear(const tc_weight *p, const float *x, int64_t T, float *y) {
    const int type = (int)p->type;
    if (type == F32) float_product_f32(p->w, p->row_bytes, p->n, p->k, x, T, y);
    else if (type == F16) float_product_f16(p->w, p->row_bytes, p->n, p->k, x, T, y);
    else float_product_bf16(p->w, p->row_bytes, p->n, p->k, x, T, y);
}
#endif

/* y_i = x · W_iᵀ for n ≤ 3 weights of the float types read in place (F32, F16, BF16; few tokens): one
 * parallel loop over all their rows, each row as tc_linear computes it. Q, K and V of a small
 * model are short streams that would each pay a fork, a join and the prefetchers' start */
int float_together(const tc_weight *const *ws, float *const *ys, int n, const float *x, int64_t T, int *code) {
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
