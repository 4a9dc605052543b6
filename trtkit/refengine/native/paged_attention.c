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

/* Each token's element offset in the cache (slot * row + the KV head's offset), from the block table once per item:
   the key pass and the value pass read the same slots. */
static void token_offsets(const int64_t *table, int64_t length, int64_t block_size, int64_t row, int64_t head,
                          int64_t *offsets) {
    for (int64_t b = 0, t = 0; t < length; b++) {
        const int64_t base = table[b] * block_size * row + head;
        for (int64_t i = 0; i < block_size && t < length; i++, t++) offsets[t] = base + i * row;
    }
}

/* The rows of one pass, prefetched PREFETCH_TOKENS tokens ahead. A sequence's blocks lie anywhere in the pool and
   hold 16 or 32 rows each, too short a run for the hardware prefetcher to learn before the walk jumps to the next
   block. The prefetch goes to L2 (prefetcht1), whose miss queue is deeper than L1's. Measured (12 sequences of
   200-700 tokens, 30 layers, 2 threads, Zen 4): fp32 12.7 GB/s without, 14.8 into L1 at 12 rows ahead, 21-22 into
   L2 at 32; bf16 9.4, 13.3, 17.1. (The offsets come from token_offsets: a cursor stepping through the block table
   for each pass and for its prefetches cost more instructions per token than the bf16 arithmetic.) */
#define PREFETCH_TOKENS 32
typedef struct {
    const char *base;
    const int64_t *offsets;
    int64_t length;
    int element, lines;
} Rows;

static inline void prefetch_row(const Rows *rows, int64_t t) {
    if (t >= rows->length) return;
    const char *row = rows->base + rows->offsets[t] * rows->element;
    for (int l = 0; l < rows->lines; l++) prefetch_l2(row + 64 * l);
}

static inline Rows start_rows(const void *cache, const int64_t *offsets, int64_t length, int bf16, int dim) {
    const int element = bf16 ? 2 : 4;
    const Rows rows = {(const char *)cache, offsets, length, element, (dim * element + 63) / 64};
    for (int64_t t = 0; t < PREFETCH_TOKENS; t++) prefetch_row(&rows, t);
    return rows;
}

/* token t's element offset, prefetching the row PREFETCH_TOKENS tokens after it */
static inline int64_t row_at(const Rows *rows, int64_t t) {
    prefetch_row(rows, t + PREFETCH_TOKENS);
    return rows->offsets[t];
}

/* One (sequence, KV head) item; chunks = head_dim / 16, a constant where the caller is specialised. */
static inline __attribute__((always_inline)) void attend(const Job *job, float *scores, int64_t *offsets,
                                                         int64_t item, const int chunks) {
    const int group = job->heads / job->kv_heads, kvh = job->kv_heads, dim = job->head_dim, bf16 = job->bf16;
    const int64_t row = (int64_t)kvh * dim, stride = job->max_len;
    const int64_t seq = item / kvh, length = job->lengths[seq];
    const int h = (int)(item % kvh);
    token_offsets(job->tables + seq * job->max_blocks, length, job->block_size, row, (int64_t)h * dim, offsets);
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
    Rows rows = start_rows(job->key, offsets, length, bf16, dim);
    for (int64_t first = 0; first < length; first += LANES) {
        const int count = length - first < LANES ? (int)(length - first) : LANES;
#ifdef __AVX512BF16__
        if (paired) {
            for (int o = 0; o < count; o++) {
                const uint16_t *row = (const uint16_t *)job->key + row_at(&rows, first + o);
                for (int c = 0; c < chunks / 2; c++) raw_keys[o][c] = _mm512_loadu_si512(row + c * 2 * LANES);
            }
            for (int o = count; o < LANES; o++)
                for (int c = 0; c < chunks / 2; c++) raw_keys[o][c] = _mm512_setzero_si512();
        } else
#endif
        {
            for (int o = 0; o < count; o++) {
                const int64_t base = row_at(&rows, first + o);
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
    rows = start_rows(job->value, offsets, length, bf16, dim);
#ifdef __AVX512BF16__
    if (paired) {
        /* each head's weights rounded to bf16 once, in place (a bf16 row fits in the front half of its fp32 row,
           and each 16 are read before they are overwritten), with a zero after the last: a pair of weights is
           then one 32-bit load instead of two conversions per head per pair of tokens */
        for (int g = 0; g < group; g++) {
            float *weights = scores + g * stride;
            int64_t t = 0;
            for (; t + LANES <= length; t += LANES) store16(weights, t, load16(weights, t, 0), 1);
            for (; t < length; t++) ((uint16_t *)weights)[t] = bf16_bits(weights[t]);
            ((uint16_t *)weights)[length] = 0;
        }
        /* two tokens per step: their value rows interleaved word by word, their bf16 weights as one pair, so
           the dot-product instruction adds p0 v0[d] + p1 v1[d] into each lane. The interleave works within
           128-bit lanes, so the accumulators hold dimensions in the order the store below undoes. */
        for (int64_t t = 0; t < length; t += 2) {
            const int two = t + 1 < length;
            const uint16_t *first_row = (const uint16_t *)job->value + row_at(&rows, t);
            const uint16_t *second_row = two ? (const uint16_t *)job->value + row_at(&rows, t + 1) : NULL;
            __m512i low[MAX_CHUNKS / 2], high[MAX_CHUNKS / 2];
            for (int c = 0; c < chunks / 2; c++) {
                const __m512i a = _mm512_loadu_si512(first_row + c * 2 * LANES);
                const __m512i b = two ? _mm512_loadu_si512(second_row + c * 2 * LANES) : _mm512_setzero_si512();
                low[c] = _mm512_unpacklo_epi16(a, b);
                high[c] = _mm512_unpackhi_epi16(a, b);
            }
            for (int g = 0; g < group; g++) {
                uint32_t pair; /* weights t and t + 1 (zero past the last) */
                memcpy(&pair, (const uint16_t *)(scores + g * stride) + t, sizeof pair);
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
        const int64_t base = row_at(&rows, t);
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

static void run_items(const Job *job, float *scores, int64_t *offsets) {
    for (int64_t item = job->first; item < job->last; item++) {
        if (job->head_dim == 64) attend(job, scores, offsets, item, 4);
        else if (job->head_dim == 128) attend(job, scores, offsets, item, 8);
        else attend(job, scores, offsets, item, job->head_dim / LANES);
    }
}

static void *worker(void *arg) {
    const Job *job = (const Job *)arg;
    float *scores = malloc(sizeof(float) * (size_t)(job->heads / job->kv_heads) * (size_t)job->max_len);
    int64_t *offsets = malloc(sizeof(int64_t) * (size_t)job->max_len);
    void *failed = scores && offsets ? NULL : (void *)1;
    if (!failed) run_items(job, scores, offsets);
    free(scores);
    free(offsets);
    return failed;
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

/* rope_head for a head_dim that is a multiple of 32: 16 lanes of each half at a time, the same operations and
   roundings (measured: the scalar loop took 0.8 s of a 32 s bf16 serving run on one core) */
__attribute__((optimize("fp-contract=off"))) static void rope_head_vec(const void *x, int64_t x_offset,
                                                                        const void *cos, const void *sin,
                                                                        int64_t table_offset, int dim, int bf16,
                                                                        void *out, int64_t out_offset) {
    const int half = dim / 2;
    for (int c = 0; c < half; c += LANES) {
        const vf x1 = load16(x, x_offset + c, bf16), x2 = load16(x, x_offset + half + c, bf16);
        vf a1 = x1 * load16(cos, table_offset + c, bf16), b1 = ((vf){0} - x2) * load16(sin, table_offset + c, bf16);
        vf a2 = x2 * load16(cos, table_offset + half + c, bf16), b2 = x1 * load16(sin, table_offset + half + c, bf16);
        if (bf16) {
            a1 = round_bf16(a1);
            b1 = round_bf16(b1);
            a2 = round_bf16(a2);
            b2 = round_bf16(b2);
        }
        store16(out, out_offset + c, a1 + b1, bf16);
        store16(out, out_offset + half + c, a2 + b2, bf16);
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
    void (*rope)(const void *, int64_t, const void *, const void *, int64_t, int, int, void *, int64_t) =
        head_dim % (2 * LANES) == 0 ? rope_head_vec : rope_head;
#pragma omp parallel for num_threads(threads) schedule(static) if (tokens >= 64)
    for (int64_t t = 0; t < tokens; t++) {
        const int64_t in = t * row_stride, table = positions[t] * head_dim;
        for (int h = 0; h < heads; h++)
            rope(qkv, in + (int64_t)h * head_dim, cos, sin, table, head_dim, bf16, q_out, (t * heads + h) * head_dim);
        for (int h = 0; h < kv_heads; h++)
            rope(qkv, in + (int64_t)(heads + h) * head_dim, cos, sin, table, head_dim, bf16, k_out,
                 (t * kv_heads + h) * head_dim);
        copy_row(k_out, t * kv_row, key_cache, slots[t] * kv_row, (int)kv_row, bf16);
        copy_row(qkv, in + (int64_t)(heads + kv_heads) * head_dim, value_cache, slots[t] * kv_row, (int)kv_row, bf16);
    }
    return 0;
}
