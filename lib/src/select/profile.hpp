#pragma once
// The profile tier: configs from shipped bundles, matched to an invocation by exact device,
// then same vendor and architecture, then the nearest workload of the same kind.
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/bundle.hpp"
#include "ejk/kernel.hpp"

namespace ejk::select {

struct ProfileHit {
  Config config;
  std::string reason;
};

class ProfileStore {
 public:
  // Loads every *.json bundle in `dirs` (in order, files sorted by name). A bundle that fails
  // its checks is reported on stderr and skipped: a bad shipped file must not stop a program.
  explicit ProfileStore(const std::vector<std::filesystem::path>& dirs);
  // One store per list of folders, shared by every executor of the process.
  static std::shared_ptr<const ProfileStore> shared(const std::vector<std::filesystem::path>& dirs);

  std::size_t size() const { return items_.size(); }

  // `mismatch` says why a config is not in the invocation's space ("" when it is); entries
  // whose config does not fit are passed over. Entries of another kernel version are ignored.
  std::optional<ProfileHit> find(const Invocation& inv, const Kernel& kernel, std::string_view version,
                                 const DeviceInfo& dev,
                                 const std::function<std::string(const Config&)>& mismatch) const;

 private:
  struct Item {
    CacheEntry entry;
    DeviceRecord device;
    std::string file;  // file name, for reasons
    Invocation inv;    // parsed from the entry's signature
  };
  std::vector<Item> items_;
};

}  // namespace ejk::select
