/* The per-token glue (see tc.h): SwiGLU, RMSNorm, RoPE and attention, called by runtime/torch/ops.py
 * (and glue.cpp) in place of torch's composite operators, whose dispatch costs more than the work
 * on one token; on a prompt, rows spread over the threads. tests/engine/test_kernels.py ties each
 * to the card steps it replaces.
 * Leaves out: the products SwiGLU makes (linear.c, dot.c, float.c). */
#include "tc.h"

/* the calling thread's buffers, grown as needed and kept (no malloc per call) */
static _Thread_local void *scratch_row; /* a key row rotated in float32 (tc_gqa) */
static _Thread_local int64_t scratch_row_cap;

/* ── SwiGLU ── */

/* e^x in float32 to about 1 ulp, branch-free so that `omp simd` loops vectorize it (libm's expf is a
 * call per element, and floorf would need -fno-trapping-math): x = n·ln 2 + r with |r| ≤ ln 2 / 2 (ln 2
 * in two parts, Cody and Waite), e^r by a degree-7 polynomial (Cephes' expf coefficients), 2^n built
 * in the exponent bits. Overflows to +∞ past 88.73, gives 0 below about −87.7 (where e^x is a float32
 * subnormal, < 1e-38); NaN stays NaN. */
static inline float exp_f32(float x) {
    x = x > 88.8f ? 88.8f : x; /* → n = 128: the exponent bits of +∞ */
    x = x < -88.0f ? -88.0f : x; /* → n = −127 (as from −87.7 on): the bits of 0 */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* rounded by adding 1.5·2²³ */
    n = n == n ? n : 0.0f; /* NaN: r below stays NaN, and the integer conversion is defined */
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    union { uint32_t u; float f; } two_n = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return p * two_n.f;
}

#if HAVE_FLOAT_DOT
/* exp_f32 on VL lanes (the same steps, NaN kept: min/max with the constant first return x when x
 * is NaN) */
static inline vf vexp(vf x) {
    x = VMAX(VSET1(-88.0f), VMIN(VSET1(88.8f), x));
    const vf shift = VSET1(12582912.0f);
    const vf n = vnan_to_0(VSUB(VFMA(x, VSET1(1.44269504088896341f), shift), shift));
    const vf r = VFMA(n, VSET1(2.12194440e-4f), VFNMA(n, VSET1(0.693359375f), x));
    vf q = VSET1(1.9875691500e-4f);
    q = VFMA(q, r, VSET1(1.3981999507e-3f));
    q = VFMA(q, r, VSET1(8.3334519073e-3f));
    q = VFMA(q, r, VSET1(4.1665795894e-2f));
    q = VFMA(q, r, VSET1(1.6666665459e-1f));
    q = VFMA(q, r, VSET1(5.0000001201e-1f));
    q = VADD(VFMA(q, VMUL(r, r), r), VSET1(1.0f));
    return VMUL(q, vpow2(vround_to_int(n)));
}

#endif

static _Thread_local float *scratch_h;
static _Thread_local int64_t scratch_h_cap;

/* g [n] ← SiLU(g) · u = g / (1 + e^−g) · u, entry by entry */
static inline void silu_mul(float *g, const float *u, int64_t n) {
    int64_t i = 0;
#if HAVE_FLOAT_DOT /* VL lanes at a time by vexp (exp_f32's NaN test kept `omp simd` from vectorizing it) */
    for (; i + VL <= n; i += VL) {
        const vf x = VLOAD(g + i);
        VSTORE(g + i, VMUL(VDIV(x, VADD(VSET1(1.0f), vexp(VMUL(x, VSET1(-1.0f))))), VLOAD(u + i)));
    }
#endif
    for (; i < n; i++) g[i] = g[i] / (1.0f + exp_f32(-g[i])) * u[i];
}

/* The prelude's SwiGLU for few tokens: y [T, d_e] = W_down · (SiLU(W_gate · x) ⊙ (W_up · x)), x [T, d_e],
 * with each product as tc_linear computes it and SiLU(g) = g / (1 + e^−g). One call instead of three
 * products and two element-wise operations, each of which costs a Python call on every layer. */
int tc_swiglu(const tc_weight *gate, const tc_weight *up, const tc_weight *down, const float *x, int64_t T,
              float *y) {
    const int64_t F = gate->n;
    if (up->n != F || up->k != gate->k || down->k != F) return -3;
    if (2 * T * F > scratch_h_cap) {
        free(scratch_h);
        scratch_h = (float *)malloc(sizeof(float) * (size_t)(2 * T * F));
        scratch_h_cap = scratch_h ? 2 * T * F : 0;
    }
    if (!scratch_h) return -2;
    float *g = scratch_h, *u = scratch_h + T * F;
    const tc_weight *ws[2] = {gate, up};
    float *ys[2] = {g, u};
    int code;
    if (!int8_together(ws, ys, 2, x, T, &code) && !float_together(ws, ys, 2, x, T, &code)) {
        code = tc_linear(gate, x, T, g);
        if (code == 0) code = tc_linear(up, x, T, u);
    }
    if (code != 0) return code;
    silu_mul(g, u, T * F);
    return tc_linear(down, g, T, y);
}

/* g [n] ← SiLU(g) · u in place (SwiGLU's middle step on a prompt's rows, whose products runtime/torch/ops.py
 * makes one at a time), spread over the threads when long */
int tc_silu_mul(float *g, const float *u, int64_t n) {
    const int64_t run = 4096;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_ROWS)
    for (int64_t i = 0; i < n; i += run) silu_mul(g + i, u + i, n - i < run ? n - i : run);
    return 0;
}

/* ── RMSNorm and RoPE ── */

/* y [R, d] = x / √(Σ x² / d + ε) · γ, row by row */
int tc_rms_norm(const float *x, const float *g, int64_t R, int64_t d, double eps, float *y) {
#pragma omp parallel for schedule(static) if (R * d >= PARALLEL_ROWS)
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < d; i++) ss += xr[i] * xr[i];
        const float s = sqrtf(ss / (float)d + (float)eps);
#pragma omp simd
        for (int64_t i = 0; i < d; i++) yr[i] = xr[i] / s * g[i];
    }
    return 0;
}

/* One head vector x [d] rotated by cos, sin [half]: layout 1 pairs (2i, 2i + 1), 2 halves (i, i + half),
 * 0 none; entries from 2·half on pass unchanged. y may not alias x. */
static inline void rope_row(const float *x, const float *c, const float *s, int64_t d, int64_t half, int layout,
                            float *y) {
    int64_t i0 = 0;
    if (layout == 1) {
        for (int64_t i = 0; i < half; i++) {
            const float a = x[2 * i], b = x[2 * i + 1];
            y[2 * i] = a * c[i] - b * s[i];
            y[2 * i + 1] = a * s[i] + b * c[i];
        }
        i0 = 2 * half;
    } else if (layout == 2) {
#pragma omp simd
        for (int64_t i = 0; i < half; i++) {
            const float a = x[i], b = x[i + half];
            y[i] = a * c[i] - b * s[i];
            y[i + half] = a * s[i] + b * c[i];
        }
        i0 = 2 * half;
    }
    for (int64_t i = i0; i < d; i++) y[i] = x[i];
}

/* RoPE of x [R, T, d] (R rows of T positions of a head vector of d entries) with cos, sin [T, half]:
 * pairs (2i, 2i + 1) when `pairs`, else (i, i + half); entries from 2·half on pass unchanged */
int tc_rope(const float *x, const float *c, const float *s, int64_t R, int64_t T, int64_t d, int64_t half,
            int pairs, float *y) {
    for (int64_t r = 0; r < R; r++)
        for (int64_t t = 0; t < T; t++, x += d, y += d) rope_row(x, c + t * half, s + t * half, d, half, pairs ? 1 : 2, y);
    return 0;
}

/* ── attention ── */

static _Thread_local float *scratch_s;
static _Thread_local int64_t scratch_s_cap;

static float *scores_scratch(int64_t n) {
    if (n > scratch_s_cap) {
        free(scratch_s);
        scratch_s = (float *)malloc(sizeof(float) * (size_t)n);
        scratch_s_cap = scratch_s ? n : 0;
    }
    return scratch_s;
}

/* ── the float16 KV cache (gqa_args.kv_half): each key and value row rounded to the nearest half
 * float (ties to even) once, as it is written, and read back exactly; llama.cpp's default cache
 * type, half the bytes each decoding step reads ── */

/* f rounded to an IEEE half float, ties to even (overflow to ±∞, NaN kept a NaN) */
static inline uint16_t half_of(float f) {
#ifdef __F16C__
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00; /* NaN */
    if (a >= 0x477FF000u) return sign | 0x7C00; /* 65520 and up (and ∞) round to ∞ */
    if (a < 0x38800000u) { /* under 2⁻¹⁴: a subnormal half. Added to 0.5, the float's last mantissa
                            * bit weighs 2⁻²⁴, a subnormal half's unit: the addition rounds to even */
        float t;
        memcpy(&t, &a, 4);
        t += 0.5f;
        uint32_t bits;
        memcpy(&bits, &t, 4);
        return sign | (uint16_t)(bits - 0x3F000000u);
    }
    /* a normal half: the exponent rebased from 127 to 15, the 13 dropped bits rounded to even */
    return sign | (uint16_t)((a - 0x38000000u + 0x0FFFu + ((a >> 13) & 1u)) >> 13);
#endif
}

static inline float float_of_half(uint16_t h) { return f16((const uint8_t *)&h); }

/* x [d] → y [d] halves */
static inline void round_to_halves(const float *x, uint16_t *y, int64_t d) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= d; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__F16C__)
    for (; i + 8 <= d; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < d; i++) y[i] = half_of(x[i]);
}

/* row j of a cache head's rows of d entries (float32, or halves when kv16) */
static inline const void *kv_row(const void *rows, int64_t j, int64_t d, int kv16) {
    return (const uint8_t *)rows + j * d * (kv16 ? 2 : 4);
}

/* q [d] · k [d] with k halves */
static inline float dot_half(const float *q, const uint16_t *k, int64_t d) {
    int64_t i = 0;
    float acc = 0.0f;
#if HAVE_FLOAT_DOT
    if (d >= VL) { /* two sums in flight */
        vf a = VZERO(), b = VZERO();
        for (; i + 2 * VL <= d; i += 2 * VL) {
            a = VFMA(VLOAD(q + i), vload_half(k + i), a);
            b = VFMA(VLOAD(q + i + VL), vload_half(k + i + VL), b);
        }
        if (i + VL <= d) a = VFMA(VLOAD(q + i), vload_half(k + i), a), i += VL;
        acc = VSUM(VADD(a, b));
    }
#endif
    for (; i < d; i++) acc += q[i] * float_of_half(k[i]);
    return acc;
}

/* The scores of one query row q [d] against keys Kh [S, d] into p [S]: q·k · scale, soft-capped to
 * cap · tanh(score / cap) when cap > 0, −∞ where ok[j] is 0; returns their maximum. */
static float scores_row(const float *q, const void *K_rows, int kv16, int64_t S, int64_t d, const uint8_t *ok,
                        float scale, float cap, float *p) {
    float m = -INFINITY;
    for (int64_t j = 0; j < S; j++) {
        float acc = 0.0f;
        if (kv16) {
            acc = dot_half(q, (const uint16_t *)K_rows + j * d, d);
        } else {
            const float *k = (const float *)K_rows + j * d;
#if HAVE_FLOAT_DOT
            if (d % VL == 0) {
                vf a = VMUL(VLOAD(q), VLOAD(k));
                for (int64_t i = VL; i < d; i += VL) a = VFMA(VLOAD(q + i), VLOAD(k + i), a);
                acc = VSUM(a);
            } else
#endif
            {
#pragma omp simd reduction(+ : acc)
                for (int64_t i = 0; i < d; i++) acc += q[i] * k[i];
            }
        }
        float sc = acc * scale;
        if (cap > 0.0f) sc = cap * tanhf(sc / cap);
        p[j] = ok[j] ? sc : -INFINITY;
        m = p[j] > m ? p[j] : m;
    }
    return m;
}

/* The keys a query row may read, from the first allowed one (*j0) to the last (*j1, exclusive): a
 * causal row of a prompt reads its own past, a sliding window its width; the others weigh 0 */
static inline void allowed_span(const uint8_t *ok, int64_t S, int64_t *j0, int64_t *j1) {
    int64_t a = 0, b = S;
    while (a < S && !ok[a]) a++;
    while (b > a && !ok[b - 1]) b--;
    *j0 = a, *j1 = b;
}

/* The rest of one query row once its scores p [n] over the keys of its span are known (scale, cap
 * and the −∞ of masked keys applied; m their maximum): a softmax over the allowed keys (ok [n]; NaN
 * when none is allowed, as the card's −∞ mask makes it) and the sink logit (−∞: none), which joins
 * the maximum and the denominator and owns no value (llama.cpp's ggml_soft_max_add_sinks), then the
 * weighted sum of the values Vh [n, d] (rows contiguous) into o [d]. p is overwritten. */
#if HAVE_FLOAT_DOT
/* the most vectors of an output row weigh_values holds in registers (AVX2 has 16 of them) */
#define HELD_VECTORS (VL == 16 ? 16 : 8)

/* o [VL·nv] = inv · Σ_j p[j] · V[j][c0 …] (V's rows of d entries, float32 or halves when kv16; the nv
 * vectors from entry c0 on), the vectors held in registers: kv16 and nv constants where it is called,
 * so that the loop over them unrolls */
static inline __attribute__((always_inline)) void weigh_values(const float *p, const void *V, const int kv16,
                                                               int64_t n, int64_t d, int64_t c0, float inv,
                                                               const int64_t nv, float *o) {
    vf ov[HELD_VECTORS];
    for (int64_t v = 0; v < nv; v++) ov[v] = VZERO();
    for (int64_t j = 0; j < n; j++) {
        const int64_t at = j * d + c0;
        const vf e = VSET1(p[j]);
        for (int64_t v = 0; v < nv; v++)
            ov[v] = VFMA(e, kv16 ? vload_half((const uint16_t *)V + at + VL * v) : VLOAD((const float *)V + at + VL * v),
                         ov[v]);
    }
    for (int64_t v = 0; v < nv; v++) VSTORE(o + VL * v, VMUL(ov[v], VSET1(inv)));
}
#endif

static void weigh_row(float *p, float m, const void *V_rows, int kv16, int64_t n, int64_t d, const uint8_t *ok,
                      float sink, float *o) {
    if (m == -INFINITY) { /* nothing allowed, or every score −∞: the card's softmax is NaN */
        for (int64_t i = 0; i < d; i++) o[i] = NAN;
        return;
    }
    if (sink > m) m = sink; /* the sink joins the maximum … */
    float l = 0.0f;
    int64_t j = 0;
#if HAVE_FLOAT_DOT
    vf lv = VZERO();
    for (; j + VL <= n; j += VL) {
        const vf e = vkeep(vexp(VSUB(VLOAD(p + j), VSET1(m))), ok + j);
        VSTORE(p + j, e);
        lv = VADD(lv, e);
    }
    l = VSUM(lv);
#endif
    for (; j < n; j++) {
        p[j] = ok[j] ? exp_f32(p[j] - m) : 0.0f;
        l += p[j];
    }
    if (sink > -INFINITY) l += exp_f32(sink - m); /* … and the denominator */
    const float inv = 1.0f / l;
#if HAVE_FLOAT_DOT
    if (d % VL == 0) { /* the row in registers, HELD_VECTORS at a time; the count a constant where common */
        for (int64_t c0 = 0; c0 < d; c0 += HELD_VECTORS * VL) {
            const int64_t nv = (d - c0) / VL < HELD_VECTORS ? (d - c0) / VL : HELD_VECTORS;
#define WEIGH(kv16, nv) weigh_values(p, V_rows, kv16, n, d, c0, inv, nv, o + c0)
            if (kv16)
                nv == 4 ? WEIGH(1, 4) : nv == 8 ? WEIGH(1, 8) : nv == HELD_VECTORS ? WEIGH(1, HELD_VECTORS) : WEIGH(1, nv);
            else
                nv == 4 ? WEIGH(0, 4) : nv == 8 ? WEIGH(0, 8) : nv == HELD_VECTORS ? WEIGH(0, HELD_VECTORS) : WEIGH(0, nv);
#undef WEIGH
        }
        return;
    }
#endif
    if (kv16) {
        const uint16_t *Vh = (const uint16_t *)V_rows;
        for (int64_t i = 0; i < d; i++) o[i] = 0.0f;
        for (j = 0; j < n; j++)
            for (int64_t i = 0; i < d; i++) o[i] += p[j] * float_of_half(Vh[j * d + i]);
        for (int64_t i = 0; i < d; i++) o[i] *= inv;
        return;
    }
    const float *Vh = (const float *)V_rows;
    for (int64_t i = 0; i < d; i++) o[i] = 0.0f;
    j = 0;
    for (; j + 4 <= n; j += 4) { /* four rows of V per pass over o */
        const float *v0 = Vh + j * d, *v1 = v0 + d, *v2 = v1 + d, *v3 = v2 + d;
        const float e0 = p[j], e1 = p[j + 1], e2 = p[j + 2], e3 = p[j + 3];
#pragma omp simd
        for (int64_t i = 0; i < d; i++) o[i] += (e0 * v0[i] + e1 * v1[i]) + (e2 * v2[i] + e3 * v3[i]);
    }
    for (; j < n; j++) {
        const float *v = Vh + j * d;
        const float e = p[j];
#pragma omp simd
        for (int64_t i = 0; i < d; i++) o[i] += e * v[i];
    }
    for (int64_t i = 0; i < d; i++) o[i] *= inv;
}

/* One query row q [d] against keys Kh, values Vh [S, d] (rows contiguous; halves when kv16), allowed
 * keys ok [S]: the scores of its span (scores_row), then weigh_row with the sink logit (−∞: none) into
 * o [d]. p: scratch of S floats. */
static void attend_row(const float *q, const void *Kh, const void *Vh, int kv16, int64_t S, int64_t d,
                       const uint8_t *ok, float scale, float cap, float sink, float *p, float *o) {
    int64_t j0, j1;
    allowed_span(ok, S, &j0, &j1);
    const float m =
        j1 > j0 ? scores_row(q, kv_row(Kh, j0, d, kv16), kv16, j1 - j0, d, ok + j0, scale, cap, p) : -INFINITY;
    weigh_row(p, m, kv_row(Vh, j0, d, kv16), kv16, j1 - j0, d, ok + j0, sink, o);
}

#define QUERY_RUN 16 /* queries of one head per work item of tc_gqa */
#if HAVE_FLOAT_DOT
#define RUN_KEYS VL /* keys per block of attend_run: one vector of scores */

/* Keys Kh [S, d] in blocks of RUN_KEYS, each block transposed: Kt [⌈S/VL⌉][d][VL], Kt[b][i][c] =
 * Kh[VL·b + c][i] (past the last key, the block's first key again: lanes attend_run masks off) */
static void transpose_keys(const void *Kh, int kv16, int64_t S, int64_t d, float *Kt) {
    for (int64_t jb = 0; jb < S; jb += RUN_KEYS, Kt += d * RUN_KEYS)
        for (int64_t c = 0; c < RUN_KEYS; c++) {
            const int64_t j = jb + (jb + c < S ? c : 0);
            if (kv16) {
                const uint16_t *k = (const uint16_t *)Kh + j * d;
                for (int64_t i = 0; i < d; i++) Kt[i * RUN_KEYS + c] = float_of_half(k[i]);
            } else {
                const float *k = (const float *)Kh + j * d;
                for (int64_t i = 0; i < d; i++) Kt[i * RUN_KEYS + c] = k[i];
            }
        }
}

/* Up to QUERY_RUN query rows of one head at once, Qr [nr, d] (d a multiple of VL),
 * against keys Kh, values Vh [S, d]; allowed [nr, S] (row stride S); each row as attend_row (the
 * head's one sink logit), out row r at o + r·o_stride. The scores of every row over the keys of the rows' spans together come
 * VL keys at a time from the head's transposed blocks of K (Kt, transpose_keys: made once a call of
 * tc_gqa, which every query head of the key head and every run reads), VL scores a vector with no
 * horizontal sums; P: scratch of nr·S floats (scores left of a row's span are written, never read). */
static void attend_run(const float *Qr, int64_t nr, const void *Vh, int kv16, int64_t S, int64_t d, const uint8_t *allowed,
                       float scale, float cap, float sink, float *P, const float *Kt_head, float *o,
                       int64_t o_stride) {
    int64_t J0 = S, J1 = 0, j0[QUERY_RUN], j1[QUERY_RUN];
    for (int64_t r = 0; r < nr; r++) {
        allowed_span(allowed + r * S, S, &j0[r], &j1[r]);
        if (j1[r] > j0[r]) J0 = j0[r] < J0 ? j0[r] : J0, J1 = j1[r] > J1 ? j1[r] : J1;
    }
    for (int64_t jb = J0 / RUN_KEYS * RUN_KEYS; jb < J1; jb += RUN_KEYS) {
        const int64_t nb = J1 - jb < RUN_KEYS ? J1 - jb : RUN_KEYS;
        const float *Kt = Kt_head + jb * d; /* block jb / 16: d · 16 floats each */
        int64_t r = 0;
        for (; r < nr; r += 4) { /* four rows at a time, two sums each: eight chains of FMAs */
            const int64_t g = nr - r < 4 ? nr - r : 4;
            vf acc[4][2];
            for (int64_t u = 0; u < 4; u++) acc[u][0] = acc[u][1] = VZERO();
            for (int64_t i = 0; i < d; i += 2) {
                const vf k0 = VLOAD(Kt + i * RUN_KEYS), k1 = VLOAD(Kt + (i + 1) * RUN_KEYS);
                for (int64_t u = 0; u < 4; u++) {
                    const float *q = Qr + (r + (u < g ? u : 0)) * d;
                    acc[u][0] = VFMA(VSET1(q[i]), k0, acc[u][0]);
                    acc[u][1] = VFMA(VSET1(q[i + 1]), k1, acc[u][1]);
                }
            }
            for (int64_t u = 0; u < g; u++)
                vstore_first(P + (r + u) * S + jb, VMUL(VADD(acc[u][0], acc[u][1]), VSET1(scale)), nb);
        }
    }
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *ok = allowed + r * S + j0[r];
        float *p = P + r * S + j0[r], m = -INFINITY;
        const int64_t n = j1[r] - j0[r];
        for (int64_t j = 0; j < n; j++) {
            float sc = p[j];
            if (cap > 0.0f) sc = cap * tanhf(sc / cap);
            p[j] = ok[j] ? sc : -INFINITY;
            m = p[j] > m ? p[j] : m;
        }
        weigh_row(p, m, kv_row(Vh, j0[r], d, kv16), kv16, n, d, ok, sink, o + r * o_stride);
    }
}
#endif

/* Heads are spread over the OpenMP threads once a step has this many score·entry products */
#define PARALLEL_ATTENTION 32768

/* Attention of few queries. Q [B, H, Tq, d] contiguous; K, V [B, Hkv, S, d] with rows contiguous and
 * strides (in floats) kb, kh for K's batch and head axes, vb, vh for V's; kv [H] the key/value head
 * of each query head; allowed [Tq, S] bytes (1: the query may read that key); see attend_row.
 * out [B, H, Tq, d]. */
int tc_attention(const float *Q, const float *K, const float *V, int64_t B, int64_t H, int64_t Tq, int64_t S,
                 int64_t d, int64_t kb, int64_t kh, int64_t vb, int64_t vh, const int64_t *kv,
                 const uint8_t *allowed, double scale, float *out) {
    int failed = 0;
#pragma omp parallel for collapse(2) schedule(static) if (B * H * Tq * S * d >= PARALLEL_ATTENTION)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            float *p = scores_scratch(S);
            if (!p) {
                failed = 1;
                continue;
            }
            const float *Kh = K + b * kb + kv[h] * kh, *Vh = V + b * vb + kv[h] * vh;
            for (int64_t t = 0; t < Tq; t++)
                attend_row(Q + ((b * H + h) * Tq + t) * d, Kh, Vh, 0, S, d, allowed + t * S, (float)scale, 0.0f,
                           -INFINITY, p, out + ((b * H + h) * Tq + t) * d);
        }
    return failed ? -2 : 0;
}

static _Thread_local float *scratch_head;
static _Thread_local int64_t scratch_head_cap;
#if HAVE_FLOAT_DOT
static _Thread_local void *keys_t; /* the calling thread's transposed keys (transpose_keys) */
static _Thread_local int64_t keys_t_cap;
#endif

/* Where batch row b of a tc_gqa call keeps its keys and values: buffers, offsets of the row's first
 * entry (kb, vb) and head strides in entries, the rows it has used, the row's first angle row in
 * cos/sin and the offset of its mask in `allowed`. One cache for every row (rows NULL): the call's
 * strides, angles [T, half] and mask [T, S] shared by the rows; a cache per row (gqa_args.rows):
 * angles [B, T, half] and masks [B, T, S_max] (S_max the most rows any row reads; a row reads the
 * first used_b + T columns of its own) */
typedef struct {
    void *K, *V;
    int64_t kb, kh, vb, vh, used, angle, mask, stride; /* stride: between the mask's rows */
} gqa_cache;

static int64_t rows_read(const gqa_args *a) {
    int64_t most = 0;
    for (int64_t b = 0; b < a->B; b++) most = a->rows[5 * b + 4] > most ? a->rows[5 * b + 4] : most;
    return most + a->T;
}

static inline gqa_cache row_cache(const gqa_args *a, int64_t b) {
    gqa_cache c;
    if (!a->rows) {
        c.K = a->Kc, c.V = a->Vc, c.kb = b * a->kb, c.kh = a->kh, c.vb = b * a->vb, c.vh = a->vh, c.used = a->used;
        c.angle = 0, c.mask = 0, c.stride = a->used + a->T;
        return c;
    }
    const int64_t *r = a->rows + 5 * b;
    c.K = (void *)(intptr_t)r[0], c.V = (void *)(intptr_t)r[1], c.kb = 0, c.kh = r[2], c.vb = 0, c.vh = r[3];
    c.used = r[4], c.stride = rows_read(a), c.angle = b * a->T, c.mask = b * a->T * c.stride;
    return c;
}

/* tc_gqa's work item `it`: run it / (B·H) of the queries of head it % H of batch row it % (B·H) / H,
 * as tc_gqa describes (Kt: the transposed keys for a prompt's runs, or NULL); 0, or −2 when out of
 * memory */
static int gqa_item(const gqa_args *a, int64_t it, const float *Kt, int64_t head_keys) {
    const int64_t B = a->B, T = a->T, H = a->H, Hkv = a->Hkv, d = a->d, half = a->half;
    const int kv16 = a->kv_half != 0;
    const int64_t run = it / (B * H), b = it % (B * H) / H, h = it % H, kvh = a->kv[h];
    const gqa_cache c = row_cache(a, b);
    const int64_t S = c.used + T;
    const int64_t t0 = run * QUERY_RUN, nr = T - t0 < QUERY_RUN ? T - t0 : QUERY_RUN;
    float *P = scores_scratch(nr * S);
    const int64_t head_floats = nr * d; /* the run's rotated queries */
    if (head_floats > scratch_head_cap) {
        free(scratch_head);
        scratch_head = (float *)malloc(sizeof(float) * (size_t)head_floats);
        scratch_head_cap = scratch_head ? head_floats : 0;
    }
    if (!P || !scratch_head) return -2;
    const void *Kh = kv_row(c.K, c.kb + kvh * c.kh, 1, kv16), *Vh = kv_row(c.V, c.vb + kvh * c.vh, 1, kv16);
    float *Qr = scratch_head, *o = a->out + ((b * T + t0) * H + h) * d;
    for (int64_t r = 0; r < nr; r++) {
        const int64_t t = c.angle + t0 + r;
        rope_row(a->Q + ((b * T + t0 + r) * H + h) * d, a->cos + t * half, a->sin + t * half, d, half,
                 (int)a->layout, Qr + r * d);
    }
    const uint8_t *allowed = a->allowed + c.mask; /* this row's [T, S], row stride S */
    const float scale = (float)a->scale, cap = (float)a->cap, sink = a->sinks ? a->sinks[h] : -INFINITY;
#if HAVE_FLOAT_DOT
    if (Kt && nr >= 4) { /* a prompt's queries: scores a block of keys at a time (one cache: stride S) */
        attend_run(Qr, nr, Vh, kv16, S, d, allowed + t0 * S, scale, cap, sink, P, Kt + (b * Hkv + kvh) * head_keys, o,
                   H * d);
        return 0;
    }
#else
    (void)Kt, (void)head_keys, (void)Hkv;
#endif
    for (int64_t r = 0; r < nr; r++)
        attend_row(Qr + r * d, Kh, Vh, kv16, S, d, allowed + (t0 + r) * c.stride, scale, cap, sink, P, o + r * H * d);
    return 0;
}

/* One step of grouped-query attention for the new tokens (the prelude's GQAttention: RoPE on every
 * head of Q and K, then each query head attends with its key/value head), keys and values kept in a
 * cache. Q [B, T, H·d], K, V [B, T, Hkv·d] contiguous (a token's heads side by side, as the
 * projections give them); cos, sin [T, half] at the new tokens' positions; layout as rope_row.
 * The T new keys (rotated) and values are written to rows used … used + T − 1 of the caches Kc, Vc
 * [B, Hkv, capacity, d] (strides kb, kh, vb, vh in entries, rows contiguous; float32, or halves when
 * kv_half), and every query reads the S = used + T rows there; kv [H], allowed [T, S], scale and cap
 * as attend_row; sinks [H] (or NULL) query head h's sink logit.
 * With `rows` (sequences at different lengths in one batch), each batch row has a cache of its own
 * and its own positions and mask: see gqa_cache.
 * out [B, T, H·d]: the heads' results side by side again.
 * The arguments come as one struct (gqa_args, structs.h): the layers of a pass share most of them,
 * so a call sets the few that differ instead of converting two dozen. */

int tc_gqa(const gqa_args *a) {
    const float *K = a->K, *V = a->V, *cos = a->cos, *sin = a->sin;
    const int64_t B = a->B, T = a->T, H = a->H, Hkv = a->Hkv, d = a->d, half = a->half;
    const int layout = (int)a->layout;
    const int kv16 = a->kv_half != 0;
    const int64_t one_thread = a->one_thread;
    float *rotated = 0; /* a key row rotated in float32, before it is rounded to halves */
    if (kv16 && !(rotated = (float *)grown(&scratch_row, &scratch_row_cap, (int64_t)sizeof(float) * d))) return -2;
    for (int64_t b = 0; b < B; b++) {
        const gqa_cache c = row_cache(a, b);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < Hkv; j++) {
                const float *k = K + ((b * T + t) * Hkv + j) * d, *v = V + ((b * T + t) * Hkv + j) * d;
                const float *co = cos + (c.angle + t) * half, *si = sin + (c.angle + t) * half;
                const int64_t kr = c.kb + j * c.kh + (c.used + t) * d, vr = c.vb + j * c.vh + (c.used + t) * d;
                if (kv16) {
                    rope_row(k, co, si, d, half, layout, rotated);
                    round_to_halves(rotated, (uint16_t *)c.K + kr, d);
                    round_to_halves(v, (uint16_t *)c.V + vr, d);
                } else {
                    rope_row(k, co, si, d, half, layout, (float *)c.K + kr);
                    memcpy((float *)c.V + vr, v, sizeof(float) * (size_t)d);
                }
            }
    }
    const int64_t S = a->rows ? rows_read(a) : a->used + T; /* the most keys a row reads */
    /* the work: each head's queries in runs of QUERY_RUN (a prompt's many, a decoding step's one) */
    const int64_t runs = (T + QUERY_RUN - 1) / QUERY_RUN, items = B * H * runs;
    int failed = 0;
    float *Kt = 0; /* [B][Hkv][⌈S/VL⌉ · VL][d], for attend_run */
    int64_t head_keys = 0;
#if HAVE_FLOAT_DOT
    if (T >= 4 && d % VL == 0 && !a->rows) {
        head_keys = (S + RUN_KEYS - 1) / RUN_KEYS * RUN_KEYS * d;
        if (!(Kt = (float *)grown(&keys_t, &keys_t_cap, (int64_t)sizeof(float) * B * Hkv * head_keys))) return -2;
#pragma omp parallel for collapse(2) schedule(static) if (!one_thread && B * Hkv * S * d >= PARALLEL_ATTENTION)
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < Hkv; j++)
                transpose_keys(kv_row(a->Kc, b * a->kb + j * a->kh, 1, kv16), kv16, S, d, Kt + (b * Hkv + j) * head_keys);
    }
#endif
    /* a decoding step's one run a head: the heads in contiguous shares (a thread reads the key/value
     * heads of its query heads, mostly its own, where heads handed out in turn would share them);
     * a prompt's runs one at a time (a causal prompt's later runs read more keys) */
    if (runs == 1) {
#pragma omp parallel for schedule(static) if (!one_thread && B * H * T * S * d >= PARALLEL_ATTENTION)
        for (int64_t it = 0; it < items; it++)
            if (gqa_item(a, it, Kt, head_keys)) failed = 1;
    } else {
#pragma omp parallel for schedule(dynamic, 1) if (!one_thread && B * H * T * S * d >= PARALLEL_ATTENTION)
        for (int64_t it = 0; it < items; it++)
            if (gqa_item(a, it, Kt, head_keys)) failed = 1;
    }
    return failed ? -2 : 0;
}
