// flash attention backward on Hopper's warpgroup tensor cores (sm_90a), f16 or bf16 with f32
// accumulation, in three launches:
//   ejk_fa_bwd_prep: per query row, D_i = dout_i . out_i and lse_i in base 2, into one padded
//     array a (sequence, head) (rows past seq_q: D 0, lse +inf, so that P is 0 there), and the f32
//     dq accumulator zeroed;
//   ejk_fa_bwd_wgmma: a block owns 64 * CW keys of one (sequence, kv head) and walks the query
//     blocks of every query head of its group that the mask lets see them. Its first warpgroup
//     copies K and V once and Q and dout blocks of BQ = 64 rows, with their rows' lse and D, into
//     a STAGES-deep ring by TMA.
//     Consumer warpgroup c owns 64 keys and computes, keys as rows: S^T = K Q^T and
//     dP^T = V dout^T (wgmma from shared memory), P^T from the saved lse, dS^T = P^T (dP^T - D),
//     then dV += P^T dout and dK += dS^T Q with P^T and dS^T straight from registers, and
//     dQ += dS K from dS^T written to shared memory (read M-major). Its dQ block goes to shared
//     memory in the accumulator's register order and is added to the f32 accumulator by one bulk
//     reduction (TMA), so the accumulator is kept in that order, a 64 x D block at a time. dK and
//     dV stay in registers until the end: no atomics on them;
//   ejk_fa_bwd_dq: dq = softmax_scale * the accumulator, in the storage dtype and dq's layout.
// The logits are in base 2 with the scale folded in (program_options), as in the forward.
//
// Build options (kernels/flash_attention/cuda.cpp): D (64, 128) CW STAGES SOFTCAP BF16.

#include "common/hopper.cuh"
#include "common/wgmma.cuh"

#define BQ 64
#define BK (64 * CW)
#define THREADS ((CW + 1) * 128)
#define CHUNKS (D / 64)
#define Q_CHUNK (BQ * 128)  // bytes of one 64-wide head_dim chunk of a Q or dout block
#define K_CHUNK (BK * 128)  // of the K or V tile
#define Q_BYTES (CHUNKS * Q_CHUNK)
#define K_BYTES (CHUNKS * K_CHUNK)
#define DS_BYTES (64 * BQ * 2)  // one consumer's dS^T, 64 keys x BQ queries
#define STATS_BYTES (BQ * 4)     // a block's lse (base 2) or D
#define DQ_BYTES (BQ * D * 4)     // one consumer's dQ block

// Where element (q, d) of a query block's dQ sits in the accumulator's order: thread (warp w,
// lane 4g + t) holds rows 16w + g + 8 half and columns 8j + 2t + e as one float2 a (half, j).
__device__ __forceinline__ int dq_slot(int q, int d) {
  const int w = q / 16, half = (q % 16) / 8, g = q % 8, j = d / 8, t = (d % 8) / 2;
  return ((half * 4 + w) * (D / 8) + j) * 64 + (4 * g + t) * 2 + d % 2;
}

struct Params {
  int batch, seq_q, seq_k, heads, group;
  int window_left, window_right;  // -1: unbounded; a causal mask is window_right 0
  int diagonal;                   // seq_k - seq_q + diagonal_offset
  float qscale, cap2;             // logits in base 2 (program_options)
  float scale;                    // softmax_scale: the gradients of q and k
};

// Named barrier of one consumer warpgroup (id 0 is __syncthreads').
__device__ __forceinline__ void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// One warp a padded query row (b, i, h): stats[(b * heads + h) * 2 * seq_pad + i] holds lse_i in
// base 2 and seq_pad further D_i = sum dout * out; D floats of the dq accumulator are zeroed.
extern "C" __global__ void __launch_bounds__(256)
    ejk_fa_bwd_prep(const elem_t* __restrict__ out, const elem_t* __restrict__ dout, const float* __restrict__ lse,
                    float* __restrict__ stats, float* __restrict__ dq_acc, int rows, int seq_q, int seq_pad, int heads) {
  const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;  // row = (b * seq_pad + i) * heads + h
  const int h = row % heads, bi = row / heads, i = bi % seq_pad, b = bi / seq_pad;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) dq_acc[static_cast<long long>(row) * D + d] = 0.0f;
  if (i < seq_q) {
    const long long base = ((static_cast<long long>(b) * seq_q + i) * heads + h) * D;
    for (int d = lane; d < D; d += 32) s += to_f32(out[base + d]) * to_f32(dout[base + d]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  }
  if (lane == 0) {
    const long long at = (static_cast<long long>(b) * heads + h) * 2 * seq_pad + i;
    stats[at] = i < seq_q ? lse[(static_cast<long long>(b) * heads + h) * seq_q + i] * 1.4426950408889634f
                          : __int_as_float(0x7f800000);
    stats[at + seq_pad] = s;
  }
}

// One thread a pair of dq elements of [batch, seq_q, heads, D]; the accumulator is [batch, heads,
// seq_pad / 64] blocks of 64 x D in dq_slot order.
extern "C" __global__ void __launch_bounds__(256) ejk_fa_bwd_dq(const float* __restrict__ dq_acc,
                                                                elem_t* __restrict__ dq, long long count, int seq_q,
                                                                int seq_pad, int heads, float scale) {
  const long long i = (static_cast<long long>(blockIdx.x) * 256 + threadIdx.x) * 2;
  if (i >= count) return;  // count is even (D is)
  const int d = static_cast<int>(i % D);
  const long long bqh = i / D;
  const int h = static_cast<int>(bqh % heads), q = static_cast<int>((bqh / heads) % seq_q);
  const long long b = bqh / heads / seq_q;
  const float* block = dq_acc + ((b * heads + h) * (seq_pad / 64) + q / 64) * (64 * D);
  const float2 v = *reinterpret_cast<const float2*>(block + dq_slot(q % 64, d));
  *reinterpret_cast<unsigned*>(dq + i) = pack2(v.x * scale, v.y * scale);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    ejk_fa_bwd_wgmma(const __grid_constant__ TensorMap q_map, const __grid_constant__ TensorMap k_map,
                     const __grid_constant__ TensorMap v_map, const __grid_constant__ TensorMap do_map,
                     const float* __restrict__ stats, int seq_pad, float* __restrict__ dq_acc,
                     elem_t* __restrict__ dk, elem_t* __restrict__ dv, const Params p) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = shared_addr(smem_raw), base = (raw + 1023u) & ~1023u;
  const unsigned k_s = base, v_s = k_s + K_BYTES, q_s = v_s + K_BYTES, do_s = q_s + STAGES * Q_BYTES,
                 ds_s = do_s + STAGES * Q_BYTES;
  const unsigned st_s = ds_s + CW * DS_BYTES;  // per stage: lse (base 2), then D
  const unsigned dq_s = st_s + STAGES * 2 * STATS_BYTES;
  const unsigned kv_full = dq_s + CW * DQ_BYTES, q_full = kv_full + 8, q_empty = q_full + 8 * STAGES;

  const int k0 = blockIdx.x * BK, hk = blockIdx.y, b = blockIdx.z;
  // The query rows some key of the block may be seen by.
  int q_begin = 0, q_end = p.seq_q;
  if (p.window_right >= 0) q_begin = max(0, k0 - p.diagonal - p.window_right);
  if (p.window_left >= 0) q_end = min(q_end, k0 + BK - 1 - p.diagonal + p.window_left + 1);
  const int qb_begin = q_begin / BQ, qb_count = q_end > q_begin ? ceil_div(q_end, BQ) - qb_begin : 0;
  const int steps = qb_count * p.group;  // (query head of the group, query block) pairs

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(q_full + 8 * s, 1);
      // Every consumer thread arrives: each read the stage's lse and D with ordinary loads.
      mbar_init(q_empty + 8 * s, CW * 128);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    regs_release<24>();
    if (tid == 0) {
      tma_prefetch_map(&q_map);
      tma_prefetch_map(&do_map);
      mbar_expect(kv_full, 2 * K_BYTES);
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        tma_load_4d(k_s + c * K_CHUNK, &k_map, kv_full, 64 * c, hk, k0, b);
        tma_load_4d(v_s + c * K_CHUNK, &v_map, kv_full, 64 * c, hk, k0, b);
      }
      for (int n = 0; n < steps; ++n) {
        const int s = n % STAGES, h = hk * p.group + n / qb_count, q0 = (qb_begin + n % qb_count) * BQ;
        if (n >= STAGES) mbar_wait(q_empty + 8 * s, ((n / STAGES) - 1) & 1);
        mbar_expect(q_full + 8 * s, 2 * Q_BYTES + 2 * STATS_BYTES);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          tma_load_4d(q_s + s * Q_BYTES + c * Q_CHUNK, &q_map, q_full + 8 * s, 64 * c, h, q0, b);
          tma_load_4d(do_s + s * Q_BYTES + c * Q_CHUNK, &do_map, q_full + 8 * s, 64 * c, h, q0, b);
        }
        const float* row_stats = stats + (static_cast<long long>(b) * p.heads + h) * 2 * seq_pad + q0;
        bulk_load(st_s + s * 2 * STATS_BYTES, row_stats, STATS_BYTES, q_full + 8 * s);
        bulk_load(st_s + s * 2 * STATS_BYTES + STATS_BYTES, row_stats + seq_pad, STATS_BYTES, q_full + 8 * s);
      }
    }
    return;
  }

  regs_take<240>();
  const int cw = wg - 1, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // Rows of S^T (keys) this thread holds: key0 (elements 4j, 4j + 1) and key0 + 8 (4j + 2, 4j + 3);
  // columns (queries) 8j + 2t and 8j + 2t + 1 of the block.
  const int strip = cw * 64, key0 = k0 + strip + warp * 16 + g;
  const unsigned my_ds = ds_s + cw * DS_BYTES;
  float dk_acc[D / 2], dv_acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk_acc[i] = dv_acc[i] = 0.0f;

  mbar_wait(kv_full, 0);
  for (int n = 0; n < steps; ++n) {
    const int s = n % STAGES, h = hk * p.group + n / qb_count, q0 = (qb_begin + n % qb_count) * BQ;
    const unsigned qs = q_s + s * Q_BYTES, dos = do_s + s * Q_BYTES;
    mbar_wait(q_full + 8 * s, (n / STAGES) & 1);

    // Two groups, so that P^T is computed while dP^T is still being multiplied.
    float st[BQ / 2], dpt[BQ / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const unsigned kc = (kk / 4) * K_CHUNK + strip * 128 + (kk % 4) * 32, qc = (kk / 4) * Q_CHUNK + (kk % 4) * 32;
      Wgmma<BQ, 0, 0>::run(st, smem_desc(k_s + kc, 16, 1024), smem_desc(qs + qc, 16, 1024), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const unsigned kc = (kk / 4) * K_CHUNK + strip * 128 + (kk % 4) * 32, qc = (kk / 4) * Q_CHUNK + (kk % 4) * 32;
      Wgmma<BQ, 0, 0>::run(dpt, smem_desc(v_s + kc, 16, 1024), smem_desc(dos + qc, 16, 1024), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();
    wgmma_hold(st);

    const bool inside = q0 + BQ <= p.seq_q && k0 + BK <= p.seq_k &&
                        (p.window_left < 0 || k0 >= q0 + BQ - 1 + p.diagonal - p.window_left) &&
                        (p.window_right < 0 || k0 + BK - 1 <= q0 + p.diagonal + p.window_right);
    const float* lse2 = reinterpret_cast<const float*>(smem_raw + (st_s + s * 2 * STATS_BYTES - raw));
    const float* dsum = lse2 + BQ;
    // P^T into A fragments for dV; st keeps P^T times the soft cap's derivative, for dS^T.
    unsigned pa[BQ / 16][4], dsa[BQ / 16][4];
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
      float pv[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * j + 2 * t + (e & 1), q = q0 + c, key = key0 + 8 * (e >> 1);
        const bool ok = inside || (q < p.seq_q && key < p.seq_k &&
                                   (p.window_left < 0 || key >= q + p.diagonal - p.window_left) &&
                                   (p.window_right < 0 || key <= q + p.diagonal + p.window_right));
        float x = st[4 * j + e] * p.qscale, dz = 1.0f;
#if SOFTCAP
        const float th = fast_tanh(x);
        x = p.cap2 * th;
        dz = 1.0f - th * th;
#endif
        pv[e] = ok ? fast_exp2(x - lse2[c]) : 0.0f;
        st[4 * j + e] = pv[e] * dz;
      }
      pa[j / 2][(j % 2) * 2] = pack2(pv[0], pv[1]);
      pa[j / 2][(j % 2) * 2 + 1] = pack2(pv[2], pv[3]);
    }
    wgmma_wait<0>();
    wgmma_hold(dpt);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
      const float d0 = dsum[8 * j + 2 * t], d1 = dsum[8 * j + 2 * t + 1];
      dsa[j / 2][(j % 2) * 2] = pack2(st[4 * j] * (dpt[4 * j] - d0), st[4 * j + 1] * (dpt[4 * j + 1] - d1));
      dsa[j / 2][(j % 2) * 2 + 1] =
          pack2(st[4 * j + 2] * (dpt[4 * j + 2] - d0), st[4 * j + 3] * (dpt[4 * j + 3] - d1));
    }

    // dV += P^T dout and dK += dS^T Q, dout and Q read N-major (head_dim contiguous).
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < BQ / 16; ++kc) {
      WgmmaRs<D, 1>::run(dv_acc, pa[kc], smem_desc(dos + kc * 2048, Q_CHUNK, 1024), 1);
      WgmmaRs<D, 1>::run(dk_acc, dsa[kc], smem_desc(qs + kc * 2048, Q_CHUNK, 1024), 1);
    }
    wgmma_commit();

    // Meanwhile dS^T into shared memory as wgmma's 128-byte swizzled rows (a row a key, BQ
    // queries): the 16-byte chunk c of row r sits at chunk c ^ (r % 8). The barrier first: every
    // warp's dQ product of the previous step has read the buffer.
    warpgroup_sync(1 + cw);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = warp * 16 + g + 8 * half;
        const unsigned addr = my_ds + r * 128 + ((j ^ (r % 8)) * 16) + 4 * t;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(dsa[j / 2][(j % 2) * 2 + half]) : "memory");
      }
    fence_async_shared();
    warpgroup_sync(1 + cw);
    // P^T and dS^T stay in registers until their products are done.
    wgmma_wait<0>();
    wgmma_hold(dk_acc);
    wgmma_hold(dv_acc);
#pragma unroll
    for (int kc = 0; kc < BQ / 16; ++kc)
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kc][e]), "+r"(dsa[kc][e])::"memory");

    // dQ (BQ x D) = dS K: dS^T read M-major, K's strip N-major.
    float dq[D / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      Wgmma<D, 1, 1>::run(dq, smem_desc(my_ds + kk * 2048, DS_BYTES, 1024),
                          smem_desc(k_s + strip * 128 + kk * 2048, K_CHUNK, 1024), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold(dq);
    mbar_arrive(q_empty + 8 * s);

    // The dQ block through shared memory in register order (each warp's float2 stores are
    // contiguous) into one bulk reduction, once the previous one has read the buffer.
    const unsigned my_dq = dq_s + cw * DQ_BYTES;
    if (tid == 0) bulk_wait_read();
    warpgroup_sync(1 + cw);
    float* stage = reinterpret_cast<float*>(smem_raw + (my_dq - raw));
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(stage + ((half * 4 + warp) * (D / 8) + j) * 64 + lane * 2) =
            make_float2(dq[4 * j + 2 * half], dq[4 * j + 2 * half + 1]);
    fence_async_shared();
    warpgroup_sync(1 + cw);
    if (tid == 0) {
      bulk_reduce_add_f32(dq_acc + ((static_cast<long long>(b) * p.heads + h) * (seq_pad / BQ) + q0 / BQ) * (BQ * D),
                          my_dq, DQ_BYTES);
      bulk_commit();
    }
  }
  // The last reduction completes before the block's shared memory goes.
  if (tid == 0) bulk_wait();

  const int kv_heads = p.heads / p.group;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key0 + 8 * half;
    if (key >= p.seq_k) continue;
    const long long off = ((static_cast<long long>(b) * p.seq_k + key) * kv_heads + hk) * D + 2 * t;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<unsigned*>(dk + off + 8 * j) =
          pack2(dk_acc[4 * j + 2 * half] * p.scale, dk_acc[4 * j + 2 * half + 1] * p.scale);
      *reinterpret_cast<unsigned*>(dv + off + 8 * j) = pack2(dv_acc[4 * j + 2 * half], dv_acc[4 * j + 2 * half + 1]);
    }
  }
}
