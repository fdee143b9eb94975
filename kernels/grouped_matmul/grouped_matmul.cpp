#include "grouped_matmul/grouped_matmul.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "common/builtin.hpp"
#include "common/sampled.hpp"
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

namespace {

// Every output element of both kernels is this sum, in this order, in the full and the sampled
// reference alike: out[r][j] = lhs row r . column j of op(rhs[g]); out[g][i][j] = column i of
// the group's lhs rows . column j of its grad rows.
double dot(std::span<const double> a, std::span<const double> b) {
  double acc = 0;
  for (std::size_t l = 0; l < a.size(); ++l) acc += a[l] * b[l];
  return acc;
}

// Columns `which` of rows [first, first + count) of a row-major matrix with `cols` columns at
// element `base` of argument `arg`: out[c][r].
std::vector<std::vector<double>> columns(const ArgReader& read, std::size_t arg, std::int64_t base, std::int64_t cols,
                                         std::int64_t first, std::int64_t count, const std::vector<std::int64_t>& which) {
  std::vector<std::vector<double>> out(which.size(), std::vector<double>(static_cast<std::size_t>(count)));
  for_each_row(read, arg, base + first * cols, cols, count, [&](std::int64_t r, const double* row) {
    for (std::size_t c = 0; c < which.size(); ++c) out[c][static_cast<std::size_t>(r)] = row[which[c]];
  });
  return out;
}

std::vector<std::int64_t> all(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

std::span<const double> row(const std::vector<double>& a, std::int64_t r, std::int64_t len) {
  return std::span<const double>(a).subspan(static_cast<std::size_t>(r * len), static_cast<std::size_t>(len));
}

}  // namespace

HostArrays GroupedMatmulKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  std::vector<std::int64_t> sizes(args[arg::group_sizes].begin(), args[arg::group_sizes].end());
  const auto o = group_offsets(p, sizes);
  const auto& lhs = args[arg::lhs];
  const auto& rhs = args[arg::rhs];
  const ArgReader host = host_reader(args);
  auto I = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  if (p.mode == Mode::gmm) {
    std::vector<double> out(I(p.m * p.n), 0.0);
    for (std::int64_t g = 0; g < p.groups; ++g) {
      if (o[I(g)] == o[I(g + 1)]) continue;
      // Column j of op(rhs[g]): a row of rhs[g] when transposed.
      std::vector<std::vector<double>> col;
      if (p.trans_rhs)
        for (std::int64_t j = 0; j < p.n; ++j) col.emplace_back(rhs.begin() + (g * p.n + j) * p.k, rhs.begin() + (g * p.n + j + 1) * p.k);
      else
        col = columns(host, arg::rhs, g * p.k * p.n, p.n, 0, p.k, all(p.n));
      for (std::int64_t r = o[I(g)]; r < o[I(g + 1)]; ++r)
        for (std::int64_t j = 0; j < p.n; ++j) out[I(r * p.n + j)] = dot(row(lhs, r, p.k), col[I(j)]);
    }
    return {std::move(out)};
  }
  std::vector<double> out(I(p.groups * p.k * p.n), 0.0);
  for (std::int64_t g = 0; g < p.groups; ++g) {
    const std::int64_t first = o[I(g)], count = o[I(g + 1)] - first;
    if (count == 0) continue;
    const auto a = columns(host, arg::lhs, 0, p.k, first, count, all(p.k));
    const auto d = columns(host, arg::rhs, 0, p.n, first, count, all(p.n));
    for (std::int64_t i = 0; i < p.k; ++i)
      for (std::int64_t j = 0; j < p.n; ++j) out[I((g * p.k + i) * p.n + j)] = dot(a[I(i)], d[I(j)]);
  }
  return {std::move(out)};
}

std::vector<SampledOutput> GroupedMatmulKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const std::vector<double> sizes_read = read(arg::group_sizes, 0, p.groups);
  const std::vector<std::int64_t> sizes(sizes_read.begin(), sizes_read.end());
  const auto o = group_offsets(p, sizes);
  auto I = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  const std::vector<std::int64_t> cols = sample_positions(p.n, 8);
  SampledPairs outs;
  if (p.mode == Mode::gmm) {
    // Rows spread over m, so over the groups as the routing fills them; each group's columns of
    // op(rhs[g]) read once.
    const std::vector<std::int64_t> rows = sample_positions(p.m, 8);
    for (std::size_t x = 0; x < rows.size();) {
      const auto g = static_cast<std::int64_t>(std::upper_bound(o.begin(), o.end(), rows[x]) - o.begin()) - 1;
      std::vector<std::vector<double>> col;
      if (p.trans_rhs)
        for (std::int64_t j : cols) col.push_back(read(arg::rhs, (g * p.n + j) * p.k, p.k));
      else
        col = columns(read, arg::rhs, g * p.k * p.n, p.n, 0, p.k, cols);
      for (; x < rows.size() && rows[x] < o[I(g + 1)]; ++x) {
        const std::vector<double> a = read(arg::lhs, rows[x] * p.k, p.k);
        for (std::size_t c = 0; c < cols.size(); ++c) outs.emplace_back(rows[x] * p.n + cols[c], dot(a, col[c]));
      }
    }
    return sampled_outputs({{arg::out, std::move(outs)}});
  }
  // Rows (group, i) of out spread over both; each group's rows of lhs and grad read once.
  const std::vector<std::int64_t> rows = sample_positions(p.groups * p.k, 8);
  for (std::size_t x = 0; x < rows.size();) {
    const std::int64_t g = rows[x] / p.k, first = o[I(g)], count = o[I(g + 1)] - first;
    std::vector<std::int64_t> is;
    for (; x < rows.size() && rows[x] / p.k == g; ++x) is.push_back(rows[x] % p.k);
    const auto a = columns(read, arg::lhs, 0, p.k, first, count, is), d = columns(read, arg::rhs, 0, p.n, first, count, cols);
    for (std::size_t i = 0; i < is.size(); ++i)
      for (std::size_t c = 0; c < cols.size(); ++c) outs.emplace_back((g * p.k + is[i]) * p.n + cols[c], dot(a[i], d[c]));
  }
  return sampled_outputs({{arg::out, std::move(outs)}});
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
