// ejk: tune, run and benchmark kernels. The one place exceptions become exit codes:
//   0 success, 1 a command found what it checks for (a regression, a failed verify),
//   2 usage or invalid argument, 3 not found, 4 device or compile error, 5 I/O error,
//   6 selection error, 70 internal error.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "commands.hpp"
#include "ejk/ejk.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ejk: kernel tuning and benchmarking on cpu, OpenCL and Vulkan"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(ejk::build_info()));
  ejk::app::Globals g;
  app.add_option("--device", g.device, "device: cpu, opencl:N, vulkan:N or auto (default: $EJK_DEVICE or auto)");
  app.add_option("--json", g.json_path, "also write results as JSON to FILE");
  app.add_flag("-v,--verbose", g.verbose, "say more");
  app.add_flag("-q,--quiet", g.quiet, "say less");
  ejk::app::add_devices(app, g);
  ejk::app::add_kernels(app, g);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const ejk::InvalidArgument& e) {
    fmt::print(stderr, "ejk: {}\n", e.what());
    return 2;
  } catch (const ejk::NotFound& e) {
    fmt::print(stderr, "ejk: {}\n", e.what());
    return 3;
  } catch (const ejk::DeviceError& e) {
    fmt::print(stderr, "ejk: device error: {}\n", e.what());
    return 4;
  } catch (const ejk::IoError& e) {
    fmt::print(stderr, "ejk: {}\n", e.what());
    return 5;
  } catch (const ejk::SelectionError& e) {
    fmt::print(stderr, "ejk: {}\n", e.what());
    return 6;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ejk: internal error: {}\n", e.what());
    return 70;
  }
  return 0;
}
