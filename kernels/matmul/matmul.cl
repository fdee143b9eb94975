// matmul: C = alpha * op(A) * op(B) + beta * C, row-major, batched over get_group_id(2).
//
// A tiled GEMM after CLBlast's xgemm. A workgroup of NDIMC x MDIMC work-items computes an
// MWG x NWG tile of C (MWG = MDIMC * MWI, NWG = NDIMC * NWI); each work-item holds MWI x NWI
// accumulators as MWI rows of NWI / VWN vectors. K is walked in chunks of KWG; with SA / SB
// a chunk of A / B is first staged in local memory (converted to f32), else it is read from
// global memory in the inner loop. Storage is f32, f16 (vload_half, no cl_khr_fp16 needed)
// or bf16 (ushort bits); arithmetic is always f32.
//
// Defines (all required):
//   DTYPE 0 f32, 1 f16, 2 bf16        TRANS_A, TRANS_B 0/1: A is [K][M] / B is [N][K]
//   MDIMC NDIMC  work-items along m / n          MWI NWI  accumulators per work-item
//   KWG  k chunk    KWI  k steps unrolled       VWM VWN  vector widths along m (A) / n (B, C)
//   SA SB  stage A / B in local memory          PF  1: fetch the next staged chunk into
//          registers while the current one is multiplied
//   STRM STRN  1: a work-item's vectors are
//          strided by MDIMC / NDIMC vectors (coalesced), 0: contiguous
//   ALIGN_A ALIGN_B ALIGN_C  leading dimensions and batch strides are multiples of the
//          vector width, so vectors may be read through aligned vector pointers
//   ORDER  0: consecutive workgroups step along n, 1: along m
//   IDX  int or long: wide enough for every element offset within one batch entry
//   FMA  1: fma() is done in hardware (CL_FP_FMA), so accumulate with it; 0: mad()
//
// Edges: workgroups whose tile reaches past M or N take the `edge` path, which clamps row
// and column indices (loads stay in bounds; the extra results are never stored) and checks
// stores. K is walked in whole chunks and the remainder (K % KWG) one step at a time, so no
// product ever reads past K. With beta == 0, C is not read.

#define MWG (MDIMC * MWI)
#define NWG (NDIMC * NWI)
#define MV (MWI / VWM)
#define NV (NWI / VWN)
#define THREADS (MDIMC * NDIMC)

#if FMA
#define MAC(a, b, c) fma(a, b, c)
#else
#define MAC(a, b, c) mad(a, b, c)
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#define VEC_1(t) t
#define VEC_2(t) t##2
#define VEC_4(t) t##4
#define VEC_8(t) t##8
#define VEC_16(t) t##16
#define VEC(t, w) CAT(VEC_, w)(t)

typedef VEC(float, VWM) floatM;
typedef VEC(float, VWN) floatN;

// Scalars of a vector into an array (dst[o..o+w)), and back.
#define UNPACK_1(d, o, v) d[o] = (v);
#define UNPACK_2(d, o, v) d[o] = (v).s0; d[(o) + 1] = (v).s1;
#define UNPACK_4(d, o, v) UNPACK_2(d, o, (v).lo) UNPACK_2(d, (o) + 2, (v).hi)
#define UNPACK_8(d, o, v) UNPACK_4(d, o, (v).lo) UNPACK_4(d, (o) + 4, (v).hi)
#define UNPACK_16(d, o, v) UNPACK_8(d, o, (v).lo) UNPACK_8(d, (o) + 8, (v).hi)
#define UNPACK(w, d, o, v) CAT(UNPACK_, w)(d, o, v)

// Vectors are built from scalars, not from halves: clang joins halves with widening shuffles
// whose undefined lanes Oclgrind's uninitialised-value checker cannot follow.
#define PACK_1(s, o) (s[o])
#define PACK_2(s, o) ((float2)(s[o], s[(o) + 1]))
#define S4(s, o) s[o], s[(o) + 1], s[(o) + 2], s[(o) + 3]
#define PACK_4(s, o) ((float4)(S4(s, o)))
#define PACK_8(s, o) ((float8)(S4(s, o), S4(s, (o) + 4)))
#define PACK_16(s, o) ((float16)(S4(s, o), S4(s, (o) + 4), S4(s, (o) + 8), S4(s, (o) + 12)))
#define PACK(w, s, o) CAT(PACK_, w)(s, o)

// ---- storage types: LD1/ST1 one element, VLOAD_w/VSTORE_w a vector at any element offset,
// ---- VLOADA_w/VSTOREA_w a vector at an offset that is a multiple of w
#if DTYPE == 0
typedef float real_t;
#define LD1(p, i) ((p)[i])
#define ST1(v, p, i) ((p)[i] = (v))
#define VLOAD_N(w, p, i) CAT(vload, w)(0, (p) + (i))
#define VSTORE_N(w, v, p, i) CAT(vstore, w)((v), 0, (p) + (i))
#define VLOADA_N(w, p, i) (*(const __global VEC(float, w)*)((p) + (i)))
#define VSTOREA_N(w, v, p, i) (*(__global VEC(float, w)*)((p) + (i)) = (v))
#elif DTYPE == 1
typedef half real_t;
#define LD1(p, i) vload_half((i), (p))
#define ST1(v, p, i) vstore_half_rte((v), (i), (p))
#define VLOAD_N(w, p, i) CAT(vload_half, w)(0, (p) + (i))
#define VSTORE_N(w, v, p, i) CAT(CAT(vstore_half, w), _rte)((v), 0, (p) + (i))
#define VLOADA_N(w, p, i) CAT(vloada_half, w)(0, (p) + (i))
#define VSTOREA_N(w, v, p, i) CAT(CAT(vstorea_half, w), _rte)((v), 0, (p) + (i))
#elif DTYPE == 2
typedef ushort real_t;
// f32 -> bf16 rounding to nearest even; NaNs stay quiet NaNs.
inline ushort bf16_1(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
#define BF16_VEC(w)                                                                        \
  inline VEC(ushort, w) CAT(bf16_, w)(VEC(float, w) f) {                                   \
    VEC(uint, w) u = CAT(as_uint, w)(f);                                                   \
    VEC(uint, w) r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;                               \
    VEC(uint, w) q = (u >> 16) | 0x40u;                                                    \
    return CAT(convert_ushort, w)(select(r, q, CAT(as_uint, w)((u & 0x7fffffffu) > 0x7f800000u))); \
  }
BF16_VEC(2)
BF16_VEC(4)
BF16_VEC(8)
BF16_VEC(16)
#define BF16_TO_F32(w, x) CAT(as_float, w)(CAT(convert_uint, w)(x) << 16)
#define LD1(p, i) as_float((uint)(p)[i] << 16)
#define ST1(v, p, i) ((p)[i] = bf16_1(v))
#define VLOAD_N(w, p, i) BF16_TO_F32(w, CAT(vload, w)(0, (p) + (i)))
#define VSTORE_N(w, v, p, i) CAT(vstore, w)(CAT(bf16_, w)(v), 0, (p) + (i))
#define VLOADA_N(w, p, i) BF16_TO_F32(w, *(const __global VEC(ushort, w)*)((p) + (i)))
#define VSTOREA_N(w, v, p, i) (*(__global VEC(ushort, w)*)((p) + (i)) = CAT(bf16_, w)(v))
#endif

// Width 1 is a plain element access for every storage type.
#define VLOAD_1(p, i) LD1(p, i)
#define VSTORE_1(v, p, i) ST1(v, p, i)
#define VLOAD_2(p, i) VLOAD_N(2, p, i)
#define VLOAD_4(p, i) VLOAD_N(4, p, i)
#define VLOAD_8(p, i) VLOAD_N(8, p, i)
#define VLOAD_16(p, i) VLOAD_N(16, p, i)
#define VSTORE_2(v, p, i) VSTORE_N(2, v, p, i)
#define VSTORE_4(v, p, i) VSTORE_N(4, v, p, i)
#define VSTORE_8(v, p, i) VSTORE_N(8, v, p, i)
#define VSTORE_16(v, p, i) VSTORE_N(16, v, p, i)
#define VLOADA_1(p, i) LD1(p, i)
#define VSTOREA_1(v, p, i) ST1(v, p, i)
#define VLOADA_2(p, i) VLOADA_N(2, p, i)
#define VLOADA_4(p, i) VLOADA_N(4, p, i)
#define VLOADA_8(p, i) VLOADA_N(8, p, i)
#define VLOADA_16(p, i) VLOADA_N(16, p, i)
#define VSTOREA_2(v, p, i) VSTOREA_N(2, v, p, i)
#define VSTOREA_4(v, p, i) VSTOREA_N(4, v, p, i)
#define VSTOREA_8(v, p, i) VSTOREA_N(8, v, p, i)
#define VSTOREA_16(v, p, i) VSTOREA_N(16, v, p, i)

#if ALIGN_A
#define LOAD_A(p, i) CAT(VLOADA_, VWM)(p, i)
#else
#define LOAD_A(p, i) CAT(VLOAD_, VWM)(p, i)
#endif
#if ALIGN_B
#define LOAD_B(p, i) CAT(VLOADA_, VWN)(p, i)
#else
#define LOAD_B(p, i) CAT(VLOAD_, VWN)(p, i)
#endif
#if ALIGN_C
#define LOAD_C(p, i) CAT(VLOADA_, VWN)(p, i)
#define STORE_C(v, p, i) CAT(VSTOREA_, VWN)(v, p, i)
#else
#define LOAD_C(p, i) CAT(VLOAD_, VWN)(p, i)
#define STORE_C(v, p, i) CAT(VSTORE_, VWN)(v, p, i)
#endif

// Element offsets of A(m, k) and B(k, n) within one batch entry.
#if TRANS_A
#define A_AT(m, k) ((IDX)(k) * lda + (m))
#else
#define A_AT(m, k) ((IDX)(m) * lda + (k))
#endif
#if TRANS_B
#define B_AT(k, n) ((IDX)(n) * ldb + (k))
#else
#define B_AT(k, n) ((IDX)(k) * ldb + (n))
#endif

// Position (in vectors) of a work-item's i-th A vector / j-th B and C vector in the tile.
#if STRM
#define AVEC(i) ((i) * MDIMC + tm)
#else
#define AVEC(i) (tm * MV + (i))
#endif
#if STRN
#define BVEC(j) ((j) * NDIMC + tn)
#else
#define BVEC(j) (tn * NV + (j))
#endif

#define LOADS_A (KWG * MWG / VWM / THREADS)
#define LOADS_B (KWG * NWG / VWN / THREADS)

// A workgroup of one work-item needs no barriers around its staging, and CPU drivers turn
// barriers into loops that keep every private variable in memory, so there are none then.
//
// Staging: work-item tid moves vectors tid, tid + THREADS, ... of a chunk. fetch_* reads the
// l-th from global memory (clamped at the edges), put_* writes it into local memory as f32,
// k-major; the two are separate so that PF can hold the next chunk in registers meanwhile.
#if SA
inline floatM fetch_a(const int edge, const __global real_t* restrict A, const int lda, const int M, const int m0,
                      const int k0, const int tid, const int l) {
  const int idx = tid + l * THREADS;
#if TRANS_A
  // A is [K][M]: a k-row of the chunk is MWG / VWM vectors along m.
  const int kk = idx / (MWG / VWM), mv = idx % (MWG / VWM);
  const IDX base = (IDX)(k0 + kk) * lda;
  if (edge) {
    float t[VWM];
#pragma unroll
    for (int q = 0; q < VWM; ++q) t[q] = LD1(A, base + min(m0 + mv * VWM + q, M - 1));
    return PACK(VWM, t, 0);
  }
  return LOAD_A(A, base + m0 + mv * VWM);
#else
  // A is [M][K]: vectors along k, one row at a time.
  const int mm = idx / (KWG / VWM), kv = idx % (KWG / VWM);
  const int row = edge ? min(m0 + mm, M - 1) : m0 + mm;
  return LOAD_A(A, (IDX)row * lda + k0 + kv * VWM);
#endif
}

inline void put_a(__local floatM* alm, const int tid, const int l, const floatM v) {
  const int idx = tid + l * THREADS;
#if TRANS_A
  alm[idx] = v;
#else
  const int mm = idx / (KWG / VWM), kv = idx % (KWG / VWM);
  float t[VWM];
  UNPACK(VWM, t, 0, v)
  __local float* s = (__local float*)alm;
#pragma unroll
  for (int q = 0; q < VWM; ++q) s[(kv * VWM + q) * MWG + mm] = t[q];
#endif
}
#endif

#if SB
inline floatN fetch_b(const int edge, const __global real_t* restrict B, const int ldb, const int N, const int n0,
                      const int k0, const int tid, const int l) {
  const int idx = tid + l * THREADS;
#if !TRANS_B
  // B is [K][N]: a k-row of the chunk is NWG / VWN vectors along n.
  const int kk = idx / (NWG / VWN), nv = idx % (NWG / VWN);
  const IDX base = (IDX)(k0 + kk) * ldb;
  if (edge) {
    float t[VWN];
#pragma unroll
    for (int q = 0; q < VWN; ++q) t[q] = LD1(B, base + min(n0 + nv * VWN + q, N - 1));
    return PACK(VWN, t, 0);
  }
  return LOAD_B(B, base + n0 + nv * VWN);
#else
  // B is [N][K]: vectors along k, one column of op(B) at a time.
  const int nn = idx / (KWG / VWN), kv = idx % (KWG / VWN);
  const int col = edge ? min(n0 + nn, N - 1) : n0 + nn;
  return LOAD_B(B, (IDX)col * ldb + k0 + kv * VWN);
#endif
}

inline void put_b(__local floatN* blm, const int tid, const int l, const floatN v) {
  const int idx = tid + l * THREADS;
#if !TRANS_B
  blm[idx] = v;
#else
  const int nn = idx / (KWG / VWN), kv = idx % (KWG / VWN);
  float t[VWN];
  UNPACK(VWN, t, 0, v)
  __local float* s = (__local float*)blm;
#pragma unroll
  for (int q = 0; q < VWN; ++q) s[(kv * VWN + q) * NWG + nn] = t[q];
#endif
}
#endif

// A read in place from [M][K] storage in f16: a scalar vload_half is a software conversion
// on some CPU drivers, so rows are read KWI elements at a time.
#define A_ROWS (DTYPE == 1 && !SA && !TRANS_A && KWI > 1)

// Row i and column j of a work-item's accumulators, clamped into the matrix. Expressions
// rather than arrays, so they cost no registers where they are not used.
#define ROWC(i) min(m0 + AVEC((i) / VWM) * VWM + (i) % VWM, M - 1)
#define COLC(j) min(n0 + BVEC((j) / VWN) * VWN + (j) % VWN, N - 1)

// One workgroup tile. Called with a literal `edge`, so each call inlines into its own copy.
inline void gemm_tile(const int edge, const int M, const int N, const int K, const float alpha, const float beta,
                      const __global real_t* restrict A, const int lda, const __global real_t* restrict B,
                      const int ldb, __global real_t* C, const int ldc, __local floatM* alm, __local floatN* blm,
                      const int m0, const int n0, const int tm, const int tn) {
  const int tid = tn + tm * NDIMC;
  (void)tid;
  (void)alm;
  (void)blm;

  floatN acc[MWI][NV];
#pragma unroll
  for (int i = 0; i < MWI; ++i)
#pragma unroll
    for (int j = 0; j < NV; ++j) acc[i][j] = (floatN)0.0f;

  const int chunks = K / KWG;
#if PF && SA
  floatM pa[LOADS_A];
  if (chunks > 0) {
#pragma unroll
    for (int l = 0; l < LOADS_A; ++l) pa[l] = fetch_a(edge, A, lda, M, m0, 0, tid, l);
  }
#endif
#if PF && SB
  floatN pb[LOADS_B];
  if (chunks > 0) {
#pragma unroll
    for (int l = 0; l < LOADS_B; ++l) pb[l] = fetch_b(edge, B, ldb, N, n0, 0, tid, l);
  }
#endif
  for (int kc = 0; kc < chunks; ++kc) {
    const int k0 = kc * KWG;
#if SA
#if PF
#pragma unroll
#endif
    for (int l = 0; l < LOADS_A; ++l) {
#if PF
      put_a(alm, tid, l, pa[l]);
#else
      put_a(alm, tid, l, fetch_a(edge, A, lda, M, m0, k0, tid, l));
#endif
    }
#endif
#if SB
#if PF
#pragma unroll
#endif
    for (int l = 0; l < LOADS_B; ++l) {
#if PF
      put_b(blm, tid, l, pb[l]);
#else
      put_b(blm, tid, l, fetch_b(edge, B, ldb, N, n0, k0, tid, l));
#endif
    }
#endif
#if (SA || SB) && THREADS > 1
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
#if PF
    // The next chunk's global loads are in flight while this one is multiplied.
    if (kc + 1 < chunks) {
#if SA
#pragma unroll
      for (int l = 0; l < LOADS_A; ++l) pa[l] = fetch_a(edge, A, lda, M, m0, k0 + KWG, tid, l);
#endif
#if SB
#pragma unroll
      for (int l = 0; l < LOADS_B; ++l) pb[l] = fetch_b(edge, B, ldb, N, n0, k0 + KWG, tid, l);
#endif
    }
#endif
    for (int kk = 0; kk < KWG; kk += KWI) {
#if A_ROWS
      // KWI values of each row at once: one vector conversion instead of KWI scalar ones.
      float ar[MWI][KWI];
#pragma unroll
      for (int i = 0; i < MWI; ++i) {
        const VEC(float, KWI) v = CAT(VLOAD_, KWI)(A, A_AT(ROWC(i), k0 + kk));
        UNPACK(KWI, ar[i], 0, v)
      }
#endif
#pragma unroll
      for (int ku = 0; ku < KWI; ++ku) {
        const int k = kk + ku;
        float a[MWI];
        floatN b[NV];
#if SA
#pragma unroll
        for (int iv = 0; iv < MV; ++iv) {
          const floatM v = alm[k * (MWG / VWM) + AVEC(iv)];
          UNPACK(VWM, a, iv * VWM, v)
        }
#elif TRANS_A
#pragma unroll
        for (int iv = 0; iv < MV; ++iv) {
          floatM v;
          if (edge) {
            float t[VWM];
#pragma unroll
            for (int q = 0; q < VWM; ++q) t[q] = LD1(A, A_AT(ROWC(iv * VWM + q), k0 + k));
            v = PACK(VWM, t, 0);
          } else {
            v = LOAD_A(A, A_AT(m0 + AVEC(iv) * VWM, k0 + k));
          }
          UNPACK(VWM, a, iv * VWM, v)
        }
#elif A_ROWS
#pragma unroll
        for (int i = 0; i < MWI; ++i) a[i] = ar[i][ku];
#else
#pragma unroll
        for (int i = 0; i < MWI; ++i) a[i] = LD1(A, A_AT(ROWC(i), k0 + k));
#endif
#if SB
#pragma unroll
        for (int jv = 0; jv < NV; ++jv) b[jv] = blm[k * (NWG / VWN) + BVEC(jv)];
#elif TRANS_B
#pragma unroll
        for (int jv = 0; jv < NV; ++jv) {
          float t[VWN];
#pragma unroll
          for (int q = 0; q < VWN; ++q) t[q] = LD1(B, B_AT(k0 + k, COLC(jv * VWN + q)));
          b[jv] = PACK(VWN, t, 0);
        }
#else
#pragma unroll
        for (int jv = 0; jv < NV; ++jv) {
          if (edge) {
            float t[VWN];
#pragma unroll
            for (int q = 0; q < VWN; ++q) t[q] = LD1(B, B_AT(k0 + k, COLC(jv * VWN + q)));
            b[jv] = PACK(VWN, t, 0);
          } else {
            b[jv] = LOAD_B(B, B_AT(k0 + k, n0 + BVEC(jv) * VWN));
          }
        }
#endif
#pragma unroll
        for (int i = 0; i < MWI; ++i)
#pragma unroll
          for (int j = 0; j < NV; ++j) acc[i][j] = MAC((floatN)a[i], b[j], acc[i][j]);
      }
    }
#if (SA || SB) && THREADS > 1
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
  }

  // The last K % KWG steps, straight from global memory.
  for (int k = chunks * KWG; k < K; ++k) {
    float a[MWI];
    floatN b[NV];
#pragma unroll
    for (int i = 0; i < MWI; ++i) a[i] = LD1(A, A_AT(ROWC(i), k));
#pragma unroll
    for (int jv = 0; jv < NV; ++jv) {
      float t[VWN];
#pragma unroll
      for (int q = 0; q < VWN; ++q) t[q] = LD1(B, B_AT(k, COLC(jv * VWN + q)));
      b[jv] = PACK(VWN, t, 0);
    }
#pragma unroll
    for (int i = 0; i < MWI; ++i)
#pragma unroll
      for (int j = 0; j < NV; ++j) acc[i][j] = MAC((floatN)a[i], b[j], acc[i][j]);
  }

  // C = alpha * acc + beta * C; C is not read when beta == 0, so garbage there is overwritten.
#pragma unroll
  for (int iv = 0; iv < MV; ++iv)
#pragma unroll
    for (int q = 0; q < VWM; ++q) {
      const int i = iv * VWM + q;
      const int row = m0 + AVEC(iv) * VWM + q;
      if (edge && row >= M) continue;
#pragma unroll
      for (int jv = 0; jv < NV; ++jv) {
        const int col = n0 + BVEC(jv) * VWN;
        const IDX at = (IDX)row * ldc + col;
        const floatN r = alpha * acc[i][jv];
        if (!edge) {
          if (beta != 0.0f)
            STORE_C(mad((floatN)beta, LOAD_C(C, at), r), C, at);
          else
            STORE_C(r, C, at);
        } else {
          float t[VWN];
          UNPACK(VWN, t, 0, r)
#pragma unroll
          for (int q2 = 0; q2 < VWN; ++q2)
            if (col + q2 < N) {
              const float x = beta != 0.0f ? mad(beta, LD1(C, at + q2), t[q2]) : t[q2];
              ST1(x, C, at + q2);
            }
        }
      }
    }
}

__kernel __attribute__((reqd_work_group_size(NDIMC, MDIMC, 1))) void xgemm(
    const int M, const int N, const int K, const float alpha, const float beta, const __global real_t* restrict A,
    const int lda, const long stride_a, const __global real_t* restrict B, const int ldb, const long stride_b,
    __global real_t* C, const int ldc, const long stride_c) {
  const int tn = get_local_id(0), tm = get_local_id(1);
#if ORDER
  // Consecutive workgroups walk down a column of tiles, so the B panel they share stays in
  // cache; the launch grid is the same.
  const int g = get_group_id(0) + get_group_id(1) * get_num_groups(0);
  const int n0 = (g / get_num_groups(1)) * NWG, m0 = (g % get_num_groups(1)) * MWG;
#else
  const int n0 = get_group_id(0) * NWG, m0 = get_group_id(1) * MWG;
#endif
  const long batch = get_group_id(2);
  A += batch * stride_a;
  B += batch * stride_b;
  C += batch * stride_c;
#if SA
  __local floatM alm[KWG * MWG / VWM];
#else
  __local floatM* alm = 0;
#endif
#if SB
  __local floatN blm[KWG * NWG / VWN];
#else
  __local floatN* blm = 0;
#endif
  if (m0 + MWG <= M && n0 + NWG <= N)
    gemm_tile(0, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc, alm, blm, m0, n0, tm, tn);
  else
    gemm_tile(1, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc, alm, blm, m0, n0, tm, tn);
}
