// Started as a separate process by the cache and recording tests:
//   test_helper write <db> <tag> <count> <measurements>  puts <count> entries, printing each commit
//   test_helper record <count>                          runs the probe kernel <count> times (EJK_RECORD)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "select_support.hpp"

int main(int argc, char** argv) {
  using namespace ejk;
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "write" && argc == 6) {
      PersistentCache cache(argv[2]);
      std::string tag = argv[3];
      int count = std::atoi(argv[4]), per = std::atoi(argv[5]);
      for (int i = 0; i < count; ++i) {
        CacheEntry e = test::measured("fp-" + tag, "probe", "v1", "sig-" + std::to_string(i), test::cfg(1 << (i % 6), 1),
                                      100.0 + i);
        std::vector<Measurement> ms(static_cast<std::size_t>(per));
        for (int j = 0; j < per; ++j) {
          ms[j].config = test::cfg(1 << (j % 6), 1 + j % 2);
          ms[j].status = j % 3 == 2 ? Status::validation : Status::ok;
          ms[j].stats = {100.0 + j, 1, 99, 5};
          ms[j].message = "candidate " + std::to_string(j) + " of writer " + tag;
        }
        cache.put(e, ms);
        std::printf("%d\n", i + 1);  // committed
        std::fflush(stdout);
      }
      return 0;
    }
    if (mode == "record" && argc == 3) {
      auto registry = test::probe_registry();
      auto device = test::fake_device();
      Executor ex(device, {.registry = registry.get(), .cache_path = std::filesystem::path(), .profile_dirs = std::vector<std::filesystem::path>{}});
      int count = std::atoi(argv[2]);
      for (int i = 0; i < count; ++i) {
        Invocation inv = test::probe(8 + i % 5);
        Tensor x(device, inv.args[0].shape, inv.args[0].dtype);
        ex.run(inv, std::span(&x, 1));
      }
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_helper %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: test_helper write <db> <tag> <count> <measurements> | record <count>\n");
  return 2;
}
