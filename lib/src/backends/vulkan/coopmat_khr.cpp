#include "backends/vulkan/coopmat_khr.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ejk/error.hpp"

namespace ejk::vulkan {
namespace {

// SPIR-V opcodes and enumerants the translation reads or writes.
enum Op : std::uint16_t {
  OpUndef = 1, OpName = 5, OpExtension = 10, OpCapability = 17, OpTypeInt = 21, OpTypeArray = 28,
  OpTypeRuntimeArray = 29, OpTypeStruct = 30, OpTypePointer = 32, OpTypeFunction = 33,
  OpConstantTrue = 41, OpConstantFalse = 42, OpConstant = 43, OpConstantComposite = 44,
  OpConstantNull = 46, OpSpecConstantComposite = 51, OpFunction = 54, OpFunctionParameter = 55,
  OpFunctionCall = 57, OpVariable = 59, OpLoad = 61, OpStore = 62, OpAccessChain = 65,
  OpInBoundsAccessChain = 66, OpPtrAccessChain = 67, OpDecorate = 71, OpMemberDecorate = 72,
  OpCompositeConstruct = 80, OpCompositeExtract = 81, OpCompositeInsert = 82, OpCopyObject = 83,
  OpConvertFToU = 109, OpConvertFToS = 110, OpConvertSToF = 111, OpConvertUToF = 112,
  OpUConvert = 113, OpSConvert = 114, OpFConvert = 115, OpSNegate = 126, OpFNegate = 127,
  OpIAdd = 128, OpFAdd = 129, OpISub = 130, OpFSub = 131, OpIMul = 132, OpFMul = 133,
  OpUDiv = 134, OpSDiv = 135, OpFDiv = 136, OpMatrixTimesScalar = 143, OpSelect = 169,
  OpPhi = 245, OpReturnValue = 254,
  OpTypeCoopKhr = 4456, OpCoopLoadKhr = 4457, OpCoopStoreKhr = 4458, OpCoopMulAddKhr = 4459,
  OpCoopLengthKhr = 4460, OpCoopConvertNv = 5293,
  OpTypeCoopNv = 5358, OpCoopLoadNv = 5359, OpCoopStoreNv = 5360, OpCoopMulAddNv = 5361,
  OpCoopLengthNv = 5362,
};
constexpr std::uint32_t kCapCoopNv = 5357, kCapCoopKhr = 6022, kCapConversionsNv = 5431;
enum Use : std::uint32_t { A = 0, B = 1, Acc = 2 };

struct Inst {
  std::uint16_t op() const { return static_cast<std::uint16_t>(w[0] & 0xffff); }
  std::vector<std::uint32_t> w;
};

std::vector<std::uint32_t> string_words(const std::string& s) {
  std::vector<std::uint32_t> out((s.size() + 4) / 4, 0);
  for (std::size_t i = 0; i < s.size(); ++i) out[i / 4] |= std::uint32_t(std::uint8_t(s[i])) << (8 * (i % 4));
  return out;
}

std::string string_of(const Inst& in, std::size_t from) {
  std::string s;
  for (std::size_t i = from; i < in.w.size(); ++i)
    for (int b = 0; b < 4; ++b) {
      char c = static_cast<char>((in.w[i] >> (8 * b)) & 0xff);
      if (!c) return s;
      s += c;
    }
  return s;
}

Inst make(std::uint16_t op, std::vector<std::uint32_t> operands) {
  Inst in;
  in.w.reserve(operands.size() + 1);
  in.w.push_back(std::uint32_t(operands.size() + 1) << 16 | op);
  in.w.insert(in.w.end(), operands.begin(), operands.end());
  return in;
}

// Whether the instruction's first two operands are a result type and a result id.
bool has_type_and_result(std::uint16_t op) {
  switch (op) {
    case OpUndef: case OpConstantTrue: case OpConstantFalse: case OpConstant: case OpConstantComposite:
    case OpConstantNull: case OpSpecConstantComposite: case OpFunction: case OpFunctionParameter:
    case OpFunctionCall: case OpVariable: case OpLoad: case OpAccessChain: case OpInBoundsAccessChain:
    case OpPtrAccessChain: case OpCompositeConstruct: case OpCompositeExtract: case OpCompositeInsert:
    case OpCopyObject: case OpConvertFToU: case OpConvertFToS: case OpConvertSToF: case OpConvertUToF:
    case OpUConvert: case OpSConvert: case OpFConvert: case OpSNegate: case OpFNegate: case OpIAdd:
    case OpFAdd: case OpISub: case OpFSub: case OpIMul: case OpFMul: case OpUDiv: case OpSDiv:
    case OpFDiv: case OpMatrixTimesScalar: case OpSelect: case OpPhi: case OpCoopLoadNv:
    case OpCoopMulAddNv: case OpCoopLengthNv:
      return true;
    default:
      return false;
  }
}

bool is_conversion(std::uint16_t op) {
  return op == OpFConvert || op == OpSConvert || op == OpUConvert || op == OpConvertFToS ||
         op == OpConvertFToU || op == OpConvertSToF || op == OpConvertUToF;
}

// The fewest words of an instruction whose operands the translation reads.
std::size_t min_words(std::uint16_t op) {
  switch (op) {
    case OpCapability: case OpExtension: case OpReturnValue: return 2;
    case OpStore: case OpName: case OpDecorate: case OpTypeRuntimeArray: case OpPhi: return 3;
    case OpTypeInt: case OpTypeArray: case OpTypePointer: case OpMemberDecorate: return 4;
    case OpCoopStoreNv: return 5;
    case OpTypeCoopNv: case OpCoopLoadNv: case OpCoopMulAddNv: case OpSelect: return 6;
    case OpCoopLengthNv: case OpLoad: case OpAccessChain: case OpInBoundsAccessChain: case OpPtrAccessChain:
    case OpCompositeExtract: case OpCopyObject: case OpFunctionCall: case OpFNegate: case OpSNegate: return 4;
    case OpFunction: return 5;
    default: return has_type_and_result(op) ? (is_conversion(op) ? 4 : 3) : 1;
  }
}

bool is_elementwise(std::uint16_t op) {
  return op == OpFAdd || op == OpFSub || op == OpFMul || op == OpFDiv || op == OpFNegate || op == OpIAdd ||
         op == OpISub || op == OpIMul || op == OpUDiv || op == OpSDiv || op == OpSNegate ||
         op == OpMatrixTimesScalar || op == OpCopyObject || op == OpSelect || op == OpPhi ||
         op == OpCompositeConstruct || op == OpCompositeInsert;
}

class Translator {
 public:
  explicit Translator(std::span<const std::uint32_t> words) {
    if (words.size() < 5 || words[0] != 0x07230203u) throw CompileError("not a SPIR-V module");
    header_.assign(words.begin(), words.begin() + 5);
    bound_ = words[3];
    for (std::size_t i = 5; i < words.size();) {
      std::uint32_t n = words[i] >> 16;
      if (n == 0 || i + n > words.size()) throw CompileError("truncated SPIR-V instruction");
      insts_.push_back({{words.begin() + i, words.begin() + i + n}});
      if (n < min_words(insts_.back().op()))
        throw CompileError("SPIR-V opcode " + std::to_string(insts_.back().op()) + " with " + std::to_string(n) + " words");
      i += n;
    }
  }

  KhrModule run() {
    bool nv = std::any_of(insts_.begin(), insts_.end(), [](const Inst& in) {
      return in.op() == OpCapability && in.w[1] == kCapCoopNv;
    });
    if (!nv) return {};
    index();
    classify();
    assign_uses();
    KhrModule out;
    out.words = emit();
    out.conversions = conversions_;
    return out;
  }

 private:
  // ---- analysis ----

  void index() {
    for (std::size_t i = 0; i < insts_.size(); ++i) {
      const Inst& in = insts_[i];
      if (in.op() == OpTypeCoopNv) coop_types_.insert(in.w[1]);
      if (is_type_decl(in) && in.op() != OpTypeCoopNv && contains_coop_operand(in)) coop_types_.insert(in.w[1]);
      if (in.op() == OpConstantTrue || in.op() == OpConstantFalse) bools_[in.w[2]] = in.op() == OpConstantTrue;
      if (in.op() == OpTypeInt && in.w[2] == 32 && in.w[3] == 0 && !uint_type_) uint_type_ = in.w[1];
      if (has_type_and_result(in.op())) type_of_[in.w[2]] = in.w[1];
    }
  }

  static bool is_type_decl(const Inst& in) {
    auto op = in.op();
    return op == OpTypeArray || op == OpTypeRuntimeArray || op == OpTypeStruct || op == OpTypePointer ||
           op == OpTypeFunction || op == OpTypeCoopNv;
  }

  // Composite types over a cooperative matrix: the element, member or pointee operands.
  bool contains_coop_operand(const Inst& in) const {
    switch (in.op()) {
      case OpTypeArray: case OpTypeRuntimeArray: return coop_types_.count(in.w[2]) > 0;
      case OpTypePointer: return coop_types_.count(in.w[3]) > 0;
      case OpTypeStruct:
      case OpTypeFunction:
        for (std::size_t k = 2; k < in.w.size(); ++k)
          if (coop_types_.count(in.w[k])) return true;
        return false;
      default: return false;
    }
  }

  bool coop_valued(std::uint32_t id) const {
    auto t = type_of_.find(id);
    return t != type_of_.end() && coop_types_.count(t->second) > 0;
  }

  std::uint32_t find(std::uint32_t x) {
    auto it = parent_.find(x);
    if (it == parent_.end()) return parent_[x] = x;
    if (it->second == x) return x;
    return it->second = find(it->second);
  }

  void unite(std::uint32_t a, std::uint32_t b) {
    if (poly(a) || poly(b)) return;  // constants take each context's use (cloned per use)
    a = find(a), b = find(b);
    if (a != b) parent_[a] = b;
  }

  bool poly(std::uint32_t id) const { return poly_.count(id) > 0; }

  [[noreturn]] void unsupported(const Inst& in) const {
    throw CompileError("cooperative-matrix translation: SPIR-V opcode " + std::to_string(in.op()) +
                       " on a cooperative matrix is not supported");
  }

  void classify() {
    bool in_function = false;
    for (const Inst& in : insts_) {
      auto op = in.op();
      bool typed = has_type_and_result(op);
      in_function = in_function || op == OpFunction;
      // Inside functions a matrix type as the first operand is a result type: an instruction
      // the translation does not know makes a matrix.
      if (in_function && !typed && in.w.size() >= 3 && coop_types_.count(in.w[1])) unsupported(in);
      bool result_coop = typed && coop_types_.count(in.w[1]) > 0;
      if ((op == OpUndef || op == OpConstantNull || op == OpConstantComposite || op == OpSpecConstantComposite) &&
          result_coop) {
        poly_.insert(in.w[2]);
        continue;
      }
      if (result_coop) find(in.w[2]);
      switch (op) {
        case OpVariable:
          if (result_coop && in.w.size() > 4) unite(in.w[2], in.w[4]);
          break;
        case OpLoad:
        case OpAccessChain:
        case OpInBoundsAccessChain:
        case OpPtrAccessChain:
          if (result_coop) unite(in.w[2], in.w[3]);
          break;
        case OpCompositeExtract:
          if (result_coop) unite(in.w[2], in.w[3]);
          break;
        case OpStore:
          if (coop_valued(in.w[2])) unite(in.w[1], in.w[2]);
          break;
        case OpPhi:
          if (result_coop)
            for (std::size_t k = 3; k < in.w.size(); k += 2) unite(in.w[2], in.w[k]);
          break;
        case OpSelect:
          if (result_coop) unite(in.w[2], in.w[4]), unite(in.w[2], in.w[5]);
          break;
        case OpCoopMulAddNv:
          roles_[in.w[3]].push_back(A);
          roles_[in.w[4]].push_back(B);
          roles_[in.w[2]].push_back(Acc);
          unite(in.w[2], in.w[5]);
          break;
        case OpCoopLoadNv:
        case OpCoopStoreNv:
        case OpCoopLengthNv:
          break;
        case OpFunctionParameter:
        case OpFunctionCall:
        case OpFunction:
          if (result_coop) unsupported(in);
          if (op == OpFunctionCall)
            for (std::size_t k = 4; k < in.w.size(); ++k)
              if (coop_valued(in.w[k])) unsupported(in);
          break;
        case OpReturnValue:
          if (coop_valued(in.w[1])) unsupported(in);
          break;
        default:
          if (result_coop) {
            if (is_conversion(op)) break;  // its own value; the use may change (see conversions_)
            if (!is_elementwise(op)) unsupported(in);
            for (std::size_t k = 3; k < in.w.size(); ++k)
              if (coop_valued(in.w[k])) unite(in.w[2], in.w[k]);
          }
      }
    }
  }

  void assign_uses() {
    std::unordered_map<std::uint32_t, std::vector<Use>> by_class;
    for (auto& [id, rs] : roles_) {
      if (poly(id)) continue;
      auto& v = by_class[find(id)];
      v.insert(v.end(), rs.begin(), rs.end());
    }
    for (auto& [c, rs] : by_class) {
      std::sort(rs.begin(), rs.end());
      rs.erase(std::unique(rs.begin(), rs.end()), rs.end());
      // One position: that use. Several: the accumulator, converted to A or B where multiplied
      // (NV_cooperative_matrix2 converts from the accumulator only).
      Use u = rs.size() == 1 ? rs[0] : Acc;
      if (rs.size() > 1 && std::find(rs.begin(), rs.end(), Acc) == rs.end())
        throw CompileError("cooperative-matrix translation: one matrix is both operand A and B of multiplies");
      use_[c] = u;
    }
  }

  Use use_of(std::uint32_t id) {
    auto it = use_.find(find(id));
    return it == use_.end() ? Acc : it->second;  // never multiplied: loads, stores, arithmetic only
  }

  // ---- emission ----

  std::uint32_t fresh() { return bound_++; }

  using Variants = std::map<std::pair<std::uint32_t, Use>, std::uint32_t>;

  // Whether `id` was given a variant for some use; its first keeps the id itself.
  static bool has_variant(const Variants& m, std::uint32_t id) {
    auto it = m.lower_bound({id, A});
    return it != m.end() && it->first.first == id;
  }

  // The id for (`id`, `use`) in `m`: `id` itself for its first use, a fresh one for others.
  std::uint32_t variant_id(Variants& m, std::uint32_t id, Use use) {
    auto it = m.find({id, use});
    if (it != m.end()) return it->second;
    const bool first = !has_variant(m, id);
    return m[{id, use}] = first ? id : fresh();
  }

  // The id of `type` retyped for `use`.
  std::uint32_t variant(std::uint32_t type, Use use) {
    return coop_types_.count(type) ? variant_id(variants_, type, use) : type;
  }

  std::uint32_t const_uint(std::uint32_t v) { return use_consts_[v]; }

  std::uint32_t layout_of(std::uint32_t column_major_id) {
    auto b = bools_.find(column_major_id);
    if (b == bools_.end())
      throw CompileError("cooperative-matrix translation: a load's or store's column-major flag is not a constant");
    return const_uint(b->second ? 1 : 0);
  }

  // A constant matrix's id in a context of `use`.
  std::uint32_t operand(std::uint32_t id, Use use) {
    if (!poly(id)) return id;
    request_recursive(type_of_.at(id), use);
    return variant_id(poly_variants_, id, use);
  }

  Inst retyped_decl(const Inst& in, Use use, std::uint32_t id) {
    Inst out = in;
    out.w[1] = id;
    switch (in.op()) {
      case OpTypeArray: case OpTypeRuntimeArray: out.w[2] = variant(in.w[2], use); break;
      case OpTypePointer: out.w[3] = variant(in.w[3], use); break;
      case OpTypeStruct: for (std::size_t k = 2; k < in.w.size(); ++k) out.w[k] = variant(in.w[k], use); break;
      case OpTypeCoopNv:  // result, component, scope, rows, columns -> + use
        out = make(OpTypeCoopKhr, {id, in.w[2], in.w[3], in.w[4], in.w[5], const_uint(use)});
        break;
      default: unsupported(in);
    }
    return out;
  }

  // Requests every (type, use) the functions need before the types are written, so that each
  // declaration is written with all its variants at its place.
  void request_types() {
    for (const Inst& in : insts_) {
      if (!has_type_and_result(in.op()) || !coop_types_.count(in.w[1]) || poly(in.w[2])) continue;
      if (in.op() == OpCoopMulAddNv) {
        for (int k = 3; k <= 4; ++k) {
          Use want = k == 3 ? A : B;
          if (!poly(in.w[k]) && use_of(in.w[k]) != want) request_recursive(type_of_.at(in.w[k]), want);
        }
      }
      request_recursive(in.w[1], use_of(in.w[2]));
    }
  }

  void request_recursive(std::uint32_t type, Use use) {
    if (!coop_types_.count(type)) return;
    variant(type, use);
    const Inst& decl = *decls_.at(type);
    switch (decl.op()) {
      case OpTypeArray: case OpTypeRuntimeArray: request_recursive(decl.w[2], use); break;
      case OpTypePointer: request_recursive(decl.w[3], use); break;
      case OpTypeStruct: for (std::size_t k = 2; k < decl.w.size(); ++k) request_recursive(decl.w[k], use); break;
      default: break;
    }
  }

  std::vector<std::uint32_t> emit() {
    for (const Inst& in : insts_)
      if (is_type_decl(in)) decls_[in.w[1]] = &in;
    // Use and layout constants (0: A / row-major, 1: B / column-major, 2: accumulator).
    bool add_uint = uint_type_ == 0;
    if (add_uint) uint_type_ = fresh();
    for (std::uint32_t v = 0; v < 3; ++v) use_consts_[v] = fresh();
    request_types();
    // Poly constants used as multiply operands or in contexts: requested while rewriting
    // functions, so functions are rewritten first and the globals after.
    std::vector<Inst> body;
    bool in_function = false;
    for (const Inst& in : insts_) {
      if (in.op() == OpFunction) in_function = true;
      if (in_function) rewrite_function_inst(in, body);
    }

    std::vector<Inst> out;
    bool consts_written = false;
    auto write_consts = [&] {
      if (consts_written) return;
      consts_written = true;
      if (add_uint) out.push_back(make(OpTypeInt, {uint_type_, 32, 0}));
      for (std::uint32_t v = 0; v < 3; ++v) out.push_back(make(OpConstant, {uint_type_, use_consts_[v], v}));
    };
    for (const Inst& in : insts_) {
      if (in.op() == OpFunction) break;
      auto op = in.op();
      if (op == OpCapability && in.w[1] == kCapCoopNv) {
        out.push_back(make(OpCapability, {kCapCoopKhr}));
        if (conversions_) out.push_back(make(OpCapability, {kCapConversionsNv}));
        continue;
      }
      if (op == OpExtension && string_of(in, 1) == "SPV_NV_cooperative_matrix") {
        out.push_back(make(OpExtension, string_words("SPV_KHR_cooperative_matrix")));
        if (conversions_) out.push_back(make(OpExtension, string_words("SPV_NV_cooperative_matrix2")));
        continue;
      }
      if ((op == OpDecorate || op == OpMemberDecorate) && coop_types_.count(in.w[1])) {
        for (auto& [key, id] : variants_)
          if (key.first == in.w[1]) {
            Inst d = in;
            d.w[1] = id;
            out.push_back(d);
          }
        continue;
      }
      if (op == OpName && (coop_types_.count(in.w[1]) || poly(in.w[1]))) {
        if (has_variant(poly(in.w[1]) ? poly_variants_ : variants_, in.w[1])) out.push_back(in);
        continue;
      }
      if (is_type_decl(in) && coop_types_.count(in.w[1])) {
        write_consts();
        for (auto& [key, id] : variants_)
          if (key.first == in.w[1]) out.push_back(retyped_decl(in, key.second, id));
        continue;
      }
      if (has_type_and_result(op) && poly(in.w[2])) {
        for (auto& [key, id] : poly_variants_)
          if (key.first == in.w[2]) {
            Inst c = in;
            c.w[1] = variant(in.w[1], key.second);
            c.w[2] = id;
            out.push_back(c);
          }
        continue;
      }
      if (op == OpVariable && coop_types_.count(in.w[1])) {  // a Private matrix
        Inst v = in;
        Use u = use_of(in.w[2]);
        v.w[1] = variant(in.w[1], u);
        if (v.w.size() > 4) v.w[4] = operand(v.w[4], u);
        out.push_back(v);
        continue;
      }
      out.push_back(in);
      if (op == OpTypeInt && in.w[1] == uint_type_) write_consts();
    }
    out.insert(out.end(), body.begin(), body.end());
    if (!consts_written) throw CompileError("cooperative-matrix translation: no cooperative-matrix type declared");

    std::vector<std::uint32_t> words = header_;
    words[3] = bound_;
    for (const Inst& in : out) words.insert(words.end(), in.w.begin(), in.w.end());
    return words;
  }

  void rewrite_function_inst(const Inst& in, std::vector<Inst>& body) {
    auto op = in.op();
    Inst out = in;
    bool typed = has_type_and_result(op);
    Use u = typed && coop_types_.count(in.w[1]) ? use_of(in.w[2]) : Acc;
    if (typed && coop_types_.count(in.w[1])) out.w[1] = variant(in.w[1], u);
    switch (op) {
      case OpCoopLoadNv: {  // type, result, pointer, stride, column-major, [memory access]
        std::vector<std::uint32_t> ops{out.w[1], in.w[2], in.w[3], layout_of(in.w[5]), in.w[4]};
        ops.insert(ops.end(), in.w.begin() + 6, in.w.end());
        body.push_back(make(OpCoopLoadKhr, ops));
        return;
      }
      case OpCoopStoreNv: {  // pointer, object, stride, column-major, [memory access]
        Use ou = poly(in.w[2]) ? Acc : use_of(in.w[2]);
        std::vector<std::uint32_t> ops{in.w[1], operand(in.w[2], ou), layout_of(in.w[4]), in.w[3]};
        ops.insert(ops.end(), in.w.begin() + 5, in.w.end());
        body.push_back(make(OpCoopStoreKhr, ops));
        return;
      }
      case OpCoopLengthNv: {  // type, result, matrix type
        std::uint32_t t = in.w[3];
        Use lu = Acc;
        std::vector<Use> seen;
        for (auto& [key, id] : variants_)
          if (key.first == t) seen.push_back(key.second);
        if (seen.size() == 1) lu = seen[0];
        body.push_back(make(OpCoopLengthKhr, {in.w[1], in.w[2], variant(t, lu)}));
        return;
      }
      case OpCoopMulAddNv: {
        std::uint32_t ops[2];
        for (int k = 0; k < 2; ++k) {
          std::uint32_t id = in.w[3 + k];
          Use want = k == 0 ? A : B;
          if (poly(id)) {
            ops[k] = operand(id, want);
          } else if (use_of(id) != want) {
            // Stored as an accumulator (another multiply adds into it or takes it elsewhere).
            conversions_ = true;
            ops[k] = fresh();
            body.push_back(make(OpCoopConvertNv, {variant(type_of_.at(id), want), ops[k], id}));
          } else {
            ops[k] = id;
          }
        }
        body.push_back(make(OpCoopMulAddKhr, {out.w[1], in.w[2], ops[0], ops[1], operand(in.w[5], Acc)}));
        return;
      }
      default:
        break;
    }
    if (typed && is_conversion(op) && coop_types_.count(in.w[1])) {
      if (!poly(in.w[3]) && use_of(in.w[3]) != u) conversions_ = true;
      out.w[3] = operand(in.w[3], u);
      body.push_back(out);
      return;
    }
    // Constant matrices among the operands take this instruction's use: its result's, or for a
    // store the pointer's.
    std::size_t first = typed ? 3 : 1;
    if (op == OpStore && coop_valued(in.w[2])) u = use_of(in.w[1]);
    if (op == OpPhi) {
      for (std::size_t k = 3; k < in.w.size(); k += 2) out.w[k] = operand(in.w[k], u);
    } else {
      for (std::size_t k = first; k < in.w.size(); ++k)
        if (poly(in.w[k])) out.w[k] = operand(in.w[k], u);
    }
    body.push_back(out);
  }

  std::vector<std::uint32_t> header_;
  std::uint32_t bound_ = 0;
  std::vector<Inst> insts_;
  std::unordered_set<std::uint32_t> coop_types_;  // NV matrices and types holding them
  std::unordered_map<std::uint32_t, std::uint32_t> type_of_;
  std::unordered_map<std::uint32_t, bool> bools_;
  std::uint32_t uint_type_ = 0;
  std::unordered_map<std::uint32_t, std::uint32_t> parent_;
  std::unordered_set<std::uint32_t> poly_;
  std::unordered_map<std::uint32_t, std::vector<Use>> roles_;
  std::unordered_map<std::uint32_t, Use> use_;
  Variants variants_;       // (matrix type, use) -> its declaration's id
  Variants poly_variants_;  // (constant matrix, use) -> its declaration's id
  std::unordered_map<std::uint32_t, const Inst*> decls_;
  std::uint32_t use_consts_[3] = {};
  bool conversions_ = false;
};

}  // namespace

KhrModule coopmat_to_khr(std::span<const std::uint32_t> nv) { return Translator(nv).run(); }

}  // namespace ejk::vulkan
