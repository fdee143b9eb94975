#include "backends/clc/clc_device.hpp"

#include <algorithm>
#include <set>

#include "core/backend_registry.hpp"
#include "core/difference.hpp"
#include "core/embedded.hpp"
#include "core/fill.hpp"
#include "ejk/error.hpp"

namespace ejk::clc {
namespace {

// Headers marked `#pragma once` are expanded once: the compilers see one text, not files.
std::string expand(std::string_view key, std::string_view text, int depth, std::set<std::string>& once) {
  if (depth > 8) throw InvalidArgument("OpenCL C source " + std::string(key) + ": includes nested more than 8 deep");
  const std::size_t slash = key.rfind('/');
  const std::string folder(slash == std::string_view::npos ? std::string_view() : key.substr(0, slash + 1));
  std::string out;
  out.reserve(text.size());
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    constexpr std::string_view directive = "#include \"";
    const std::size_t close = line.rfind('"');
    if (line.starts_with(directive) && close > directive.size()) {
      const std::string name(line.substr(directive.size(), close - directive.size()));
      const auto& files = detail::embedded_files();
      auto find = [&](const std::string& wanted) {
        return std::find_if(files.begin(), files.end(), [&](const detail::EmbeddedFile* f) { return f->key == wanted; });
      };
      auto it = find(folder + name);
      if (it == files.end()) it = find(name);  // "common/philox.h": a path below kernels/
      if (it != files.end()) {
        const std::string_view included = (*it)->text();
        if (included.find("#pragma once") != std::string_view::npos && !once.insert((*it)->key).second) {
          out += '\n';  // keeps the lines' numbers
          continue;
        }
        out += expand((*it)->key, included, depth + 1, once);
        out += "\n#line " + std::to_string(line_no + 1) + "\n";
        continue;
      }
    }
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace

std::string with_includes(std::string_view key, std::string_view text) {
  std::set<std::string> once;
  return expand(key, text, 0, once);
}

void Device::check_ranges(const Kernel& k, const Range& global, const Range& local) const {
  const DeviceInfo& in = info();
  if (global.dims != local.dims)
    throw InvalidArgument("launch of " + k.name() + ": global and local ranges have different dimensions");
  if (local.count() > k.max_workgroup_size())
    throw ResourceError("launch of " + k.name() + " on " + in.id() + ": a workgroup of " +
                        std::to_string(local.count()) + " work-items exceeds the kernel's limit of " +
                        std::to_string(k.max_workgroup_size()));
  for (std::uint32_t d = 0; d < global.dims; ++d) {
    if (local.size[d] > in.max_workgroup_dims[d])
      throw ResourceError("launch of " + k.name() + " on " + in.id() + ": local size " + std::to_string(local.size[d]) +
                          " in dimension " + std::to_string(d) + " exceeds the device's limit of " +
                          std::to_string(in.max_workgroup_dims[d]));
    if (local.size[d] == 0 || global.size[d] % local.size[d] != 0)
      throw InvalidArgument("launch of " + k.name() + ": global size " + std::to_string(global.size[d]) +
                            " is not a multiple of local size " + std::to_string(local.size[d]) + " in dimension " +
                            std::to_string(d));
  }
}

void Device::fill_blocks(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed, float lo,
                         float hi) {
  auto k = kernel("common/fill.cl", "", "ejk_fill");
  const auto n = static_cast<std::uint64_t>(count / 4);
  // A grid-stride loop: enough groups to fill the device, whatever the tensor's size.
  constexpr std::size_t local = 256;
  const std::size_t groups = static_cast<std::size_t>(std::min<std::uint64_t>((n + local - 1) / local, 1u << 16));
  const auto word0 = static_cast<std::uint64_t>(first) * dtype_size(t) / 4;
  launch(*k, Range(groups * local), Range(local), dst, word0, static_cast<std::uint64_t>(first / 4), n,
         static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32), lo, hi - lo, fill_code(t));
}

Difference Device::difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n) {
  if (n <= 0) return {};
  auto k = kernel("common/difference.cl", "", "ejk_difference");
  constexpr std::size_t local = 256;
  const std::size_t groups = std::min<std::size_t>((static_cast<std::size_t>(n) + local - 1) / local, 1024);
  const auto part = allocate(groups * 4 * sizeof(std::uint32_t));
  launch(*k, Range(groups * local), Range(local), got, want ? *want : got, static_cast<std::uint64_t>(n), fill_code(t),
         static_cast<std::uint32_t>(want != nullptr), *part);
  std::vector<std::uint32_t> words(groups * 4);
  read(*part, 0, words.data(), words.size() * sizeof(std::uint32_t));
  return fold_groups(words, n);
}

Device& clc_device(ejk::Device& d) {
  auto* dev = dynamic_cast<Device*>(&d);
  if (!dev) throw DeviceError("expected a device that runs OpenCL C (opencl or cuda), got " + d.info().id());
  return *dev;
}

bool is_cpu(const DeviceInfo& info) { return info.cpu; }

std::vector<Backend> backends() {
  std::vector<Backend> out;
  for (const auto& b : ejk::backends::registered())
    if (b.opencl_c) out.push_back(b.backend);
  return out;
}

}  // namespace ejk::clc
