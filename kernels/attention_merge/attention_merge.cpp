#include "attention_merge/attention_merge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "common/builtin.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::attention_merge {

namespace {

constexpr const char* kernel_name = "attention_merge";

std::string describe(const char* name, const TensorSpec& s) {
  return std::string(name) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

InvalidArgument error(const std::string& what) { return InvalidArgument(std::string(kernel_name) + ": " + what); }

}  // namespace

std::vector<ArgDef> AttentionMergeKernel::args() const {
  return {{"out", Role::inout}, {"lse", Role::inout}, {"part", Role::in}, {"part_lse", Role::in}};
}

Invocation invocation(const TensorSpec& out, const TensorSpec& lse, const TensorSpec& part, const TensorSpec& part_lse) {
  Invocation inv;
  inv.kernel = kernel_name;
  inv.args = {out, lse, part, part_lse};
  return inv;
}

Problem Problem::of(const Invocation& inv) {
  const std::string k = kernel_name;
  if (inv.args.size() != arg::count)
    throw InvalidArgument(k + " takes 4 arguments (out, lse, part, part_lse), got " + std::to_string(inv.args.size()));
  for (const auto& [key, _] : inv.options.items()) throw InvalidArgument(k + " has no option '" + key + "' (it takes none)");
  for (const auto& [key, _] : inv.scalars.items()) throw InvalidArgument(k + " has no scalar '" + key + "' (it takes none)");
  const TensorSpec &out = inv.args[arg::out], &lse = inv.args[arg::lse], &part = inv.args[arg::part],
                   &part_lse = inv.args[arg::part_lse];
  Problem p;
  p.out_dtype = out.dtype;
  p.part_dtype = part.dtype;
  if (!is_float(out.dtype)) throw error(describe("out", out) + " must be f32, f16 or bf16");
  if (!is_float(part.dtype)) throw error(describe("part", part) + " must be f32, f16 or bf16");
  if (out.shape.size() == 4) {
    p.batch = out.shape[0], p.seq = out.shape[1], p.heads = out.shape[2], p.head_dim = out.shape[3];
  } else if (out.shape.size() == 3) {
    p.packed = true;
    p.batch = 1, p.seq = out.shape[0], p.heads = out.shape[1], p.head_dim = out.shape[2];
  } else {
    throw error(describe("out", out) + " must be [batch, seq, heads, head_dim] (or packed [total, heads, head_dim])");
  }
  if (p.batch < 0 || p.seq < 0 || p.heads < 0 || p.head_dim < 0) throw error(describe("out", out) + " has a negative size");
  if (part.shape != out.shape)
    throw error(describe("part", part) + " must have out's shape " + to_string(out.shape) + " (dtype f32, f16 or bf16)");
  const Shape want_lse = p.packed ? Shape{p.heads, p.seq} : Shape{p.batch, p.heads, p.seq};
  const std::string layout = p.packed ? "[heads, total]" : "[batch, heads, seq]";
  for (const auto& [name, s] : {std::pair{"lse", &lse}, std::pair{"part_lse", &part_lse}})
    if (s->shape != want_lse || s->dtype != DType::f32)
      throw error(describe(name, *s) + " must be f32 " + to_string(want_lse) + " (" + layout + " for " +
                  describe("out", out) + ")");
  // Device kernels index elements with 32-bit integers.
  if (static_cast<double>(p.rows()) * static_cast<double>(std::max<std::int64_t>(1, p.head_dim)) >= 2147483647.0)
    throw error(describe("out", out) + " holds 2^31 elements or more");
  return p;
}

void AttentionMergeKernel::check(const Invocation& inv) const {
  if (inv.kernel != name()) throw InvalidArgument("invocation of " + inv.kernel + " given to " + std::string(name()));
  (void)Problem::of(inv);
}

Vars AttentionMergeKernel::vars(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return {{"batch", p.batch},
          {"seq", p.seq},
          {"heads", p.heads},
          {"head_dim", p.head_dim},
          {"rows", p.rows()},
          {"packed", std::int64_t{p.packed}},
          {"out_dtype", std::string(to_string(p.out_dtype))},
          {"part_dtype", std::string(to_string(p.part_dtype))}};
}

double AttentionMergeKernel::flops(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return 3.0 * static_cast<double>(p.rows()) * static_cast<double>(p.head_dim);
}

double AttentionMergeKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double n = static_cast<double>(p.rows()) * static_cast<double>(p.head_dim);
  return n * static_cast<double>(2 * dtype_size(p.out_dtype) + dtype_size(p.part_dtype)) +
         12.0 * static_cast<double>(p.rows());
}

HostArrays AttentionMergeKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  constexpr double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> out = args[arg::out], lse = args[arg::lse];
  const auto& part = args[arg::part];
  const auto& part_lse = args[arg::part_lse];
  const auto D = static_cast<std::size_t>(p.head_dim);
  for (std::int64_t r = 0; r < p.rows(); ++r) {
    const auto li = static_cast<std::size_t>(p.lse_index(r));
    const double a = lse[li], c = part_lse[li];
    double* o = out.data() + static_cast<std::size_t>(r) * D;
    const double* q = part.data() + static_cast<std::size_t>(r) * D;
    if (c == ninf) {
      if (a == ninf) std::fill(o, o + D, 0.0);
      continue;
    }
    if (a == ninf) {
      for (std::size_t i = 0; i < D; ++i) o[i] = round_to(p.out_dtype, q[i]);
      lse[li] = c;
      continue;
    }
    const double m = std::max(a, c) + std::log1p(std::exp(-std::abs(a - c)));
    const double wa = std::exp(a - m), wc = std::exp(c - m);
    for (std::size_t i = 0; i < D; ++i) o[i] = o[i] * wa + q[i] * wc;
    lse[li] = m;
  }
  return {std::move(out), std::move(lse)};
}

std::vector<SampledOutput> AttentionMergeKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  constexpr double ninf = -std::numeric_limits<double>::infinity();
  const std::int64_t D = p.head_dim;
  SampledOutput out{arg::out, {}, {}}, lse{arg::lse, {}, {}};
  std::vector<std::pair<std::int64_t, double>> lses;
  for (std::int64_t r : sample_positions(p.rows(), 32)) {
    const std::int64_t li = p.lse_index(r);
    const double a = read(arg::lse, li, 1)[0], c = read(arg::part_lse, li, 1)[0];
    std::vector<double> o = read(arg::out, r * D, D);
    const std::vector<double> q = read(arg::part, r * D, D);
    double l = a;
    if (c == ninf) {
      if (a == ninf) std::fill(o.begin(), o.end(), 0.0);
    } else if (a == ninf) {
      for (std::int64_t i = 0; i < D; ++i) o[static_cast<std::size_t>(i)] = round_to(p.out_dtype, q[static_cast<std::size_t>(i)]);
      l = c;
    } else {
      l = std::max(a, c) + std::log1p(std::exp(-std::abs(a - c)));
      const double wa = std::exp(a - l), wc = std::exp(c - l);
      for (std::int64_t i = 0; i < D; ++i)
        o[static_cast<std::size_t>(i)] = o[static_cast<std::size_t>(i)] * wa + q[static_cast<std::size_t>(i)] * wc;
    }
    for (std::int64_t i = 0; i < D; ++i) {
      out.index.push_back(r * D + i);
      out.value.push_back(o[static_cast<std::size_t>(i)]);
    }
    lses.emplace_back(li, l);
  }
  // lse is [batch, heads, seq] while rows run over [batch, seq, heads]: its indices need sorting.
  std::sort(lses.begin(), lses.end());
  for (const auto& [at, value] : lses) {
    lse.index.push_back(at);
    lse.value.push_back(value);
  }
  return {std::move(out), std::move(lse)};
}

double AttentionMergeKernel::tolerance(const Invocation& inv) const { return default_tolerance(Problem::of(inv).out_dtype); }

std::vector<Fill> AttentionMergeKernel::fills(const Invocation& inv, std::uint64_t seed) const {
  const Problem p = Problem::of(inv);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> logit(-4.0, 4.0);
  std::uniform_int_distribution<int> kind(0, 7);
  std::vector<Fill> a(arg::count, Fill::uniform());
  // One log-sum-exp per row: small, and drawn on the host to place the -inf cases.
  const auto rows = static_cast<std::size_t>(p.rows());
  std::vector<double> lse(rows), part_lse(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    const int k = kind(rng);  // 0: lse -inf, 1: part_lse -inf, 2: both, else both finite
    lse[i] = k == 0 || k == 2 ? -INFINITY : round_to(DType::f32, logit(rng));
    part_lse[i] = k == 1 || k == 2 ? -INFINITY : round_to(DType::f32, logit(rng));
  }
  a[arg::lse] = Fill::of(std::move(lse));
  a[arg::part_lse] = Fill::of(std::move(part_lse));
  return a;
}

Invocation AttentionMergeKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                            const nlohmann::json& options) const {
  const RecipeSizes size(kernel_name, sizes, size_names(), "seq, heads, head_dim; optional batch (1)");
  const std::int64_t batch = size("batch", 1), seq = size("seq", -1), heads = size("heads", -1), dim = size("head_dim", -1);
  bool packed = false;
  DType part_dtype = dtype;
  for (const auto& [key, v] : options.items()) {
    if (key == "packed") {
      if (!v.is_boolean()) throw InvalidArgument(std::string(kernel_name) + " option 'packed' must be a boolean, got " + v.dump());
      packed = v.get<bool>();
    } else if (key == "part_dtype") {
      if (!v.is_string())
        throw InvalidArgument(std::string(kernel_name) + " option 'part_dtype' must be f32, f16 or bf16, got " + v.dump());
      part_dtype = parse_dtype(v.get<std::string>());
    } else {
      throw InvalidArgument(std::string(kernel_name) + " has no option '" + key + "' (options: packed, part_dtype)");
    }
  }
  const Shape x = packed ? Shape{batch * seq, heads, dim} : Shape{batch, seq, heads, dim};
  const Shape l = packed ? Shape{heads, batch * seq} : Shape{batch, heads, seq};
  Invocation inv = invocation({x, dtype}, {l, DType::f32}, {x, part_dtype}, {l, DType::f32});
  validate(inv);
  return inv;
}

EJK_BUILTIN(kernels, "attention_merge") { r.add(std::make_shared<AttentionMergeKernel>()); }

}  // namespace ejk::kernels::attention_merge
