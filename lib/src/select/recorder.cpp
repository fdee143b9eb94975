#include "select/recorder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ejk/error.hpp"
#include "select/per_path.hpp"

namespace ejk::select {

Recorder::Recorder(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;  // before anything else can change it
    throw IoError("EJK_RECORD: cannot open " + path.string() + ": " + std::strerror(err));
  }
}

Recorder::~Recorder() { ::close(fd_); }

std::shared_ptr<Recorder> Recorder::open(const std::filesystem::path& path) { return one_per_path<Recorder>(path); }

void Recorder::append(std::string_view line) {
  // A regular-file write with O_APPEND positions and writes under the inode lock, so one
  // write() call never interleaves with another process's. Short writes (a full disk) are
  // finished with further writes, which could interleave; that is reported, not hidden.
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw IoError("EJK_RECORD: writing " + path_.string() + ": " + std::strerror(err));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace ejk::select
