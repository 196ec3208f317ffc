/* The int8 GEMM's tile kernels with AVX-512 VNNI (see gemm.c for the tiles and the sums, tc.h for when
 * a build has them): a tile's products with one to GEMM_TOKENS tokens.
 * Leaves out: the AVX2 kernels (gemm_avx2.c), building the tiles and the threads (gemm.c). */
#include "tc.h"

#if INT8_AVX512
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
const gemm_fn *gemm_fns(int type) { return gemm_group(type) == 16 ? gemm_16 : gemm_32; }
#endif
