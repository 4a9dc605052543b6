/* y[m, n] = sum_k x[m, k] w[n, k] for the few rows of a decode step (16 at most), fp32 and bf16, on weights packed
 * in panels.
 *
 * At decode sizes a projection reads its whole weight once per step and does little arithmetic on it, so the
 * kernel's job is to stream the weight at the memory's speed while the multiply-adds keep pace. The weight is packed
 * once into panels of 16 output features, k-major (panel p holds w[16 p + j][k] at [k][j]), so each panel is one
 * sequential stream of 64-byte rows. Two panels are multiplied together against up to ROWS rows of x: per k, two
 * vector loads and 2 ROWS multiply-adds whose x operand is a broadcast straight from memory, with 2 ROWS
 * accumulators in registers. x is first transposed, a block of rows at a time, into [k][rows] (bf16: [k / 2][rows]
 * pairs), so that all the rows' values of one k sit side by side behind one pointer, and each multiply-add takes its
 * x value as an embedded broadcast from a constant offset (written in asm on AVX-512: GCC emits a separate broadcast
 * instruction, which competes for the vector pipes). Read from x in place, each row needed a pointer of its own:
 * twelve do not fit the general registers, and the spills and the bf16 pairs assembled in general registers cost
 * more than the arithmetic (measured, one Zen 4 core, 30 layers of SmolLM2-135M: bf16 at 16 rows 24-35 -> 21.6 ms,
 * 8 rows 15.1 -> 10.5; fp32 at 16 rows 44-48 -> 38 ms). More rows take another pass over the same panels, which are
 * in cache by then. Panel pairs are split between torch's OpenMP threads.
 */
#include "vector.h"

#define PANEL 16
#define ROWS 12
#define PREFETCH_ROWS 16 /* k rows (64 bytes each) ahead in each panel */
/* bf16: k pairs (64 bytes each) ahead in each panel, into L2. At few rows a bf16 panel streams from memory slower than
   fp32's did (its weights are half the bytes for the same arithmetic), and 16 rows ahead (1 KB) is less than memory's
   latency at that rate. Measured, one Zen 4 core, thread CPU time, medians of 6 interleaved runs, 30 layers of
   SmolLM2-135M's four projections streamed from memory: 1 row 14.4 -> 11.8 ms, 4 rows 14.9 -> 13.3, 16 rows 25.0 ->
   24.9 (compute-bound there); lm_head 3.0 -> 2.5, 3.4 -> 2.8, 5.8 -> 5.6. fp32, already at the core's bandwidth at
   one row, gained nothing from it and keeps PREFETCH_ROWS. */
#define PREFETCH_PAIRS 64

/* Panels, rounded up to an even count so that every pair is whole. */
int64_t packed_floats(int64_t n, int64_t k) { return (n + 2 * PANEL - 1) / (2 * PANEL) * 2 * PANEL * k; }

/* packed[p][k][j] = weight[16 p + j][k], zero past n; packed holds packed_floats(n, k) floats. */
void pack_panels(const float *weight, int64_t n, int64_t k, float *packed) {
    const int64_t panels = packed_floats(n, k) / (PANEL * k);
    for (int64_t p = 0; p < panels; p++)
        for (int64_t kk = 0; kk < k; kk++)
            for (int j = 0; j < PANEL; j++) {
                const int64_t row = p * PANEL + j;
                packed[(p * k + kk) * PANEL + j] = row < n ? weight[row * k + kk] : 0.f;
            }
}

static inline void store_columns(float *y, int64_t n, int64_t column, vf value) {
    if (column >= n) return;
    if (column + PANEL <= n) {
        store_floats(y + column, value);
    } else {
        for (int j = 0; column + j < n; j++) y[column + j] = value[j];
    }
}

/* Row blocks of at most ROWS rows: 16 rows go as 12 + 4 (measured faster than 8 + 8). */
static inline int block_rows(int64_t m, int64_t row) { return m - row < ROWS ? (int)(m - row) : ROWS; }

/* xt[b] = rows [ROWS b, + block_rows) of x as [k][rows] */
static void transpose_rows(const float *x, int64_t m, int64_t k, float *xt) {
    for (int64_t row = 0; row < m; row += ROWS) {
        const int rows = block_rows(m, row);
        float *block = xt + row * k;
        for (int r = 0; r < rows; r++)
            for (int64_t kk = 0; kk < k; kk++) block[kk * rows + r] = x[(row + r) * k + kk];
    }
}

/* rows (a constant where inlined) of xt ([k][rows]) against the panel pair at first (the second panel follows) */
static inline __attribute__((always_inline)) void panel_pair(const float *xt, int64_t k, const float *first,
                                                             float *y, int64_t n, int64_t column, const int rows) {
    const float *second = first + k * PANEL;
    vf a[ROWS], b[ROWS];
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) a[r] = b[r] = (vf){0};
    for (int64_t kk = 0; kk < k; kk++) {
        if (kk + PREFETCH_ROWS < k) {
            __builtin_prefetch(first + (kk + PREFETCH_ROWS) * PANEL, 0, 0);
            __builtin_prefetch(second + (kk + PREFETCH_ROWS) * PANEL, 0, 0);
        }
        const vf u = load_floats(first + kk * PANEL);
        const vf v = load_floats(second + kk * PANEL);
        const float *values = xt + kk * rows;
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
#ifdef __AVX512F__
            __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(a[r]) : "v"(u), "m"(values[r]));
            __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(b[r]) : "v"(v), "m"(values[r]));
#else
            a[r] += values[r] * u;
            b[r] += values[r] * v;
#endif
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) {
        store_columns(y + r * n, n, column, a[r]);
        store_columns(y + r * n, n, column + PANEL, b[r]);
    }
}

/* CALL(r) once, with r the compile-time constant equal to rows (1 to ROWS), so each row count gets its own
   fully unrolled copy of the panel loop with its accumulators in registers */
#define FOR_ROWS(CALL, rows)                                                                                       \
    switch (rows) {                                                                                                \
    case 1: CALL(1); break;                                                                                        \
    case 2: CALL(2); break;                                                                                        \
    case 3: CALL(3); break;                                                                                        \
    case 4: CALL(4); break;                                                                                        \
    case 5: CALL(5); break;                                                                                        \
    case 6: CALL(6); break;                                                                                        \
    case 7: CALL(7); break;                                                                                        \
    case 8: CALL(8); break;                                                                                        \
    case 9: CALL(9); break;                                                                                        \
    case 10: CALL(10); break;                                                                                      \
    case 11: CALL(11); break;                                                                                      \
    default: CALL(ROWS); break;                                                                                    \
    }

static void pair_rows(const float *xt, int64_t k, const float *first, float *y, int64_t n, int64_t column,
                      int rows) {
#define FP32_PAIR(r) panel_pair(xt, k, first, y, n, column, r)
    FOR_ROWS(FP32_PAIR, rows)
#undef FP32_PAIR
}

/* y [m, n] = x [m, k] . w^T with w packed by pack_panels. Returns 0, -1 for a shape it does not take, -2 when out of
   memory. */
int skinny_gemm(const float *x, int64_t m, int64_t k, const float *packed, int64_t n, float *y, int threads) {
    if (m < 1 || k < 1 || n < 1 || threads < 1) return -1;
    const int64_t pairs = packed_floats(n, k) / (2 * PANEL * k);
    float *xt = malloc((size_t)(m * k) * sizeof *xt);
    if (xt == NULL) return -2;
    transpose_rows(x, m, k, xt);
    if (threads > pairs) threads = (int)pairs;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t pair = 0; pair < pairs; pair++) {
        const float *first = packed + 2 * pair * k * PANEL;
        for (int64_t row = 0; row < m; row += ROWS)
            pair_rows(xt + row * k, k, first, y + row * n, n, 2 * pair * PANEL, block_rows(m, row));
    }
    free(xt);
    return 0;
}

/* ---- bf16: the same panels holding pairs of k, for the bf16 dot-product instruction ---- */

/* Elements (bf16) that pack_panels_bf16 writes: even panel count, k rounded up to even. */
int64_t packed_halves(int64_t n, int64_t k) { return packed_floats(n, k + (k & 1)); }

/* packed[p][k / 2][j][2] = weight[16 p + j][k], k even first; zero past n and past k. */
void pack_panels_bf16(const uint16_t *weight, int64_t n, int64_t k, uint16_t *packed) {
    const int64_t even = k + (k & 1), panels = packed_halves(n, k) / (PANEL * even);
    for (int64_t p = 0; p < panels; p++)
        for (int64_t kk = 0; kk < even; kk++)
            for (int j = 0; j < PANEL; j++) {
                const int64_t row = p * PANEL + j;
                packed[((p * (even / 2) + kk / 2) * PANEL + j) * 2 + (kk & 1)] =
                    row < n && kk < k ? weight[row * k + kk] : 0;
            }
}

static inline void store_columns_bf16(uint16_t *y, int64_t n, int64_t column, vf value) {
    for (int j = 0; j < PANEL && column + j < n; j++) y[column + j] = bf16_bits(value[j]);
}

/* xt[b] = rows [block b, + its rows) of x as [k / 2][rows] pairs (k = 2 i in the low half, 2 i + 1 in the high
   half; a missing last odd k is zero), in blocks of `block` rows */
static void transpose_pairs(const uint16_t *x, int64_t m, int64_t k, uint32_t *xt, int64_t block_size) {
    const int64_t pairs = (k + 1) / 2;
    for (int64_t row = 0; row < m; row += block_size) {
        const int rows = (int)(m - row < block_size ? m - row : block_size);
        uint32_t *block = xt + row * pairs;
        for (int r = 0; r < rows; r++) {
            const uint16_t *source = x + (row + r) * k;
            for (int64_t i = 0; i < pairs; i++) {
                const uint32_t low = source[2 * i], high = 2 * i + 1 < k ? source[2 * i + 1] : 0;
                block[i * rows + r] = low | high << 16;
            }
        }
    }
}

static inline __attribute__((always_inline)) void panel_pair_bf16(const uint32_t *xt, int64_t pairs,
                                                                  const uint16_t *first, uint16_t *y, int64_t n,
                                                                  int64_t column, const int rows) {
    const uint16_t *second = first + pairs * 2 * PANEL;
    vf a[ROWS], b[ROWS];
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) a[r] = b[r] = (vf){0};
    for (int64_t i = 0; i < pairs; i++) {
        if (i + PREFETCH_PAIRS < pairs) {
            prefetch_l2(first + (i + PREFETCH_PAIRS) * 2 * PANEL);
            prefetch_l2(second + (i + PREFETCH_PAIRS) * 2 * PANEL);
        }
        const uint32_t *values = xt + i * rows;
#ifdef __AVX512BF16__
        const __m512bh u = (__m512bh)_mm512_loadu_si512(first + i * 2 * PANEL);
        const __m512bh v = (__m512bh)_mm512_loadu_si512(second + i * 2 * PANEL);
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
            /* the x pair as an embedded broadcast: GCC keeps a separate broadcast, which shares the vector pipes */
            __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(a[r]) : "v"(u), "m"(values[r]));
            __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(b[r]) : "v"(v), "m"(values[r]));
        }
#else
        vu raw_u, raw_v;
        memcpy(&raw_u, first + i * 2 * PANEL, sizeof raw_u);
        memcpy(&raw_v, second + i * 2 * PANEL, sizeof raw_v);
        const vf u0 = (vf)(raw_u << 16), u1 = (vf)(raw_u & 0xFFFF0000u);
        const vf v0 = (vf)(raw_v << 16), v1 = (vf)(raw_v & 0xFFFF0000u);
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
            const uint32_t lo = values[r] << 16, hi = values[r] & 0xFFFF0000u;
            float x0, x1;
            memcpy(&x0, &lo, sizeof x0);
            memcpy(&x1, &hi, sizeof x1);
            a[r] += x0 * u0 + x1 * u1;
            b[r] += x0 * v0 + x1 * v1;
        }
#endif
    }
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) {
        store_columns_bf16(y + r * n, n, column, a[r]);
        store_columns_bf16(y + r * n, n, column + PANEL, b[r]);
    }
}

static void pair_rows_bf16(const uint32_t *xt, int64_t pairs, const uint16_t *first, uint16_t *y, int64_t n,
                           int64_t column, int rows) {
#define BF16_PAIR(r) panel_pair_bf16(xt, pairs, first, y, n, column, r)
    FOR_ROWS(BF16_PAIR, rows)
#undef BF16_PAIR
}

#ifdef __AVX512BF16__
/* 13 to WIDE_ROWS rows in one pass over each panel: a pair of panels against 12 rows and again against the rest read
   the weights twice, the second time with only the rest's multiply-adds per load. One panel against every row holds
   `rows` accumulators and one weight vector in registers, so each weight is read once, from memory, with 16
   multiply-adds per 64 bytes: the rate this machine's memory and its bf16 dot products meet at (2 cores, 27 GB/s,
   463 GFLOP/s). The sums are the same, in the same order: the result is bitwise that of the paired kernel. */
#define WIDE_ROWS 16

static inline __attribute__((always_inline)) void panel_wide_bf16(const uint32_t *xt, int64_t pairs,
                                                                  const uint16_t *panel, uint16_t *y, int64_t n,
                                                                  int64_t column, const int rows) {
    vf a[WIDE_ROWS];
#pragma GCC unroll 16
    for (int r = 0; r < rows; r++) a[r] = (vf){0};
    for (int64_t i = 0; i < pairs; i++) {
        if (i + PREFETCH_PAIRS < pairs) prefetch_l2(panel + (i + PREFETCH_PAIRS) * 2 * PANEL);
        const uint32_t *values = xt + i * rows;
        const __m512bh u = (__m512bh)_mm512_loadu_si512(panel + i * 2 * PANEL);
#pragma GCC unroll 16
        for (int r = 0; r < rows; r++)
            __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(a[r]) : "v"(u), "m"(values[r]));
    }
#pragma GCC unroll 16
    for (int r = 0; r < rows; r++) store_columns_bf16(y + r * n, n, column, a[r]);
}

static void panel_wide_rows_bf16(const uint32_t *xt, int64_t pairs, const uint16_t *panel, uint16_t *y, int64_t n,
                                 int64_t column, int rows) {
    switch (rows) {
    case 13: panel_wide_bf16(xt, pairs, panel, y, n, column, 13); break;
    case 14: panel_wide_bf16(xt, pairs, panel, y, n, column, 14); break;
    case 15: panel_wide_bf16(xt, pairs, panel, y, n, column, 15); break;
    default: panel_wide_bf16(xt, pairs, panel, y, n, column, WIDE_ROWS); break;
    }
}
#endif

/* y [m, n] = x [m, k] . w^T in bf16 (fp32 sums, rounded to nearest even), w packed by pack_panels_bf16. */
int skinny_gemm_bf16(const uint16_t *x, int64_t m, int64_t k, const uint16_t *packed, int64_t n, uint16_t *y,
                     int threads) {
    if (m < 1 || k < 1 || n < 1 || threads < 1) return -1;
    const int64_t k_pairs = (k + 1) / 2, pair_size = 2 * PANEL * 2 * k_pairs;
    const int64_t pairs = packed_halves(n, k) / pair_size;
    uint32_t *xt = malloc((size_t)(m * k_pairs) * sizeof *xt);
    if (xt == NULL) return -2;
#ifdef __AVX512BF16__
    if (m > ROWS && m <= WIDE_ROWS) {
        transpose_pairs(x, m, k, xt, m);
        const int64_t panels = 2 * pairs, panel_size = pair_size / 2;
        if (threads > panels) threads = (int)panels;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t p = 0; p < panels; p++)
            panel_wide_rows_bf16(xt, k_pairs, packed + p * panel_size, y, n, p * PANEL, (int)m);
        free(xt);
        return 0;
    }
#endif
    transpose_pairs(x, m, k, xt, ROWS);
    if (threads > pairs) threads = (int)pairs;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t pair = 0; pair < pairs; pair++)
        for (int64_t row = 0; row < m; row += ROWS)
            pair_rows_bf16(xt + row * k_pairs, k_pairs, packed + pair * pair_size, y + row * n, n, 2 * pair * PANEL,
                           block_rows(m, row));
    free(xt);
    return 0;
}
