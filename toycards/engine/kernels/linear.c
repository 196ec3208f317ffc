/* The products' entry points (see tc.h): which version multiplies a weight (tc_linear: the in-place
 * float product, the int8 products, else a dequantized row at a time), the products of one x with
 * several weights (tc_linears), the int8 GEMM on its own (tc_gemm_linear), what a type gets
 * (tc_quantizes_x, tc_float_direct, tc_gemm_x_block), the token limits the Python side checks at
 * load (tc_limit), and whether every type prefetches its weight stream (tc_set_prefetch).
 * Leaves out: the products themselves (dequant.c, float.c, dot.c, gemm.c). */
#include "tc.h"

int prefetch_others = 0; /* see ahead_other (tc.h) */
void tc_set_prefetch(int on) { prefetch_others = on; }
int tc_prefetch(void) { return prefetch_others; }

/* the token limits (tc.h), which the Python side keeps too (engine.ckernels.FEW_TOKENS and
 * FEW_FLOAT_TOKENS): it loads the library only where they agree */
int tc_limit(int which) { return which == 0 ? FEW_TOKENS : which == 1 ? MAX_FLOAT_TOKENS : -1; }

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
    if (p->packed && !tc_packs(type)) return -4;
#if HAVE_FLOAT_DOT
    if (tc_float_direct(type) && T <= MAX_FLOAT_TOKENS) {
        float_linear(p, x, T, y);
        return 0;
    }
#endif
    row_fn row = row_kernel(type);
    if (!row) return -1;
#if HAVE_INT8_DOT
    if (tc_quantizes_x(type)) {
        if (T > FEW_TOKENS) return gemm_int8(p, x, T, y, 0);
        return int8_product(type, p->w, p->row_bytes, p->n, p->k, (int)p->packed, x, T, y);
    }
#endif
    return dequant_linear(p, row, x, T, y);
}

/* y_a, y_b, y_c = x · W_aᵀ, x · W_bᵀ, x · W_cᵀ (c, y_c may be NULL): consecutive card steps that
 * multiply one x (Q, K and V of attention), one call instead of one per weight */
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
