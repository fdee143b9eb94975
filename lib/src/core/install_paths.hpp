#pragma once
// Where the library's companions (the shipped profiles, the tuner's worker) lie, found from
// the library file itself so that an installed tree still works after it is moved: nothing
// absolute is compiled in.
#include <filesystem>

namespace ejk::detail {

// The folder holding the loaded libejk file; empty when it cannot be told.
std::filesystem::path library_dir();
// The installed share/ejk/profiles and bin folders, by their path relative to library_dir()
// (the build tree mirrors them); empty when library_dir() is.
std::filesystem::path installed_profiles_dir();
std::filesystem::path installed_bin_dir();

}  // namespace ejk::detail
