#include "grouped_matmul/grouped_matmul.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "common/builtin.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::grouped_matmul {

namespace {

std::string describe(const char* name, const TensorSpec& s) {
  return std::string(name) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

const char* kname(Mode m) { return m == Mode::gmm ? "grouped_matmul" : "grouped_matmul_tgmm"; }

}  // namespace

std::vector<ArgDef> GroupedMatmulKernel::args() const {
  return {{"lhs", Role::in}, {mode_ == Mode::gmm ? "rhs" : "grad", Role::in}, {"group_sizes", Role::in}, {"out", Role::out}};
}

Invocation invocation(Mode mode, const TensorSpec& lhs, const TensorSpec& rhs, const TensorSpec& group_sizes,
                      const TensorSpec& out, bool trans_rhs) {
  Invocation inv;
  inv.kernel = kname(mode);
  inv.args = {lhs, rhs, group_sizes, out};
  if (mode == Mode::gmm) inv.options = {{"trans_rhs", trans_rhs}};
  return inv;
}

Problem Problem::of(const Invocation& inv) {
  Problem p;
  p.mode = inv.kernel == "grouped_matmul_tgmm" ? Mode::tgmm : Mode::gmm;
  const std::string k = kname(p.mode);
  const bool gmm = p.mode == Mode::gmm;
  if (inv.args.size() != arg::count)
    throw InvalidArgument(k + " takes 4 arguments (lhs, " + (gmm ? "rhs" : "grad") + ", group_sizes, out), got " +
                          std::to_string(inv.args.size()));
  for (const auto& [key, v] : inv.options.items()) {
    if (!gmm || key != "trans_rhs")
      throw InvalidArgument(k + " has no option '" + key + "'" + (gmm ? " (options: trans_rhs)" : " (it takes none)"));
    if (!v.is_boolean()) throw InvalidArgument(k + " option 'trans_rhs' must be a boolean, got " + v.dump());
    p.trans_rhs = v.get<bool>();
  }
  for (const auto& [key, _] : inv.scalars.items()) throw InvalidArgument(k + " has no scalar '" + key + "' (it takes none)");
  const TensorSpec &lhs = inv.args[arg::lhs], &rhs = inv.args[arg::rhs], &gs = inv.args[arg::group_sizes],
                   &out = inv.args[arg::out];
  const char* rname = gmm ? "rhs" : "grad";
  p.dtype = lhs.dtype;
  if (lhs.shape.size() != 2 || !is_float(p.dtype))
    throw InvalidArgument(k + ": " + describe("lhs", lhs) + " must be [m, k] of f32, f16 or bf16");
  p.m = lhs.shape[0];
  p.k = lhs.shape[1];
  if (gs.shape.size() != 1 || gs.dtype != DType::i32 || gs.shape[0] < 1)
    throw InvalidArgument(k + ": " + describe("group_sizes", gs) + " must be i32 [groups] with at least one group");
  p.groups = gs.shape[0];
  if (gmm) {
    if (rhs.shape.size() != 3)
      throw InvalidArgument(k + ": " + describe("rhs", rhs) + " must be " + (p.trans_rhs ? "[groups, n, k]" : "[groups, k, n]"));
    p.n = p.trans_rhs ? rhs.shape[1] : rhs.shape[2];
    const Shape want = p.trans_rhs ? Shape{p.groups, p.n, p.k} : Shape{p.groups, p.k, p.n};
    if (rhs.shape != want || rhs.dtype != p.dtype)
      throw InvalidArgument(k + ": " + describe("rhs", rhs) + " must be " + std::string(to_string(p.dtype)) + " " +
                            to_string(want) + " (" + (p.trans_rhs ? "[groups, n, k]" : "[groups, k, n]") +
                            " with groups from group_sizes " + to_string(gs.shape) + " and k from lhs " +
                            to_string(lhs.shape) + ")");
  } else {
    if (rhs.shape.size() != 2 || rhs.shape[0] != p.m || rhs.dtype != p.dtype)
      throw InvalidArgument(k + ": " + describe("grad", rhs) + " must be " + std::string(to_string(p.dtype)) + " [" +
                            std::to_string(p.m) + ", n] (the rows of lhs " + to_string(lhs.shape) + ")");
    p.n = rhs.shape[1];
  }
  const Shape want_out = gmm ? Shape{p.m, p.n} : Shape{p.groups, p.k, p.n};
  if (out.shape != want_out || out.dtype != p.dtype)
    throw InvalidArgument(k + ": " + describe("out", out) + " must be " + std::string(to_string(p.dtype)) + " " +
                          to_string(want_out) + (gmm ? " ([m, n])" : " ([groups, k, n])"));
  // Device kernels index with 32-bit integers.
  for (const TensorSpec* s : {&lhs, &rhs, &out})
    if (static_cast<double>(numel(s->shape)) >= 2147483647.0)
      throw InvalidArgument(k + ": " + describe(s == &lhs ? "lhs" : s == &out ? "out" : rname, *s) +
                            " holds 2^31 elements or more");
  return p;
}

std::vector<std::int64_t> group_offsets(const Problem& p, std::span<const std::int64_t> sizes) {
  std::vector<std::int64_t> o(static_cast<std::size_t>(p.groups + 1), 0);
  for (std::int64_t g = 0; g < p.groups; ++g) {
    const std::int64_t s = sizes[static_cast<std::size_t>(g)];
    if (s < 0)
      throw InvalidArgument(std::string(kname(p.mode)) + ": group_sizes[" + std::to_string(g) + "] = " + std::to_string(s) +
                            " is negative");
    o[static_cast<std::size_t>(g + 1)] = o[static_cast<std::size_t>(g)] + s;
  }
  if (o.back() != p.m)
    throw InvalidArgument(std::string(kname(p.mode)) + ": group_sizes sum to " + std::to_string(o.back()) +
                          ", not to the rows of lhs (m = " + std::to_string(p.m) + ")");
  return o;
}

void GroupedMatmulKernel::check(const Invocation& inv) const {
  if (inv.kernel != name()) throw InvalidArgument("invocation of " + inv.kernel + " given to " + std::string(name()));
  (void)Problem::of(inv);
}

Vars GroupedMatmulKernel::vars(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return {{"m", p.m},
          {"k", p.k},
          {"n", p.n},
          {"groups", p.groups},
          {"rows_per_group", p.m / p.groups},
          {"trans_rhs", std::int64_t{p.trans_rhs}},
          {"dtype", std::string(to_string(p.dtype))},
          {"dtype_size", static_cast<std::int64_t>(dtype_size(p.dtype))}};
}

double GroupedMatmulKernel::flops(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.k) * static_cast<double>(p.n);
}

double GroupedMatmulKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double e = static_cast<double>(dtype_size(p.dtype));
  const double m = static_cast<double>(p.m), k = static_cast<double>(p.k), n = static_cast<double>(p.n),
               g = static_cast<double>(p.groups);
  // lhs, the weights (rhs or the tgmm output: groups * k * n) and the row-side operand (out or grad).
  return e * (m * k + g * k * n + m * n) + 4.0 * g;
}

HostArrays GroupedMatmulKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  std::vector<std::int64_t> sizes(args[arg::group_sizes].begin(), args[arg::group_sizes].end());
  const auto o = group_offsets(p, sizes);
  const auto& lhs = args[arg::lhs];
  const auto& rhs = args[arg::rhs];
  auto I = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  if (p.mode == Mode::gmm) {
    std::vector<double> out(I(p.m * p.n), 0.0);
    for (std::int64_t g = 0; g < p.groups; ++g)
      for (std::int64_t r = o[I(g)]; r < o[I(g + 1)]; ++r)
        for (std::int64_t j = 0; j < p.n; ++j) {
          double acc = 0;
          for (std::int64_t l = 0; l < p.k; ++l)
            acc += lhs[I(r * p.k + l)] * rhs[I(p.trans_rhs ? (g * p.n + j) * p.k + l : (g * p.k + l) * p.n + j)];
          out[I(r * p.n + j)] = acc;
        }
    return {std::move(out)};
  }
  std::vector<double> out(I(p.groups * p.k * p.n), 0.0);
  for (std::int64_t g = 0; g < p.groups; ++g)
    for (std::int64_t r = o[I(g)]; r < o[I(g + 1)]; ++r)
      for (std::int64_t i = 0; i < p.k; ++i) {
        const double a = lhs[I(r * p.k + i)];
        for (std::int64_t j = 0; j < p.n; ++j) out[I((g * p.k + i) * p.n + j)] += a * rhs[I(r * p.n + j)];
      }
  return {std::move(out)};
}

double GroupedMatmulKernel::tolerance(const Invocation& inv) const {
  // f32 accumulation over the reduced dimension (k, or a group's rows for tgmm): the error grows
  // like its square root.
  const Problem p = Problem::of(inv);
  const std::int64_t depth = p.mode == Mode::gmm ? p.k : p.m;
  return default_tolerance(p.dtype) * std::max(1.0, std::sqrt(static_cast<double>(std::max<std::int64_t>(depth, 1)) / 64.0));
}

std::vector<Fill> GroupedMatmulKernel::fills(const Invocation& inv, std::uint64_t seed) const {
  const Problem p = Problem::of(inv);
  const auto defs = args();
  std::vector<Fill> a = standard_fills(inv, defs);
  // Sorted cut points in 0..m: routing as uneven as a router's, empty groups possible.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> cut(0, p.m);
  std::vector<std::int64_t> cuts(static_cast<std::size_t>(p.groups + 1));
  for (auto& c : cuts) c = cut(rng);
  cuts.front() = 0;
  cuts.back() = p.m;
  std::sort(cuts.begin(), cuts.end());
  std::vector<double> sizes;
  for (std::int64_t g = 0; g < p.groups; ++g)
    sizes.push_back(static_cast<double>(cuts[static_cast<std::size_t>(g + 1)] - cuts[static_cast<std::size_t>(g)]));
  a[arg::group_sizes] = Fill::of(std::move(sizes));
  return a;
}

Invocation GroupedMatmulKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                           const nlohmann::json& options) const {
  const std::string k(name());
  const RecipeSizes size(k, sizes, size_names(), "m, k, n, groups");
  const std::int64_t m = size("m", -1), kk = size("k", -1), n = size("n", -1), g = size("groups", -1);
  bool trans = false;
  for (const auto& [key, v] : options.items()) {
    if (mode_ != Mode::gmm || key != "trans_rhs")
      throw InvalidArgument(k + " has no option '" + key + "'" + (mode_ == Mode::gmm ? " (options: trans_rhs)" : " (it takes none)"));
    if (!v.is_boolean()) throw InvalidArgument(k + " option 'trans_rhs' must be a boolean, got " + v.dump());
    trans = v.get<bool>();
  }
  Invocation inv = mode_ == Mode::gmm
                       ? invocation(mode_, {{m, kk}, dtype}, {trans ? Shape{g, n, kk} : Shape{g, kk, n}, dtype},
                                    {{g}, DType::i32}, {{m, n}, dtype}, trans)
                       : invocation(mode_, {{m, kk}, dtype}, {{m, n}, dtype}, {{g}, DType::i32}, {{g, kk, n}, dtype});
  validate(inv);
  return inv;
}

EJK_BUILTIN(kernels, "grouped_matmul") {
  for (Mode mode : {Mode::gmm, Mode::tgmm}) r.add(std::make_shared<GroupedMatmulKernel>(mode));
}

}  // namespace ejk::kernels::grouped_matmul
