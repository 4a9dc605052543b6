/* y[m, n] = sum_k x[m, k] w[n, k] for the few rows of a decode step, fp32, on weights packed in panels.
 *
 * At decode sizes (one row per sequence, 16 at most here) a projection reads its whole weight from memory once per
 * step and does little arithmetic on it, so the kernel's job is to stream the weight at the memory's speed while
 * the multiply-adds keep pace. The weight is packed once into panels of 16 output features, k-major (panel p holds
 * w[16 p + j][k] at [k][j]), so each panel is one sequential stream of 64-byte rows. Two panels are multiplied
 * together against up to ROWS rows of x: per k, two vector loads, ROWS broadcasts and 2 ROWS multiply-adds, with
 * 2 ROWS accumulators held in registers. More rows take another pass over the same panels, which are in cache
 * by then. Panel pairs are split between torch's OpenMP threads.
 */
#include "vector.h"

#define PANEL 16
#define ROWS 12
#define PREFETCH_ROWS 16 /* k rows (64 bytes each) ahead in each panel */

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

/* rows (a constant where inlined) of x against the panel pair at first (the second panel follows it) */
static inline __attribute__((always_inline)) void panel_pair(const float *x, int64_t k, const float *first,
                                                             float *y, int64_t n, int64_t column, const int rows) {
    const float *second = first + k * PANEL;
    vf a[ROWS], b[ROWS];
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) a[r] = b[r] = (vf){0};
    const float *end = first + k * PANEL;
    for (int64_t kk = 0; kk < k; kk++) {
        if (first + (kk + PREFETCH_ROWS) * PANEL < end) {
            __builtin_prefetch(first + (kk + PREFETCH_ROWS) * PANEL, 0, 0);
            __builtin_prefetch(second + (kk + PREFETCH_ROWS) * PANEL, 0, 0);
        }
        const vf u = load_floats(first + kk * PANEL);
        const vf v = load_floats(second + kk * PANEL);
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
            const float value = x[r * k + kk];
            a[r] += value * u;
            b[r] += value * v;
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

static void pair_rows(const float *x, int64_t k, const float *first, float *y, int64_t n, int64_t column, int rows) {
#define FP32_PAIR(r) panel_pair(x, k, first, y, n, column, r)
    FOR_ROWS(FP32_PAIR, rows)
#undef FP32_PAIR
}

/* y [m, n] = x [m, k] . w^T with w packed by pack_panels. Returns 0, or -1 for a shape it does not take. */
int skinny_gemm(const float *x, int64_t m, int64_t k, const float *packed, int64_t n, float *y, int threads) {
    if (m < 1 || k < 1 || n < 1 || threads < 1) return -1;
    const int64_t pairs = packed_floats(n, k) / (2 * PANEL * k);
    if (threads > pairs) threads = (int)pairs;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t pair = 0; pair < pairs; pair++) {
        const float *first = packed + 2 * pair * k * PANEL;
        for (int64_t row = 0; row < m; row += ROWS) { /* 16 rows: 12 + 4 measured faster than 8 + 8 */
            const int rows = m - row < ROWS ? (int)(m - row) : ROWS;
            pair_rows(x + row * k, k, first, y + row * n, n, 2 * pair * PANEL, rows);
        }
    }
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

/* a pair of x's values (k = 2 i, 2 i + 1) as one 32-bit word; a missing odd k reads as zero */
static inline uint32_t x_pair(const uint16_t *row, int64_t i, int64_t k) {
    const uint32_t low = row[2 * i], high = 2 * i + 1 < k ? row[2 * i + 1] : 0;
    return low | high << 16;
}

static inline __attribute__((always_inline)) void panel_pair_bf16(const uint16_t *x, int64_t k,
                                                                  const uint16_t *first, uint16_t *y, int64_t n,
                                                                  int64_t column, const int rows) {
    const int64_t pairs = (k + 1) / 2;
    const uint16_t *second = first + pairs * 2 * PANEL;
    vf a[ROWS], b[ROWS];
#pragma GCC unroll 12
    for (int r = 0; r < rows; r++) a[r] = b[r] = (vf){0};
    for (int64_t i = 0; i < pairs; i++) {
        if (i + PREFETCH_ROWS < pairs) {
            __builtin_prefetch(first + (i + PREFETCH_ROWS) * 2 * PANEL, 0, 0);
            __builtin_prefetch(second + (i + PREFETCH_ROWS) * 2 * PANEL, 0, 0);
        }
#ifdef __AVX512BF16__
        const __m512bh u = (__m512bh)_mm512_loadu_si512(first + i * 2 * PANEL);
        const __m512bh v = (__m512bh)_mm512_loadu_si512(second + i * 2 * PANEL);
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
            const __m512bh value = (__m512bh)_mm512_set1_epi32((int)x_pair(x + r * k, i, k));
            __m512 sa, sb;
            memcpy(&sa, &a[r], sizeof sa);
            memcpy(&sb, &b[r], sizeof sb);
            sa = _mm512_dpbf16_ps(sa, value, u);
            sb = _mm512_dpbf16_ps(sb, value, v);
            memcpy(&a[r], &sa, sizeof sa);
            memcpy(&b[r], &sb, sizeof sb);
        }
#else
        vu raw_u, raw_v;
        memcpy(&raw_u, first + i * 2 * PANEL, sizeof raw_u);
        memcpy(&raw_v, second + i * 2 * PANEL, sizeof raw_v);
        const vf u0 = (vf)(raw_u << 16), u1 = (vf)(raw_u & 0xFFFF0000u);
        const vf v0 = (vf)(raw_v << 16), v1 = (vf)(raw_v & 0xFFFF0000u);
#pragma GCC unroll 12
        for (int r = 0; r < rows; r++) {
            const uint32_t pair = x_pair(x + r * k, i, k), lo = pair << 16, hi = pair & 0xFFFF0000u;
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

static void pair_rows_bf16(const uint16_t *x, int64_t k, const uint16_t *first, uint16_t *y, int64_t n,
                           int64_t column, int rows) {
#define BF16_PAIR(r) panel_pair_bf16(x, k, first, y, n, column, r)
    FOR_ROWS(BF16_PAIR, rows)
#undef BF16_PAIR
}

/* y [m, n] = x [m, k] . w^T in bf16 (fp32 sums, rounded to nearest even), w packed by pack_panels_bf16. */
int skinny_gemm_bf16(const uint16_t *x, int64_t m, int64_t k, const uint16_t *packed, int64_t n, uint16_t *y,
                     int threads) {
    if (m < 1 || k < 1 || n < 1 || threads < 1) return -1;
    const int64_t pair_size = 2 * PANEL * (k + (k & 1)), pairs = packed_halves(n, k) / pair_size;
    if (threads > pairs) threads = (int)pairs;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t pair = 0; pair < pairs; pair++)
        for (int64_t row = 0; row < m; row += ROWS) {
            const int rows = m - row < ROWS ? (int)(m - row) : ROWS;
            pair_rows_bf16(x + row * k, k, packed + pair * pair_size, y + row * n, n, 2 * pair * PANEL, rows);
        }
    return 0;
}
