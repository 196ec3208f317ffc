/* The int8 GEMM's tile kernels with AVX2 (see gemm.c for the tiles and the sums, tc.h for when a
 * build has them): a tile's products with one to GEMM_TOKENS tokens.
 * Leaves out: the AVX-512 kernels (gemm_avx512.c), building the tiles and the threads (gemm.c). */
#include "tc.h"

#if LANES
/* y [TT tokens][8 rows of the tile] (row stride N, the first R rows stored) from a tile and TT
 * tokens' qx [TT][K], dxg and sxg [TT][K/L] (each group's dx and dx · Σ qx): per group, DEPTH quads'
 * pairs added in int16 before each widening (see gemm.c; DEPTH = 1: Q8_0's sign trick) */
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
 * a sub-block (m_j · dx · Σ qx, mt and sxg; summed in integers too it is no faster). Per sub-block
 * and token that is one float step where gemm_tokens takes four. But x in runs rounds coarser: with
 * Q4_K's products in runs a model's logits still deviate from exact arithmetic less than llama.cpp's
 * do, with Q6_K's too they no longer would, and Q5_K and Q6_K gain less from it; so both keep their
 * blocks of 32. */
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
            for (int t = 0; t < TT; t++) { /* a block's first widening starts its sums (cheaper than
                                              * zeroing them after each block's float step) */
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
const gemm_fn *gemm_fns(int type) {
    if (type == Q4_K) return gemm_q4_k;
    if (type == Q8_0) return gemm_q8;
    if (type == Q6_K) return gemm_q6;
    return type == Q5_0 || type == Q5_1 || type == Q5_K ? gemm_q5 : gemm_q4;
}
#endif
