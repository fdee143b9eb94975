// Timing waits for a rested GPU to raise its clocks: a device that runs slowly until it has been
// busy for a while (as GPUs do at rest) is timed at its fast speed, by the tuner and by
// `ejk run`'s measure alike (both time through tuning::Bench).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>

#include "select_support.hpp"
#include "tune/bench.hpp"

namespace ejk {
namespace {

using Clock = std::chrono::steady_clock;

// Runs take `slow` ns until the device has been busy (no gap over `rest`) for `ramp`, then `fast`.
class GovernedDevice final : public test::FakeDevice {
 public:
  GovernedDevice(DeviceInfo info, Clock::duration ramp) : FakeDevice(std::move(info)), ramp_(ramp) {}
  double time_ns(const std::function<void()>& work) override {
    work();
    const auto now = Clock::now();
    if (!last_ || now - *last_ > rest) busy_since_ = now;
    last_ = now;
    return now - busy_since_ >= ramp_ ? fast : slow;
  }
  static constexpr double slow = 5000, fast = 1000;
  static constexpr auto rest = std::chrono::milliseconds(200);

 private:
  Clock::duration ramp_;
  std::optional<Clock::time_point> last_;
  Clock::time_point busy_since_;
};

tuning::BenchSettings unchecked() {
  tuning::BenchSettings s;
  s.validate = false;
  return s;
}

TEST(SpinUp, ARestedGpuIsTimedAtItsSpeedInUse) {
  auto reg = test::probe_registry();
  const Invocation inv = test::probe(64);
  const Implementation& impl = reg->implementation(inv, test::fake_info());
  DeviceInfo gpu = test::fake_info();
  gpu.backend = Backend::opencl;
  gpu.discrete = true;
  GovernedDevice device(gpu, std::chrono::milliseconds(150));
  tuning::Bench bench(inv, reg->kernel("probe"), impl, device, unchecked());
  const Measurement m = bench.measure(test::cfg(4, 1), 0);
  ASSERT_EQ(m.status, Status::ok) << m.message;
  EXPECT_EQ(m.stats.median_ns, GovernedDevice::fast) << "timed before the device came up to speed";
  // A second candidate right after finds the device busy and is timed as it is.
  const Measurement next = bench.measure(test::cfg(8, 1), 0);
  EXPECT_EQ(next.stats.median_ns, GovernedDevice::fast);
  // One after a pause (host-side checks, a program build) that let the device slow down again.
  std::this_thread::sleep_for(GovernedDevice::rest + std::chrono::milliseconds(50));
  const Measurement later = bench.measure(test::cfg(2, 1), 0);
  EXPECT_EQ(later.stats.median_ns, GovernedDevice::fast) << "timed before the device came back up to speed";
  // Nor is it abandoned for its first run at the slow speed.
  std::this_thread::sleep_for(GovernedDevice::rest + std::chrono::milliseconds(50));
  const Measurement after = bench.measure(test::cfg(16, 1), GovernedDevice::fast);
  EXPECT_EQ(after.stats.median_ns, GovernedDevice::fast) << after.message;
  EXPECT_GE(after.stats.n, 5) << after.message;
}

}  // namespace
}  // namespace ejk
