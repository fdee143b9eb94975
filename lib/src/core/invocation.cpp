#include "ejk/invocation.hpp"

#include <cstdint>

#include "ejk/error.hpp"
#include "ejk/registry.hpp"

namespace ejk {

namespace {
nlohmann::json spec_json(const TensorSpec& s) {
  return nlohmann::json{{"shape", s.shape}, {"dtype", std::string(to_string(s.dtype))}};
}
[[noreturn]] void malformed(const std::string& what) { throw InvalidArgument("malformed invocation: " + what); }

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
  // Every field is checked for its exact type: a JSON reader converts 1.5 to 1 and 2^64-1 to -1
  // without a word, and a shape read that way would pass for a valid one.
  if (!j.is_object()) malformed("not a JSON object");
  Invocation inv;
  if (!j.contains("kernel") || !j.at("kernel").is_string() || j.at("kernel").get_ref<const std::string&>().empty())
    malformed("'kernel' must be a non-empty text");
  inv.kernel = j.at("kernel").get<std::string>();
  if (!j.contains("args") || !j.at("args").is_array()) malformed("'args' must be a list");
  for (std::size_t i = 0; i < j.at("args").size(); ++i) {
    const auto& a = j.at("args")[i];
    const std::string at = "args[" + std::to_string(i) + "]";
    if (!a.is_object() || !a.contains("shape") || !a.contains("dtype")) malformed(at + " must be an object with shape and dtype");
    if (!a.at("shape").is_array()) malformed(at + ".shape must be a list of integers, got " + a.at("shape").dump());
    TensorSpec spec;
    for (const auto& d : a.at("shape")) {
      // A value beyond int64 would wrap when read: numel below names every other bound.
      if (!d.is_number_integer() ||
          (d.is_number_unsigned() && d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)))
        malformed(at + ".shape must be a list of integers from 0 to 2^31-1, got " + a.at("shape").dump());
      spec.shape.push_back(d.get<std::int64_t>());
    }
    if (!a.at("dtype").is_string()) malformed(at + ".dtype must be text, got " + a.at("dtype").dump());
    spec.dtype = parse_dtype(a.at("dtype").get<std::string>());
    (void)numel(spec.shape, at + " (" + inv.kernel + ")");  // every bound of ejk/shape.hpp
    inv.args.push_back(std::move(spec));
  }
  if (j.contains("options")) inv.options = j.at("options");
  if (j.contains("scalars")) inv.scalars = j.at("scalars");
  if (!inv.options.is_object() || !inv.scalars.is_object()) malformed("options and scalars must be objects");
  return inv;
}

Invocation Invocation::of(std::string_view kernel, std::span<const Tensor> args, nlohmann::json options,
                          nlohmann::json scalars) {
  const Kernel& k = Registry::global().kernel(kernel);
  const std::vector<ArgDef> defs = k.args();
  Invocation inv;
  inv.kernel = std::string(kernel);
  inv.options = std::move(options);
  inv.scalars = std::move(scalars);
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].defined())
      throw InvalidArgument(inv.kernel + ": argument " + std::to_string(i) +
                            (i < defs.size() ? " (" + defs[i].name + ")" : std::string()) +
                            " is an undefined tensor; an absent optional argument is an empty tensor of shape [0]");
    inv.args.push_back(args[i].spec());
  }
  k.validate(inv);
  return inv;
}

}  // namespace ejk
