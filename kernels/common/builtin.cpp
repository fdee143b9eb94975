
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "common/builtin.hpp"

namespace ejk {

namespace kernels {

namespace {

struct Registration {
  Stage stage;
  std::string key;
  Builtin::Add add;
};

// Filled during static initialization, so a function-local static: it exists before the first
// file's registrations run, whatever the order of files.
std::vector<Registration>& registrations() {
  static std::vector<Registration> list;
  return list;
}

}  // namespace

Builtin::Builtin(Stage stage, const char* key, Add add) { registrations().push_back({stage, key, add}); }

}  // namespace kernels

void register_builtin_kernels(Registry& registry) {
  std::vector<kernels::Registration> list = kernels::registrations();
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return std::tie(a.stage, a.key) < std::tie(b.stage, b.key); });
  for (const auto& r : list) r.add(registry);
}

}  // namespace ejk
