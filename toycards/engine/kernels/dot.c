/* Version 3 of the product (see tc.h), for few tokens (FEW_TOKENS at most) of Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1 and the K-quants: integer dot products, as llama.cpp does. x is quantized per block of 32 to
 * int8 first (xquant.c: qx = round(x / dx), dx = max|x| / 127, dx kept in float32), so a block's dot
 * product is one integer sum:
 *   Q8_0  Σ w·x ≈ dw·dx·Σ q·qx          Q4_0  dw·dx·(Σ q·qx − 8·Σ qx)     Q4_1  dw·dx·Σ q·qx + m·dx·Σ qx
 *   Q5_0  dw·dx·(Σ q·qx − 16·Σ qx)      Q5_1  dw·dx·Σ q·qx + m·dx·Σ qx    (q: nibble + 16·fifth bit)
 * The K-quants against x in int8 blocks of 32 (finer than llama.cpp's q8_K blocks of 256, so no
 * less exact): a Q4_K / Q5_K sub-block of 32 is one x block,
 *   Σ w·x ≈ d·sc_j·dx·Σ q·qx − dmin·m_j·dx·Σ qx
 * and a Q6_K chunk of 32 (two groups of 16 with their own int8 scales) is one x block,
 *   Σ w·x ≈ d·dx·(sc_a·Σ_{first 16} (q − 32)·qx + sc_b·Σ_{last 16} (q − 32)·qx).
 * The tests hold this to dequantize(W) · dequantize(quantize(x)) within float32 rounding, and the
 * logits it gives to llama.cpp's own deviation from exact arithmetic (which quantizes x the same way).
 * Owns: a weight's part of a product (its packed groups of ROWS rows, then its rows as stored) and
 * the one parallel loop over the parts of one x. Leaves out: the row kernels, per instruction set
 * (dot_avx512.c, dot_avx2.c: int8_rows), and the many-token GEMM (gemm.c). */
#include "tc.h"

#if HAVE_INT8_DOT
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
    part->rows = int8_rows(type);
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

/* y [T, N] = x [T, K] · Wᵀ for one weight (T ≤ FEW_TOKENS) */
int int8_product(int type, const uint8_t *W, int64_t row_bytes, int64_t N, int64_t K, int packed, const float *x,
                 int64_t T, float *y) {
    int8_part part;
    int8_part_of(type, W, row_bytes, N, K, packed, y, &part);
    return int8_products(&part, 1, K, x, T);
}
#endif

/* y_i = x · W_iᵀ for n ≤ 3 weights of one x [T, K] as one int8 product (int8_products) when each is a
 * type whose x is quantized: returns 1 and sets *code; 0 when they are not (the caller multiplies one
 * weight at a time). Each y_i is what tc_linear gives: the same x blocks, the same sums. */
int int8_together(const tc_weight *const *ws, float *const *ys, int n, const float *x, int64_t T, int *code) {
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
