/* Decode attention over the paged KV pool, read in place (no gather, no padding to the longest sequence).
 *
 * One query token per sequence. Work items are (sequence, KV head) pairs: the query heads that share a KV head
 * (grouped-query attention) are scored together, so each cached key and value row is loaded once. Scores, the
 * softmax and the weighted sum run in fp32 for fp32 and bf16 caches alike; bf16 output is rounded to nearest even,
 * as torch rounds. The items are split into one contiguous range per thread, each with about the same number of
 * cached tokens to read.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16
#define MAX_GROUP 16
#define MAX_CHUNKS 16 /* head_dim up to 256 */
#define MAX_THREADS 64

typedef float vf __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
typedef float vf4 __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef uint32_t vu __attribute__((vector_size(64)));
typedef uint16_t vh __attribute__((vector_size(32)));

typedef struct {
    const void *q, *key, *value;
    void *out;
    const int64_t *tables, *lengths;
    int64_t max_blocks, max_len, first, last; /* items [first, last): item = sequence * kv_heads + kv_head */
    int heads, kv_heads, head_dim, block_size, bf16;
    float scale;
} Job;

static inline vf load16(const void *base, int64_t offset, int bf16) {
    vf r;
    if (bf16) {
        vh half;
        memcpy(&half, (const uint16_t *)base + offset, sizeof half);
        vu bits = __builtin_convertvector(half, vu) << 16;
        memcpy(&r, &bits, sizeof r);
    } else {
        memcpy(&r, (const float *)base + offset, sizeof r);
    }
    return r;
}

static inline void store1(void *base, int64_t index, float value, int bf16) {
    if (!bf16) {
        ((float *)base)[index] = value;
        return;
    }
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    bits += 0x7FFF + ((bits >> 16) & 1);
    ((uint16_t *)base)[index] = (uint16_t)(bits >> 16);
}

/* A pairwise sum: a chain of 16 dependent adds would cost 16 add latencies per dot product. */
static inline float hsum(vf v) {
    vf8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
            __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    vf4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* e^x for x <= 0 without a libm call: 2^n * p(r) with Cephes' expf polynomial, relative error below 2e-7. */
static inline vf exp_vec(vf x) {
    const vf floor_ = (vf){0} - 87.f;
    const vi below = x < floor_; /* lanes of all ones where x is below the floor */
    vi xi, fi;
    memcpy(&xi, &x, sizeof xi);
    memcpy(&fi, &floor_, sizeof fi);
    xi = (below & fi) | (~below & xi);
    memcpy(&x, &xi, sizeof x);
    vf n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;
    vf r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
    vf p = (vf){0} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.f;
    vi bits;
    memcpy(&bits, &p, sizeof bits);
    bits += __builtin_convertvector(n, vi) << 23;
    memcpy(&p, &bits, sizeof p);
    return p;
}

static inline float exp_one(float x) {
    vf v = (vf){0} + x;
    return exp_vec(v)[0];
}

/* scores[0..count) = e^(scores - max); returns their sum (pairwise over the lanes) */
static inline float exp_in_place(float *scores, int64_t count, float max) {
    vf part = (vf){0};
    int64_t t = 0;
    for (; t + LANES <= count; t += LANES) {
        vf s;
        memcpy(&s, scores + t, sizeof s);
        s = exp_vec(s - max);
        memcpy(scores + t, &s, sizeof s);
        part += s;
    }
    float sum = hsum(part);
    for (; t < count; t++) {
        scores[t] = exp_one(scores[t] - max);
        sum += scores[t];
    }
    return sum;
}

#define DEFINE_RUN(NAME, CHUNKS_EXPR)                                                                         \
    static void NAME(const Job *job, float *scores) {                                                         \
        const int group = job->heads / job->kv_heads, kvh = job->kv_heads, dim = job->head_dim;               \
        const int chunks = (CHUNKS_EXPR), bs = job->block_size, bf16 = job->bf16;                             \
        const int64_t row = (int64_t)kvh * dim, stride = job->max_len;                                        \
        vf q[MAX_GROUP][MAX_CHUNKS], acc[MAX_GROUP][MAX_CHUNKS], kv[MAX_CHUNKS];                              \
        float best[MAX_GROUP], total[MAX_GROUP];                                                              \
        for (int64_t item = job->first; item < job->last; item++) {                                           \
            const int64_t seq = item / kvh, length = job->lengths[seq];                                       \
            const int h = (int)(item % kvh);                                                                  \
            const int64_t *table = job->tables + seq * job->max_blocks;                                       \
            for (int g = 0; g < group; g++) {                                                                 \
                best[g] = -3.0e38f;                                                                           \
                for (int c = 0; c < chunks; c++)                                                              \
                    q[g][c] = load16(job->q, (seq * job->heads + h * group + g) * dim + c * LANES, bf16) *    \
                              job->scale;                                                                     \
            }                                                                                                 \
            for (int64_t t = 0; t < length; t++) {                                                            \
                const int64_t base = (table[t / bs] * bs + t % bs) * row + (int64_t)h * dim;                  \
                for (int c = 0; c < chunks; c++) kv[c] = load16(job->key, base + c * LANES, bf16);            \
                for (int g = 0; g < group; g++) {                                                             \
                    vf a = q[g][0] * kv[0];                                                                   \
                    for (int c = 1; c < chunks; c++) a += q[g][c] * kv[c];                                    \
                    const float s = hsum(a);                                                                  \
                    scores[g * stride + t] = s;                                                               \
                    best[g] = s > best[g] ? s : best[g];                                                      \
                }                                                                                             \
            }                                                                                                 \
            for (int g = 0; g < group; g++) {                                                                 \
                total[g] = exp_in_place(scores + g * stride, length, best[g]);                                \
                for (int c = 0; c < chunks; c++) acc[g][c] = (vf){0};                                         \
            }                                                                                                 \
            for (int64_t t = 0; t < length; t++) {                                                            \
                const int64_t base = (table[t / bs] * bs + t % bs) * row + (int64_t)h * dim;                  \
                for (int c = 0; c < chunks; c++) kv[c] = load16(job->value, base + c * LANES, bf16);          \
                for (int g = 0; g < group; g++) {                                                             \
                    const float p = scores[g * stride + t];                                                   \
                    for (int c = 0; c < chunks; c++) acc[g][c] += p * kv[c];                                  \
                }                                                                                             \
            }                                                                                                 \
            for (int g = 0; g < group; g++) {                                                                 \
                const float inv = 1.f / total[g];                                                             \
                const int64_t out = (seq * job->heads + h * group + g) * dim;                                 \
                for (int c = 0; c < chunks; c++)                                                              \
                    for (int l = 0; l < LANES; l++) store1(job->out, out + c * LANES + l, acc[g][c][l] * inv, bf16); \
            }                                                                                                 \
        }                                                                                                     \
    }

DEFINE_RUN(run_dim64, 4)
DEFINE_RUN(run_dim128, 8)
DEFINE_RUN(run_any_dim, dim / LANES)

static void *worker(void *arg) {
    const Job *job = (const Job *)arg;
    float *scores = malloc(sizeof(float) * (size_t)(job->heads / job->kv_heads) * (size_t)job->max_len);
    if (!scores) return (void *)1;
    if (job->head_dim == 64) run_dim64(job, scores);
    else if (job->head_dim == 128) run_dim128(job, scores);
    else run_any_dim(job, scores);
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
