// Which integer, handed to inline PTX, names a __local array in the shared window?
__kernel void addr_kinds(__global ulong* out) {
  __local uint tile[64];
  tile[get_local_id(0)] = get_local_id(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (get_local_id(0) == 0) {
    ulong p = (ulong)(&tile[4]);
    uint isshared, isglobal;
    asm volatile("{ .reg .pred q; isspacep.shared q, %1; selp.u32 %0, 1, 0, q; }" : "=r"(isshared) : "l"(p));
    asm volatile("{ .reg .pred q; isspacep.global q, %1; selp.u32 %0, 1, 0, q; }" : "=r"(isglobal) : "l"(p));
    ulong cv;
    asm volatile("cvta.to.shared.u64 %0, %1;" : "=l"(cv) : "l"(p));
    uint s32;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(s32) : "l"(p));
    out[0] = p; out[1] = isshared; out[2] = isglobal; out[3] = cv; out[4] = s32;
    // ld.shared through each candidate: the raw value, and the converted one
    uint v_raw = 0xdead, v_cv = 0xdead;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v_raw) : "l"(p));

    out[5] = v_raw; out[6] = v_cv;
    out[7] = 0;
  }
}

// ldmatrix x1 (8x8 b16): lane l gets row l/4, words l%4 of the tile, given each row's address by lanes 0-7.
__kernel void ldm(__global const uint* in, __global uint* out, int mode) {
  __local uint tile[8 * 4 * 2] __attribute__((aligned(16)));
  uint l = get_local_id(0);
  tile[l] = in[l];
  tile[l + 32] = in[l + 32];
  barrier(CLK_LOCAL_MEM_FENCE);
  uint r;
  ulong p = (ulong)(&tile[(l % 8) * 4]);
  if (mode == 0) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r) : "l"(p));
  } else if (mode == 1) {
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [t]; }" : "=r"(r) : "l"(p));
  } else {
    uint s = (uint)(ulong)(&tile[(l % 8) * 4]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r) : "r"(s));
  }
  out[l] = r;
}

// cp.async 16 bytes a lane from global into local, then read back through C.
__kernel void cpa(__global const uint4* in, __global uint4* out, int mode) {
  __local uint4 tile[32];
  uint l = get_local_id(0);
  tile[l] = (uint4)(0xdead);
  barrier(CLK_LOCAL_MEM_FENCE);
  ulong dst = (ulong)(&tile[l]);
  ulong src = (ulong)(&in[l]);
  if (mode == 0) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "l"(dst), "l"(src) : "memory");
  } else {
    asm volatile("{ .reg .u64 d, s; cvta.to.shared.u64 d, %0; cvta.to.global.u64 s, %1; cp.async.cg.shared.global [d], [s], 16; }" :: "l"(dst), "l"(src) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  barrier(CLK_LOCAL_MEM_FENCE);
  out[l] = tile[31 - l];
}
