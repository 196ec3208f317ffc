/* The structs that the kernels' entry points (tc.h) take and that their callers fill in: ctypes mirrors them
 * in engine/ckernels.py (Plan, GQAArgs), and glue.cpp includes this file (engine/torch/native.py checks the
 * mirrors' sizes against it when it loads). C and C++ alike. */
#ifndef TOYCARDS_STRUCTS_H
#define TOYCARDS_STRUCTS_H

#include <stdint.h>

/* A weight's fixed arguments, built once (engine.ckernels.Plan): a decoding step passes four arguments
 * per product instead of eight, which is most of what ctypes costs per call. Its bytes are at w, in
 * the file's layout, or in the packed layout (tc_pack) when `packed` is 1. */
typedef struct {
    int64_t type, row_bytes, n, k;
    const uint8_t *w;
    int64_t packed;
} tc_weight;

/* tc_gqa's arguments (see tc_gqa in blockops.c) */
typedef struct {
    const float *Q, *K, *V;
    int64_t B, T, H, Hkv, d;
    const float *cos, *sin;
    int64_t half, layout;
    void *Kc, *Vc; /* float32 rows, or halves when kv_half */
    int64_t kb, kh, vb, vh, used;
    const int64_t *kv;
    const uint8_t *allowed;
    double scale, cap;
    float *out;
    int64_t one_thread; /* 1: on the calling thread alone (the NumPy target's prompts, see tc_dequant_rows) */
    int64_t kv_half;    /* 1: the caches hold halves (a float16 KV cache) */
    const float *sinks; /* [H]: each query head's sink logit (see weigh_row), or NULL: none */
    /* NULL, or a cache per batch row (sequences at different lengths): row b's K and V buffers
     * [Hkv, capacity_b, d] and their head strides in entries, and the rows it has used, at
     * rows[5b] … rows[5b + 4] (Kc, Vc, kb, kh, vb, vh and used are then not read) */
    const int64_t *rows;
} gqa_args;

#endif
