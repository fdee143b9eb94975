// Bounded JSON input and atomic JSON output. Limits are enforced while parsing (through the
// parser's callback) so that a hostile file never becomes a deep tree in memory.
#include "ejk/json.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <set>
#include <vector>

#include "ejk/error.hpp"
#include "ejk/text.hpp"

namespace ejk {

namespace fs = std::filesystem;

namespace {

// A char iterator that tells how far the parser has read, so that refusals made from the
// parser's callback can name a line and column.
class Tracked {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  Tracked(const char* p, const char* begin, std::size_t* read) : p_(p), begin_(begin), read_(read) {}
  reference operator*() const { return *p_; }
  Tracked& operator++() {
    ++p_;
    *read_ = static_cast<std::size_t>(p_ - begin_);
    return *this;
  }
  Tracked operator++(int) {
    Tracked t = *this;
    ++*this;
    return t;
  }
  bool operator==(const Tracked& o) const { return p_ == o.p_; }
  bool operator!=(const Tracked& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char* begin_;
  std::size_t* read_;
};

// "line:col" of the byte before offset `read` (the last one the parser consumed), `text`
// starting on line `first_line`.
std::string place(std::string_view text, std::size_t read, std::size_t first_line) {
  const std::size_t at = std::min(read > 0 ? read - 1 : 0, text.size());
  std::size_t line = first_line, line_start = 0;
  for (std::size_t i = 0; i < at; ++i)
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  return std::to_string(line) + ":" + std::to_string(at - line_start + 1);
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
// without the parts the location already says.
std::string reason_of(const nlohmann::json::exception& e) {
  std::string s = e.what();
  if (auto close = s.find("] "); s.rfind("[json.exception.", 0) == 0 && close != std::string::npos) s.erase(0, close + 2);
  if (s.rfind("parse error", 0) == 0)
    if (auto colon = s.find(": "); colon != std::string::npos) s.erase(0, colon + 2);
  return s;
}

struct Refusal {
  std::string what;
};

struct Frame {
  bool array = false;
  std::int64_t index = -1;
  std::string key;
  std::set<std::string, std::less<>> keys;
};

// Where the parser is, as a JSON pointer: /entries/3/config. Deep ones keep their two ends.
std::string pointer(const std::vector<Frame>& frames) {
  std::string out;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (frames.size() > 12 && i == 6) {
      out += "/...";
      i = frames.size() - 4;
    }
    const Frame& f = frames[i];
    if (f.array && f.index >= 0) out += "/" + std::to_string(f.index);
    else if (!f.array && !f.key.empty()) out += "/" + printable(f.key, 40);
  }
  return out.empty() ? "/" : out;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and returns close()'s errno (0 when it succeeded).
  int close() {
    int fd = fd_;
    fd_ = -1;
    return fd >= 0 && ::close(fd) != 0 ? errno : 0;
  }

 private:
  int fd_;
};

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

std::string json_kind(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::binary: return "binary data";
    default: return v.dump();  // numbers and booleans: the value says what it is
  }
}

nlohmann::json parse_json(std::string_view text, std::string_view source, const JsonLimits& limits,
                          std::size_t first_line) {
  const std::string src = printable(source, 4096);
  if (text.size() > limits.max_bytes)
    throw InvalidArgument(src + ": " + std::to_string(text.size()) + " bytes of JSON, more than the limit of " +
                          std::to_string(limits.max_bytes) + " bytes");
  std::size_t read = 0;
  std::vector<Frame> frames;
  auto element = [&] {
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  };
  using Event = nlohmann::json::parse_event_t;
  auto check = [&](int depth, Event event, nlohmann::json& parsed) -> bool {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        element();
        if (depth + 1 > limits.max_depth)
          throw Refusal{"arrays and objects nested deeper than " + std::to_string(limits.max_depth) + " levels (at " +
                        pointer(frames) + ")"};
        frames.emplace_back().array = event == Event::array_start;
        break;
      case Event::key: {
        Frame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) throw Refusal{"duplicate key '" + printable(f.key) + "' at " + pointer(frames)};
        break;
      }
      case Event::object_end:
      case Event::array_end:
        frames.pop_back();
        break;
      case Event::value:
        element();
        break;
    }
    return true;
  };
  const char* begin = text.data();
  try {
    return nlohmann::json::parse(Tracked(begin, begin, &read), Tracked(begin + text.size(), begin, &read), check);
  } catch (const Refusal& r) {
    throw InvalidArgument(src + ":" + place(text, read, first_line) + ": " + r.what);
  } catch (const nlohmann::json::parse_error& e) {
    throw InvalidArgument(src + ":" + place(text, e.byte, first_line) + ": not valid JSON: " + printable(reason_of(e)));
  } catch (const nlohmann::json::exception& e) {
    // A number out of range (1e400) is the parser's out_of_range.406.
    throw InvalidArgument(src + ":" + place(text, read, first_line) + ": " + printable(reason_of(e)));
  }
}

nlohmann::json read_json_file(const fs::path& path, const JsonLimits& limits) {
  const std::string name = printable(path.string(), 4096);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    throw IoError("cannot read " + name + ": " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw IoError("cannot read " + name + ": it is a folder");
    if (S_ISREG(st.st_mode) && static_cast<std::uintmax_t>(st.st_size) > limits.max_bytes)
      throw InvalidArgument(name + ": " + std::to_string(st.st_size) + " bytes of JSON, more than the limit of " +
                            std::to_string(limits.max_bytes) + " bytes");
  }
  std::string text;
  char buf[1 << 16];
  while (text.size() <= limits.max_bytes) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw IoError("cannot read " + name + ": " + errno_text(err));
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return parse_json(text, path.string(), limits);
}

void write_json_file(const fs::path& path, const nlohmann::json& doc) {
  write_text_file(path, doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void write_text_file(const fs::path& path, std::string_view text) {
  static std::atomic<unsigned> serial{0};
  const std::string name = printable(path.string(), 4096);
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  // Removes the temporary file unless it was renamed into place.
  struct Temp {
    const fs::path& p;
    bool keep = false;
    ~Temp() {
      if (!keep) ::unlink(p.c_str());
    }
  };
  auto fail = [&](const char* what, int err) -> IoError {
    return IoError("cannot write " + name + ": " + what + errno_text(err));
  };
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw fail("", errno);
  Temp temp{tmp};
  for (std::size_t off = 0; off < text.size();) {
    ssize_t n = ::write(fd.get(), text.data() + off, text.size() - off);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw fail("", err);
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) throw fail("", errno);
  if (int err = fd.close()) throw fail("", err);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw fail("cannot move the new file into place: ", errno);
  temp.keep = true;
}

}  // namespace ejk
