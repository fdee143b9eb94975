#include "add/add.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "common/builtin.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::add {

namespace {

constexpr const char* kernel_name = "add";

std::string describe(const char* name, const TensorSpec& s) {
  return std::string(name) + " " + to_string(s.shape) + " " + std::string(to_string(s.dtype));
}

InvalidArgument error(const std::string& what) { return InvalidArgument(std::string(kernel_name) + ": " + what); }

// One element of the result in double, rounded to out's storage; b unused when alpha is 0.
double element(const Problem& p, double a, double b) { return round_to(p.out_dtype, p.reads_b() ? a + p.alpha * b : a); }

}  // namespace

std::vector<ArgDef> AddKernel::args() const { return {{"a", Role::in}, {"b", Role::in}, {"out", Role::out}}; }

Invocation invocation(const TensorSpec& a, const TensorSpec& b, const TensorSpec& out, double alpha) {
  Invocation inv;
  inv.kernel = kernel_name;
  inv.args = {a, b, out};
  inv.scalars = {{"alpha", alpha}};
  return inv;
}

Problem Problem::of(const Invocation& inv) {
  const std::string k = kernel_name;
  if (inv.args.size() != arg::count)
    throw InvalidArgument(k + " takes 3 arguments (a, b, out), got " + std::to_string(inv.args.size()));
  for (const auto& [key, _] : inv.options.items()) throw InvalidArgument(k + " has no option '" + key + "' (it takes none)");
  for (const auto& [key, _] : inv.scalars.items())
    if (key != "alpha") throw InvalidArgument(k + " has no scalar '" + key + "' (scalars: alpha)");
  const TensorSpec &a = inv.args[arg::a], &b = inv.args[arg::b], &out = inv.args[arg::out];
  Problem p;
  if (inv.scalars.contains("alpha")) {
    const auto& v = inv.scalars.at("alpha");
    if (!v.is_number()) throw error("scalar 'alpha' must be a number, got " + v.dump());
    p.alpha = v.get<double>();
    // The devices multiply by alpha in f32: a finite double beyond f32's range is no better.
    if (!std::isfinite(static_cast<float>(p.alpha)))
      throw error("alpha " + (std::ostringstream() << p.alpha).str() + " must be finite in f32 (for " + describe("a", a) + ")");
  }
  for (const auto& [name, s] : {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"out", &out}})
    if (!is_float(s->dtype)) throw error(describe(name, *s) + " must be f32, f16 or bf16");
  if (b.shape != a.shape) throw error(describe("b", b) + " must have a's shape " + to_string(a.shape));
  if (out.shape != a.shape) throw error(describe("out", out) + " must have a's shape " + to_string(a.shape));
  p.a_dtype = a.dtype, p.b_dtype = b.dtype, p.out_dtype = out.dtype;
  p.numel = ejk::numel(a.shape);
  // Device kernels index elements with 32-bit integers.
  if (p.numel >= 2147483647) throw error(describe("a", a) + " holds 2^31 - 1 elements or more");
  return p;
}

void AddKernel::check(const Invocation& inv) const {
  if (inv.kernel != name()) throw InvalidArgument("invocation of " + inv.kernel + " given to " + std::string(name()));
  (void)Problem::of(inv);
}

Vars AddKernel::vars(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return {{"n", p.numel},
          {"a_dtype", std::string(to_string(p.a_dtype))},
          {"b_dtype", std::string(to_string(p.b_dtype))},
          {"out_dtype", std::string(to_string(p.out_dtype))}};
}

double AddKernel::flops(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  return p.reads_b() ? 2.0 * static_cast<double>(p.numel) : 0.0;
}

double AddKernel::bytes(const Invocation& inv) const {
  const Problem p = Problem::of(inv);
  const std::size_t per = dtype_size(p.a_dtype) + (p.reads_b() ? dtype_size(p.b_dtype) : 0) + dtype_size(p.out_dtype);
  return static_cast<double>(p.numel) * static_cast<double>(per);
}

HostArrays AddKernel::reference(const Invocation& inv, const HostArrays& args) const {
  const Problem p = Problem::of(inv);
  const auto& a = args[arg::a];
  const auto& b = args[arg::b];
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = element(p, a[i], p.reads_b() ? b[i] : 0.0);
  return {std::move(out)};
}

std::vector<SampledOutput> AddKernel::sampled_reference(const Invocation& inv, const ArgReader& read) const {
  const Problem p = Problem::of(inv);
  SampledOutput out{arg::out, {}, {}};
  for (std::int64_t i : sample_positions(p.numel, 64)) {
    out.index.push_back(i);
    out.value.push_back(element(p, read(arg::a, i, 1)[0], p.reads_b() ? read(arg::b, i, 1)[0] : 0.0));
  }
  return {std::move(out)};
}

double AddKernel::tolerance(const Invocation& inv) const { return default_tolerance(Problem::of(inv).out_dtype); }

Invocation AddKernel::from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                                 const nlohmann::json& options) const {
  const RecipeSizes size(kernel_name, sizes, size_names(), "n");
  const std::int64_t n = size("n", -1);
  DType a_dtype = dtype, b_dtype = dtype;
  for (const auto& [key, v] : options.items()) {
    if (key != "a_dtype" && key != "b_dtype")
      throw InvalidArgument(std::string(kernel_name) + " has no option '" + key + "' (options: a_dtype, b_dtype)");
    if (!v.is_string())
      throw InvalidArgument(std::string(kernel_name) + " option '" + key + "' must be f32, f16 or bf16, got " + v.dump());
    (key == "a_dtype" ? a_dtype : b_dtype) = parse_dtype(v.get<std::string>());
  }
  Invocation inv = invocation({{n}, a_dtype}, {{n}, b_dtype}, {{n}, dtype}, 1.0);
  validate(inv);
  return inv;
}

EJK_BUILTIN(kernels, "add") { r.add(std::make_shared<AddKernel>()); }

}  // namespace ejk::kernels::add
