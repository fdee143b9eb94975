// The translation of ejk's GL_NV_cooperative_matrix shaders into SPV_KHR_cooperative_matrix
// (backends/vulkan/coopmat_khr.hpp): every embedded cooperative-matrix module translates, no NV
// instruction is left, every multiply's operands are typed A, B and accumulator (after a
// conversion where the module needs one), and only modules that change a matrix's use ask for
// NV_cooperative_matrix2. Running the translated modules is the cooperative-matrix kernel tests'
// part on devices with VK_KHR_cooperative_matrix.
#ifdef EJK_HAVE_VULKAN
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/vulkan/coopmat_khr.hpp"
#include "backends/vulkan/vulkan_device.hpp"
#include "core/embedded.hpp"
#include "ejk/error.hpp"
#include "support.hpp"
#include "vulkan_coopmat_khr_modules.hpp"

namespace ejk {
namespace {

struct Parsed {
  std::map<std::uint32_t, std::vector<std::uint32_t>> defs;  // result id -> its instruction
  std::vector<std::vector<std::uint32_t>> insts;
  std::map<std::uint32_t, std::uint32_t> constants;  // OpConstant id -> value
  std::set<std::uint32_t> types;                     // matrix types
};

Parsed parse(const std::vector<std::uint32_t>& w) {
  Parsed p;
  for (std::size_t i = 5; i < w.size();) {
    std::uint32_t n = w[i] >> 16;
    std::vector<std::uint32_t> in(w.begin() + static_cast<std::ptrdiff_t>(i), w.begin() + static_cast<std::ptrdiff_t>(i + n));
    std::uint32_t op = in[0] & 0xffff;
    if (op == 4456) p.defs[in[1]] = in, p.types.insert(in[1]);  // OpTypeCooperativeMatrixKHR
    if (op == 43) p.constants[in[2]] = in[3];                     // OpConstant
    // A value of a matrix type (types come before their values; ids are unique).
    if (op != 4456 && in.size() >= 3 && p.types.count(in[1])) p.defs[in[2]] = in;
    p.insts.push_back(std::move(in));
    i += n;
  }
  return p;
}

std::vector<std::uint32_t> words_of(const detail::EmbeddedFile& f) {
  std::vector<std::uint32_t> w(f.size / 4);
  std::memcpy(w.data(), f.data, w.size() * 4);
  return w;
}

// The use (0 A, 1 B, 2 accumulator) of a value's matrix type.
std::uint32_t use_of(const Parsed& p, std::uint32_t value) {
  const auto& def = p.defs.at(value);
  const auto& type = p.defs.at(def[1]);
  return p.constants.at(type[6]);
}

std::vector<std::string> coopmat_modules() {
  std::vector<std::string> keys;
  for (const auto* f : detail::embedded_files()) {
    std::string k = f->key;
    if (k.ends_with(".spv") && k.find("coopmat") != std::string::npos) keys.push_back(k);
  }
  return keys;
}

// What a translated module holds: no NV instruction (checked), its products (each checked for
// operands typed A, B and accumulator), its use conversions, and its loads' layouts in order.
struct Translated {
  int products = 0;
  int converts = 0;               // OpCooperativeMatrixConvertNV
  bool use_changes = false;       // a converting instruction between matrices of different uses
  std::vector<std::uint32_t> load_layouts;
};

Translated check(const vulkan::KhrModule& khr) {
  Translated t;
  EXPECT_FALSE(khr.words.empty());
  if (khr.words.empty()) return t;
  EXPECT_EQ(khr.words[0], 0x07230203u);
  auto p = parse(khr.words);
  for (const auto& in : p.insts) {
    std::uint32_t op = in[0] & 0xffff;
    EXPECT_FALSE(op >= 5358 && op <= 5362) << "NV cooperative-matrix opcode " << op << " left";
    if (op == 17) {
      EXPECT_NE(in[1], 5357u) << "CooperativeMatrixNV capability left";
    }
    if (op == 5293) ++t.converts, t.use_changes = true;
    if (op == 4457) t.load_layouts.push_back(p.constants.at(in[4]));  // type, result, pointer, layout
    if (op == 4459) {  // OpCooperativeMatrixMulAddKHR: type, result, a, b, c
      ++t.products;
      EXPECT_EQ(use_of(p, in[3]), 0u);
      EXPECT_EQ(use_of(p, in[4]), 1u);
      EXPECT_EQ(p.constants.at(p.defs.at(in[1])[6]), 2u);
    }
    if (op == 115 && p.types.count(in[1]) && p.defs.count(in[3]) && use_of(p, in[2]) != use_of(p, in[3]))
      t.use_changes = true;
  }
  EXPECT_EQ(khr.conversions, t.use_changes);
  return t;
}

TEST(VulkanCoopmatKhr, EveryCooperativeMatrixShaderTranslates) {
  auto keys = coopmat_modules();
#ifdef EJK_HAVE_COOPMAT
  ASSERT_GE(keys.size(), 8u);
#endif
  for (const auto& key : keys) {
    SCOPED_TRACE(key);
    const Translated t = check(vulkan::coopmat_to_khr(words_of(detail::embedded(key))));
    if (key.find("rows_coopmat") == std::string::npos) {
      EXPECT_GT(t.products, 0);
    }
  }
}

TEST(VulkanCoopmatKhr, AMultiplyingAccumulatorIsConvertedWhereItIsAnOperand) {
  // y = a b + 0 in f16, then s = y 0 + 0 in f32: y and the zero matrix are accumulators that
  // the second product takes as A and B.
  const std::vector<std::uint32_t> nv(std::begin(test::coopmat_use_change_spirv), std::end(test::coopmat_use_change_spirv));
  const auto khr = vulkan::coopmat_to_khr(nv);
  EXPECT_TRUE(khr.conversions);
  const Translated t = check(khr);
  EXPECT_EQ(t.products, 2);
  EXPECT_EQ(t.converts, 2);
  EXPECT_EQ(t.load_layouts, (std::vector<std::uint32_t>{0, 1}));  // a row-major, b column-major
}

TEST(VulkanCoopmatKhr, OneMatrixAsBothOperandsIsRefusedByName) {
  const std::vector<std::uint32_t> nv(std::begin(test::coopmat_a_and_b_spirv), std::end(test::coopmat_a_and_b_spirv));
  try {
    vulkan::coopmat_to_khr(nv);
    ADD_FAILURE() << "no error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("both operand A and B"), std::string::npos) << e.what();
  }
}

TEST(VulkanCoopmatKhr, UsesFollowWhereMatricesFlow) {
  // matmul multiplies straight from loads; flash attention's probabilities go from an
  // accumulator to an operand.
  EXPECT_FALSE(vulkan::coopmat_to_khr(words_of(detail::embedded("matmul/matmul_coopmat.spv"))).conversions);
  EXPECT_TRUE(vulkan::coopmat_to_khr(words_of(detail::embedded("flash_attention/flash_attention_fwd_coopmat.spv"))).conversions);
}

TEST(VulkanCoopmatKhr, ModulesWithoutCooperativeMatricesAreLeftAlone) {
  EXPECT_TRUE(vulkan::coopmat_to_khr(words_of(detail::embedded("common/copy.spv"))).words.empty());
  std::vector<std::uint32_t> junk{1, 2, 3};
  EXPECT_THROW(vulkan::coopmat_to_khr(junk), CompileError);
  // Cut inside an instruction.
  auto truncated = words_of(detail::embedded("matmul/matmul_coopmat.spv"));
  std::size_t i = 5;
  while ((truncated[i] >> 16) < 3) i += truncated[i] >> 16;
  truncated.resize(i + 2);
  EXPECT_THROW(vulkan::coopmat_to_khr(truncated), CompileError);
  // An instruction too short for the operands the translation reads: the first cooperative-matrix
  // load cut to three words, the module's length kept.
  auto short_load = words_of(detail::embedded("matmul/matmul_coopmat.spv"));
  for (std::size_t j = 5; j < short_load.size(); j += short_load[j] >> 16)
    if ((short_load[j] & 0xffff) == 5359) {  // OpCooperativeMatrixLoadNV
      const std::uint32_t n = short_load[j] >> 16;
      short_load[j] = 3u << 16 | 5359;
      short_load[j + 3] = (n - 3) << 16 | 1;  // the rest as an OpUndef of its own length
      break;
    }
  try {
    vulkan::coopmat_to_khr(short_load);
    ADD_FAILURE() << "no error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("opcode 5359 with 3 words"), std::string::npos) << e.what();
  }
}

TEST(VulkanCoopmatKhr, EnvironmentPicksTheFormAndRejectsOthersByName) {
  const test::ScopedEnv restore("EJK_VULKAN_COOPMAT");
  ::unsetenv("EJK_VULKAN_COOPMAT");
  EXPECT_TRUE(vulkan::coopmat_khr_from_env());
  ::setenv("EJK_VULKAN_COOPMAT", "nv", 1);
  EXPECT_FALSE(vulkan::coopmat_khr_from_env());
  ::setenv("EJK_VULKAN_COOPMAT", "khr", 1);
  EXPECT_TRUE(vulkan::coopmat_khr_from_env());
  ::setenv("EJK_VULKAN_COOPMAT", "amd", 1);
  test::expect_error([] { vulkan::coopmat_khr_from_env(); }, "EJK_VULKAN_COOPMAT=amd");
}

}  // namespace
}  // namespace ejk

#endif  // EJK_HAVE_VULKAN
