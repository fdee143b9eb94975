// A fragment's rows in registers, where the device's probe found each row of a 16x16 f32
// cooperative matrix on ROW_LANES invocations at the same elements of each
// (kernels/common/vulkan_fragment_rows.hpp). The including shader declares ROW_LANES,
// ROW_FIRST_LO and ROW_FIRST_HI (the probe's FragmentRows) as specialization constants and
// enables GL_KHR_shader_subgroup_shuffle.

// The first element of this invocation on element e's row (four bits an element).
uint row_first(uint e) { return (e < 8u ? ROW_FIRST_LO >> (4u * e) : ROW_FIRST_HI >> (4u * (e - 8u))) & 15u; }

// A row's maximum and sum from each of its invocations' share.
float rows_max(float x) {
  [[unroll]] for (uint d = 1u; d < ROW_LANES; d *= 2u) x = max(x, subgroupShuffleXor(x, d));
  return x;
}

float rows_sum(float x) {
  [[unroll]] for (uint d = 1u; d < ROW_LANES; d *= 2u) x += subgroupShuffleXor(x, d);
  return x;
}
