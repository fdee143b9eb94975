#pragma once
// Helpers shared by the tests: the devices under test, running an implementation directly,
// result comparison, expected errors and temporary folders.
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <source_location>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "ejk/ejk.hpp"

namespace ejk::test {

// Every device present. Under CI=true, all three backends must be there.
inline std::vector<std::string> devices() {
  std::vector<std::string> out;
  for (const auto& d : list_devices()) out.push_back(d.id());
  return out;
}

// The devices of one backend present (none is fine: the suite then instantiates nothing).
inline std::vector<std::string> devices(Backend backend) {
  std::vector<std::string> out;
  for (const auto& d : list_devices())
    if (d.backend == backend) out.push_back(d.id());
  return out;
}

// A sampled reference's reader over host arrays: a read of an output, or outside an input,
// fails the test (named by `label`) and returns what lies inside.
inline ArgReader host_reader(const HostArrays& in, std::vector<ArgDef> defs, std::string label) {
  return [&in, defs = std::move(defs), label = std::move(label)](std::size_t arg, std::int64_t first, std::int64_t count) {
    EXPECT_TRUE(arg < in.size() && arg < defs.size() && defs[arg].role != Role::out && first >= 0 &&
                first + count <= static_cast<std::int64_t>(in[arg].size()))
        << label << ": read of argument " << arg << " [" << first << ", +" << count << ")";
    if (arg >= in.size()) return std::vector<double>{};
    const auto size = static_cast<std::int64_t>(in[arg].size());
    first = std::clamp<std::int64_t>(first, 0, size);
    count = std::clamp<std::int64_t>(count, 0, size - first);
    return std::vector<double>(in[arg].begin() + first, in[arg].begin() + first + count);
  };
}

// One SampledOutput against the full reference of its argument: indices ascending, values equal
// where the reference is infinite and within 1e-12 relative elsewhere.
inline void expect_sample_matches(const SampledOutput& s, const std::vector<double>& full, const std::string& label) {
  ASSERT_EQ(s.index.size(), s.value.size()) << label;
  EXPECT_TRUE(std::is_sorted(s.index.begin(), s.index.end())) << label;
  for (std::size_t j = 0; j < s.index.size(); ++j) {
    const double w = full[static_cast<std::size_t>(s.index[j])];
    if (std::isinf(w))
      EXPECT_EQ(s.value[j], w) << label << " argument " << s.arg << " element " << s.index[j];
    else
      EXPECT_NEAR(s.value[j], w, 1e-12 * std::max(1.0, std::abs(w))) << label << " argument " << s.arg << " element " << s.index[j];
  }
}

// An H100 as NVIDIA's OpenCL driver describes it (48 KiB of local memory, 1024 work-items a
// group), without tensor-core fragments: tests of spaces and heuristics on any machine add
// `coopmat` where they need it.
inline DeviceInfo nvidia_opencl_like(std::uint64_t local_mem = 48 * 1024, std::uint32_t max_wg = 1024) {
  DeviceInfo d;
  d.backend = Backend::opencl;
  d.vendor = "NVIDIA Corporation";
  d.name = "NVIDIA H100";
  d.discrete = true;
  d.compute_units = 132;
  d.local_mem = local_mem;
  d.max_workgroup_size = max_wg;
  d.max_workgroup_dims = {max_wg, max_wg, 64};
  return d;
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// Largest error relative to the largest reference magnitude (a normwise check that does
// not blow up where the reference crosses zero). NaN fails outright, and so does an infinity
// unless the reference has the same one there (the -inf log-sum-exp of a fully masked row).
inline double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isinf(got[i]) && got[i] == want[i]) continue;
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return INFINITY;
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

// Runs `inv` with the implementation the registry picks for ctx's device (which must be of that
// device's backend), on the host values `in` of every argument, under `config` or else the
// heuristic's; returns the arguments from `first_output` on as read back.
inline HostArrays run_implementation(Context& ctx, const Invocation& inv, const HostArrays& in, std::size_t first_output,
                                     const std::optional<Config>& config = {}) {
  const auto& impl = Registry::global().implementation(inv, ctx.device().info());
  EXPECT_EQ(impl.backend(), ctx.device().info().backend);
  std::vector<Tensor> args;
  for (std::size_t i = 0; i < inv.args.size(); ++i) args.push_back(ctx.from(inv.args[i].shape, inv.args[i].dtype, in[i]));
  impl.run(inv, config ? *config : impl.heuristic(inv, ctx.device().info()), args, ctx.device());
  HostArrays out;
  for (std::size_t i = first_output; i < args.size(); ++i) out.push_back(args[i].read());
  return out;
}

// Runs `inv` twice (see run_implementation) on its kernel's inputs from `seed` and expects the
// same bits from both runs; then expects the outputs in `checked` (index among the outputs and
// name) within the kernel's tolerance of its double reference.
inline void expect_bitwise_repeatable(Context& ctx, const Invocation& inv, std::uint64_t seed, std::size_t first_output,
                                      const std::vector<std::pair<std::size_t, std::string>>& checked) {
  const Kernel& kernel = Registry::global().kernel(inv.kernel);
  const HostArrays in = kernel.inputs(inv, seed);
  const HostArrays first = run_implementation(ctx, inv, in, first_output);
  EXPECT_EQ(run_implementation(ctx, inv, in, first_output), first);
  const HostArrays want = kernel.reference(inv, in);
  for (const auto& [i, name] : checked)
    EXPECT_LE(relative_error(first[i], want[i]), kernel.tolerance(inv)) << name;
}

// A device copy: (src, src_offset, dst, dst_offset, bytes), as Device::copy takes them.
using CopyFn = std::function<void(const Buffer&, std::size_t, Buffer&, std::size_t, std::size_t)>;

// Copies through `copy` on `dev` and expects every byte of the destination buffer: the copied
// range equal to the source's, the rest untouched. The cases cover what a vectorized copy does
// differently: sizes past 1 MiB (where Vulkan takes its shader), offsets congruent modulo 16 but
// unaligned (a head and a tail around the vector body), offsets that disagree modulo 16 and 4,
// odd sizes, a whole buffer whose size is no multiple of 16, and disjoint ranges of one buffer.
inline void expect_copies_byte_exact(Device& dev, const CopyFn& copy, const std::string& label) {
  constexpr std::size_t mib = std::size_t{1} << 20, n = 3 * mib + 37;
  struct Case {
    std::size_t src_offset, dst_offset, bytes;
  };
  const Case cases[] = {{0, 0, 2 * mib},        {16, 48, 2 * mib + 13},    {5, 21, 2 * mib + 7}, {3, 8, mib + 1},
                        {4, 12, mib + 4},       {0, 0, n},                 {1, 2, 15},           {16, 0, 16},
                        {7, 7, 9},              {mib + 9, 25, mib - 3}};
  std::vector<std::byte> src_bytes(n), dst_bytes(n);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    src_bytes[i] = static_cast<std::byte>(x >> 56);
    dst_bytes[i] = static_cast<std::byte>(~i);
  }
  auto src = dev.allocate(n), dst = dev.allocate(n);
  dev.write(*src, 0, src_bytes.data(), n);
  std::vector<std::byte> got(n);
  auto expect_bytes = [&](const Buffer& b, const std::vector<std::byte>& want, const std::string& what) {
    dev.read(b, 0, got.data(), n);
    const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
    EXPECT_TRUE(diff.first == got.end()) << label << ", " << what << ": first wrong byte at "
                                         << (diff.first - got.begin()) << " of " << n;
  };
  for (const Case& c : cases) {
    dev.write(*dst, 0, dst_bytes.data(), n);
    copy(*src, c.src_offset, *dst, c.dst_offset, c.bytes);
    std::vector<std::byte> want = dst_bytes;
    std::memcpy(want.data() + c.dst_offset, src_bytes.data() + c.src_offset, c.bytes);
    expect_bytes(*dst, want, "copy of " + std::to_string(c.bytes) + " bytes from " + std::to_string(c.src_offset) +
                                 " to " + std::to_string(c.dst_offset));
  }
  // Within one buffer: [3, 3 + mib + 5) to mib + 35 (congruent modulo 16, disjoint).
  dev.write(*dst, 0, src_bytes.data(), n);
  copy(*dst, 3, *dst, mib + 35, mib + 5);
  std::vector<std::byte> want = src_bytes;
  std::memcpy(want.data() + mib + 35, src_bytes.data() + 3, mib + 5);
  expect_bytes(*dst, want, "copy within one buffer");
}

// A name gtest accepts for a device id ("opencl:0" -> "opencl_0").
inline std::string test_name(std::string id) {
  for (auto& c : id)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return id;
}

// Expects fn() to throw InvalidArgument whose message contains `needle`; a failure names the
// caller's line.
template <class Fn>
void expect_error(Fn&& fn, const std::string& needle, std::source_location where = std::source_location::current()) {
  ::testing::ScopedTrace trace(where.file_name(), static_cast<int>(where.line()), "expect_error");
  try {
    fn();
    ADD_FAILURE() << "expected InvalidArgument mentioning " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Restores an environment variable, set or unset, to what it was when the guard was made.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
  }
  ~ScopedEnv() {
    if (saved_) ::setenv(name_, saved_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// A fresh folder under the system's temporary folder, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ejk-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
};

}  // namespace ejk::test
