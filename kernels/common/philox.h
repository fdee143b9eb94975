/* Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
   SC 2011), a counter-based generator: every backend draws the same numbers from a counter and
   a key without state. Flash attention's dropout draws its mask from (seed, sequence, head,
   query, key) with it, forward and backward alike; random inputs (fill.cl, fill.comp and the
   host's fill_uniform) draw their values from (element / 4, seed).

   This file is the definition. It is written in the subset that C/C++, OpenCL C and GLSL
   (Vulkan, #extension GL_GOOGLE_include_directive) share, with the few language differences
   behind macros, so each backend includes this very text rather than a copy.

   Bit-exact algorithm (for a port to any other language):
     round(c, k):  (hi0, lo0) = 0xD2511F53 * c.x   (full 64-bit product of two u32)
                   (hi1, lo1) = 0xCD9E8D57 * c.z
                   c = (hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0)
     philox4x32_10(c, k): 10 times { c = round(c, k); k.x += 0x9E3779B9; k.y += 0xBB67AE85 }
       (all arithmetic modulo 2^32; the key bump after the 10th round is unused)
     Element (seq, head, q, k) of a call with seed S, where seq is the batch index (or the
     sequence index of packed variable-length input), head the query head, q and k positions
     within that sequence:
       r = philox4x32_10((k / 4, q, head, seq), (S mod 2^32, S / 2^32))
       word = r.x, r.y, r.z or r.w for k % 4 = 0, 1, 2, 3
       kept  iff  word >= threshold,  threshold = min(floor(p * 2^32), 2^32 - 1) computed by the
       host in double precision (ejk::kernels::flash_attention::dropout_threshold); kept
       probabilities are multiplied by 1 / (1 - p), dropped ones by 0.
   Known answers (Random123's kat_vectors), checked by tests/flash_attention_test.cpp:
     ctr (0, 0, 0, 0), key (0, 0)                   -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8
     ctr (ffffffff x4), key (ffffffff, ffffffff)    -> 408f276d 41c83b0e a20bc7c6 6d5451fd
     ctr (243f6a88 85a308d3 13198a2e 03707344),
     key (a4093822 299f31d0)                        -> d16cfe09 94fdcceb 5001e420 24126ea1 */
#ifndef EJK_COMMON_PHILOX_H
#define EJK_COMMON_PHILOX_H

#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
#define EJK_U32 uint
#define EJK_U32X4 uint4
#define EJK_FN
#define ejk_make4(a, b, c, d) ((uint4)((a), (b), (c), (d)))
EJK_FN EJK_U32 ejk_mulhi32(EJK_U32 a, EJK_U32 b) { return mul_hi(a, b); }
#elif defined(VULKAN) || defined(GL_SPIRV) || defined(GL_core_profile) || defined(GL_ES)
#define EJK_U32 uint
#define EJK_U32X4 uvec4
#define EJK_FN
#define ejk_make4(a, b, c, d) uvec4((a), (b), (c), (d))
EJK_FN EJK_U32 ejk_mulhi32(EJK_U32 a, EJK_U32 b) {
  uint hi;
  uint lo;
  umulExtended(a, b, hi, lo);
  return hi;
}
#else
#include <stdint.h>
#define EJK_U32 uint32_t
#define EJK_U32X4 ejk_u32x4
/* Internal linkage: the CPU kernels are built once per ISA with different flags. */
#define EJK_FN static inline
typedef struct ejk_u32x4 {
  uint32_t x, y, z, w;
} ejk_u32x4;
EJK_FN ejk_u32x4 ejk_make4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  ejk_u32x4 r;
  r.x = a;
  r.y = b;
  r.z = c;
  r.w = d;
  return r;
}
EJK_FN uint32_t ejk_mulhi32(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * (uint64_t)b) >> 32); }
#endif

EJK_FN EJK_U32X4 ejk_philox4x32_10(EJK_U32X4 c, EJK_U32 k0, EJK_U32 k1) {
  for (int i = 0; i < 10; ++i) {
    EJK_U32 hi0 = ejk_mulhi32(0xD2511F53u, c.x);
    EJK_U32 lo0 = 0xD2511F53u * c.x;
    EJK_U32 hi1 = ejk_mulhi32(0xCD9E8D57u, c.z);
    EJK_U32 lo1 = 0xCD9E8D57u * c.z;
    c = ejk_make4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

/* The four words of key positions 4*(k/4) .. 4*(k/4)+3: one generator call serves four keys. */
EJK_FN EJK_U32X4 ejk_dropout_words(EJK_U32 seq, EJK_U32 head, EJK_U32 q, EJK_U32 k, EJK_U32 seed_lo, EJK_U32 seed_hi) {
  return ejk_philox4x32_10(ejk_make4(k >> 2, q, head, seq), seed_lo, seed_hi);
}

EJK_FN EJK_U32 ejk_pick_word(EJK_U32X4 r, EJK_U32 k) {
  EJK_U32 lane = k & 3u;
  return lane == 0u ? r.x : (lane == 1u ? r.y : (lane == 2u ? r.z : r.w));
}

/* 1 when element (seq, head, q, k) is kept, 0 when dropped. */
EJK_FN EJK_U32 ejk_dropout_keep(EJK_U32 seq, EJK_U32 head, EJK_U32 q, EJK_U32 k, EJK_U32 seed_lo, EJK_U32 seed_hi,
                                EJK_U32 threshold) {
  EJK_U32 word = ejk_pick_word(ejk_dropout_words(seq, head, q, k, seed_lo, seed_hi), k);
  return word >= threshold ? 1u : 0u;
}

#endif
