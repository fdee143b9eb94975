#pragma once
// Where things that register themselves during static initialization (kernels and their
// implementations, backends, the decode engine's clients) collect: a function-local static, so
// the list exists before the first registration runs, whatever the order of files. One list per
// element type.
#include <vector>

namespace ejk {

template <class T>
std::vector<T>& static_list() {
  static std::vector<T> list;
  return list;
}

}  // namespace ejk
