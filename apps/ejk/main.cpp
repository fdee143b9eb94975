// ejk: tune, run and benchmark kernels. The one place exceptions become exit codes
// (docs/cli.md):
//   0 success
//   1 the command found what it checks for: a regression (compare), a damaged cache (cache
//     verify), a workload that failed or could not be tuned (run, replay, tune)
//   2 usage error or invalid argument (bad recipe, bad shape, unknown option value)
//   3 not found (unknown kernel, cache entry)
//   4 device or compile error
//   5 I/O error (missing, unreadable or unwritable file, damaged bundle or trace)
//   6 selection error (EJK_STRICT refused a selection)
//   70 internal error
//   130 interrupted (run, replay, tune: the finished workloads are reported)
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "commands.hpp"
#include "ejk/ejk.hpp"

// Messages quote what files hold (names, keys, values): nothing in them may drive the terminal.
static std::string shown(const std::exception& e) { return ejk::printable(e.what(), std::string::npos, true); }

int main(int argc, char** argv) {
  CLI::App app{"ejk: tune, run and benchmark attention and matrix kernels on cpu, OpenCL and Vulkan"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand
  app.set_version_flag("--version", std::string(ejk::build_info()));
  ejk::app::Globals g;
  app.add_option("--device", g.device, "device: cpu, opencl:N, vulkan:N, cuda:N or auto (default: the recipe's, $EJK_DEVICE, auto)");
  app.add_option("--cache-dir", g.cache_dir, "persistent cache folder (default: $EJK_CACHE_DIR, else $XDG_CACHE_HOME/ejk)");
  app.add_option("--json", g.json_path, "also write the results as JSON (Google Benchmark's shape) to FILE");
  app.add_flag("-v,--verbose", g.verbose, "say more");
  app.add_flag("-q,--quiet", g.quiet, "print only what was asked for");
  app.parse_complete_callback([&g] {
    if (!g.cache_dir.empty()) setenv("EJK_CACHE_DIR", g.cache_dir.c_str(), 1);
  });
  ejk::app::add_devices(app, g);
  ejk::app::add_kernels(app, g);
  ejk::app::add_run(app, g);
  ejk::app::add_tune(app, g);
  ejk::app::add_bundles(app, g);
  ejk::app::add_cache(app, g);
  ejk::app::add_compare(app, g);
  ejk::app::add_report(app, g);
  // With EJK_AUTOTUNE_POLICY=autotune, selections that reach the autotune tier are tuned here.
  ejk::install_autotuner();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const ejk::InvalidArgument& e) {
    fmt::print(stderr, "ejk: {}\n", shown(e));
    return 2;
  } catch (const ejk::NotFound& e) {
    fmt::print(stderr, "ejk: {}\n", shown(e));
    return 3;
  } catch (const ejk::DeviceError& e) {
    fmt::print(stderr, "ejk: device error: {}\n", shown(e));
    return 4;
  } catch (const ejk::IoError& e) {
    fmt::print(stderr, "ejk: {}\n", shown(e));
    return 5;
  } catch (const ejk::SelectionError& e) {
    fmt::print(stderr, "ejk: {}\n", shown(e));
    return 6;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ejk: internal error: {}\n", shown(e));
    return 70;
  }
  return g.exit_code;
}
