#include "common/builtin.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/static_list.hpp"

namespace ejk {

namespace kernels {

namespace {

struct Registration {
  Stage stage;
  std::string key;
  Builtin::Add add;
};

}  // namespace

Builtin::Builtin(Stage stage, const char* key, Add add) { static_list<Registration>().push_back({stage, key, add}); }

}  // namespace kernels

void register_builtin_kernels(Registry& registry) {
  std::vector<kernels::Registration> list = static_list<kernels::Registration>();
  std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return std::tie(a.stage, a.key) < std::tie(b.stage, b.key); });
  for (const auto& r : list) r.add(registry);
}

}  // namespace ejk
