// Traces (EJK_RECORD's JSONL): a file -> read_trace -> what `ejk replay` and `ejk tune` do with
// each line before touching a device: its name and key, the key read back, and the kernel's
// own checks and cost.
#include "ejk/ejk.hpp"
#include "ejk/tuner.hpp"
#include "report.hpp"
#include "support.hpp"

namespace {

const ejk::fuzz::InputFile& input() {
  static const ejk::fuzz::InputFile file("trace.jsonl");
  return file;
}

void exercise(const ejk::TraceRecord& r) {
  const ejk::Invocation& inv = r.invocation;
  (void)ejk::app::workload_name(inv);
  const std::string sig = inv.signature();
  if (ejk::Invocation::from_json(inv.to_json()).signature() != sig)
    ejk::fuzz::finding("an invocation that does not survive writing and reading", sig);
  if (!ejk::Registry::global().has(inv.kernel)) return;  // replay reports the unknown kernel
  const ejk::Kernel& kernel = ejk::Registry::global().kernel(inv.kernel);
  try {
    kernel.validate(inv);
  } catch (const ejk::InvalidArgument&) {
    return;  // replay reports the line as invalid
  }
  ejk::fuzz::require_sane_sizes(inv);
  (void)kernel.flops(inv);
  (void)kernel.bytes(inv);
  (void)kernel.vars(inv);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ejk::Registry::global();
  (void)input();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = input().write(ejk::fuzz::text_of(data, size));
  std::vector<ejk::TraceRecord> records;
  try {
    records = ejk::read_trace(path);
  } catch (const ejk::IoError& e) {
    ejk::fuzz::require_place(e.what(), path + ":");
    return 0;
  }
  for (const auto& r : records) exercise(r);
  return 0;
}
