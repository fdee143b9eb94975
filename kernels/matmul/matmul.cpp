#include "matmul/matmul.hpp"

#include <algorithm>
#include <cmath>

#include "common/builtin.hpp"
#include "common/sampled.hpp"
#include "ejk/error.hpp"
#include "ejk/ops.hpp"

namespace ejk::kernels::matmul {

std::vector<ArgDef> matmul_args() { return {{"a", Role::in}, {"b", Role::in}, {"c", Role::inout}}; }
std::vector<ArgDef> MatmulKernel::args() const { return matmul_args(); }

Invocation invocation(const TensorSpec& a, const TensorSpec& b, const TensorSpec& c, bool trans_a, bool trans_b,
                      double alpha, double beta, bool tf32) {
  Invocation inv;
  inv.kernel = "matmul";
  inv.args = {a, b, c};
  inv.options = {{"trans_a", trans_a}, {"trans_b", trans_b}};
  if (tf32) inv.options["tf32"] = true;
  inv.scalars = {{"alpha", alpha}, {"beta", beta}};
  return inv;
}

namespace {

bool option(const nlohmann::json& options, const char* name) {
  if (!options.contains(name)) return false;
  const auto& v = options.at(name);
  if (!v.is_boolean()) throw InvalidArgument(std::string("matmul option '") + name + "' must be a boolean, got " + v.dump());
  return v.get<bool>();
}

double scalar(const Invocation& inv, const char* name, double fallback) {
  if (!inv.scalars.contains(name)) return fallback;
  const auto& v = inv.scalars.at(name);
  if (!v.is_number()) throw InvalidArgument(std::string("matmul scalar '") + name + "' must be a number, got " + v.dump());
  return v.get<double>();
}

std::string describe(const char* name, const TensorSpec& s) {
  return std::string(name) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

}  // namespace

Problem Problem::of(const Invocation& inv) {
  if (inv.args.size() != 3)
    throw InvalidArgument("matmul takes 3 arguments (a, b, c), got " + std::to_string(inv.args.size()));
  for (const auto& [key, _] : inv.options.items())
    if (key != "trans_a" && key != "trans_b" && key != "tf32")
      throw InvalidArgument("matmul has no option '" + key + "' (options: trans_a, trans_b, tf32)");
  const TensorSpec &a = inv.args[0], &b = inv.args[1], &c = inv.args[2];
  Problem p;
  p.trans_a = option(inv.options, "trans_a");
  p.trans_b = option(inv.options, "trans_b");
  p.tf32 = option(inv.options, "tf32");
  p.alpha = scalar(inv, "alpha", 1.0);
  p.beta = scalar(inv, "beta", 0.0);
  const char* names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) {
    const auto& s = inv.args[static_cast<std::size_t>(i)];
    if (s.shape.size() != 2 && s.shape.size() != 3)
      throw InvalidArgument("matmul: " + describe(names[i], s) + " must have rank 2 or 3");
    if (s.dtype == DType::i32) throw InvalidArgument("matmul: " + describe(names[i], s) + ": dtype i32 is not supported (f32, f16, bf16)");
  }
  if (a.dtype != b.dtype || a.dtype != c.dtype)
    throw InvalidArgument("matmul: dtypes differ: " + describe("a", a) + ", " + describe("b", b) + ", " + describe("c", c));
  p.dtype = a.dtype;
  if (p.tf32 && p.dtype != DType::f32)
    throw InvalidArgument("matmul option 'tf32' takes f32 operands, not " + std::string(to_string(p.dtype)) + " (" +
                          describe("a", a) + ")");
  auto last2 = [](const TensorSpec& s, std::int64_t& r, std::int64_t& col) {
    r = s.shape[s.shape.size() - 2];
    col = s.shape[s.shape.size() - 1];
  };
  std::int64_t ar, ac, br, bc, cr, cc;
  last2(a, ar, ac);
  last2(b, br, bc);
  last2(c, cr, cc);
  p.m = p.trans_a ? ac : ar;
  std::int64_t ka = p.trans_a ? ar : ac;
  std::int64_t kb = p.trans_b ? bc : br;
  p.n = p.trans_b ? br : bc;
  p.k = ka;
  if (ka != kb)
    throw InvalidArgument("matmul: inner dimensions differ: " + describe("a", a) + (p.trans_a ? " (transposed)" : "") +
                          " has k=" + std::to_string(ka) + ", " + describe("b", b) + (p.trans_b ? " (transposed)" : "") +
                          " has k=" + std::to_string(kb));
  if (cr != p.m || cc != p.n)
    throw InvalidArgument("matmul: " + describe("c", c) + " must be [.., " + std::to_string(p.m) + ", " +
                          std::to_string(p.n) + "] for " + describe("a", a) + " and " + describe("b", b));
  p.batch = c.shape.size() == 3 ? c.shape[0] : 1;
  for (int i = 0; i < 2; ++i) {
    const auto& s = inv.args[static_cast<std::size_t>(i)];
    if (s.shape.size() == 3 && (c.shape.size() != 3 || s.shape[0] != p.batch))
      throw InvalidArgument("matmul: batch of " + describe(names[i], s) + " does not match " + describe("c", c));
  }
  p.batch_stride_a = a.shape.size() == 3 ? p.m * p.k : 0;
  p.batch_stride_b = b.shape.size() == 3 ? p.k * p.n : 0;
  p.batch_stride_c = p.m * p.n;
  return p;
}

void MatmulKernel::check(const Invocation& inv) const { (void)Problem::of(inv); }

Vars MatmulKernel::vars(const Invocation& inv) const {
  Problem p = Problem::of(inv);
  return {{"batch", p.batch},
          {"m", p.m},
          {"n", p.n},
          {"k", p.k},
          {"trans_a", std::int64_t{p.trans_a}},
          {"trans_b", std::int64_t{p.trans_b}},
          {"dtype", std::string(to_string(p.dtype))},
          {"dtype_size", static_cast<std::int64_t>(dtype_size(p.dtype))}};
}

double MatmulKernel::flops(const Invocation& inv) const {
  Problem p = Problem::of(inv);
  return 2.0 * static_cast<double>(p.batch) * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
}

double MatmulKernel::bytes(const Invocation& inv) const {
  Problem p = Problem::of(inv);
  double e = static_cast<double>(dtype_size(p.dtype));
  double a = static_cast<double>(p.m * p.k) * (p.batch_stride_a ? static_cast<double>(p.batch) : 1.0);
  double b = static_cast<double>(p.k * p.n) * (p.batch_stride_b ? static_cast<double>(p.batch) : 1.0);
  double c = static_cast<double>(p.batch * p.m * p.n) * (p.beta != 0.0 ? 2.0 : 1.0);
  return e * (a + b + c);
}

HostArrays MatmulKernel::reference(const Invocation& inv, const HostArrays& args) const {
  Problem p = Problem::of(inv);
  const auto &a = args[0], &b = args[1];
  std::vector<double> c = args[2];
  for (std::int64_t bi = 0; bi < p.batch; ++bi)
    for (std::int64_t i = 0; i < p.m; ++i)
      for (std::int64_t j = 0; j < p.n; ++j) {
        double acc = 0;
        for (std::int64_t l = 0; l < p.k; ++l) {
          double av = a[static_cast<std::size_t>(bi * p.batch_stride_a + (p.trans_a ? l * p.m + i : i * p.k + l))];
          double bv = b[static_cast<std::size_t>(bi * p.batch_stride_b + (p.trans_b ? j * p.k + l : l * p.n + j))];
          acc += av * bv;
        }
        auto& out = c[static_cast<std::size_t>(bi * p.batch_stride_c + i * p.n + j)];
        out = p.alpha * acc + (p.beta != 0.0 ? p.beta * out : 0.0);
      }
  return {std::move(c)};
}

namespace {

// Columns `which` of a rows x cols row-major matrix at element `base` of argument `arg`: out[c][r].
std::vector<std::vector<double>> columns(const ArgReader& read, std::size_t arg, std::int64_t base, std::int64_t rows,
                                         std::int64_t cols, const std::vector<std::int64_t>& which) {
  std::vector<std::vector<double>> out(which.size(), std::vector<double>(static_cast<std::size_t>(rows)));
  for_each_row(read, arg, base, cols, rows, [&](std::int64_t r, const double* row) {
    for (std::size_t c = 0; c < which.size(); ++c) out[c][static_cast<std::size_t>(r)] = row[which[c]];
  });
  return out;
}

}  // namespace

std::vector<SampledOutput> MatmulKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  if (p.batch * p.m == 0 || p.n == 0) return {};
  const std::vector<std::int64_t> rows = sample_positions(p.batch * p.m, 8), cols = sample_positions(p.n, 8);
  SampledOutput s{2, {}, {}};
  // Grouped by batch entry, so each reads its rows of a and columns of b once.
  for (std::size_t r = 0; r < rows.size();) {
    const std::int64_t bi = rows[r] / p.m;
    std::vector<std::int64_t> is;
    for (; r < rows.size() && rows[r] / p.m == bi; ++r) is.push_back(rows[r] % p.m);
    const std::int64_t abase = bi * p.batch_stride_a, bbase = bi * p.batch_stride_b;
    std::vector<std::vector<double>> arow, bcol;  // a(i, .) and b(., j)
    if (p.trans_a) {
      arow = columns(read, 0, abase, p.k, p.m, is);
    } else {
      for (std::int64_t i : is) arow.push_back(read(0, abase + i * p.k, p.k));
    }
    if (p.trans_b) {
      for (std::int64_t j : cols) bcol.push_back(read(1, bbase + j * p.k, p.k));
    } else {
      bcol = columns(read, 1, bbase, p.k, p.n, cols);
    }
    for (std::size_t ii = 0; ii < is.size(); ++ii)
      for (std::size_t jj = 0; jj < cols.size(); ++jj) {
        double acc = 0;
        for (std::int64_t l = 0; l < p.k; ++l) acc += arow[ii][static_cast<std::size_t>(l)] * bcol[jj][static_cast<std::size_t>(l)];
        const std::int64_t at = bi * p.batch_stride_c + is[ii] * p.n + cols[jj];
        s.index.push_back(at);
        s.value.push_back(p.alpha * acc + (p.beta != 0.0 ? p.beta * read(2, at, 1)[0] : 0.0));
      }
  }
  return {std::move(s)};
}

double MatmulKernel::tolerance(const Invocation& inv) const {
  // f32 accumulation over k terms: error grows like sqrt(k) ulps, relative to the row's magnitude.
  Problem p = Problem::of(inv);
  double growth = std::sqrt(static_cast<double>(std::max<std::int64_t>(p.k, 1)) / 64.0);
  // TF32 keeps 10 of f32's 23 mantissa bits: rounding a and b to nearest costs each product up to
  // 2 * 2^-11 ~ 1e-3 of its magnitude. Over k terms of random sign those errors add like sqrt(k)
  // and so does the sum, which leaves ~1e-3 of the largest output; 2e-3 keeps room for the worst
  // element of a large output and for f32 accumulation, with the same sqrt(k / 64) growth as f32.
  // (wgmma truncates instead: up to 2^-10 an operand, biased, but the products' signs are random.)
  const double base = p.tf32 ? 2e-3 : default_tolerance(p.dtype);
  return base * std::max(1.0, growth);
}

Invocation MatmulKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                   const nlohmann::json& options) const {
  const RecipeSizes size("matmul", sizes, size_names(), "m, n, k, batch");
  const std::int64_t m = size("m", -1), n = size("n", -1), k = size("k", -1);
  const bool ta = option(options, "trans_a"), tb = option(options, "trans_b"), tf = option(options, "tf32");
  auto shape = [&](std::int64_t r, std::int64_t c) {
    return sizes.count("batch") ? Shape{sizes.at("batch"), r, c} : Shape{r, c};
  };
  Invocation inv = invocation({ta ? shape(k, m) : shape(m, k), dtype}, {tb ? shape(n, k) : shape(k, n), dtype},
                              {shape(m, n), dtype}, ta, tb, 1.0, 0.0, tf);
  for (const auto& [key, v] : options.items()) inv.options[key] = v;
  // `tf32: false` is the default: the same workload key as leaving it out.
  if (!tf) inv.options.erase("tf32");
  validate(inv);
  return inv;
}

EJK_BUILTIN(kernels, "matmul") { r.add(std::make_shared<MatmulKernel>()); }

}  // namespace ejk::kernels::matmul

namespace ejk {

void matmul(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c, const MatmulOptions& o) {
  Invocation inv = kernels::matmul::invocation(a.spec(), b.spec(), c.spec(), o.trans_a, o.trans_b, o.alpha, o.beta, o.tf32);
  const Tensor args[] = {a, b, c};
  ctx.executor().run(inv, args, o.config);
}

Tensor matmul(const Context& ctx, const Tensor& a, const Tensor& b, const MatmulOptions& o) {
  if (a.rank() < 2 || b.rank() < 2)
    throw InvalidArgument("matmul: a " + to_string(a.shape()) + " and b " + to_string(b.shape()) + " must have rank 2 or 3");
  std::int64_t m = o.trans_a ? a.dim(-1) : a.dim(-2);
  std::int64_t n = o.trans_b ? b.dim(-2) : b.dim(-1);
  Shape cs{m, n};
  if (a.rank() == 3) cs.insert(cs.begin(), a.dim(0));
  else if (b.rank() == 3) cs.insert(cs.begin(), b.dim(0));
  Tensor c = ctx.empty(cs, a.dtype());
  MatmulOptions o2 = o;
  o2.beta = 0.0;
  matmul(ctx, a, b, c, o2);
  return c;
}

}  // namespace ejk
