#include "common/vulkan_fragment_rows.hpp"

#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "backends/vulkan/vulkan_device.hpp"

namespace ejk::kernels {

FragmentRows fragment_rows_of(std::span<const float> out, std::uint32_t subgroup) {
  if (out.size() < 257 || subgroup == 0 || 256 % subgroup != 0) return {};
  const std::uint32_t elements = 256 / subgroup;
  if (out[256] != static_cast<float>(elements) || elements > 16) return {};
  // row[l][i]: the row of element i of invocation l; every element held exactly once.
  std::vector<std::array<int, 16>> row(subgroup);
  for (auto& r : row) r.fill(-1);
  for (std::uint32_t e = 0; e < 256; ++e) {
    const float v = out[e];
    if (!(v >= 0.f) || v != std::floor(v)) return {};
    const auto code = static_cast<std::uint32_t>(v);
    const std::uint32_t l = code / 64, i = code % 64;
    if (l >= subgroup || i >= elements || row[l][i] != -1) return {};
    row[l][i] = static_cast<int>(e / 16);
  }
  // The first element of the same row, alike for every invocation.
  FragmentRows f;
  for (std::uint32_t i = 0; i < elements; ++i) {
    std::uint32_t first = i;
    for (std::uint32_t j = 0; j < i; ++j)
      if (row[0][j] == row[0][i]) {
        first = j;
        break;
      }
    for (std::uint32_t l = 0; l < subgroup; ++l)
      for (std::uint32_t j = 0; j < elements; ++j)
        if ((row[l][j] == row[l][i]) != (row[0][j] == row[0][i])) return {};
    (i < 8 ? f.first_lo : f.first_hi) |= first << (4 * (i % 8));
  }
  // The fewest aligned invocations that hold every element of their rows alike.
  for (std::uint32_t lanes = 1; lanes <= subgroup; lanes *= 2) {
    bool ok = true;
    std::array<int, 16> group;
    group.fill(-1);
    for (std::uint32_t l = 0; l < subgroup && ok; ++l)
      for (std::uint32_t i = 0; i < elements && ok; ++i) {
        const int r = row[l][i];
        ok = row[l & ~(lanes - 1)][i] == r && (group[static_cast<std::size_t>(r)] == -1 ||
                                                group[static_cast<std::size_t>(r)] == static_cast<int>(l / lanes));
        group[static_cast<std::size_t>(r)] = static_cast<int>(l / lanes);
      }
    if (ok) {
      f.lanes = lanes;
      return f;
    }
  }
  return {};
}

FragmentRows fragment_rows(vulkan::VulkanDevice& dev) {
  static std::mutex mutex;
  static std::map<int, FragmentRows> known;
  const DeviceInfo& info = dev.info();
  std::lock_guard lock(mutex);
  if (auto it = known.find(info.index); it != known.end()) return it->second;
  FragmentRows f;
#ifdef EJK_HAVE_COOPMAT
  const auto& pd = dev.physical();
  const std::uint32_t sg = info.subgroup_size;
  if (pd.subgroup_shuffle && pd.full_subgroups && sg > 0 && 256 % sg == 0 &&
      info.offers({16, 16, 16, DType::f16, DType::f32})) {
    auto out = dev.allocate(257 * sizeof(float));
    vulkan::Launch l;
    l.spirv = "common/rows_coopmat.spv";
    l.local_size = {sg, 1, 1};
    l.buffers = {out.get()};
    l.full_subgroups = true;
    dev.dispatch(l);
    std::vector<float> v(257);
    dev.read(*out, 0, v.data(), v.size() * sizeof(float));
    f = fragment_rows_of(v, sg);
  }
#endif
  known.emplace(info.index, f);
  return f;
}

FragmentRows fragment_rows(const DeviceInfo& dev) { return fragment_rows(vulkan::vulkan_device(*open_device(dev.id()))); }

}  // namespace ejk::kernels
