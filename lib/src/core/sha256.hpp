#pragma once
// SHA-256 (FIPS 180-4), for kernel versions and bundle checksums.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ejk::detail {

class Sha256 {
 public:
  Sha256();
  Sha256& update(std::string_view data);
  std::array<std::uint8_t, 32> digest();
  std::string hex();  // lowercase, 64 characters

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace ejk::detail
