/* Decode attention over the paged KV pool, read in place (no gather, no padding to the longest sequence).
 *
 * One query token per sequence. Work items are (sequence, KV head) pairs: the query heads that share a KV head
 * (grouped-query attention) are scored together, so each cached key and value row is loaded once. Scores, the
 * softmax and the weighted sum run in fp32 for fp32 and bf16 caches alike; bf16 output is rounded to nearest even,
 * as torch rounds. The items are split into one contiguous range per thread, each with about the same number of
 * cached tokens to read.
 */
#include "vector.h"

typedef struct {
    const void *q, *key, *value;
    void *out;
    const int64_t *tables, *lengths;
    int64_t max_blocks, max_len, first, last; /* items [first, last): item = sequence * kv_heads + kv_head */
    int heads, kv_heads, head_dim, block_size, bf16;
    float scale;
} Job;

/* sums[i] = the sum of v[i]'s lanes, for 16 vectors at once: a transpose-and-add tree, 15 adds in all instead of
   16 separate horizontal sums. */
static inline vf sum_each(const vf v[LANES]) {
    vf b[8], c[4], d[2];
    for (int i = 0; i < 8; i++)
        b[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(v[2 * i], v[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29,
                                       30, 31);
    for (int i = 0; i < 4; i++)
        c[i] = __builtin_shufflevector(b[2 * i], b[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               __builtin_shufflevector(b[2 * i], b[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30,
                                       31);
    for (int i = 0; i < 2; i++)
        d[i] = __builtin_shufflevector(c[2 * i], c[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
               __builtin_shufflevector(c[2 * i], c[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30,
                                       31);
    return __builtin_shufflevector(d[0], d[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           __builtin_shufflevector(d[0], d[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

/* Walks a block table token by token without a division per token. */
typedef struct {
    const int64_t *table;
    int64_t block, offset, block_size, row;
} Cursor;

static inline int64_t next_slot_base(Cursor *cursor) {
    const int64_t base = (cursor->table[cursor->block] * cursor->block_size + cursor->offset) * cursor->row;
    if (++cursor->offset == cursor->block_size) {
        cursor->offset = 0;
        cursor->block++;
    }
    return base;
}

/* A cursor that also prefetches the row PREFETCH_TOKENS tokens ahead of it. A sequence's blocks lie anywhere in
   the pool and hold 16 or 32 rows each, too short a run for the hardware prefetcher to learn before the walk
   jumps to the next block. The prefetch goes to L2 (prefetcht1), whose miss queue is deeper than L1's. Measured
   (12 sequences of 200-700 tokens, 30 layers, 2 threads, Zen 4): fp32 12.7 GB/s without, 14.8 into L1 at 12
   rows ahead, 21-22 into L2 at 32; bf16 9.4, 13.3, 17.1. */
#define PREFETCH_TOKENS 32
typedef struct {
    Cursor now, ahead;
    int64_t ahead_left; /* rows the ahead cursor may still visit */
    const char *base;   /* the cache, offset to this KV head */
    int element, lines;
} Walker;

static inline void prefetch_ahead(Walker *walker) {
    if (walker->ahead_left <= 0) return;
    walker->ahead_left--;
    const char *row = walker->base + next_slot_base(&walker->ahead) * walker->element;
    for (int l = 0; l < walker->lines; l++) __builtin_prefetch(row + 64 * l, 0, 2);
}

static inline Walker start_walk(Cursor start, int64_t length, const void *cache, int64_t head_offset, int bf16,
                                int dim) {
    const int element = bf16 ? 2 : 4;
    Walker walker = {start, start, length, (const char *)cache + head_offset * element, element,
                     (dim * element + 63) / 64};
    for (int i = 0; i < PREFETCH_TOKENS; i++) prefetch_ahead(&walker);
    return walker;
}

static inline int64_t walk(Walker *walker) {
    prefetch_ahead(walker);
    return next_slot_base(&walker->now);
}

/* One (sequence, KV head) item; chunks = head_dim / 16, a constant where the caller is specialised. */
static inline __attribute__((always_inline)) void attend(const Job *job, float *scores, int64_t item,
                                                         const int chunks) {
    const int group = job->heads / job->kv_heads, kvh = job->kv_heads, dim = job->head_dim, bf16 = job->bf16;
    const int64_t row = (int64_t)kvh * dim, stride = job->max_len;
    const int64_t seq = item / kvh, length = job->lengths[seq];
    const int h = (int)(item % kvh);
    const Cursor start = {job->tables + seq * job->max_blocks, 0, 0, job->block_size, row};
    vf q[MAX_GROUP][MAX_CHUNKS], acc[MAX_GROUP][MAX_CHUNKS], keys[LANES][MAX_CHUNKS], dots[LANES];
    vf best[MAX_GROUP];
    float total[MAX_GROUP];
    for (int g = 0; g < group; g++) {
        best[g] = (vf){0} - 3.0e38f;
        for (int c = 0; c < chunks; c++)
            q[g][c] = load16(job->q, (seq * job->heads + h * group + g) * dim + c * LANES, bf16) * job->scale;
    }
#ifdef __AVX512BF16__
    const int paired = bf16 && chunks % 2 == 0;
    __m512i raw_q[MAX_GROUP][MAX_CHUNKS / 2], raw_keys[LANES][MAX_CHUNKS / 2];
    if (paired)
        for (int g = 0; g < group; g++)
            for (int c = 0; c < chunks / 2; c++)
                raw_q[g][c] = _mm512_loadu_si512((const uint16_t *)job->q + (seq * job->heads + h * group + g) * dim +
                                                 c * 2 * LANES);
#endif
    /* scores, 16 tokens at a time: their keys in fp32, then each query head's 16 dot products summed together */
    Walker cursor = start_walk(start, length, job->key, (int64_t)h * dim, bf16, dim);
    for (int64_t first = 0; first < length; first += LANES) {
        const int count = length - first < LANES ? (int)(length - first) : LANES;
#ifdef __AVX512BF16__
        if (paired) {
            for (int o = 0; o < count; o++) {
                const uint16_t *row = (const uint16_t *)job->key + walk(&cursor) + (int64_t)h * dim;
                for (int c = 0; c < chunks / 2; c++) raw_keys[o][c] = _mm512_loadu_si512(row + c * 2 * LANES);
            }
            for (int o = count; o < LANES; o++)
                for (int c = 0; c < chunks / 2; c++) raw_keys[o][c] = _mm512_setzero_si512();
        } else
#endif
        {
            for (int o = 0; o < count; o++) {
                const int64_t base = walk(&cursor) + (int64_t)h * dim;
                for (int c = 0; c < chunks; c++) keys[o][c] = load16(job->key, base + c * LANES, bf16);
            }
            for (int o = count; o < LANES; o++)
                for (int c = 0; c < chunks; c++) keys[o][c] = (vf){0};
        }
        for (int g = 0; g < group; g++) {
#ifdef __AVX512BF16__
            if (paired) {
                /* bf16 pairs multiplied and summed into fp32 lanes by the CPU's dot-product instruction */
                for (int o = 0; o < LANES; o++) {
                    __m512 a = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)raw_q[g][0], (__m512bh)raw_keys[o][0]);
                    for (int c = 1; c < chunks / 2; c++)
                        a = _mm512_dpbf16_ps(a, (__m512bh)raw_q[g][c], (__m512bh)raw_keys[o][c]);
                    memcpy(&dots[o], &a, sizeof a);
                }
            } else
#endif
            {
                for (int o = 0; o < LANES; o++) {
                    vf a = q[g][0] * keys[o][0];
                    for (int c = 1; c < chunks; c++) a += q[g][c] * keys[o][c];
                    dots[o] = a;
                }
            }
            vf s = sum_each(dots);
#ifdef __AVX512BF16__
            if (paired) s *= job->scale; /* the raw bf16 query is unscaled */
#endif
            memcpy(scores + g * stride + first, &s, sizeof(float) * (size_t)count);
            for (int o = count; o < LANES; o++) s[o] = -3.0e38f;
            best[g] = pick(s > best[g], s, best[g]);
        }
    }
    for (int g = 0; g < group; g++) {
        total[g] = exp_in_place(scores + g * stride, length, hmax(best[g]));
        for (int c = 0; c < chunks; c++) acc[g][c] = (vf){0};
    }
    cursor = start_walk(start, length, job->value, (int64_t)h * dim, bf16, dim);
#ifdef __AVX512BF16__
    if (paired) {
        /* two tokens per step: their value rows interleaved word by word, their bf16 weights as one pair, so
           the dot-product instruction adds p0 v0[d] + p1 v1[d] into each lane. The interleave works within
           128-bit lanes, so the accumulators hold dimensions in the order the store below undoes. */
        for (int64_t t = 0; t < length; t += 2) {
            const int two = t + 1 < length;
            const uint16_t *first_row = (const uint16_t *)job->value + walk(&cursor) + (int64_t)h * dim;
            const uint16_t *second_row =
                two ? (const uint16_t *)job->value + walk(&cursor) + (int64_t)h * dim : NULL;
            __m512i low[MAX_CHUNKS / 2], high[MAX_CHUNKS / 2];
            for (int c = 0; c < chunks / 2; c++) {
                const __m512i a = _mm512_loadu_si512(first_row + c * 2 * LANES);
                const __m512i b = two ? _mm512_loadu_si512(second_row + c * 2 * LANES) : _mm512_setzero_si512();
                low[c] = _mm512_unpacklo_epi16(a, b);
                high[c] = _mm512_unpackhi_epi16(a, b);
            }
            for (int g = 0; g < group; g++) {
                const uint32_t pair = bf16_bits(scores[g * stride + t]) |
                                      (two ? (uint32_t)bf16_bits(scores[g * stride + t + 1]) << 16 : 0u);
                const __m512bh weights = (__m512bh)_mm512_set1_epi32((int)pair);
                for (int c = 0; c < chunks / 2; c++) {
                    __m512 a, b;
                    memcpy(&a, &acc[g][2 * c], sizeof a);
                    memcpy(&b, &acc[g][2 * c + 1], sizeof b);
                    a = _mm512_dpbf16_ps(a, weights, (__m512bh)low[c]);
                    b = _mm512_dpbf16_ps(b, weights, (__m512bh)high[c]);
                    memcpy(&acc[g][2 * c], &a, sizeof a);
                    memcpy(&acc[g][2 * c + 1], &b, sizeof b);
                }
            }
        }
        for (int g = 0; g < group; g++) {
            const float inv = 1.f / total[g];
            const int64_t out = (seq * job->heads + h * group + g) * dim;
            for (int c = 0; c < chunks; c++)
                for (int l = 0; l < LANES; l++) /* lane l of the low / high half: dimension 8 (l / 4) + l % 4 (+ 4) */
                    store1(job->out, out + (c / 2) * 2 * LANES + (l / 4) * 8 + (c % 2) * 4 + l % 4,
                           acc[g][c][l] * inv, bf16);
        }
        return;
    }
#endif
    for (int64_t t = 0; t < length; t++) {
        const int64_t base = walk(&cursor) + (int64_t)h * dim;
        vf value[MAX_CHUNKS];
        for (int c = 0; c < chunks; c++) value[c] = load16(job->value, base + c * LANES, bf16);
        for (int g = 0; g < group; g++) {
            const float p = scores[g * stride + t];
            for (int c = 0; c < chunks; c++) acc[g][c] += p * value[c];
        }
    }
    for (int g = 0; g < group; g++) {
        const float inv = 1.f / total[g];
        const int64_t out = (seq * job->heads + h * group + g) * dim;
        for (int c = 0; c < chunks; c++)
            for (int l = 0; l < LANES; l++) store1(job->out, out + c * LANES + l, acc[g][c][l] * inv, bf16);
    }
}

static void run_items(const Job *job, float *scores) {
    for (int64_t item = job->first; item < job->last; item++) {
        if (job->head_dim == 64) attend(job, scores, item, 4);
        else if (job->head_dim == 128) attend(job, scores, item, 8);
        else attend(job, scores, item, job->head_dim / LANES);
    }
}

static void *worker(void *arg) {
    const Job *job = (const Job *)arg;
    float *scores = malloc(sizeof(float) * (size_t)(job->heads / job->kv_heads) * (size_t)job->max_len);
    if (!scores) return (void *)1;
    run_items(job, scores);
    free(scores);
    return NULL;
}

/* 0 on success; -1 when a shape is outside what this kernel handles; -2 when memory ran out. */
int paged_decode_attention(const void *q, const void *key, const void *value, void *out, const int64_t *tables,
                           const int64_t *lengths, int64_t num_seqs, int64_t max_blocks, int heads, int kv_heads,
                           int head_dim, int block_size, int bf16, float scale, int threads) {
    if (kv_heads < 1 || heads % kv_heads || heads / kv_heads > MAX_GROUP || head_dim % LANES ||
        head_dim > LANES * MAX_CHUNKS || block_size < 1 || threads < 1)
        return -1;
    int64_t max_len = 1, total = 0;
    for (int64_t s = 0; s < num_seqs; s++) {
        max_len = lengths[s] > max_len ? lengths[s] : max_len;
        total += lengths[s];
    }
    const int64_t items = num_seqs * kv_heads;
    if (threads > items) threads = (int)(items > 0 ? items : 1);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    Job jobs[MAX_THREADS];
    int64_t item = 0, done = 0;
    for (int w = 0; w < threads; w++) {
        const int64_t goal = total * kv_heads * (w + 1) / threads;
        jobs[w] = (Job){q, key, value, out, tables, lengths, max_blocks, max_len, item, item,
                        heads, kv_heads, head_dim, block_size, bf16, scale};
        while (item < items && (w == threads - 1 || done < goal)) done += lengths[item++ / kv_heads];
        jobs[w].last = item;
    }
    int failed = 0;
    /* torch's own OpenMP pool: its threads are awake (spinning) after the projection just before, so a
       pthread of our own would share a core with one of them */
#pragma omp parallel for num_threads(threads) schedule(static, 1) reduction(| : failed)
    for (int w = 0; w < threads; w++) failed |= worker(&jobs[w]) != NULL;
    return failed ? -2 : 0;
}

/* ---- rotary embedding and the K/V cache write, for every row of a step ---- */


/* GPT-NeoX rotate-half rotary embedding of one head, in the same operations and roundings as torch's
   x * cos + rotate_half(x) * sin in the model's dtype (bf16 rounds after each of the three), so both paths
   give the same bits. Contraction into fused multiply-adds is off here for that reason. */
__attribute__((optimize("fp-contract=off"))) static void rope_head(const void *x, int64_t x_offset,
                                                                    const void *cos, const void *sin,
                                                                    int64_t table_offset, int dim, int bf16,
                                                                    void *out, int64_t out_offset) {
    const int half = dim / 2;
    for (int d = 0; d < dim; d++) {
        const float value = to_float(x, x_offset + d, bf16);
        const float partner = d < half ? -to_float(x, x_offset + d + half, bf16) : to_float(x, x_offset + d - half, bf16);
        float a = value * to_float(cos, table_offset + d, bf16), b = partner * to_float(sin, table_offset + d, bf16);
        if (bf16) {
            a = bf16_round(a);
            b = bf16_round(b);
        }
        store1(out, out_offset + d, a + b, bf16);
    }
}

static void copy_row(const void *src, int64_t src_offset, void *dst, int64_t dst_offset, int count, int bf16) {
    const size_t size = bf16 ? 2 : 4;
    memcpy((char *)dst + (size_t)dst_offset * size, (const char *)src + (size_t)src_offset * size, size * (size_t)count);
}

/* For each row t of the fused projection output qkv [tokens, row_stride] (q heads, then k heads, then v heads):
   q_out[t] = rope(q), k_out[t] = rope(k), key_cache[slots[t]] = k_out[t], value_cache[slots[t]] = v.
   cos and sin are [positions, head_dim] tables; positions[t] is row t's position. Returns 0, or -1 for an odd
   head_dim. */
int rope_and_store(const void *qkv, int64_t tokens, int64_t row_stride, const void *cos, const void *sin,
                   const int64_t *positions, const int64_t *slots, void *q_out, void *k_out, void *key_cache,
                   void *value_cache, int heads, int kv_heads, int head_dim, int bf16, int threads) {
    if (head_dim % 2 || threads < 1) return -1;
    const int64_t kv_row = (int64_t)kv_heads * head_dim;
#pragma omp parallel for num_threads(threads) schedule(static) if (tokens >= 64)
    for (int64_t t = 0; t < tokens; t++) {
        const int64_t in = t * row_stride, table = positions[t] * head_dim;
        for (int h = 0; h < heads; h++)
            rope_head(qkv, in + (int64_t)h * head_dim, cos, sin, table, head_dim, bf16, q_out,
                      (t * heads + h) * head_dim);
        for (int h = 0; h < kv_heads; h++)
            rope_head(qkv, in + (int64_t)(heads + h) * head_dim, cos, sin, table, head_dim, bf16, k_out,
                      (t * kv_heads + h) * head_dim);
        copy_row(k_out, t * kv_row, key_cache, slots[t] * kv_row, (int)kv_row, bf16);
        copy_row(qkv, in + (int64_t)(heads + kv_heads) * head_dim, value_cache, slots[t] * kv_row, (int)kv_row, bf16);
    }
    return 0;
}
