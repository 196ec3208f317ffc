/* A weight's bytes (see tc.h): the packed layout that the few-token int8 products read fastest
 * (tc_pack, tc_pack_weights; engine/packing.py decides when), a packed row put back together as
 * stored (stored_row, for dequantisation and the GEMM's tiles), and asking the OS to read a file
 * ahead (tc_read_ahead).
 * Leaves out: the products on the packed layout (dot*.c, gemm*.c). */
#include "tc.h"
#ifdef __linux__
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

static _Thread_local void *scratch_bytes;
static _Thread_local int64_t scratch_bytes_cap;

/* ── packed weights: ROWS rows side by side, so that a few-token product reads one stream ─────────
 * With the AVX-512 kernels (ROWS = 4), a weight of a type whose x is quantized may be copied once into
 * this layout (tc_pack): rows n < N − N mod ROWS in groups of ROWS, each group in the same bytes as its
 * rows as stored (from g·ROWS·row_bytes); within a group, for each step s of 256 elements (8 blocks of
 * a 32-element type, one K-quant block), row 0's bytes of that step, then row 1's, …, then row
 * ROWS − 1's; then each row's bytes past its last whole step (the last K/32 mod 8 blocks of a
 * 32-element type), row after row. The last N mod ROWS rows stay as stored.
 * A row's bytes of one step are its 8 (or 1) blocks as stored, except for the SPLIT types (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0), whose step holds the same bytes regrouped (pack_step): the 8 blocks' float16
 * scales d, then (Q4_1, Q5_1) their 8 mins m, then (Q5_0, Q5_1) their 8 uint32 qh of fifth bits, then
 * their quants: Q8_0's 8 × 32 in order, each v stored as v + 128 (v XOR 0x80: unsigned, so that one
 * vpdpbusd multiplies 64 of them); the others' low four bits as two runs of 64 bytes, run h holding
 * element i (0 … 63) of blocks 4h, 4h + 1 in byte i's low nibble and element i of blocks 4h + 2, 4h + 3
 * in its high nibble (so that two blocks' qh, side by side, are the 64-bit mask of a nibble half).
 * When each row ends in two blocks past its last step (SPLIT_TAIL), the group's 8 tail blocks (row
 * 0's two, row 1's, …) are split likewise.
 * Why: the kernels multiply ROWS rows against the same x blocks at once (x is loaded once, and the
 * rows' closing reductions overlap), but reading ROWS rows as stored means ROWS interleaved streams,
 * which the hardware prefetchers follow poorly once the weight is not in cache; packed, a group is
 * read front to back. Split, a step's scales are one load instead of eight, and 64 quants unpack with one mask
 * where the file's blocks take two loads, two shifts and three inserts per pair of blocks.
 * With the AVX2 kernels (LANES, ROWS = 8) the packed types are those whose x is quantized too,
 * and a group of eight rows holds, for each block b (K/32 of them, K/256 for the K-quants; no steps
 * or tail), the eight rows' float16 scales d of block b (row 0's first; Q6_K's from the end of its
 * blocks), then (Q4_1, Q5_1, Q4_K, Q5_K) their eight mins m or dmin, then the rest of the blocks four bytes
 * at a time: bytes 4c … 4c + 3 of row 0's block b (past its d and m), of row 1's, …, of row 7's, for
 * c = 0, 1, … (Q4_0, Q4_1: the 16 quant bytes, c < 4; Q5_0, Q5_1: the qh word, then those, c < 5;
 * Q8_0: 32, c < 8; Q4_K: its 12 bytes of scales and mins, c < 3, then its 128 quant bytes; Q5_K: the
 * same 12 bytes, its 32 bytes qh of fifth bits, then its 128 quant bytes, c < 43; Q6_K: ql, qh, then
 * the 16 int8 scales, c < 52). See dot_lanes, dot_lanes_q45_k and dot_lanes_q6_k. */

/* for the types that pack in lanes: a block's elements and bytes, the bytes of its float16 fields (d;
 * d and m or dmin) and where they are in a block as stored (at its start; Q6_K's d at its end), and
 * where the rest of it starts */

static inline int lane_elements(int type) { return type == Q4_K || type == Q5_K || type == Q6_K ? 256 : 32; }
static inline int lane_block_bytes(int type) {
    return type == Q4_K ? 144 : type == Q5_K ? 176 : type == Q6_K ? 210 : BLOCK_BYTES(type);
}
static inline int lane_head(int type) { return HAS_MIN(type) || type == Q4_K || type == Q5_K ? 4 : 2; }
static inline int lane_head_at(int type) { return type == Q6_K ? 208 : 0; }
static inline int lane_rest_at(int type) { return type == Q6_K ? 0 : lane_head(type); }

/* row r's block b of a lanes group (LANES) g → the block as stored (blk) */
static void lanes_block(int type, const uint8_t *g, int64_t b, int r, uint8_t *blk) {
    const int bs = lane_block_bytes(type), hb = lane_head(type), h0 = lane_head_at(type), q0 = lane_rest_at(type);
    const uint8_t *o = g + b * 8 * bs;
    for (int f = 0; f < hb; f += 2) memcpy(blk + h0 + f, o + 8 * f + 2 * r, 2); /* d, then m */
    for (int c = 0; c < (bs - hb) / 4; c++) memcpy(blk + q0 + 4 * c, o + 8 * hb + 32 * c + 4 * r, 4);
}

#if LANES
/* eight rows as stored (rows, a row every rb bytes) → their lanes group g: per block, the rows'
 * float16 fields, then the rest of their blocks, eight chunks of four bytes of the eight rows at a
 * time by one transpose of 32-bit words (the inverse of lanes_block for all eight rows) */
static void lanes_group(int type, const uint8_t *rows, int64_t rb, uint8_t *g, int64_t n_blocks) {
    const int bs = lane_block_bytes(type), hb = lane_head(type), h0 = lane_head_at(type), q0 = lane_rest_at(type);
    const int chunks = (bs - hb) / 4;
    for (int64_t b = 0; b < n_blocks; b++) {
        const uint8_t *blk = rows + b * bs;
        uint8_t *o = g + b * 8 * bs, *rest = o + 8 * hb;
        for (int r = 0; r < 8; r++)
            for (int f = 0; f < hb; f += 2) memcpy(o + 8 * f + 2 * r, blk + r * rb + h0 + f, 2);
        int c = 0;
        for (; c + 8 <= chunks; c += 8) transpose_rows(blk + q0 + 4 * c, rb, rest + 32 * c);
        for (; c < chunks; c++)
            for (int r = 0; r < 8; r++) memcpy(rest + 32 * c + 4 * r, blk + r * rb + q0 + 4 * c, 4);
    }
}
#endif

/* the inverse of pack_step (below): a packed step of a SPLIT type (o) → its 8 blocks as stored (b) */
static void unpack_step(int type, const uint8_t *o, uint8_t *b) {
    const int bs = BLOCK_BYTES(type), hb = HAS_MIN(type) ? 4 : 2, qb = hb + (HAS_QH(type) ? 4 : 0);
    const uint8_t *qh = o + 8 * hb, *q = qh + (HAS_QH(type) ? 32 : 0);
    for (int j = 0; j < 8; j++) {
        uint8_t *blk = b + j * bs;
        for (int f = 0; f < hb; f += 2) memcpy(blk + f, o + 8 * f + 2 * j, 2);
        if (HAS_QH(type)) memcpy(blk + hb, qh + 4 * j, 4);
        if (type == Q8_0)
            for (int e = 0; e < 32; e++) blk[2 + e] = (uint8_t)(q[32 * j + e] ^ 0x80);
    }
    if (type == Q8_0) return;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 2; k++) { /* swap_nibbles undone: lo, hi → blocks 4h + k and 4h + k + 2 */
            const uint8_t *lo = q + 64 * h + 32 * k, *hi = lo + 16;
            uint8_t *x = b + (4 * h + k) * bs + qb, *y = b + (4 * h + k + 2) * bs + qb;
#if defined(__AVX2__) /* immintrin.h is included */
            const __m128i l = _mm_loadu_si128((const __m128i *)lo), u = _mm_loadu_si128((const __m128i *)hi);
            const __m128i f = _mm_set1_epi8(0x0F), high = _mm_set1_epi8((char)0xF0);
            _mm_storeu_si128((__m128i *)x, _mm_or_si128(_mm_and_si128(l, f), _mm_slli_epi16(_mm_and_si128(u, f), 4)));
            _mm_storeu_si128((__m128i *)y, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(l, 4), f), _mm_and_si128(u, high)));
#else
            for (int e = 0; e < 16; e++)
                x[e] = (uint8_t)((lo[e] & 15) | (hi[e] & 15) << 4), y[e] = (uint8_t)((lo[e] >> 4) | (hi[e] & 0xF0));
#endif
        }
}

/* the rows of a packed group (ROWS) when weights of `type` are multiplied faster packed (the types
 * whose x is quantized, with the AVX-512 and the AVX2 kernels alike), else 0 */
int tc_packs(int type) {
    return ROWS > 1 && HAVE_INT8_DOT && (LANES ? LANE_TYPE(type) : step_bytes(type) > 0) ? ROWS : 0;
}

/* whether a packed copy of this type regroups a step's bytes (SPLIT: scales apart from the quants;
 * LANES: blocks interleaved), rather than only placing ROWS rows' steps side by side */
int tc_pack_regroups(int type) { return tc_packs(type) && (LANES || SPLIT(type)); }

#if !LANES
/* 16 bytes x, y → 16 bytes each of lo, hi: lo[e] = x[e]'s low nibble | y[e]'s low nibble << 4,
 * hi[e] = x[e]'s high nibble | y[e]'s high nibble << 4. For two Q4 blocks' quants x, y (elements e,
 * e + 16 of a block in byte e) it gives a run's 32 bytes (lo: element e of both blocks, hi: element
 * e + 16). */
static inline void swap_nibbles(const uint8_t *x, const uint8_t *y, uint8_t *lo, uint8_t *hi) {
    for (int e = 0; e < 16; e++) {
        const uint8_t a = x[e], c = y[e];
        lo[e] = (uint8_t)((a & 15) | (c & 15) << 4), hi[e] = (uint8_t)((a >> 4) | (c & 0xF0));
    }
}

/* one row's step of 8 blocks of a SPLIT type as stored (b) → its packed bytes (o), as the comment
 * above describes */
static void pack_step(int type, const uint8_t *b, uint8_t *o) {
    const int bs = BLOCK_BYTES(type), hb = HAS_MIN(type) ? 4 : 2; /* a block's bytes, its d (and m) */
    const int qb = hb + (HAS_QH(type) ? 4 : 0);                      /* where a block's quants start */
    uint8_t *qh = o + 8 * hb, *q = qh + (HAS_QH(type) ? 32 : 0);
    for (int j = 0; j < 8; j++) {
        const uint8_t *blk = b + j * bs;
        for (int f = 0; f < hb; f += 2) memcpy(o + 8 * f + 2 * j, blk + f, 2); /* d, then m (Q4_1, Q5_1) */
        if (HAS_QH(type)) memcpy(qh + 4 * j, blk + hb, 4);
        if (type == Q8_0)
            for (int e = 0; e < 32; e++) q[32 * j + e] = (uint8_t)(blk[2 + e] ^ 0x80); /* v + 128 */
    }
    if (type == Q8_0) return;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 2; k++) { /* blocks 4h + k (low nibbles) and 4h + k + 2 (high) */
            uint8_t *run = q + 64 * h + 32 * k;
            swap_nibbles(b + (4 * h + k) * bs + qb, b + (4 * h + k + 2) * bs + qb, run, run + 16);
        }
}

/* ROWS rows as stored (rows: the plan's, one after another) → their packed group: for each step,
 * each row's bytes of it (SPLIT: regrouped, pack_step), then each row's bytes past its last step
 * (SPLIT_TAIL: the group's 8 tail blocks split as one step) */
static void steps_group(const tc_weight *p, const uint8_t *rows, uint8_t *group) {
    const int type = (int)p->type;
    const int64_t rb = p->row_bytes, sb = step_bytes(type), steps = p->k / 256, tail = rb - steps * sb;
    for (int64_t r = 0; r < ROWS; r++) {
        const uint8_t *row = rows + r * rb;
        for (int64_t st = 0; st < steps; st++) {
            uint8_t *to = group + (st * ROWS + r) * sb;
            if (SPLIT(type)) pack_step(type, row + st * sb, to);
            else memcpy(to, row + st * sb, (size_t)sb);
        }
        memcpy(group + steps * ROWS * sb + r * tail, row + steps * sb, (size_t)tail);
    }
    if (SPLIT_TAIL(type, p->k)) { /* the group's 8 tail blocks, split */
        uint8_t blocks[8 * 34], *at = group + steps * ROWS * sb;
        memcpy(blocks, at, (size_t)(ROWS * tail));
        pack_step(type, blocks, at);
    }
}
#endif

/* rows [r0, r1) of the plan's weight (as stored) in the packed layout, into the same bytes of out
 * [N · row_bytes] that they take in it (a group's bytes are its rows' bytes as stored); r0 and r1 are
 * multiples of ROWS, or r1 = N; on the calling thread alone when `one_thread` (as tc_dequant_rows) */
int tc_pack(const tc_weight *p, int64_t r0, int64_t r1, uint8_t *out, int64_t one_thread) {
    if (!tc_packs((int)p->type) || p->packed || r0 % ROWS || (r1 % ROWS && r1 != p->n) || r0 > r1 || r1 > p->n)
        return -1;
    const int64_t rb = p->row_bytes, full = p->n - p->n % ROWS, last = r1 < full ? r1 : full;
    if (r1 > full) memcpy(out + full * rb, p->w + full * rb, (size_t)((r1 - full) * rb));
#pragma omp parallel for schedule(static) if (!one_thread && (last - r0) * rb >= PARALLEL_BYTES)
    for (int64_t n0 = r0; n0 < last; n0 += ROWS)
#if LANES
        lanes_group((int)p->type, p->w + n0 * rb, rb, out + n0 * rb, p->k / lane_elements((int)p->type));
#else
        steps_group(p, p->w + n0 * rb, out + n0 * rb);
#endif
    return 0;
}

/* ask the OS to read bytes [offset, offset + length) of the file open as fd into its page cache,
 * `chunk` bytes a request, and return once all are asked (the reads go on without this thread);
 * 0, or the error number. Linux clamps one request to the device's readahead size, so one request
 * for a whole file reads only its start. Called through ctypes on a thread of its own
 * (mapped.read_ahead): the requests block for a while, and without Python's lock they do not slow
 * the loader, nor it them. */
int tc_read_ahead(int64_t fd, int64_t offset, int64_t length, int64_t chunk) {
#ifdef __linux__
    for (int64_t at = offset; at < offset + length; at += chunk) {
        const int64_t n = offset + length - at < chunk ? offset + length - at : chunk;
        const int e = posix_fadvise((int)fd, (off_t)at, (off_t)n, POSIX_FADV_WILLNEED);
        if (e) return e;
    }
    return 0;
#else
    (void)fd, (void)offset, (void)length, (void)chunk;
    return -1;
#endif
}

/* count weights copied one after another: weight i (plans[i], as stored) into outs[i] (as many
 * bytes), packed as tc_pack makes it where its type packs (tc_packs), else as stored (the float types
 * the products read in place: a copy in the process's own memory), about `slice` bytes at a time;
 * where hand_back[i] (its bytes a read-only view of a file: engine/packing.py decides) the whole pages under
 * each slice are unmapped once it is copied (read again, they map again from the file), so that a
 * weight costs its size once while it is copied. One call for many weights: a thread packing a
 * model's weights ahead of its first products (packing.pack_ahead) takes Python's lock only before
 * and after them. */
int tc_pack_weights(const tc_weight *plans, uint8_t *const *outs, const uint8_t *hand_back, int64_t count,
                    int64_t slice, int64_t one_thread) {
#ifdef __linux__
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
#endif
    for (int64_t i = 0; i < count; i++) {
        const tc_weight *p = &plans[i];
        const int64_t rows = tc_packs((int)p->type) ? ROWS : 1, group = rows * p->row_bytes;
        const int64_t step = (slice / group > 1 ? slice / group : 1) * rows;
        if (p->packed) return -1;
        for (int64_t r0 = 0; r0 < p->n; r0 += step) {
            const int64_t r1 = p->n - r0 < step ? p->n : r0 + step;
            if (rows > 1) {
                const int code = tc_pack(p, r0, r1, outs[i], one_thread);
                if (code != 0) return code;
            } else {
                memcpy(outs[i] + r0 * p->row_bytes, p->w + r0 * p->row_bytes, (size_t)((r1 - r0) * p->row_bytes));
            }
#ifdef __linux__
            if (hand_back[i]) {
                const uintptr_t a = (uintptr_t)(p->w + r0 * p->row_bytes), b = (uintptr_t)(p->w + r1 * p->row_bytes);
                const uintptr_t start = (a + page - 1) / page * page, end = b / page * page;
                if (end > start) madvise((void *)start, end - start, MADV_DONTNEED);
            }
#else
            (void)hand_back;
#endif
        }
    }
    return 0;
}

/* row n of the plan's weight as the file stores it (row_bytes): in place, or put back together into
 * buf [row_bytes] from its packed group (a step of 256 elements at a time, then its bytes past the
 * last whole step); NULL when buf is NULL and the row needs it */
const uint8_t *stored_row(const tc_weight *p, int64_t n, uint8_t *buf) {
    const int64_t rb = p->row_bytes, full = p->n - p->n % ROWS;
    if (!p->packed || n >= full) return p->w + n * rb;
    if (!buf) return 0;
    const int type = (int)p->type;
    const int64_t sb = step_bytes(type), steps = p->k / 256, r = n % ROWS, tail = rb - steps * sb;
    const uint8_t *group = p->w + (n - r) * rb, *at = group + steps * ROWS * sb;
    if (LANES) {
        for (int64_t b = 0; b < p->k / lane_elements(type); b++)
            lanes_block(type, group, b, (int)r, buf + b * lane_block_bytes(type));
        return buf;
    }
    for (int64_t st = 0; st < steps; st++) {
        const uint8_t *from = group + (st * ROWS + r) * sb;
        if (SPLIT(type)) unpack_step(type, from, buf + st * sb);
        else memcpy(buf + st * sb, from, (size_t)sb);
    }
    if (SPLIT_TAIL(type, p->k)) { /* row r's two blocks of the group's split tail step */
        uint8_t blocks[8 * 34];
        unpack_step(type, at, blocks);
        memcpy(buf + steps * sb, blocks + r * tail, (size_t)tail);
    } else {
        memcpy(buf + steps * sb, at + r * tail, (size_t)tail);
    }
    return buf;
}

/* the calling thread's buffer for one row as stored (stored_row), NULL when out of memory */
uint8_t *row_buffer(const tc_weight *p) {
    return (uint8_t *)grown(&scratch_bytes, &scratch_bytes_cap, p->row_bytes);
}
