#include "ejk/invocation.hpp"

#include "ejk/error.hpp"

namespace ejk {

namespace {
nlohmann::json spec_json(const TensorSpec& s) {
  return nlohmann::json{{"shape", s.shape}, {"dtype", std::string(to_string(s.dtype))}};
}
}  // namespace

std::string Invocation::signature() const {
  nlohmann::json args_json = nlohmann::json::array();
  for (const auto& a : args) args_json.push_back(spec_json(a));
  // nlohmann::json objects are std::map-backed: keys come out sorted, so dump() is canonical.
  return nlohmann::json{{"args", args_json}, {"options", options}}.dump();
}

nlohmann::json Invocation::to_json() const {
  nlohmann::json args_json = nlohmann::json::array();
  for (const auto& a : args) args_json.push_back(spec_json(a));
  return {{"kernel", kernel}, {"args", args_json}, {"options", options}, {"scalars", scalars}};
}

Invocation Invocation::from_json(const nlohmann::json& j) {
  try {
    Invocation inv;
    inv.kernel = j.at("kernel").get<std::string>();
    for (const auto& a : j.at("args"))
      inv.args.push_back({a.at("shape").get<Shape>(), parse_dtype(a.at("dtype").get<std::string>())});
    if (j.contains("options")) inv.options = j.at("options");
    if (j.contains("scalars")) inv.scalars = j.at("scalars");
    if (!inv.options.is_object() || !inv.scalars.is_object())
      throw InvalidArgument("options and scalars must be objects");
    return inv;
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("malformed invocation: ") + e.what());
  }
}

}  // namespace ejk
