/* The elementwise work of a decoder layer, each in one pass over its rows: the residual add with the RMS norm that
 * follows it, and SiLU(gate) * up.
 *
 * In torch each is five to seven operations, each a dispatch, an allocation and a pass over memory; at decode sizes
 * (a few rows of 576) the calls cost more than the arithmetic, and a 30-layer step made about 500 of them. The
 * rounding follows Hugging Face's Llama, the reference the engine's greedy output is held to: the norm runs in fp32
 * (x -> fp32, mean of squares, x * rsqrt(mean + eps)), rounds to the model's dtype, then multiplies by the weight in
 * that dtype; the residual add, SiLU and the product with up each round to the model's dtype, as torch's bf16
 * operations do (fp32 arithmetic, then round to nearest even). fp32 models round nowhere.
 */
#include <math.h>

#include "vector.h"

/* Elements below which a pass runs on one thread: waking a second one costs more than the rows take. */
#define PARALLEL_ELEMENTS 32768

static inline int threads_for(int64_t elements, int threads) { return elements < PARALLEL_ELEMENTS ? 1 : threads; }

/* One row: x += delta (when given, rounded to the dtype), then out = dtype(x * rsqrt(mean(x^2) + eps)) * weight.
   dim is a multiple of 16. */
static void residual_norm_row(void *x, const void *delta, const void *weight, void *out, int64_t dim, float eps,
                              int bf16) {
    vf squares = (vf){0};
    for (int64_t c = 0; c < dim; c += LANES) {
        vf value = load16(x, c, bf16);
        if (delta != NULL) {
            value += load16(delta, c, bf16);
            if (bf16) value = round_bf16(value);
            store16(x, c, value, bf16);
        }
        squares += value * value;
    }
    const float scale = 1.f / sqrtf(hsum(squares) / (float)dim + eps);
    for (int64_t c = 0; c < dim; c += LANES) {
        vf normed = load16(x, c, bf16) * scale;
        if (bf16) normed = round_bf16(normed);
        store16(out, c, normed * load16(weight, c, bf16), bf16);
    }
}

/* x [rows, dim] += delta [rows, dim] (delta may be NULL: no add), out [rows, dim] = the RMS norm of x times weight
   [dim]. Returns 0, or -1 for a shape it does not take. */
int residual_rms_norm(void *x, const void *delta, const void *weight, void *out, int64_t rows, int64_t dim,
                      float eps, int bf16, int threads) {
    if (rows < 0 || dim < LANES || dim % LANES != 0 || threads < 1) return -1;
    const int64_t row_bytes = dim * (bf16 ? 2 : 4);
#pragma omp parallel for num_threads(threads_for(rows * dim, threads)) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        residual_norm_row((char *)x + r * row_bytes, delta ? (const char *)delta + r * row_bytes : NULL, weight,
                          (char *)out + r * row_bytes, dim, eps, bf16);
    return 0;
}

/* x / (1 + e^-x) for 16 lanes, with e^-|x| only (exp_vec takes arguments <= 0): x >= 0 gives x / (1 + t), x < 0
   gives x t / (1 + t), t = e^-|x|. Below -88 torch's e^-x overflows to infinity and its SiLU gives -0: so here. */
static inline vf silu_vec(vf x) {
    const vi negative = x < 0;
    const vf magnitude = pick(negative, (vf){0} - x, x);
    const vf t = exp_vec((vf){0} - magnitude);
    const vf value = pick(negative, x * t, x) / (1.f + t);
    return pick(negative & (magnitude > 88.f), x * 0.f, value);
}

/* out [rows, inner] = dtype(silu(gate)) * up, where gate_up [rows, 2 inner] holds gate then up in each row. inner is
   a multiple of 16. */
int silu_and_mul(const void *gate_up, void *out, int64_t rows, int64_t inner, int bf16, int threads) {
    if (rows < 0 || inner < LANES || inner % LANES != 0 || threads < 1) return -1;
#pragma omp parallel for num_threads(threads_for(rows * inner, threads)) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < inner; c += LANES) {
            vf gate = silu_vec(load16(gate_up, r * 2 * inner + c, bf16));
            if (bf16) gate = round_bf16(gate);
            store16(out, r * inner + c, gate * load16(gate_up, r * 2 * inner + inner + c, bf16), bf16);
        }
    return 0;
}
