/* rollart's CPU kernels for the engine's steps: paged attention read straight from the paged KV cache, sampling
 * with the behaviour logprob, one row per request, the MLP's silu * mul, RoPE with the cache write, and the
 * matmuls on prepacked weights.
 *
 * Built on first use by rollart.models.cpu_kernels (cc -O3 -march=native -fopenmp) and called through ctypes
 * on tensors' data pointers; the torch reference paths (rollart.models.paged, rollart.engine.sampler) compute
 * the same values and are what the tests compare against. Plain C, vectorised by the compiler: the inner loops
 * run over head_dim or over the vocabulary with no dependence between lanes.
 *
 * dtype codes: 0 float32, 1 bfloat16 (the KV cache's and the queries' dtype; accumulation is always fp32).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DT_F32 0
#define DT_BF16 1

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, as torch converts fp32 to bf16 (NaN stays NaN). */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* 2^f for f in [0, 1): a degree-6 minimax polynomial (scalar or vector f). */
#define EXP2_POLY(f) \
    ((((((1.535336188319500e-4f * (f) + 1.339887440266574e-3f) * (f) + 9.618437357674640e-3f) * (f) + \
        5.550332471162809e-2f) * (f) + 2.402264791363012e-1f) * (f) + 6.931472028550421e-1f) * (f) + 1.0f)

/* exp(x) for x <= 0 (softmax after subtracting the max): 2^(x log2 e) by range reduction and a degree-6
 * polynomial of 2^f on [0, 1); relative error below 2e-7; 0 below -87 (where expf is < 2e-38). No libm call,
 * so loops over it vectorise. */
static inline float exp_nonpos(float x) {
    float t = (x < -87.0f ? -87.0f : x) * 1.4426950408889634f;
    float fi = floorf(t);
    float f = t - fi;
    const float p = EXP2_POLY(f);
    int32_t bits;
    memcpy(&bits, &p, 4);
    bits += (int32_t)fi * (1 << 23);
    float r;
    memcpy(&r, &bits, 4);
    return x < -87.0f ? 0.0f : r;
}

static inline void load_row(const void *base, int64_t at, int dtype, int n, float *restrict dst) {
    if (dtype == DT_BF16) {
        const uint16_t *src = (const uint16_t *)base + at;
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
    } else {
        const float *src = (const float *)base + at;
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = src[i];
    }
}

static inline void store_row(void *base, int64_t at, int dtype, int n, const float *restrict src) {
    if (dtype == DT_BF16) {
        uint16_t *dst = (uint16_t *)base + at;
#pragma omp simd
        for (int i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
    } else {
        memcpy((float *)base + at, src, sizeof(float) * (size_t)n);
    }
}

/* s[0..n-1] <- softmax(s), in fp32. */
static inline void softmax_in_place(float *restrict s, int64_t n) {
    float m = s[0];
#pragma omp simd reduction(max : m)
    for (int64_t t = 0; t < n; t++) m = s[t] > m ? s[t] : m;
    float z = 0.0f;
#pragma omp simd reduction(+ : z)
    for (int64_t t = 0; t < n; t++) {
        s[t] = exp_nonpos(s[t] - m);
        z += s[t];
    }
    const float inv = 1.0f / z;
#pragma omp simd
    for (int64_t t = 0; t < n; t++) s[t] *= inv;
}

/* Lanes of one vector register of this build: query vectors of a prefill work item, keys of a tile. */
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
#define NEG_BIG (-1e30f)
typedef float vlanes __attribute__((vector_size(LANES * sizeof(float))));  /* one zmm, or two ymm on AVX2 */

typedef uint16_t vhalf __attribute__((vector_size(LANES * sizeof(uint16_t))));
typedef uint32_t vword __attribute__((vector_size(LANES * sizeof(uint32_t))));

typedef int32_t vint __attribute__((vector_size(LANES * sizeof(int32_t))));

static inline vlanes splat(float x) {
    vlanes v;
    for (int i = 0; i < LANES; i++) v[i] = x;
    return v;
}

/* mask ? a : b, lane-wise (mask lanes all ones or all zeros, as vector comparisons give). */
static inline vlanes vselect(vint mask, vlanes a, vlanes b) {
    vint ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    vint r = (ia & mask) | (ib & ~mask);
    vlanes out;
    memcpy(&out, &r, sizeof out);
    return out;
}

static inline vlanes vmax(vlanes a, vlanes b) { return vselect(a > b, a, b); }

/* exp_nonpos on every lane, in vector operations only. */
static inline vlanes vexp_nonpos(vlanes x) {
    const vint under = x < splat(-87.0f);
    const vlanes t = vselect(under, splat(-87.0f), x) * 1.4426950408889634f;
    vint ti = __builtin_convertvector(t, vint);            /* truncates: one too high where t < 0 is fractional */
    ti += (vint)(__builtin_convertvector(ti, vlanes) > t);  /* a true comparison is -1 */
    const vlanes f = t - __builtin_convertvector(ti, vlanes);
    vlanes p = EXP2_POLY(f);
    vint bits;
    memcpy(&bits, &p, sizeof bits);
    bits += ti * (1 << 23);
    memcpy(&p, &bits, sizeof p);
    return vselect(under, splat(0.0f), p);
}

typedef struct {
    int s, kvh, r0, nrows, g0, ng;   /* query rows r0..r0+nrows-1 of sequence s, heads g0..g0+ng-1 of kvh's group */
} work_item;

/* LANES consecutive elements from base + at, as fp32. */
static inline vlanes load_lanes(const void *base, int64_t at, int dtype) {
    vlanes f;
    if (dtype == DT_BF16) {
        vhalf h;
        memcpy(&h, (const uint16_t *)base + at, sizeof h);
        vword w = __builtin_convertvector(h, vword) << 16;
        memcpy(&f, &w, sizeof f);
    } else {
        memcpy(&f, (const float *)base + at, sizeof f);
    }
    return f;
}

/* The LANES lane sums of p[0..LANES-1], as one vector (lane j: the sum of p[j]'s lanes): a transposing tree of
 * two-vector shuffles (for 16 lanes 45 shuffles and adds, where summing each vector alone takes 16 serial steps):
 * each level adds the two halves of every group of lanes, packing two vectors' groups into one. */
typedef int32_t vidx __attribute__((vector_size(LANES * sizeof(int32_t))));
#define SHUFFLE_ADD(a, b, lo, hi) (__builtin_shuffle(a, b, lo) + __builtin_shuffle(a, b, hi))
static inline vlanes sum_lanes(const vlanes *p) {
#if LANES == 16
    const vidx lo1 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const vidx hi1 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    const vidx lo2 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    const vidx hi2 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
    const vidx lo3 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
    const vidx hi3 = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31};
    const vidx lo4 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const vidx hi4 = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    vlanes c[8], d[4], e[2];
    for (int i = 0; i < 8; i++) c[i] = SHUFFLE_ADD(p[2 * i], p[2 * i + 1], lo1, hi1);
    for (int i = 0; i < 4; i++) d[i] = SHUFFLE_ADD(c[2 * i], c[2 * i + 1], lo2, hi2);
    for (int i = 0; i < 2; i++) e[i] = SHUFFLE_ADD(d[2 * i], d[2 * i + 1], lo3, hi3);
    return SHUFFLE_ADD(e[0], e[1], lo4, hi4);
#elif LANES == 8
    const vidx lo1 = {0, 1, 2, 3, 8, 9, 10, 11}, hi1 = {4, 5, 6, 7, 12, 13, 14, 15};
    const vidx lo2 = {0, 1, 4, 5, 8, 9, 12, 13}, hi2 = {2, 3, 6, 7, 10, 11, 14, 15};
    const vidx lo3 = {0, 2, 4, 6, 8, 10, 12, 14}, hi3 = {1, 3, 5, 7, 9, 11, 13, 15};
    vlanes c[4], d[2];
    for (int i = 0; i < 4; i++) c[i] = SHUFFLE_ADD(p[2 * i], p[2 * i + 1], lo1, hi1);
    for (int i = 0; i < 2; i++) d[i] = SHUFFLE_ADD(c[2 * i], c[2 * i + 1], lo2, hi2);
    return SHUFFLE_ADD(d[0], d[1], lo3, hi3);
#else
    const vidx lo1 = {0, 1, 4, 5}, hi1 = {2, 3, 6, 7};
    const vidx lo2 = {0, 2, 4, 6}, hi2 = {1, 3, 5, 7};
    vlanes c[2];
    for (int i = 0; i < 2; i++) c[i] = SHUFFLE_ADD(p[2 * i], p[2 * i + 1], lo1, hi1);
    return SHUFFLE_ADD(c[0], c[1], lo2, hi2);
#endif
}

/* The cache rows of keys first..first+n-1 of kv head kvh (one division for the lot). */
static inline void key_rows(const int64_t *table, int64_t first, int n, int block_size, int Hkv, int kvh, int D,
                            int64_t *rows) {
    int64_t blk = first / block_size, off = first % block_size;
    for (int j = 0; j < n; j++) {
        rows[j] = ((table[blk] * block_size + off) * Hkv + kvh) * D;
        if (++off == block_size) {
            off = 0;
            blk++;
        }
    }
}

/* A decode item: every query head of a one-token sequence (Hkv kv heads of G query heads each, head_dim a
 * multiple of LANES, DC = D / LANES vectors a head), over keys 0..ctx-1 a tile of LANES keys at a time, each key's
 * whole cache row (all kv heads, contiguous) read once: each key's dot products kept as partial-sum vectors and
 * summed by one transposing tree per query head (sum_lanes), so no dot product ends in a horizontal sum of its
 * own; then an exact softmax per head; then the values. Query head kvh G + g reads kv head kvh. G_ and D_ are
 * compile-time constants where they are not 0. (One item per kv head read a third of every row per pass, and at a
 * few hundred tokens of context the sequence's rows no longer stayed in L2 between the passes.) */
static inline __attribute__((always_inline)) void decode_item_lanes(
        const int G_, const int D_, int G, int D, int Hkv, const void *q, int64_t q_at, void *out, int64_t out_at,
        const void *k_cache, const void *v_cache, const int64_t *table, int64_t ctx, int block_size, float scale,
        int dtype, float *restrict scores, vlanes *restrict qv, vlanes *restrict part, vlanes *restrict acc) {
    if (G_) G = G_;
    if (D_) D = D_;
    const int DC = D / LANES, H = G * Hkv;
    int64_t rows[LANES];
    for (int h = 0; h < H; h++)
        for (int c = 0; c < DC; c++) qv[h * DC + c] = load_lanes(q, q_at + h * D + c * LANES, dtype) * scale;
    /* 1) scores; the next tile's keys are asked for meanwhile, and this tile's values (read in 3) */
    const int elem = dtype == DT_BF16 ? 2 : 4, row_bytes = Hkv * D * elem;
    int64_t ahead[LANES];
    for (int64_t first = 0; first < ctx; first += LANES) {
        const int n = ctx - first < LANES ? (int)(ctx - first) : LANES;
        key_rows(table, first, n, block_size, Hkv, 0, D, rows);
        const int64_t later = first + LANES;
        const int na = ctx - later < LANES ? (int)(ctx - later) : LANES;
        if (na > 0) key_rows(table, later, na, block_size, Hkv, 0, D, ahead);
        for (int j = 0; j < na; j++)
            for (int b = 0; b < row_bytes; b += 64) __builtin_prefetch((const char *)k_cache + ahead[j] * elem + b);
        for (int j = 0; j < n; j++)
            for (int b = 0; b < row_bytes; b += 64) __builtin_prefetch((const char *)v_cache + rows[j] * elem + b, 0, 2);
        for (int j = 0; j < LANES; j++) {
            if (j >= n) {
                for (int h = 0; h < H; h++) part[h * LANES + j] = (vlanes){0};
                continue;
            }
            for (int kvh = 0; kvh < Hkv; kvh++) {
                vlanes k[DC];
                for (int c = 0; c < DC; c++) k[c] = load_lanes(k_cache, rows[j] + kvh * D + c * LANES, dtype);
                for (int g = 0; g < G; g++) {
                    const int h = kvh * G + g;
                    vlanes pg = qv[h * DC] * k[0];
                    for (int c = 1; c < DC; c++) pg += qv[h * DC + c] * k[c];
                    part[h * LANES + j] = pg;
                }
            }
        }
        for (int h = 0; h < H; h++) {
            const vlanes sc = sum_lanes(part + h * LANES);
            memcpy(scores + h * ctx + first, &sc, sizeof(float) * (size_t)n);
        }
    }
    /* 2) softmax per query head */
    for (int h = 0; h < H; h++) softmax_in_place(scores + h * ctx, ctx);
    /* 3) probabilities times values */
    for (int i = 0; i < H * DC; i++) acc[i] = (vlanes){0};
    for (int64_t first = 0; first < ctx; first += LANES) {
        const int n = ctx - first < LANES ? (int)(ctx - first) : LANES;
        key_rows(table, first, n, block_size, Hkv, 0, D, rows);
        for (int j = 0; j < n; j++)
            for (int kvh = 0; kvh < Hkv; kvh++)
                for (int c = 0; c < DC; c++) {
                    const vlanes v = load_lanes(v_cache, rows[j] + kvh * D + c * LANES, dtype);
                    for (int g = 0; g < G; g++) {
                        const int h = kvh * G + g;
                        acc[h * DC + c] += scores[h * ctx + first + j] * v;
                    }
                }
    }
    for (int h = 0; h < H; h++)
        for (int c = 0; c < DC; c++) {
            float o[LANES];
            memcpy(o, &acc[h * DC + c], sizeof o);
            store_row(out, out_at + h * D + c * LANES, dtype, LANES, o);
        }
}

/* A prefill item: up to LANES query vectors (rows x heads of one kv head's group), every one a lane of the
 * vectors below, over a tile of LANES keys at a time with an online softmax (flash attention's recurrence).
 * Scores: for each d one query vector (qt[d]) times LANES broadcast key values, LANES accumulators; values: for
 * each d, the accumulator of d gathers LANES probability vectors times broadcast value entries. */
static inline __attribute__((always_inline)) void prefill_item(
        const int D_, int D, const work_item *it, int G, const void *q, int64_t q_row_stride, void *out,
        int64_t out_row_stride, const void *k_cache, const void *v_cache, const int64_t *table, int64_t q_start,
        int64_t q_len, int64_t ctx, int Hkv, int block_size, float scale, int dtype, vlanes *restrict qt,
        vlanes *restrict acc, float *restrict kf, float *restrict vf) {
    if (D_) D = D_;
    const int R = it->nrows * it->ng;
    float pos[LANES];
    for (int d = 0; d < D; d++) qt[d] = (vlanes){0};
    for (int r = 0; r < LANES; r++) pos[r] = -1.0f;       /* an idle lane sees no key */
    for (int r = 0; r < R; r++) {
        const int row = it->r0 + r / it->ng, g = it->g0 + r % it->ng;
        load_row(q, (q_start + row) * q_row_stride + ((int64_t)it->kvh * G + g) * D, dtype, D, kf);
        for (int d = 0; d < D; d++) qt[d][r] = kf[d] * scale;
        pos[r] = (float)(ctx - q_len + row);              /* this query sees keys 0..pos (exact below 2^24) */
    }
    vlanes m = splat(NEG_BIG), l = {0};
    for (int d = 0; d < D; d++) acc[d] = (vlanes){0};
    vlanes vpos;
    for (int r = 0; r < LANES; r++) vpos[r] = pos[r];
    const int64_t last = ctx - q_len + it->r0 + it->nrows - 1;   /* the item's last query position */
    for (int64_t first = 0; first <= last; first += LANES) {
        const int n = last + 1 - first < LANES ? (int)(last + 1 - first) : LANES;
        /* 1) the tile's keys and values as fp32 rows */
        int64_t rows[LANES];
        key_rows(table, first, n, block_size, Hkv, it->kvh, D, rows);
        for (int j = 0; j < n; j++) {
            load_row(k_cache, rows[j], dtype, D, kf + j * D);
            load_row(v_cache, rows[j], dtype, D, vf + j * D);
        }
        for (int j = n; j < LANES; j++)
            for (int d = 0; d < D; d++) kf[j * D + d] = vf[j * D + d] = 0.0f;
        /* 2) scores: sc[j] holds key j's score for every lane */
        vlanes sc[LANES];
        for (int j = 0; j < LANES; j++) sc[j] = (vlanes){0};
        for (int d = 0; d < D; d++) {
            const vlanes qd = qt[d];
            for (int j = 0; j < LANES; j++) sc[j] += kf[j * D + d] * qd;
        }
        /* 3) causal mask and online softmax, lane-wise */
        vlanes tmax = splat(NEG_BIG);
        for (int j = 0; j < LANES; j++) {
            const vint seen = splat((float)(first + j)) <= vpos;
            sc[j] = j < n ? vselect(seen, sc[j], splat(NEG_BIG)) : splat(NEG_BIG);
            tmax = vmax(tmax, sc[j]);
        }
        const vlanes m_new = vmax(tmax, m);
        const vlanes alpha = vexp_nonpos(m - m_new);
        vlanes psum = {0};
        for (int j = 0; j < LANES; j++) {   /* a masked score is exp(-1e30 - m_new) = 0: every real lane saw key 0 */
            sc[j] = vexp_nonpos(sc[j] - m_new);
            psum += sc[j];
        }
        l = l * alpha + psum;
        m = m_new;
        /* 4) values: acc[d] = alpha * acc[d] + sum_j p[j] * v[j][d] */
        for (int d = 0; d < D; d++) {
            vlanes a = acc[d] * alpha;
            for (int j = 0; j < n; j++) a += vf[j * D + d] * sc[j];
            acc[d] = a;
        }
    }
    for (int r = 0; r < R; r++) {
        const int row = it->r0 + r / it->ng, g = it->g0 + r % it->ng;
        const int64_t at = (q_start + row) * out_row_stride + ((int64_t)it->kvh * G + g) * D;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int d = 0; d < D; d++) kf[d] = acc[d][r] * inv;    /* kf: free once the last tile is done */
        store_row(out, at, dtype, D, kf);
    }
}

/* Causal attention of packed queries over the paged KV cache, prefill chunks and decodes alike.
 *   q, out       (N, H, D) rows q_row_stride / out_row_stride elements apart, heads contiguous
 *   query_start  (S + 1,) int64: sequence s owns rows query_start[s]..query_start[s+1]-1, the last of its
 *                context_lens[s] tokens (whose keys are already in the cache)
 *   k/v_cache    (num_blocks, block_size, Hkv, D), contiguous; block_tables (S, bt_row_stride) int64
 * Query head h reads kv head h / (H / Hkv); scores, softmax and sums in fp32. A one-token sequence is one work
 * item (decode_item_lanes, every kv head) where head_dim is a multiple of LANES and a kv head has at most LANES query
 * heads; every other sequence is split into items of up to LANES query vectors (prefill_item). */
int rl_paged_attention(const void *q, int64_t q_row_stride, void *out, int64_t out_row_stride, const void *k_cache,
                       const void *v_cache, const int64_t *block_tables, int64_t bt_row_stride,
                       const int64_t *query_start, const int64_t *context_lens, int S, int H, int Hkv, int D,
                       int block_size, float scale, int dtype, int num_threads) {
    if (S <= 0) return 0;
    if (Hkv <= 0 || H % Hkv != 0 || D <= 0 || block_size <= 0) return -1;
    const int G = H / Hkv;
    const int ng = G < LANES ? G : LANES;             /* heads per prefill item */
    const int rows = LANES / ng;                       /* query rows per prefill item */
    const int laned = D % LANES == 0 && G <= LANES;   /* one-token sequences take decode_item_lanes */
    int64_t total = 0, max_ctx = 1;
    for (int s = 0; s < S; s++) {
        const int64_t q_len = query_start[s + 1] - query_start[s];
        if (q_len < 0 || q_len > context_lens[s]) return -1;
        total += q_len == 1 && laned ? 1 : ((q_len + rows - 1) / rows) * Hkv * ((G + ng - 1) / ng);
        if (context_lens[s] > max_ctx) max_ctx = context_lens[s];
    }
    work_item *items = malloc(sizeof(work_item) * (size_t)(total ? total : 1));
    if (!items) return -2;
    int64_t k = 0;
    for (int s = 0; s < S; s++) {
        const int q_len = (int)(query_start[s + 1] - query_start[s]);
        if (q_len == 1 && laned) {
            work_item w = {s, 0, 0, 1, 0, G};
            items[k++] = w;
            continue;
        }
        for (int kvh = 0; kvh < Hkv; kvh++) {
            for (int g0 = 0; g0 < G; g0 += ng)
                for (int r0 = 0; r0 < q_len; r0 += rows) {
                    work_item w = {s, kvh, r0, q_len - r0 < rows ? q_len - r0 : rows, g0, G - g0 < ng ? G - g0 : ng};
                    items[k++] = w;
                }
        }
    }
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        float *scores = malloc(sizeof(float) * (size_t)(H * max_ctx));
        float *kf = malloc(sizeof(float) * (size_t)(LANES * D));
        float *vf = malloc(sizeof(float) * (size_t)(LANES * D));
        const size_t nvec = (size_t)(D > H * (D / LANES + 1) ? D : H * (D / LANES + 1));
        vlanes *qt = aligned_alloc(sizeof(vlanes), sizeof(vlanes) * nvec);    /* prefill: D; decode: H x DC */
        vlanes *acc = aligned_alloc(sizeof(vlanes), sizeof(vlanes) * nvec);
        vlanes *part = aligned_alloc(sizeof(vlanes), sizeof(vlanes) * (size_t)(H * LANES));
        if (!scores || !kf || !vf || !qt || !acc || !part) {
#pragma omp atomic write
            failed = 1;
        } else {
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < total; i++) {
                const work_item *it = items + i;
                const int s = it->s;
                const int64_t *table = block_tables + (int64_t)s * bt_row_stride;
                const int64_t q_start = query_start[s], q_len = query_start[s + 1] - q_start, ctx = context_lens[s];
                if (q_len == 1 && laned) {
                    const int64_t q_at = q_start * q_row_stride, out_at = q_start * out_row_stride;
#define LANED(G_, D_) decode_item_lanes(G_, D_, G, D, Hkv, q, q_at, out, out_at, k_cache, v_cache, table, ctx, \
                                        block_size, scale, dtype, scores, qt, part, acc)
                    if (D == 64 && G == 1) LANED(1, 64);
                    else if (D == 64 && G == 2) LANED(2, 64);
                    else if (D == 64 && G == 3) LANED(3, 64);
                    else if (D == 64 && G == 4) LANED(4, 64);
                    else if (D == 128 && G == 1) LANED(1, 128);
                    else if (D == 128 && G == 2) LANED(2, 128);
                    else if (D == 128 && G == 4) LANED(4, 128);
                    else if (D == 128 && G == 8) LANED(8, 128);
                    else LANED(0, 0);
#undef LANED
                    continue;
                }
#define PREFILL(D_) prefill_item(D_, D, it, G, q, q_row_stride, out, out_row_stride, k_cache, v_cache, table, \
                                 q_start, q_len, ctx, Hkv, block_size, scale, dtype, qt, acc, kf, vf)
                if (D == 64) PREFILL(64);
                else if (D == 128) PREFILL(128);
                else PREFILL(0);
#undef PREFILL
            }
        }
        free(scores);
        free(kf);
        free(vf);
        free(qt);
        free(acc);
        free(part);
    }
    free(items);
    return failed ? -2 : 0;
}

#define CHUNK 64

/* One token per row of fp32 logits (R, V), rows row_stride apart, and its behaviour logprob
 * log_softmax(logits)[token] (of the raw logits, as rollart.engine.sampler documents).
 * temperature[r] == 0: the first index of the largest logit. Else the token is drawn from
 * softmax(logits / temperature) by inverting its CDF at uniform[r] in [0, 1): the first index whose cumulative
 * mass exceeds uniform[r] times the total (a token of probability 0 is never drawn). Top-k / top-p rows are not
 * served here (the caller samples them with torch). */
int rl_sample_rows(const float *logits, int64_t row_stride, int R, int V, const float *temperature,
                   const double *uniform, int64_t *tokens, float *logprobs, int num_threads) {
    if (R <= 0) return 0;
    if (V <= 0) return -1;
    const int nchunks = (V + CHUNK - 1) / CHUNK;
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        float *chunk_mass = malloc(sizeof(float) * (size_t)nchunks);
        if (!chunk_mass) {
#pragma omp atomic write
            failed = 1;
        } else {
#pragma omp for schedule(dynamic, 1)
            for (int r = 0; r < R; r++) {
                const float *l = logits + (int64_t)r * row_stride;
                float m = l[0];
#pragma omp simd reduction(max : m)
                for (int i = 0; i < V; i++) m = l[i] > m ? l[i] : m;
                int64_t best = 0;
                while (best < V - 1 && l[best] != m) best++;
                float z = 0.0f;
#pragma omp simd reduction(+ : z)
                for (int i = 0; i < V; i++) z += exp_nonpos(l[i] - m);
                const float temp = temperature[r];
                int64_t token = best;
                if (temp > 0.0f) {
                    const float inv_t = 1.0f / temp;
                    double total = 0.0;
                    for (int c = 0; c < nchunks; c++) {
                        const int lo = c * CHUNK, hi = lo + CHUNK < V ? lo + CHUNK : V;
                        float mass = 0.0f;
#pragma omp simd reduction(+ : mass)
                        for (int i = lo; i < hi; i++) mass += exp_nonpos((l[i] - m) * inv_t);
                        chunk_mass[c] = mass;
                        total += mass;
                    }
                    const double target = uniform[r] * total;
                    double below = 0.0;
                    int c = 0;
                    while (c < nchunks - 1 && below + chunk_mass[c] <= target) below += chunk_mass[c++];
                    const int lo = c * CHUNK, hi = lo + CHUNK < V ? lo + CHUNK : V;
                    token = -1;
                    int last_positive = -1;
                    for (int i = lo; i < hi; i++) {
                        const float p = exp_nonpos((l[i] - m) * inv_t);
                        if (p <= 0.0f) continue;
                        last_positive = i;
                        below += p;
                        if (below > target) {
                            token = i;
                            break;
                        }
                    }
                    if (token < 0) token = last_positive >= 0 ? last_positive : best; /* target rounded up */
                }
                tokens[r] = token;
                logprobs[r] = (l[token] - m) - logf(z);
            }
        }
        free(chunk_mass);
    }
    return failed ? -2 : 0;
}

/* silu(gate) * up for the MLP: x (N, 2 I) holds gate | up per row (rows x_row_stride elements apart), out (N, I)
 * contiguous; one pass where torch makes a silu tensor and then a product tensor. silu(g) = g * sigmoid(g), with
 * sigmoid from e = exp(-|g|) (never overflows): 1 / (1 + e) for g >= 0, e / (1 + e) below. */
int rl_silu_and_mul(const void *x, int64_t x_row_stride, void *out, int64_t N, int I, int dtype, int num_threads) {
    if (N <= 0) return 0;
    if (I <= 0) return -1;
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        float *gate = malloc(sizeof(float) * (size_t)I), *up = malloc(sizeof(float) * (size_t)I);
        if (!gate || !up) {
#pragma omp atomic write
            failed = 1;
        } else {
#pragma omp for schedule(static)
            for (int64_t r = 0; r < N; r++) {
                load_row(x, r * x_row_stride, dtype, I, gate);
                load_row(x, r * x_row_stride + I, dtype, I, up);
#pragma omp simd
                for (int i = 0; i < I; i++) {
                    const float g = gate[i], e = exp_nonpos(g < 0.0f ? g : -g);
                    gate[i] = g * (g >= 0.0f ? 1.0f : e) / (1.0f + e) * up[i];
                }
                store_row(out, r * I, dtype, I, gate);
            }
        }
        free(gate);
        free(up);
    }
    return failed ? -2 : 0;
}

/* RoPE (rotate-half) of q and k and the cache write of k and v, for the packed tokens of one step.
 *   qkv        (N, H + 2 Hkv, D): q heads, k heads, v heads of each token, rows row_stride elements apart; the q
 *              heads are rotated in place (attention reads them there)
 *   cos, sin   (N, D) rows cs_row_stride apart: each token's angles
 *   slots      (N,) int64: the flat cache slot (block * block_size + offset) of each token
 *   k/v_cache  (num_blocks * block_size, Hkv, D) contiguous: k rotated and v copied into the token's slot
 * out[i] = x[i] cos[i] - x[i + D/2] sin[i] for i < D/2, x[i] cos[i] + x[i - D/2] sin[i] above, in fp32. */
int rl_rope_and_cache(void *qkv, int64_t row_stride, int64_t N, int H, int Hkv, int D, const void *cos,
                      const void *sin, int64_t cs_row_stride, const int64_t *slots, void *k_cache, void *v_cache,
                      int dtype, int num_threads) {
    if (N <= 0) return 0;
    if (D <= 0 || D % 2 || H <= 0 || Hkv <= 0) return -1;
    const int half = D / 2;
    const size_t esize = dtype == DT_BF16 ? 2 : 4;
    int failed = 0;
#pragma omp parallel num_threads(num_threads)
    {
        float *buf = malloc(sizeof(float) * (size_t)(4 * D));
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        } else {
            float *c = buf, *s = buf + D, *x = buf + 2 * D, *y = buf + 3 * D;
#pragma omp for schedule(static)
            for (int64_t n = 0; n < N; n++) {
                load_row(cos, n * cs_row_stride, dtype, D, c);
                load_row(sin, n * cs_row_stride, dtype, D, s);
                for (int h = 0; h < H + Hkv; h++) {
                    const int64_t at = n * row_stride + (int64_t)h * D;
                    load_row(qkv, at, dtype, D, x);
#pragma omp simd
                    for (int i = 0; i < half; i++) {
                        y[i] = x[i] * c[i] - x[i + half] * s[i];
                        y[i + half] = x[i + half] * c[i + half] + x[i] * s[i + half];
                    }
                    store_row(h < H ? qkv : k_cache, h < H ? at : (slots[n] * Hkv + (h - H)) * D, dtype, D, y);
                }
                const char *v = (const char *)qkv + (n * row_stride + (int64_t)(H + Hkv) * D) * esize;
                memcpy((char *)v_cache + slots[n] * Hkv * D * esize, v, (size_t)Hkv * D * esize);
            }
        }
        free(buf);
    }
    return failed ? -2 : 0;
}

/* y = x W^T (+ bias) for the engine's matmuls, with W prepacked by rl_pack_linear into panels of LIN_NR columns:
 * panel p holds W[p LIN_NR + j][k] at (p K + k) LIN_NR + j, zeros past N, in the weight's dtype (bf16 on a CPU
 * with vdpbf16ps: pairs of k, below). A tile of LIN_MR rows by LIN_NR columns keeps its sums in registers: each k
 * loads the panel's LIN_NR weights once (as fp32; a bf16 one by a shift) and adds them times each row's x[k], so
 * every weight is read once per LIN_MR rows and the panel block (LIN_PB panels, a few hundred KB) stays in L2
 * while all rows pass over it; the first rows' pass asks for the next panel while it computes, so at the few rows
 * of a decode step the weights stream from memory while the arithmetic runs instead of between. x is copied into
 * fp32 rows first (bf16 rows of even depth for pair panels; zero rows pad the last tile). Sums in fp32. */
#if LANES == 16
#define LIN_MR 8
#else
#define LIN_MR 4
#endif
#define LIN_NV 2
#define LIN_NR (LIN_NV * LANES)
#define LIN_PB 8
#if defined(__AVX512BF16__) && LANES == 16
/* bf16 weights and inputs multiplied two k at a time by the CPU's bf16 dot product (vdpbf16ps), with fp32 sums:
 * a bf16 panel then holds each column's pair (W[n][2i], W[n][2i+1]) together, K padded to even with zeros. */
#include <immintrin.h>
#define LIN_PAIRS 1
#else
#define LIN_PAIRS 0
#endif

static inline int lin_pairs(int dtype) { return LIN_PAIRS && dtype == DT_BF16; }
static inline int lin_depth(int K, int dtype) { return lin_pairs(dtype) ? (K + 1) / 2 * 2 : K; }

int rl_linear_panels(void) { return LIN_NR; }

/* Elements of the packed copy of an (N, K) weight. */
int64_t rl_linear_packed_size(int N, int K, int dtype) {
    return (int64_t)((N + LIN_NR - 1) / LIN_NR) * lin_depth(K, dtype) * LIN_NR;
}

/* w (N, K) rows w_row_stride apart -> packed (rl_linear_packed_size elements), both in dtype. */
int rl_pack_linear(const void *w, int64_t w_row_stride, int N, int K, void *packed, int dtype, int num_threads) {
    const int panels = (N + LIN_NR - 1) / LIN_NR, depth = lin_depth(K, dtype), pair = lin_pairs(dtype) ? 2 : 1;
    const size_t elem = dtype == DT_BF16 ? 2 : 4;
    /* k's place in a panel: row k, column j; or (PAIR 2) row k / 2, column j, the pair's k % 2 */
#define PACK_PANELS(T, PAIR)                                                                                 \
    _Pragma("omp parallel for schedule(static) num_threads(num_threads)")                                  \
    for (int p = 0; p < panels; p++) {                                                                      \
        T *dst = (T *)packed + (size_t)p * depth * LIN_NR;                                                  \
        const T *src[LIN_NR];                                                                               \
        for (int j = 0; j < LIN_NR; j++)                                                                    \
            src[j] = p * LIN_NR + j < N ? (const T *)w + (size_t)(p * LIN_NR + j) * w_row_stride : NULL;    \
        for (int i = 0; i < depth / PAIR; i++)           /* the panel written in order, its rows read along */ \
            for (int j = 0; j < LIN_NR; j++)                                                                \
                for (int h = 0; h < PAIR; h++) {                                                            \
                    const int k = i * PAIR + h;                                                             \
                    *dst++ = src[j] && k < K ? src[j][k] : (T)0;                                            \
                }                                                                                           \
    }
    if (pair == 2) {
        PACK_PANELS(uint16_t, 2)
    } else if (elem == 2) {
        PACK_PANELS(uint16_t, 1)
    } else {
        PACK_PANELS(uint32_t, 1)
    }
#undef PACK_PANELS
    return 0;
}

static inline __attribute__((always_inline)) void linear_tile(const float *restrict xf, int K, const void *panel,
                                                              int dtype, const char *ahead,
                                                              vlanes acc[LIN_MR][LIN_NV]) {
    const int line = dtype == DT_BF16 ? LIN_NR * 2 : LIN_NR * 4;  /* bytes of one k's weights */
    for (int r = 0; r < LIN_MR; r++)
        for (int v = 0; v < LIN_NV; v++) acc[r][v] = splat(0.0f);
    for (int k = 0; k < K; k++) {
        if (ahead)
            for (int b = 0; b < line; b += 64) __builtin_prefetch(ahead + (size_t)k * line + b, 0, 2);
        vlanes w[LIN_NV];
        for (int v = 0; v < LIN_NV; v++) w[v] = load_lanes(panel, (int64_t)k * LIN_NR + v * LANES, dtype);
#pragma GCC unroll 16
        for (int r = 0; r < LIN_MR; r++) {
            const float xr = xf[(size_t)r * K + k];
            for (int v = 0; v < LIN_NV; v++) acc[r][v] += w[v] * xr;
        }
    }
}

#if LIN_PAIRS
/* The tile of linear_tile over a pair panel: xb holds LIN_MR bf16 rows of depth (even) elements. */
static inline __attribute__((always_inline)) void linear_tile_pairs(const uint16_t *restrict xb, int depth,
                                                                    const void *panel, const char *ahead,
                                                                    vlanes acc[LIN_MR][LIN_NV]) {
    __m512 sum[LIN_MR][LIN_NV];
    for (int r = 0; r < LIN_MR; r++)
        for (int v = 0; v < LIN_NV; v++) sum[r][v] = _mm512_setzero_ps();
    for (int i = 0; i < depth / 2; i++) {
        if (ahead)
            for (int b = 0; b < LIN_NR * 4; b += 64) __builtin_prefetch(ahead + (size_t)i * LIN_NR * 4 + b, 0, 2);
        __m512i w[LIN_NV];
        for (int v = 0; v < LIN_NV; v++)
            w[v] = _mm512_loadu_si512((const char *)panel + ((size_t)i * LIN_NR + v * LANES) * 4);
#pragma GCC unroll 16
        for (int r = 0; r < LIN_MR; r++) {
            int32_t two;
            memcpy(&two, xb + (size_t)r * depth + 2 * i, 4);
            const __m512i xr = _mm512_set1_epi32(two);
            for (int v = 0; v < LIN_NV; v++) sum[r][v] = _mm512_dpbf16_ps(sum[r][v], (__m512bh)xr, (__m512bh)w[v]);
        }
    }
    for (int r = 0; r < LIN_MR; r++)
        for (int v = 0; v < LIN_NV; v++) memcpy(&acc[r][v], &sum[r][v], sizeof acc[r][v]);
}
#endif

int rl_linear(const void *x, int64_t x_row_stride, int64_t M, int K, const void *packed, int N, const void *bias,
              void *out, int64_t out_row_stride, int dtype, int num_threads) {
    if (M <= 0) return 0;
    const int64_t Mpad = (M + LIN_MR - 1) / LIN_MR * LIN_MR;
    const int pairs = lin_pairs(dtype), depth = lin_depth(K, dtype);
    /* the rows as the tiles read them: fp32, or bf16 with K padded to even for the pair panels */
    void *rows = malloc((pairs ? 2 : 4) * (size_t)Mpad * depth);
    if (!rows) return -2;
    const size_t elem = dtype == DT_BF16 ? 2 : 4, panel_bytes = (size_t)depth * LIN_NR * elem;
    const int panels = (N + LIN_NR - 1) / LIN_NR, blocks = (panels + LIN_PB - 1) / LIN_PB;
#pragma omp parallel num_threads(num_threads)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < Mpad; r++) {
            if (pairs) {
                uint16_t *dst = (uint16_t *)rows + r * depth;
                memset(dst, 0, 2 * (size_t)depth);
                if (r < M) memcpy(dst, (const uint16_t *)x + r * x_row_stride, 2 * (size_t)K);
            } else if (r < M) {
                load_row(x, r * x_row_stride, dtype, K, (float *)rows + r * K);
            } else {
                memset((float *)rows + r * K, 0, sizeof(float) * (size_t)K);
            }
        }
#pragma omp for schedule(dynamic, 1)
        for (int b = 0; b < blocks; b++) {
            const int p_end = (b + 1) * LIN_PB < panels ? (b + 1) * LIN_PB : panels;
            for (int64_t r0 = 0; r0 < Mpad; r0 += LIN_MR)
                for (int p = b * LIN_PB; p < p_end; p++) {
                    vlanes acc[LIN_MR][LIN_NV];
                    const char *panel = (const char *)packed + (size_t)p * panel_bytes;
                    /* the first rows' pass streams the panels from memory: fetch the next one meanwhile */
                    const char *ahead = r0 == 0 && p + 1 < panels ? panel + panel_bytes : NULL;
#if LIN_PAIRS
                    if (pairs) linear_tile_pairs((const uint16_t *)rows + r0 * depth, depth, panel, ahead, acc);
                    else
#endif
                    linear_tile((const float *)rows + r0 * K, K, panel, dtype, ahead, acc);
                    const int n0 = p * LIN_NR, nn = N - n0 < LIN_NR ? N - n0 : LIN_NR;
                    float row[LIN_NR];
                    for (int r = 0; r < LIN_MR && r0 + r < M; r++) {
                        memcpy(row, acc[r], sizeof row);
                        if (bias) {
                            for (int j = 0; j < nn; j++)
                                row[j] += dtype == DT_BF16 ? bf16_to_f32(((const uint16_t *)bias)[n0 + j])
                                                           : ((const float *)bias)[n0 + j];
                        }
                        store_row(out, (r0 + r) * out_row_stride + n0, dtype, nn, row);
                    }
                }
        }
    }
    free(rows);
    return 0;
}

/* out[out_at..] = rms_norm(x[x_at..]) * w over n elements, as the model's RMSNorm: x r in fp32 (r = 1 /
 * sqrt(mean(x^2) + eps)), rounded to bf16 before the weight (wf, as fp32) where the dtype is bf16, then times w. */
static void rms_norm_row(const void *x, int64_t x_at, void *out, int64_t out_at, int n, const float *restrict wf,
                         float eps, int dtype, float *restrict row) {
    load_row(x, x_at, dtype, n, row);
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < n; i++) ss += row[i] * row[i];
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    if (dtype == DT_BF16) {
        for (int i = 0; i < n; i++) row[i] = bf16_to_f32(f32_to_bf16(row[i] * r)) * wf[i];
    } else {
#pragma omp simd
        for (int i = 0; i < n; i++) row[i] = row[i] * r * wf[i];
    }
    store_row(out, out_at, dtype, n, row);
}

/* rms_norm_row over each of N contiguous rows of h elements, with one weight w (h,) in the dtype. */
static void rms_norm_rows(const void *x, void *out, int64_t N, int h, const void *w, float eps, int dtype,
                          float *restrict row, float *restrict wf) {
    load_row(w, 0, dtype, h, wf);
    for (int64_t n = 0; n < N; n++) rms_norm_row(x, n * h, out, n * h, h, wf, eps, dtype, row);
}

/* x += d over n elements, each sum rounded to the dtype as torch's add rounds it. */
static void add_in_place(void *x, const void *d, int64_t n, int dtype) {
    if (dtype == DT_BF16) {
        uint16_t *a = x;
        const uint16_t *b = d;
        for (int64_t i = 0; i < n; i++) a[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
    } else {
        float *a = x;
        const float *b = d;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
    }
}

/* One decoder layer's weights, as the engine holds them: RMSNorm weights (h,), matmuls packed by rl_pack_linear
 * (qkv: the fused q | k | v projection, (H + 2 Hkv) D outputs; gate_up: gate | up, 2 I outputs); qkv_bias, and the
 * per-head RMSNorm weights (D,) of q and k (Qwen3's, before RoPE), or NULL. */
typedef struct {
    const void *ln_in, *qkv, *qkv_bias, *q_norm, *k_norm, *o, *ln_post, *gate_up, *down;
} rl_layer;

/* Every decoder layer of one step, a Llama-shaped layer after another, in one call: the same kernels and values as
 * the model's layer loop calling them one by one (rollart.models.transformer), without the ~20 calls through
 * Python and torch a layer makes there, each of which finds its code and data evicted from the caches by the
 * weights the matmul before it streamed.
 *   x          (N, h) the residual stream, updated in place
 *   cos, sin   (N, D) rows cs_row_stride apart; slots (N,) the cache slot of each token
 *   kv_cache   (L, 2, blocks, block_size, Hkv, D) contiguous: layer l's k at 2 l kv_half elements, v after it
 *   block_tables, query_start, context_lens, S: as rl_paged_attention's */
int rl_decoder_layers(const rl_layer *layers, int L, void *x, int64_t N, int h, int H, int Hkv, int D, int I,
                      const void *cos, const void *sin, int64_t cs_row_stride, const int64_t *slots, void *kv_cache,
                      int64_t kv_half, const int64_t *block_tables, int64_t bt_row_stride, const int64_t *query_start,
                      const int64_t *context_lens, int S, int block_size, float scale, float eps, int dtype,
                      int num_threads) {
    if (N <= 0) return 0;
    const size_t elem = dtype == DT_BF16 ? 2 : 4;
    const int64_t qkv_w = (int64_t)(H + 2 * Hkv) * D, att_w = (int64_t)H * D;
    const int64_t sizes[6] = {N * h, N * qkv_w, N * att_w, N * h, N * 2 * (int64_t)I, N * (int64_t)I};
    int64_t total = 0;
    for (int i = 0; i < 6; i++) total += sizes[i];
    char *buf = malloc(elem * (size_t)total + sizeof(float) * (2 * (size_t)h + 2 * (size_t)D));
    if (!buf) return -2;
    char *normed = buf, *qkv = normed + elem * sizes[0], *att = qkv + elem * sizes[1], *proj = att + elem * sizes[2];
    char *gate_up = proj + elem * sizes[3], *act = gate_up + elem * sizes[4];
    float *row = (float *)(act + elem * sizes[5]), *wf = row + h, *wq = wf + h, *wk = wq + D;
    int rc = 0;
    for (int l = 0; l < L && rc == 0; l++) {
        const rl_layer *ly = layers + l;
        char *k_cache = (char *)kv_cache + elem * (size_t)(2 * l) * kv_half, *v_cache = k_cache + elem * kv_half;
        rms_norm_rows(x, normed, N, h, ly->ln_in, eps, dtype, row, wf);
        rc = rl_linear(normed, h, N, h, ly->qkv, (int)qkv_w, ly->qkv_bias, qkv, qkv_w, dtype, num_threads);
        if (!rc && ly->q_norm) {
            load_row(ly->q_norm, 0, dtype, D, wq);
            load_row(ly->k_norm, 0, dtype, D, wk);
            for (int64_t n = 0; n < N; n++)
                for (int hd = 0; hd < H + Hkv; hd++) {
                    const int64_t at = n * qkv_w + (int64_t)hd * D;
                    rms_norm_row(qkv, at, qkv, at, D, hd < H ? wq : wk, eps, dtype, row);
                }
        }
        if (!rc) rc = rl_rope_and_cache(qkv, qkv_w, N, H, Hkv, D, cos, sin, cs_row_stride, slots, k_cache, v_cache,
                                        dtype, num_threads);
        if (!rc) rc = rl_paged_attention(qkv, qkv_w, att, att_w, k_cache, v_cache, block_tables, bt_row_stride,
                                         query_start, context_lens, S, H, Hkv, D, block_size, scale, dtype,
                                         num_threads);
        if (!rc) rc = rl_linear(att, att_w, N, (int)att_w, ly->o, h, NULL, proj, h, dtype, num_threads);
        if (rc) break;
        add_in_place(x, proj, N * h, dtype);
        rms_norm_rows(x, normed, N, h, ly->ln_post, eps, dtype, row, wf);
        rc = rl_linear(normed, h, N, h, ly->gate_up, 2 * I, NULL, gate_up, 2 * (int64_t)I, dtype, num_threads);
        if (!rc) rc = rl_silu_and_mul(gate_up, 2 * (int64_t)I, act, N, I, dtype, num_threads);
        if (!rc) rc = rl_linear(act, I, N, I, ly->down, h, NULL, proj, h, dtype, num_threads);
        if (!rc) add_in_place(x, proj, N * h, dtype);
    }
    free(buf);
    return rc;
}
