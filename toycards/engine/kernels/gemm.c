/* Version 4 of the product (see tc.h): many tokens of the types whose x is quantized, an int8 GEMM.
 * x is quantized as for version 3 (quantize_x: int8 blocks of 32, dx, sx = dx · Σ qx), so many tokens
 * get the sums few tokens get, up to the order of float32 additions; but Q4_K's with the AVX2 kernels
 * in runs of 256 sharing dx (gemm_tokens_k in gemm_avx2.c), as llama.cpp's q8_K for every K-quant product.
 * Each weight row is first written as unsigned quants q ∈ [0, 255] with a float scale d and a float
 * offset m per group of L elements
 * (L = 32; 16 for Q6_K, whose int8 scales change every 16), so that w = d·q + m:
 *   Q8_0  q = v + 128, m = −128·d      Q4_0  q = nibble, m = −8·d       Q4_1  q = nibble, m as stored
 *   Q5_0  m = −16·d                    Q5_1  m as stored                 (q: nibble + 16·fifth bit)
 *   Q4_K / Q5_K  d = d·sc_j, m = −dmin·m_j     Q6_K  d = d·sc_g, q = 6-bit quant, m = −32·d·sc_g
 * (with the AVX2 kernels Q8_0's q is v itself, −128 … 127, and m = 0: see below). Then a group's
 * part of Σ w·x is d·dx·Σ q·qx + m·dx·Σ qx, the integer sums Σ q·qx exact. The rows go GEMM_ROWS at
 * a time (one int32 lane a row) into a tile, q as [K/4][GEMM_ROWS rows][4] (four consecutive quants
 * of a row in a lane), d and m as [K/L][GEMM_ROWS]; each thread builds its tiles in L2 and multiplies
 * them by every token, GEMM_TOKENS at a time: per group and token, L/4 vector products (the tile's
 * quads of all its rows against the token's quad broadcast), then its sum converted to float and
 * scaled by one FMA, its offset part by another. A tile costs a byte an element, built once for all
 * the tokens.
 * AVX-512 VNNI (gemm_avx512.c): tiles of 16 rows, 8 tokens, vpdpbusd sums straight into int32.
 * AVX2 (LANES, gemm_avx2.c): tiles of 8 rows, 4 tokens. A packed group is a tile already but for
 * unpacking: each 32-bit lane of its chunks holds one row's four bytes, so its nibbles (with Q5's
 * fifth bits and Q6_K's high bits) are the tile's vectors, with no transpose; rows as stored go through gemm_row and an
 * 8 × 8 transpose of 32-bit words. With no vpdpbusd, vpmaddubsw's int16 pairs add up in int16 while
 * they cannot overflow: eight quads of Q4 (q ≤ 15: 8 · 2 · 15 · 127 = 30480), four of Q5 (q ≤ 31),
 * two of Q6_K (q ≤ 63), then one vpmaddwd widens them. Q8_0's q would overflow one pair (2 · 255 ·
 * 127), so its tile keeps v with m = 0 and multiplies |v| by x with v's sign, each quad widened.
 * Owns: the tiles (a row's quants, gemm_row, or a packed group's read in place) and the threads.
 * Leaves out: the tile kernels, per instruction set (gemm_fns: gemm_avx512.c, gemm_avx2.c). */
#include "tc.h"

#if HAVE_INT8_DOT
/* one row as stored (b, K elements) → its quants q [K], and d, m [K / L] (see above), with the
 * version 3 kernels' unpacking (nibbles, unsigned_quants, q6_chunks) */
static void gemm_row(int type, const uint8_t *b, int64_t K, uint8_t *q, float *d, float *m) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    switch (type) {
    case Q8_0: /* AVX2: v, m = 0; AVX-512: v + 128, m = −128·d */
        for (int64_t g = 0; g < K / 32; g++, b += 34, q += 32) {
            d[g] = f16(b), m[g] = LANES ? 0.0f : -128.0f * d[g];
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b + 2));
            _mm256_storeu_si256((__m256i *)q, LANES ? v : _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
        }
        return;
    case Q4_0:
    case Q4_1:
    case Q5_0:
    case Q5_1:
        for (int64_t g = 0; g < K / 32; g++, b += BLOCK_BYTES(type), q += 32) {
            d[g] = f16(b), m[g] = HAS_MIN(type) ? f16(b + 2) : -BIAS(type) * d[g];
            _mm256_storeu_si256((__m256i *)q, unsigned_quants(type, b));
        }
        return;
    case Q4_K:
    case Q5_K:
        for (int64_t s = 0; s < K; s += 256, d += 8, m += 8) {
            const int five = type == Q5_K;
            const float dd = f16(b), dmin = f16(b + 2);
            const uint8_t *qs = b + (five ? 48 : 16);
            const __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16)); /* Q5_K: bit j of byte l → sub-block j */
            for (int j = 0; j < 8; j++, q += 32) { /* sub-block j: nibbles of qs[32 · (j / 2) …], low for even j */
                int sc, mn;
                scale_min_k4(j, b + 4, &sc, &mn);
                d[j] = gemm_x_runs(type) ? (float)sc : dd * (float)sc, m[j] = -(dmin * (float)mn); /* runs: gemm_tile */
                const __m256i c = _mm256_loadu_si256((const __m256i *)(qs + 32 * (j / 2)));
                __m256i v = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(c, 4) : c, low4);
                if (five) { /* bit j of each qh byte → 16 */
                    const __m256i bit = _mm256_set1_epi8((char)(1 << j));
                    v = _mm256_or_si256(v, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit),
                                                            _mm256_set1_epi8(16)));
                }
                _mm256_storeu_si256((__m256i *)q, v);
            }
            b += five ? 176 : 144;
        }
        return;
    default: /* Q6_K: element e of half n (128 elements) takes scale 8n + e / 16 */
        for (int64_t s = 0; s < K; s += 256, b += 210, d += 16, m += 16) {
            const float dd = f16(b + 208);
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int g = 0; g < 16; g++) d[g] = dd * (float)sc[g], m[g] = -32.0f * d[g];
            for (int n = 0; n < 2; n++, q += 128) {
                __m256i c[4];
                q6_chunks(b + 64 * n, b + 128 + 32 * n, c);
                for (int j = 0; j < 4; j++) _mm256_storeu_si256((__m256i *)(q + 32 * j), c[j]);
            }
        }
    }
}

#if LANES
/* a packed group of eight rows (g, see tc_pack) → its tile: wq [K/4][8][4], dt and mt [K/L][8] (and
 * for Q4_K ds [K/256][8], see gemm_tile), each vector as gemm_row and the transpose would give it
 * (the same q, the same d and m) */
static void gemm_lanes_tile(int type, const uint8_t *g, int64_t K, uint8_t *wq, float *dt, float *mt, float *ds) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256 negate = _mm256_set1_ps(-0.0f);
    if (type == Q4_K || type == Q5_K) { /* per block: 8 sub-blocks of 32, their scales and mins as dot_lanes_q45_k takes them */
        const int five = type == Q5_K, runs = gemm_x_runs(type);
        for (int64_t b = 0; b < K / 256; b++, g += 8 * (five ? 176 : 144), wq += 8 * 256, dt += 64, mt += 64) {
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)(g + 32)), w1 = _mm256_loadu_si256((const __m256i *)(g + 64));
            const __m256i w2 = _mm256_loadu_si256((const __m256i *)(g + 96));
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
            if (runs) _mm256_storeu_ps(ds + 8 * b, d);
            for (int j = 0; j < 8; j++) {
                __m256i sc, mn;
                lanes_scale_min_k4(j, w0, w1, w2, &sc, &mn);
                if (runs) /* sc in both halves of each lane (gemm_tokens_k) */
                    _mm256_storeu_si256((__m256i *)(dt + 8 * j), _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16)));
                else
                    _mm256_storeu_ps(dt + 8 * j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
                _mm256_storeu_ps(mt + 8 * j, _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(mn)), negate));
            }
            for (int i = 0; i < 4; i++) /* sub-blocks 2i (low nibbles), 2i + 1 (high) */
                for (int c = 0; c < 8; c++) {
                    __m256i lo, hi;
                    lanes_q45_k(five, g, i, c, &lo, &hi);
                    _mm256_storeu_si256((__m256i *)(wq + 32 * (16 * i + c)), lo);
                    _mm256_storeu_si256((__m256i *)(wq + 32 * (16 * i + 8 + c)), hi);
                }
        }
        return;
    }
    if (type == Q6_K) { /* per block: 16 groups of 16, their int8 scales; the quants as dot_lanes_q6_k builds them */
        for (int64_t b = 0; b < K / 256; b++, g += 8 * 210, wq += 8 * 256, dt += 128, mt += 128) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
            const uint8_t *ch = g + 16;
            for (int gi = 0; gi < 16; gi++) {
                const __m256 ds = _mm256_mul_ps(d, _mm256_cvtepi32_ps(lanes_q6_k_scale(ch, gi)));
                _mm256_storeu_ps(dt + 8 * gi, ds);
                _mm256_storeu_ps(mt + 8 * gi, _mm256_mul_ps(_mm256_set1_ps(-32.0f), ds));
            }
            for (int n = 0; n < 2; n++)
                for (int c = 0; c < 8; c++) { /* elements 128n + 32k + 4c … + 3 of the eight rows */
                    __m256i q[4];
                    lanes_q6_k(ch, n, c, q);
                    for (int k = 0; k < 4; k++) _mm256_storeu_si256((__m256i *)(wq + 32 * (32 * n + 8 * k + c)), q[k]);
                }
        }
        return;
    }
    const int64_t gb = 8 * BLOCK_BYTES(type), hb = HAS_MIN(type) ? 4 : 2; /* a group's block; its d (and m) */
    for (int64_t b = 0; b < K / 32; b++, g += gb, wq += 256) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        _mm256_storeu_ps(dt + 8 * b, d);
        _mm256_storeu_ps(mt + 8 * b, type == Q8_0    ? _mm256_setzero_ps()
                                     : HAS_MIN(type) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)))
                                                     : _mm256_mul_ps(_mm256_set1_ps(-BIAS(type)), d));
        const uint8_t *c = g + 8 * hb;
        if (type == Q8_0) { /* chunk c: elements 4c … 4c + 3 of the eight rows, v as stored */
            memcpy(wq, c, 256);
            continue;
        }
        const __m256i H = HAS_QH(type) ? _mm256_loadu_si256((const __m256i *)c) : _mm256_setzero_si256();
        if (HAS_QH(type)) c += 32;
        for (int j = 0; j < 4; j++) { /* chunk j: elements 4j + i (low nibbles), 16 + 4j + i (high) */
            const __m256i v = _mm256_loadu_si256((const __m256i *)(c + 32 * j));
            __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            if (HAS_QH(type))
                lo = _mm256_or_si256(lo, fifth_bits_of_lanes(H, 4 * j)), hi = _mm256_or_si256(hi, fifth_bits_of_lanes(H, 16 + 4 * j));
            _mm256_storeu_si256((__m256i *)(wq + 32 * j), lo);
            _mm256_storeu_si256((__m256i *)(wq + 32 * (4 + j)), hi);
        }
    }
}

#else
/* one packed step of a SPLIT type (o: its 8 scales d, the 8 mins m of Q4_1 and Q5_1, the 8 qh of Q5_0
 * and Q5_1, then its quants, see tc_pack), blocks j0 … j1 − 1 of it → those blocks' unsigned quants q
 * [32 per block] and d, m as gemm_row gives them, read in place: Q8_0's quants are stored as v + 128
 * already, and a run's low nibbles are two consecutive blocks (4h, 4h + 1), its high nibbles the next
 * two, each plus 16 where its block's qh has the element's bit */
static void gemm_split_step(int type, const uint8_t *o, int j0, int j1, uint8_t *q, float *d, float *m) {
    const int hb = HAS_MIN(type) ? 4 : 2;
    const uint8_t *qh = o + 8 * hb, *qs = qh + (HAS_QH(type) ? 32 : 0);
    if (j0 == 0 && j1 == 8) { /* a whole step: its eight scales (and mins) side by side, as halves */
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)o));
        _mm256_storeu_ps(d, dv);
        _mm256_storeu_ps(m, HAS_MIN(type) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 16)))
                                          : _mm256_mul_ps(dv, _mm256_set1_ps(type == Q8_0 ? -128.0f : -BIAS(type))));
    } else
        for (int j = j0; j < j1; j++) {
            d[j - j0] = f16(o + 2 * j);
            m[j - j0] = type == Q8_0 ? -128.0f * d[j - j0] : HAS_MIN(type) ? f16(o + 16 + 2 * j) : -BIAS(type) * d[j - j0];
        }
    if (type == Q8_0) {
        memcpy(q, qs + 32 * j0, (size_t)(32 * (j1 - j0)));
        return;
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int j = j0; j < j1; j += 2) { /* blocks j, j + 1: half (j / 2) % 2 of run j / 4 */
        const __m512i v = _mm512_loadu_si512((const void *)(qs + 64 * (j / 4)));
        __m512i u = _mm512_and_si512((j / 2) % 2 ? _mm512_srli_epi16(v, 4) : v, low4);
        if (HAS_QH(type)) { /* the fifth bits of blocks j, j + 1 */
            uint64_t bits;
            memcpy(&bits, qh + 4 * j, 8);
            u = _mm512_mask_add_epi8(u, _cvtu64_mask64(bits), u, _mm512_set1_epi8(16));
        }
        _mm512_storeu_si512((void *)(q + 32 * (j - j0)), u);
    }
}

/* row n of a packed weight of a SPLIT type → gemm_row's q, d, m, read from its group in place (no
 * row put back together as stored first) */
static void gemm_packed_row(const tc_weight *p, int64_t n, uint8_t *q, float *d, float *m) {
    const int type = (int)p->type;
    const int64_t rb = p->row_bytes, sb = step_bytes(type), steps = p->k / 256, r = n % ROWS;
    const int64_t tail = rb - steps * sb;
    const uint8_t *group = p->w + (n - r) * rb, *at = group + steps * ROWS * sb;
    for (int64_t st = 0; st < steps; st++, q += 256, d += 8, m += 8)
        gemm_split_step(type, group + (st * ROWS + r) * sb, 0, 8, q, d, m);
    if (SPLIT_TAIL(type, p->k)) /* row r's two blocks: slots 2r, 2r + 1 of the group's split tail */
        gemm_split_step(type, at, (int)(2 * r), (int)(2 * r + 2), q, d, m);
    else if (tail)
        gemm_row(type, at + r * tail, p->k - 256 * steps, q, d, m);
}

#endif

/* a thread's tile and row buffers (see gemm_tile), and the calling thread's half-block scales of x
 * (Q6_K, see gemm_int8), grown as needed and kept */
static _Thread_local void *tile_q, *tile_f, *halves_f;
static _Thread_local int64_t tile_q_cap, tile_f_cap, halves_f_cap;

/* rows n0 … n0 + R − 1 (R ≤ GEMM_ROWS) of the plan's weight as a tile: wq [K/4][GEMM_ROWS][4], dt and
 * mt [K/L][GEMM_ROWS] (rows R … GEMM_ROWS − 1 zero); where x comes in runs of 256 (gemm_x_runs: Q4_K
 * and Q5_K on AVX2) dt holds each sub-block's scale sc as int16 in both halves of a row's lane and
 * ds [K/256][GEMM_ROWS] each block's d (gemm_tokens_k). 0, or −2 when out of memory. A packed
 * group of eight rows is unpacked straight into its tile (AVX2); otherwise each row's quants go to
 * a row buffer [GEMM_ROWS][K], transposed GEMM_ROWS quads at a time. */
static int gemm_tile(const tc_weight *p, int64_t n0, int R, uint8_t **wq, float **dt, float **mt, float **ds) {
    const int type = (int)p->type, runs = gemm_x_runs(type);
    const int64_t K = p->k, ng = K / gemm_group(type), nd = GEMM_ROWS * (K / 256);
    uint8_t *q = (uint8_t *)grown(&tile_q, &tile_q_cap, 2 * GEMM_ROWS * K);
    float *f = (float *)grown(&tile_f, &tile_f_cap, (int64_t)sizeof(float) * (2 * (GEMM_ROWS + 1) * ng + nd));
    if (!q || !f) return -2;
    uint8_t *rows = q + GEMM_ROWS * K;
    *wq = q, *dt = f, *mt = f + GEMM_ROWS * ng, *ds = f + 2 * GEMM_ROWS * ng;
    float *row_d = *ds + nd, *row_m = row_d + ng;
    const int64_t full = p->n - p->n % ROWS; /* packed rows (see tc_pack) */
#if LANES
    if (p->packed && n0 + GEMM_ROWS <= full) { /* n0 is a multiple of 8: one group */
        gemm_lanes_tile(type, p->w + n0 * p->row_bytes, K, q, *dt, *mt, *ds);
        return 0;
    }
#endif
    /* a packed row's bytes as stored (AVX-512; with LANES every packed row took the branch above) */
    uint8_t *bytes = p->packed && !LANES ? row_buffer(p) : 0;
    if (p->packed && !LANES && !bytes) return -2;
    if (R < GEMM_ROWS) {
        memset(rows + R * K, 0, (size_t)((GEMM_ROWS - R) * K));
        memset(f, 0, sizeof(float) * (size_t)(2 * GEMM_ROWS * ng + nd));
    }
    for (int r = 0; r < R; r++) {
        const uint8_t *row = 0;
#if !LANES
        if (p->packed && SPLIT(type) && n0 + r < full)
            gemm_packed_row(p, n0 + r, rows + r * K, row_d, row_m);
        else
#endif
            gemm_row(type, row = stored_row(p, n0 + r, bytes), K, rows + r * K, row_d, row_m);
        for (int64_t g = 0; g < ng; g++) (*dt)[GEMM_ROWS * g + r] = row_d[g], (*mt)[GEMM_ROWS * g + r] = row_m[g];
        if (runs) /* gemm_row gave each sub-block's sc: as int16 twice; each block's d from the row */
            for (int64_t g = 0; g < ng; g++) {
                const int32_t sc = (int32_t)row_d[g], both = sc | sc << 16;
                memcpy(*dt + GEMM_ROWS * g + r, &both, 4);
                if (g % 8 == 0) (*ds)[GEMM_ROWS * (g / 8) + r] = f16(row + (g / 8) * 144); /* Q4_K's blocks */
            }
    }
    int64_t i = 0; /* quads */
    for (; i + GEMM_ROWS <= K / 4; i += GEMM_ROWS) transpose_rows(rows + 4 * i, K, q + 4 * GEMM_ROWS * i);
    for (; i < K / 4; i++)
        for (int r = 0; r < GEMM_ROWS; r++) memcpy(q + 4 * GEMM_ROWS * i + 4 * r, rows + r * K + 4 * i, 4);
    return 0;
}

/* y [T, N] = x [T, K] · Wᵀ by tiles of GEMM_ROWS rows, each thread building its own (version 4); on
 * the calling thread alone when `one_thread` (as tc_dequant_rows) */
int gemm_int8(const tc_weight *p, const float *x, int64_t T, float *y, int64_t one_thread) {
    const int type = (int)p->type, L = gemm_group(type);
    const int64_t N = p->n, K = p->k, nb = K / 32, ng = K / L, tiles = (N + GEMM_ROWS - 1) / GEMM_ROWS;
    const gemm_fn *fns = gemm_fns(type);
    const int runs = gemm_x_runs(type); /* x in runs of 256 (gemm_tokens_k) */
    int8_t *qx;
    float *dx, *sx, *dxg, *sxg;
    if (!scratch_x(T * K, T * nb, &qx, &dx, &sx)) return -2;
    float *halves = 0; /* L = 16: each half block's dx and dx · Σ qx */
    if (L == 16 && !(halves = (float *)grown(&halves_f, &halves_f_cap, (int64_t)sizeof(float) * 2 * T * ng)))
        return -2;
    dxg = L == 16 ? halves : dx, sxg = L == 16 ? halves + T * ng : sx;
    int failed = 0;
#pragma omp parallel if (!one_thread)
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < T; t++) {
            (runs ? quantize_x_256 : quantize_x)(x + t * K, nb, qx + t * K, dx + t * nb, sx + t * nb);
            if (L == 16)
                for (int64_t g = 0; g < ng; g++) {
                    int sum = 0;
                    for (int e = 0; e < 16; e++) sum += qx[t * K + 16 * g + e];
                    dxg[t * ng + g] = dx[t * nb + g / 2], sxg[t * ng + g] = dx[t * nb + g / 2] * (float)sum;
                }
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < tiles; i++) {
            const int64_t n0 = i * GEMM_ROWS;
            const int R = (int)(N - n0 < GEMM_ROWS ? N - n0 : GEMM_ROWS);
            uint8_t *wq;
            float *dt, *mt, *ds;
            if (gemm_tile(p, n0, R, &wq, &dt, &mt, &ds)) {
                failed = 1;
                continue;
            }
            for (int64_t t0 = 0; t0 < T; t0 += GEMM_TOKENS) {
                const int tt = (int)(T - t0 < GEMM_TOKENS ? T - t0 : GEMM_TOKENS);
                fns[tt](wq, dt, mt, ds, K, qx + t0 * K, dxg + t0 * ng, sxg + t0 * ng, y + t0 * N + n0, N, R);
            }
        }
    }
    return failed ? -2 : 0;
}
#endif
