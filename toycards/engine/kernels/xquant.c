/* Activation quantisation for the int8 products (see tc.h; dot.c, gemm.c): x rounded to int8 blocks
 * of 32 with a float32 scale each (qx = round(x / dx), dx = max|x| / 127), as llama.cpp rounds it for
 * the same products, and each block's dx · Σ qx, which the types with a bias or a min need.
 * Buffers: qx int8 [T, K], dx float32 [T, K/32], sx float32 [T, K/32] (dx · Σ qx of the block).
 * Leaves out: the products (dot*.c, gemm*.c). */
#include "tc.h"

#if HAVE_INT8_DOT
/* the calling thread's buffers for quantized x, grown as needed and kept (no malloc per product) */
static _Thread_local void *scratch_q, *scratch_f;
static _Thread_local int64_t scratch_q_cap, scratch_f_cap;

/* qx [n_q] and dx, sx [n_blocks] in the calling thread's buffers; 0 when out of memory */
int scratch_x(int64_t n_q, int64_t n_blocks, int8_t **qx, float **dx, float **sx) {
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
void quantize_x(const float *x, int64_t n_blocks, int8_t *qx, float *dx, float *sx) {
    quantize_x_runs(x, n_blocks, 1, qx, dx, sx);
}

/* the same with runs of 8 blocks (256 elements) sharing their dx (Q4_K's int8 GEMM on AVX2) */
void quantize_x_256(const float *x, int64_t n_blocks, int8_t *qx, float *dx, float *sx) {
    quantize_x_runs(x, n_blocks, 8, qx, dx, sx);
}
#endif
