#include "mean_pooling/mean_pooling.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "common/builtin.hpp"
#include "common/sequences.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::mean_pooling {

namespace {

std::string describe(const char* name, const TensorSpec& s) {
  return std::string(name) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

bool is_absent(const TensorSpec& s) { return s.shape == Shape{0}; }

}  // namespace

TensorSpec absent() { return {Shape{0}, DType::i32}; }

std::vector<ArgDef> MeanPoolingKernel::args() const {
  if (dir_ == Direction::forward) return {{"x", Role::in}, {"cu_seqlens", Role::in}, {"out", Role::out}};
  return {{"dout", Role::in}, {"cu_seqlens", Role::in}, {"dx", Role::out}};
}

Invocation invocation(Direction dir, const TensorSpec& in, const TensorSpec& cu_seqlens, const TensorSpec& out) {
  Invocation inv;
  inv.kernel = dir == Direction::forward ? "mean_pooling" : "mean_pooling_bwd";
  inv.args = {in, cu_seqlens, out};
  return inv;
}

Problem Problem::of(const Invocation& inv) {
  Problem p;
  p.dir = inv.kernel == "mean_pooling_bwd" ? Direction::backward : Direction::forward;
  const bool fwd = p.dir == Direction::forward;
  const std::string k = fwd ? "mean_pooling" : "mean_pooling_bwd";
  const char* tok_name = fwd ? "x" : "dx";
  const char* pool_name = fwd ? "out" : "dout";
  if (inv.args.size() != arg::count)
    throw InvalidArgument(k + " takes 3 arguments (" + (fwd ? "x, cu_seqlens, out" : "dout, cu_seqlens, dx") + "), got " +
                          std::to_string(inv.args.size()));
  for (const auto& [key, _] : inv.options.items()) throw InvalidArgument(k + " has no option '" + key + "' (it takes none)");
  for (const auto& [key, _] : inv.scalars.items()) throw InvalidArgument(k + " has no scalar '" + key + "' (it takes none)");
  const TensorSpec& tok = fwd ? inv.args[arg::in] : inv.args[arg::out];
  const TensorSpec& pool = fwd ? inv.args[arg::out] : inv.args[arg::in];
  const TensorSpec& cu = inv.args[arg::cu_seqlens];
  p.dtype = tok.dtype;
  if (!is_float(p.dtype)) throw InvalidArgument(k + ": " + describe(tok_name, tok) + " must be f32, f16 or bf16");
  p.packed = !is_absent(cu);
  if (p.packed) {
    if (cu.shape.size() != 1 || cu.dtype != DType::i32 || cu.shape[0] < 1)
      throw InvalidArgument(k + ": " + describe("cu_seqlens", cu) + " must be i32 [num_seqs + 1] (or [0] when " +
                            tok_name + " is padded [batch, seq, dim])");
    if (tok.shape.size() != 2)
      throw InvalidArgument(k + ": " + describe(tok_name, tok) + " must be [tokens, dim] with cu_seqlens " +
                            to_string(cu.shape));
    p.segs = cu.shape[0] - 1;
    p.tokens = tok.shape[0];
    p.dim = tok.shape[1];
  } else {
    if (tok.shape.size() != 3)
      throw InvalidArgument(k + ": " + describe(tok_name, tok) +
                            " must be [batch, seq, dim] (or [tokens, dim] with cu_seqlens i32 [num_seqs + 1])");
    p.segs = tok.shape[0];
    p.seq = tok.shape[1];
    p.tokens = p.segs * p.seq;
    p.dim = tok.shape[2];
  }
  if (p.segs < 0 || p.seq < 0 || p.tokens < 0 || p.dim < 0)
    throw InvalidArgument(k + ": " + describe(tok_name, tok) + " has a negative size");
  const Shape want{p.segs, p.dim};
  if (pool.shape != want || pool.dtype != p.dtype)
    throw InvalidArgument(k + ": " + describe(pool_name, pool) + " must be " + std::string(to_string(p.dtype)) + " " +
                          to_string(want) + " ([" + (p.packed ? "num_seqs" : "batch") + ", dim] for " +
                          describe(tok_name, tok) + ")");
  // Device kernels index with 32-bit integers.
  if (static_cast<double>(p.tokens) * static_cast<double>(p.dim) >= 2147483647.0)
    throw InvalidArgument(k + ": " + describe(tok_name, tok) + " holds 2^31 elements or more");
  return p;
}

std::vector<std::int64_t> offsets(const Problem& p, std::span<const double> cu_seqlens) {
  std::vector<std::int64_t> o(static_cast<std::size_t>(p.segs + 1));
  if (!p.packed) {
    for (std::int64_t s = 0; s <= p.segs; ++s) o[static_cast<std::size_t>(s)] = s * p.seq;
    return o;
  }
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = static_cast<std::int64_t>(cu_seqlens[i]);
  check_cu_seqlens(o, "cu_seqlens", p.tokens);
  return o;
}

void MeanPoolingKernel::check(const Invocation& inv) const {
  if (inv.kernel != name()) throw InvalidArgument("invocation of " + inv.kernel + " given to " + std::string(name()));
  (void)Problem::of(inv);
}

Vars MeanPoolingKernel::vars(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return {{"segs", p.segs},
          {"seq", p.seq},
          {"tokens", p.tokens},
          {"dim", p.dim},
          {"longest", p.longest()},
          {"packed", std::int64_t{p.packed}},
          {"dtype", std::string(to_string(p.dtype))},
          {"dtype_size", static_cast<std::int64_t>(dtype_size(p.dtype))}};
}

double MeanPoolingKernel::flops(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return static_cast<double>(p.tokens) * static_cast<double>(p.dim) + static_cast<double>(p.segs * p.dim);
}

double MeanPoolingKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const double e = static_cast<double>(dtype_size(p.dtype));
  return e * static_cast<double>((p.tokens + p.segs) * p.dim) + (p.packed ? 4.0 * static_cast<double>(p.segs + 1) : 0.0);
}

HostArrays MeanPoolingKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  const auto o = offsets(p, args[arg::cu_seqlens]);
  const auto& in = args[arg::in];
  const auto D = static_cast<std::size_t>(p.dim);
  if (p.dir == Direction::forward) {
    std::vector<double> out(static_cast<std::size_t>(p.segs) * D, 0.0);
    for (std::int64_t s = 0; s < p.segs; ++s) {
      const std::int64_t a = o[static_cast<std::size_t>(s)], b = o[static_cast<std::size_t>(s + 1)];
      if (a == b) continue;
      for (std::size_t c = 0; c < D; ++c) {
        double acc = 0;
        for (std::int64_t t = a; t < b; ++t) acc += in[static_cast<std::size_t>(t) * D + c];
        out[static_cast<std::size_t>(s) * D + c] = acc / static_cast<double>(b - a);
      }
    }
    return {std::move(out)};
  }
  std::vector<double> dx(static_cast<std::size_t>(p.tokens) * D, 0.0);
  for (std::int64_t s = 0; s < p.segs; ++s) {
    const std::int64_t a = o[static_cast<std::size_t>(s)], b = o[static_cast<std::size_t>(s + 1)];
    for (std::int64_t t = a; t < b; ++t)
      for (std::size_t c = 0; c < D; ++c)
        dx[static_cast<std::size_t>(t) * D + c] = in[static_cast<std::size_t>(s) * D + c] / static_cast<double>(b - a);
  }
  return {std::move(dx)};
}

std::vector<SampledOutput> MeanPoolingKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  const auto o = offsets(p, p.packed ? read(arg::cu_seqlens, 0, p.segs + 1) : std::vector<double>{});
  const std::int64_t D = p.dim;
  SampledOutput out{arg::out, {}, {}};
  if (p.dir == Direction::backward) {
    // dx row t is the row of its sequence in dout over the sequence's length.
    for (std::int64_t t : sample_positions(p.tokens, 8)) {
      const auto s = static_cast<std::int64_t>(std::upper_bound(o.begin(), o.end(), t) - o.begin()) - 1;
      const double len = static_cast<double>(o[static_cast<std::size_t>(s + 1)] - o[static_cast<std::size_t>(s)]);
      const std::vector<double> row = read(arg::in, s * D, D);
      for (std::int64_t c = 0; c < D; ++c) {
        out.index.push_back(t * D + c);
        out.value.push_back(row[static_cast<std::size_t>(c)] / len);
      }
    }
    return {std::move(out)};
  }
  const std::vector<std::int64_t> columns = sample_positions(D, 8);
  const std::int64_t step = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / std::max<std::int64_t>(D, 1));
  for (std::int64_t s : sample_positions(p.segs, 8)) {
    const std::int64_t a = o[static_cast<std::size_t>(s)], b = o[static_cast<std::size_t>(s + 1)];
    std::vector<double> acc(columns.size(), 0.0);
    // The sequence's tokens a stretch at a time, so host memory stays bounded.
    for (std::int64_t t = a; t < b; t += step) {
      const std::int64_t n = std::min(step, b - t);
      const std::vector<double> rows = read(arg::in, t * D, n * D);
      for (std::int64_t r = 0; r < n; ++r)
        for (std::size_t c = 0; c < columns.size(); ++c)
          acc[c] += rows[static_cast<std::size_t>(r * D + columns[c])];
    }
    for (std::size_t c = 0; c < columns.size(); ++c) {
      out.index.push_back(s * D + columns[c]);
      out.value.push_back(a == b ? 0.0 : acc[c] / static_cast<double>(b - a));
    }
  }
  return {std::move(out)};
}

double MeanPoolingKernel::tolerance(const Invocation& inv) const {
  // f32 sums over a sequence: the error grows like the square root of its length.
  const Problem p = Problem::of(inv);
  if (p.dir == Direction::backward) return default_tolerance(p.dtype);
  return default_tolerance(p.dtype) * std::max(1.0, std::sqrt(static_cast<double>(p.longest()) / 256.0));
}

std::vector<Fill> MeanPoolingKernel::fills(const Invocation& inv, std::uint64_t seed) const {
  const Problem p = Problem::of(inv);
  std::vector<Fill> a(arg::count, Fill::none());
  a[arg::in] = Fill::uniform();
  a[arg::cu_seqlens] = Fill::of(std::vector<double>(static_cast<std::size_t>(numel(inv.args[arg::cu_seqlens].shape)), 0.0));
  if (p.packed) {
    // Cut points drawn uniformly from 0..tokens, sorted: lengths vary, empty ones included.
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> cut(0, p.tokens);
    std::vector<double> cu(static_cast<std::size_t>(p.segs + 1));
    for (auto& x : cu) x = static_cast<double>(cut(rng));
    cu.front() = 0;
    cu.back() = static_cast<double>(p.tokens);
    std::sort(cu.begin(), cu.end());
    a[arg::cu_seqlens] = Fill::of(std::move(cu));
  }
  return a;
}

Invocation MeanPoolingKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                         const nlohmann::json& options) const {
  const std::string k(name());
  const RecipeSizes size(k, sizes, size_names(), "batch, seq, dim");
  const std::int64_t b = size("batch", -1), s = size("seq", -1), d = size("dim", -1);
  bool packed = false;
  for (const auto& [key, v] : options.items()) {
    if (key != "packed") throw InvalidArgument(k + " has no option '" + key + "' (options: packed)");
    if (!v.is_boolean()) throw InvalidArgument(k + " option 'packed' must be a boolean, got " + v.dump());
    packed = v.get<bool>();
  }
  const TensorSpec tok = packed ? TensorSpec{{b * s, d}, dtype} : TensorSpec{{b, s, d}, dtype};
  const TensorSpec cu = packed ? TensorSpec{{b + 1}, DType::i32} : absent();
  const TensorSpec pool{{b, d}, dtype};
  Invocation inv = dir_ == Direction::forward ? invocation(dir_, tok, cu, pool) : invocation(dir_, pool, cu, tok);
  validate(inv);
  return inv;
}

EJK_BUILTIN(kernels, "mean_pooling") {
  for (Direction dir : {Direction::forward, Direction::backward}) r.add(std::make_shared<MeanPoolingKernel>(dir));
}

}  // namespace ejk::kernels::mean_pooling
