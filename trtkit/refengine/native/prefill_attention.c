/* Causal attention for the prompt chunks of a step, over the paged KV pool, read in place.
 *
 * Chunk c holds query rows [row_starts[c], row_starts[c] + num_tokens[c]) at positions context_starts[c] onwards;
 * query row i attends to the cache's positions [0, context_starts[c] + i], walked through the chunk's block table.
 * The step's K/V is in the cache already (rope_and_store wrote it), so a fresh prompt and a chunk that continues a
 * cached prefix are the same case.
 *
 * Work items are (chunk, KV head, tile of QUERY_TILE positions): the query heads that share a KV head are scored
 * together, so one tile is QUERY_TILE x group rows against each key tile. Per key tile of KEY_TILE tokens the keys
 * are converted to fp32 and transposed once, then every block of ROW_BLOCK rows computes its scores with broadcast
 * multiply-adds (16 keys per vector), an online softmax (running max and sum per row, in fp32), and adds its
 * weighted values into fp32 accumulators. bf16 inputs are widened to fp32; the output is rounded to nearest even.
 * Items go to threads largest first, one at a time (OpenMP dynamic), on torch's OpenMP pool.
 */
#include "vector.h"

#define KEY_TILE 64
#define KEY_VECS (KEY_TILE / LANES)
#define QUERY_TILE 32
#define ROW_BLOCK 4
#define MASKED -3.0e38f

typedef struct {
    const void *q, *key, *value;
    void *out;
    const int64_t *tables, *row_starts, *num_tokens, *context_starts;
    int64_t max_blocks;
    int heads, kv_heads, head_dim, block_size, bf16;
    float scale;
} PrefillJob;

typedef struct {
    int64_t chunk, first, rows, cost; /* query rows [first, first + rows) of the chunk */
    int kv_head;
} PrefillItem;

/* Per-thread scratch, fp32: queries and accumulators [rows][dim], keys transposed [dim][KEY_TILE], values
   [KEY_TILE][dim], weights [ROW_BLOCK][KEY_TILE], and each row's running max and sum. */
typedef struct {
    float *q, *acc, *keys, *values, *weights, *max, *sum;
} Scratch;

static int scratch_alloc(Scratch *s, int64_t rows, int dim) {
    const size_t floats = (size_t)(2 * rows * dim + 2 * KEY_TILE * dim + ROW_BLOCK * KEY_TILE + 2 * rows);
    float *base = aligned_alloc(64, ((floats * sizeof(float) + 63) / 64) * 64);
    if (!base) return -1;
    s->q = base;
    s->acc = s->q + rows * dim;
    s->keys = s->acc + rows * dim;
    s->values = s->keys + (int64_t)KEY_TILE * dim;
    s->weights = s->values + (int64_t)KEY_TILE * dim;
    s->max = s->weights + ROW_BLOCK * KEY_TILE;
    s->sum = s->max + rows;
    return 0;
}

static inline int64_t slot_of(const int64_t *table, int64_t position, int block_size) {
    return table[position / block_size] * block_size + position % block_size;
}

/* Keys [first, first + count) of one KV head into s->keys (transposed) and s->values, fp32; zeros past count. */
static void load_key_tile(const PrefillJob *job, const int64_t *table, int h, int64_t first, int count,
                          const Scratch *s) {
    const int dim = job->head_dim;
    for (int j = 0; j < KEY_TILE; j++) {
        float *value = s->values + (int64_t)j * dim;
        if (j >= count) {
            for (int d = 0; d < dim; d++) s->keys[(int64_t)d * KEY_TILE + j] = value[d] = 0.f;
            continue;
        }
        const int64_t base = (slot_of(table, first + j, job->block_size) * job->kv_heads + h) * dim;
        for (int d = 0; d < dim; d += LANES) {
            const vf k = load16(job->key, base + d, job->bf16), v = load16(job->value, base + d, job->bf16);
            memcpy(value + d, &v, sizeof v);
            for (int l = 0; l < LANES; l++) s->keys[(int64_t)(d + l) * KEY_TILE + j] = k[l];
        }
    }
}

/* Scores of ROW_BLOCK rows against the key tile, the causal mask, and the online-softmax update of each row's max
   and sum: s->weights gets e^(score - new max), 0 where masked, and correction[r] the factor by which the row's
   accumulators must shrink (e^(old max - new max)), which add_values applies. */
static inline __attribute__((always_inline)) void score_block(const Scratch *s, int64_t row0, int dim,
                                                              const int64_t positions[ROW_BLOCK], int64_t first,
                                                              float correction[ROW_BLOCK]) {
    vf scores[ROW_BLOCK][KEY_VECS];
#pragma GCC unroll 16
    for (int r = 0; r < ROW_BLOCK; r++)
#pragma GCC unroll 16
        for (int v = 0; v < KEY_VECS; v++) scores[r][v] = (vf){0};
    const float *q = s->q + row0 * dim;
    for (int d = 0; d < dim; d++) {
        const float *row = s->keys + (int64_t)d * KEY_TILE;
        vf keys[KEY_VECS];
#pragma GCC unroll 16
        for (int v = 0; v < KEY_VECS; v++) keys[v] = load_floats(row + v * LANES);
#pragma GCC unroll 16
        for (int r = 0; r < ROW_BLOCK; r++) {
            const float x = q[r * dim + d];
#pragma GCC unroll 16
            for (int v = 0; v < KEY_VECS; v++) scores[r][v] += x * keys[v];
        }
    }
    const vi lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const vf floor_ = (vf){0} + MASKED;
#pragma GCC unroll 16
    for (int r = 0; r < ROW_BLOCK; r++) {
        vi visible[KEY_VECS];
        const int partial = first + KEY_TILE - 1 > positions[r]; /* some key of the tile lies after this row */
        vf best = floor_;
#pragma GCC unroll 16
        for (int v = 0; v < KEY_VECS; v++) {
            visible[v] = partial ? (lane + (int)(first + v * LANES)) <= (int)positions[r] : (vi){0} - 1;
            scores[r][v] = pick(visible[v], scores[r][v], floor_);
            best = pick(scores[r][v] > best, scores[r][v], best);
        }
        const float old = s->max[row0 + r], tile_max = hmax(best), now = tile_max > old ? tile_max : old;
        correction[r] = exp_one(old - now);
        vf total = (vf){0};
#pragma GCC unroll 16
        for (int v = 0; v < KEY_VECS; v++) {
            const vf p = (vf)((vi)exp_vec(scores[r][v] - now) & visible[v]);
            total += p;
            store_floats(s->weights + r * KEY_TILE + v * LANES, p);
        }
        s->max[row0 + r] = now;
        s->sum[row0 + r] = s->sum[row0 + r] * correction[r] + hsum(total);
    }
}

/* acc[rows] = acc * correction + weights . values, for ROW_BLOCK rows; chunks = dim / 16. */
static inline __attribute__((always_inline)) void add_values(const Scratch *s, int64_t row0, int count,
                                                             const float correction[ROW_BLOCK], const int chunks) {
    const int dim = chunks * LANES;
    float *out = s->acc + row0 * dim;
    vf acc[ROW_BLOCK][MAX_CHUNKS];
#pragma GCC unroll 16
    for (int r = 0; r < ROW_BLOCK; r++)
#pragma GCC unroll 16
        for (int c = 0; c < chunks; c++) acc[r][c] = load_floats(out + r * dim + c * LANES) * correction[r];
    for (int j = 0; j < count; j++) {
        const float *row = s->values + (int64_t)j * dim;
        vf value[MAX_CHUNKS];
#pragma GCC unroll 16
        for (int c = 0; c < chunks; c++) value[c] = load_floats(row + c * LANES);
#pragma GCC unroll 16
        for (int r = 0; r < ROW_BLOCK; r++) {
            const float p = s->weights[r * KEY_TILE + j];
#pragma GCC unroll 16
            for (int c = 0; c < chunks; c++) acc[r][c] += p * value[c];
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < ROW_BLOCK; r++)
#pragma GCC unroll 16
        for (int c = 0; c < chunks; c++) store_floats(out + r * dim + c * LANES, acc[r][c]);
}

static inline __attribute__((always_inline)) void prefill_item(const PrefillJob *job, const PrefillItem *item,
                                                               const Scratch *s, const int chunks) {
    const int dim = chunks * LANES, group = job->heads / job->kv_heads, h = item->kv_head;
    const int64_t rows = item->rows * group, padded = (rows + ROW_BLOCK - 1) / ROW_BLOCK * ROW_BLOCK;
    const int64_t *table = job->tables + item->chunk * job->max_blocks;
    const int64_t first_position = job->context_starts[item->chunk] + item->first;
    const int64_t last_position = first_position + item->rows - 1;
    const int64_t first_row = job->row_starts[item->chunk] + item->first;
    for (int64_t r = 0; r < padded; r++) { /* row r: query position first + r / group, head h * group + r % group */
        const int64_t source = ((first_row + r / group) * job->heads + (int64_t)h * group + r % group) * dim;
        for (int d = 0; d < dim; d++)
            s->q[r * dim + d] = r < rows ? to_float(job->q, source + d, job->bf16) * job->scale : 0.f;
        memset(s->acc + r * dim, 0, sizeof(float) * (size_t)dim);
        s->max[r] = MASKED;
        s->sum[r] = 0.f;
    }
    for (int64_t first = 0; first <= last_position; first += KEY_TILE) {
        const int count = last_position + 1 - first < KEY_TILE ? (int)(last_position + 1 - first) : KEY_TILE;
        load_key_tile(job, table, h, first, count, s);
        for (int64_t row0 = 0; row0 < padded; row0 += ROW_BLOCK) {
            int64_t positions[ROW_BLOCK];
            float correction[ROW_BLOCK];
            for (int r = 0; r < ROW_BLOCK; r++) /* padding rows see what the tile's last row sees */
                positions[r] = row0 + r < rows ? first_position + (row0 + r) / group : last_position;
            score_block(s, row0, dim, positions, first, correction);
            add_values(s, row0, count, correction, chunks);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t target = ((first_row + r / group) * job->heads + (int64_t)h * group + r % group) * dim;
        const float inv = 1.f / s->sum[r];
        for (int d = 0; d < dim; d++) store1(job->out, target + d, s->acc[r * dim + d] * inv, job->bf16);
    }
}

static void run_item(const PrefillJob *job, const PrefillItem *item, const Scratch *s) {
    if (job->head_dim == 64) prefill_item(job, item, s, 4);
    else if (job->head_dim == 128) prefill_item(job, item, s, 8);
    else prefill_item(job, item, s, job->head_dim / LANES);
}

static int larger_first(const void *a, const void *b) {
    const int64_t x = ((const PrefillItem *)a)->cost, y = ((const PrefillItem *)b)->cost;
    return (x < y) - (x > y);
}

/* 0 on success; -1 when a shape is outside what this kernel handles; -2 when memory ran out. */
int paged_prefill_attention(const void *q, const void *key, const void *value, void *out, const int64_t *tables,
                            int64_t max_blocks, const int64_t *row_starts, const int64_t *num_tokens,
                            const int64_t *context_starts, int64_t num_chunks, int heads, int kv_heads,
                            int head_dim, int block_size, int bf16, float scale, int threads) {
    if (kv_heads < 1 || heads % kv_heads || heads / kv_heads > MAX_GROUP || head_dim % LANES ||
        head_dim > LANES * MAX_CHUNKS || block_size < 1 || threads < 1)
        return -1;
    const PrefillJob job = {q, key, value, out, tables, row_starts, num_tokens, context_starts, max_blocks,
                            heads, kv_heads, head_dim, block_size, bf16, scale};
    int64_t count = 0;
    for (int64_t c = 0; c < num_chunks; c++) count += (num_tokens[c] + QUERY_TILE - 1) / QUERY_TILE * kv_heads;
    PrefillItem *items = malloc(sizeof(PrefillItem) * (size_t)(count > 0 ? count : 1));
    if (!items) return -2;
    int64_t n = 0;
    for (int64_t c = 0; c < num_chunks; c++)
        for (int64_t first = 0; first < num_tokens[c]; first += QUERY_TILE)
            for (int h = 0; h < kv_heads; h++) {
                const int64_t rows = num_tokens[c] - first < QUERY_TILE ? num_tokens[c] - first : QUERY_TILE;
                items[n++] = (PrefillItem){c, first, rows, rows * (context_starts[c] + first + rows), h};
            }
    qsort(items, (size_t)n, sizeof(PrefillItem), larger_first);
    if (threads > n) threads = (int)(n > 0 ? n : 1);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    int failed = 0;
    const int64_t tile_rows = (int64_t)QUERY_TILE * (heads / kv_heads) + ROW_BLOCK;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        Scratch scratch;
        const int ready = scratch_alloc(&scratch, tile_rows, head_dim) == 0;
        failed |= !ready;
        /* every thread meets the loop (a worksharing construct); one without scratch skips its items, and the
           call fails */
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++)
            if (ready) run_item(&job, &items[i], &scratch);
        if (ready) free(scratch.q);
    }
    free(items);
    return failed ? -2 : 0;
}
