/* Vector helpers shared by the attention kernels: 16-float vectors (GCC vector extensions, so an AVX2 build
 * splits them in two), bf16 loads and round-to-nearest-even stores, a pairwise horizontal sum and e^x. */
#ifndef TRTKIT_VECTOR_H
#define TRTKIT_VECTOR_H

#include <stdint.h>
#if defined(__AVX512F__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif
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
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef int32_t vi4 __attribute__((vector_size(16)));
typedef uint32_t vu __attribute__((vector_size(64)));
typedef uint16_t vh __attribute__((vector_size(32)));


static inline vf load16(const void *base, int64_t offset, int bf16) {
    vf r;
    if (bf16) {
#ifdef __AVX512F__
        /* one zero-extend and one shift; the generic conversion below compiles to four shuffles more */
        const __m512i bits = _mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + offset))), 16);
        memcpy(&r, &bits, sizeof r);
#else
        vh half;
        memcpy(&half, (const uint16_t *)base + offset, sizeof half);
        vu bits = __builtin_convertvector(half, vu) << 16;
        memcpy(&r, &bits, sizeof r);
#endif
    } else {
        memcpy(&r, (const float *)base + offset, sizeof r);
    }
    return r;
}

static inline float to_float(const void *base, int64_t index, int bf16) {
    if (!bf16) return ((const float *)base)[index];
    uint32_t bits = (uint32_t)((const uint16_t *)base)[index] << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* round to nearest even, as torch rounds float to bfloat16 */
static inline uint16_t bf16_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

static inline void store1(void *base, int64_t index, float value, int bf16) {
    if (bf16) ((uint16_t *)base)[index] = bf16_bits(value);
    else ((float *)base)[index] = value;
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

/* Unaligned vector loads and stores of float memory (vector types alias their element type). */
typedef float vf_unaligned __attribute__((vector_size(64), aligned(4), may_alias));

static inline vf load_floats(const float *p) { return *(const vf_unaligned *)p; }
static inline void store_floats(float *p, vf v) { *(vf_unaligned *)p = v; }

/* the largest of v's lanes, by a halving tree */
static inline float hmax(vf v) {
    vf8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
    vf8 b = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    a = (vf8)(((a > b) & (vi8)a) | (~(a > b) & (vi8)b));
    vf4 c = __builtin_shufflevector(a, a, 0, 1, 2, 3), d = __builtin_shufflevector(a, a, 4, 5, 6, 7);
    c = (vf4)(((c > d) & (vi4)c) | (~(c > d) & (vi4)d));
    const float x = c[0] > c[1] ? c[0] : c[1], y = c[2] > c[3] ? c[2] : c[3];
    return x > y ? x : y;
}

/* lane by lane: yes where mask is set, else no */
static inline vf pick(vi mask, vf yes, vf no) { return (vf)((mask & (vi)yes) | (~mask & (vi)no)); }

/* A prefetch into L2 that the compiler keeps: GCC 12 deletes a loop whose body is only __builtin_prefetch calls
   (it has no side effects to the optimizer), which silently left the attention walk with no prefetch at all. */
static inline void prefetch_l2(const void *address) {
#if defined(__x86_64__)
    __asm__ volatile("prefetcht1 %0" : : "m"(*(const char *)address));
#else
    __builtin_prefetch(address, 0, 2);
#endif
}

/* a vector of 16 values rounded to bf16 and back (round to nearest even), as a bf16 store and load would */
static inline vf round_bf16(vf value) {
    vu bits;
    memcpy(&bits, &value, sizeof bits);
    bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* 16 values stored in the dtype (bf16: rounded to nearest even, as torch rounds) */
static inline void store16(void *base, int64_t offset, vf value, int bf16) {
    if (bf16) {
        vu bits;
        memcpy(&bits, &value, sizeof bits);
        const vh half = __builtin_convertvector((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16, vh);
        memcpy((uint16_t *)base + offset, &half, sizeof half);
    } else {
        memcpy((float *)base + offset, &value, sizeof value);
    }
}

static inline float bf16_round(float value) {
    const uint32_t bits = (uint32_t)bf16_bits(value) << 16;
    memcpy(&value, &bits, sizeof value);
    return value;
}

#endif
