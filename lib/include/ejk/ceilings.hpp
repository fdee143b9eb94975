#pragma once
// A device's measured ceilings (its copy bandwidth and its fastest matrix multiply per dtype) and
// the roofline they draw: what share of the attainable rate a result reached, and which bound
// applies. Measured once per device (`ejk devices --measure`) and kept in the persistent cache
// under the device's fingerprint, so a new driver is measured anew.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ejk/device.hpp"
#include "ejk/dtype.hpp"
#include "ejk/export.hpp"

namespace ejk {

// One measured figure: a rate per second and what was timed to get it.
struct Figure {
  double per_second = 0;
  std::string how;  // "copy of 256 MiB, median of 9", "matmul 1024^3, config {...}"
};

struct EJK_API Ceilings {
  std::optional<Figure> copy;       // bytes read + written per second
  std::map<DType, Figure> matmul;  // FLOP/s of the fastest matmul path, per dtype measured
  std::int64_t measured_unix = 0;

  bool empty() const { return !copy && matmul.empty(); }
  // Bytes per second; 0 when the copy was not measured.
  double bandwidth() const { return copy ? copy->per_second : 0; }
  // FLOP/s for work in `t`: its own figure, else f32's (f16 and bf16 accumulate in f32 where the
  // device has no faster path for them); 0 when neither was measured.
  double peak_flops(DType t) const;

  // {"GB/s": .., "GFLOP/s": {"f32": ..}, "how": {"copy": .., "matmul/f32": ..}, "measured_unix": ..}
  nlohmann::json to_json() const;
  // Throws InvalidArgument naming what is wrong.
  static Ceilings from_json(const nlohmann::json& j);
};

// Where a result stands under its device's roofline.
struct EJK_API Roofline {
  double share = 0;           // achieved rate / attainable rate (may exceed 1: ceilings are measured)
  bool compute_bound = true;  // min(peak, intensity * bandwidth) is the peak
  double attainable = 0;      // FLOP/s when compute-bound, bytes/s otherwise
  double intensity = 0;       // FLOPs per byte; 0 when the work has no FLOPs
  nlohmann::json to_json() const;
  std::string describe() const;  // "62% of roofline (compute-bound)"
};

// The roofline of work of `flops` FLOPs moving `bytes` bytes in `ns` nanoseconds, dtype `t`:
// attainable = min(peak_flops(t), intensity * bandwidth). Work without FLOPs is held to the
// bandwidth alone, work without bytes to the peak alone. nullopt when the ceilings lack the
// figure the bound needs, or the result has no time or no work.
EJK_API std::optional<Roofline> roofline(const Ceilings& c, DType t, double flops, double bytes, double ns);

// Times a device copy and the matmul the selector chain picks (a tuned config when the cache
// has one, else the heuristic; never tuning on the spot, whatever the policy) at growing sizes until one run is long enough to saturate the
// device, for f32 and for f16 and bf16 where the device computes in them. Short on a CPU
// (a few seconds). `progress` hears what is being measured. Throws DeviceError when the device
// cannot run the copy or any matmul.
EJK_API Ceilings measure_ceilings(const std::shared_ptr<Device>& device,
                                  const std::function<void(const std::string&)>& progress = {});

}  // namespace ejk
