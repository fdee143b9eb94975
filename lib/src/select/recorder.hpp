#pragma once
// EJK_RECORD=trace.jsonl: one JSON line per executor call. Lines are written with single
// O_APPEND writes, so several processes (and threads) can record into one file.
#include <filesystem>
#include <memory>
#include <string_view>

namespace ejk::select {

class Recorder {
 public:
  // One recorder per path in the process. Throws IoError when the file cannot be opened.
  static std::shared_ptr<Recorder> open(const std::filesystem::path& path);
  explicit Recorder(const std::filesystem::path& path);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Appends `line` (which must end with '\n') in one write.
  void append(std::string_view line);

 private:
  int fd_;
  std::filesystem::path path_;
};

}  // namespace ejk::select
