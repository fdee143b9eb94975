#version 450
// How one stored array differs from another (Device::difference): the reduction of
// difference.cl, whose comments say what each group writes. Storage is read as 32-bit words
// (two 16-bit elements share one), so no 16-bit storage is needed: the word holding the last
// element of an odd count lies within the allocation, which Vulkan buffers round up to 16
// bytes. Buffers of at most 4 GiB keep element indices within 32 bits, so the bad index's high
// word is 0.
#extension GL_GOOGLE_include_directive : require
#include "vulkan.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer Got { uint got[]; };
layout(std430, binding = 1) readonly buffer Want { uint want[]; };
layout(std430, binding = 2) writeonly buffer Part { uint part[]; };

layout(push_constant) uniform Push {
  uint n, dtype, has_want;
} pc;

shared float lerr[256], lscale[256];
shared uint lbad[256];

float load_got(uint e) {
  if (pc.dtype == 1u || pc.dtype == 2u) return ejk_decode16(got[e >> 1] >> (16u * (e & 1u)), pc.dtype);
  if (pc.dtype == 3u) return float(int(got[e]));
  return uintBitsToFloat(got[e]);
}

float load_want(uint e) {
  if (pc.dtype == 1u || pc.dtype == 2u) return ejk_decode16(want[e >> 1] >> (16u * (e & 1u)), pc.dtype);
  if (pc.dtype == 3u) return float(int(want[e]));
  return uintBitsToFloat(want[e]);
}

bool finite(float x) { return !isnan(x) && !isinf(x); }

void main() {
  float err = 0.0, scale = 0.0;
  uint bad = pc.n;  // none
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint e = gl_GlobalInvocationID.x; e < pc.n; e += stride) {
    const float g = load_got(e);
    if (pc.has_want == 0u) {
      if (!finite(g)) bad = min(bad, e);
      continue;
    }
    const float w = load_want(e);
    if (isinf(w) && g == w) continue;
    if (!finite(g) || isinf(w)) {
      bad = min(bad, e);
      continue;
    }
    if (!isnan(w)) {
      err = max(err, abs(g - w));
      scale = max(scale, abs(w));
    }
  }
  const uint l = gl_LocalInvocationID.x;
  lerr[l] = err;
  lscale[l] = scale;
  lbad[l] = bad;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (l < s) {
      lerr[l] = max(lerr[l], lerr[l + s]);
      lscale[l] = max(lscale[l], lscale[l + s]);
      lbad[l] = min(lbad[l], lbad[l + s]);
    }
    barrier();
  }
  if (l == 0u) {
    const uint g4 = 4u * gl_WorkGroupID.x;
    part[g4] = floatBitsToUint(lerr[0]);
    part[g4 + 1u] = floatBitsToUint(lscale[0]);
    part[g4 + 2u] = lbad[0];
    part[g4 + 3u] = 0u;
  }
}
