// Ring attention under mpirun: per-rank TFLOP/s and where the time went (compute overlapped
// with the ring's messages, waiting for messages not hidden, host copies and merges), forward
// and backward, with a fixed shard per rank so that runs with 1 and N ranks give weak scaling.
//
//   mpirun -n 2 ejk_ring_attention_bench --device opencl --dtype f16 --shard 4096 --causal
//
// --device cpu | opencl | vulkan | cuda picks device N of that backend for the rank of local index N
// (ranks of one host count 0, 1, ...); "opencl:1" names one device for every rank. Rank 0 prints
// a table, then one line "summary ..." of key=value pairs that scripts/device/ring-bench reads.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ejk/ejk.hpp"
#include "ejk/ring_attention.hpp"

namespace {

struct Args {
  std::string device = "cpu", dtype = "f32";
  std::int64_t batch = 1, shard = 1024, heads = 8, kv_heads = 8, dim = 64;
  bool causal = false, backward = true, striped = false, host = false;
  std::int64_t window = -1;
  int reps = 5, warmup = 1;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "ejk_ring_attention_bench: %s\n"
               "options: --device cpu|opencl|vulkan[:N] --dtype f32|f16|bf16 --batch B --shard S (tokens per rank)\n"
               "         --heads H --kv-heads K --dim D --causal --window W (left) --striped (layout) --host (transport)\n"
               "         --no-backward --reps R --warmup W\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value of " + k).c_str());
      return argv[++i];
    };
    auto integer = [&] { return std::stoll(value()); };
    if (k == "--device") a.device = value();
    else if (k == "--dtype") a.dtype = value();
    else if (k == "--batch") a.batch = integer();
    else if (k == "--shard") a.shard = integer();
    else if (k == "--heads") a.heads = integer();
    else if (k == "--kv-heads") a.kv_heads = integer();
    else if (k == "--dim") a.dim = integer();
    else if (k == "--causal") a.causal = true;
    else if (k == "--striped") a.striped = true;
    else if (k == "--host") a.host = true;
    else if (k == "--window") a.window = integer();
    else if (k == "--no-backward") a.backward = false;
    else if (k == "--reps") a.reps = static_cast<int>(integer());
    else if (k == "--warmup") a.warmup = static_cast<int>(integer());
    else usage(("unknown argument " + k).c_str());
  }
  if (a.reps < 1) usage("--reps must be at least 1");
  return a;
}

// One rank's figures of one pass (the median repetition by total time).
struct Row {
  double total_s, compute_s, wait_s, host_s, flops, comm_s;
  double self_tflops;  // the same shard's ring on this rank alone (MPI_COMM_SELF); 0: not measured
  int blocks;
};

// total: the median of the calls made without figures (as a program calls the ring: asking for
// them times each step on the device's clock, which holds the host back at every step); the
// split of the time, FLOPs and blocks: from one more call, with them.
double middle(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
Row median(const std::vector<double>& totals, const ejk::RingAttentionStats& split, double comm_s, double self_tflops) {
  return {middle(totals), split.compute_s, split.wait_s, split.host_s, split.flops, comm_s, self_tflops, split.blocks};
}

// One pass's calls on one communicator: wall times of the calls without figures, and the
// figures of one more call.
struct Timed {
  std::vector<double> totals;
  ejk::RingAttentionStats split;
  double tflops() const { return split.flops / middle(totals) / 1e12; }
};

// The same messages as a ring pass without compute: size - 1 steps of `bytes` to the right
// neighbour, from the left one; median of `reps` passes. The baseline the overlap is judged by.
double ring_messages(std::size_t bytes, int reps) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) return 0.0;
  std::vector<char> a(bytes, 1), b(bytes);
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int step = 0; step + 1 < size; ++step) {
      MPI_Request q[2];
      MPI_Irecv(b.data(), static_cast<int>(bytes), MPI_BYTE, (rank + size - 1) % size, 1, MPI_COMM_WORLD, &q[0]);
      MPI_Isend(a.data(), static_cast<int>(bytes), MPI_BYTE, (rank + 1) % size, 1, MPI_COMM_WORLD, &q[1]);
      MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
      a.swap(b);
    }
    if (r > 0) times.push_back(MPI_Wtime() - t0);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void report(const char* pass, const Row& mine, const std::string& device, const std::string& transport, int rank, int size) {
  std::vector<Row> rows(static_cast<std::size_t>(size));
  MPI_Gather(&mine, sizeof(Row), MPI_BYTE, rows.data(), sizeof(Row), MPI_BYTE, 0, MPI_COMM_WORLD);
  char name[128] = {};
  std::snprintf(name, sizeof name, "%s", device.c_str());
  std::vector<char> names(static_cast<std::size_t>(size) * sizeof name);
  MPI_Gather(name, sizeof name, MPI_CHAR, names.data(), sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  std::printf("%s (transport: %s)\n%-5s %-28s %6s %10s %10s %10s %10s %10s %9s %8s\n", pass, transport.c_str(), "rank", "device",
              "blocks", "total ms", "compute ms", "wait ms", "host ms", "comm ms", "TFLOP/s", "busy");
  double flops = 0, slowest = 0, wait = 0, mean = 0, busiest = 0, mean_compute = 0, self_sum = 0;
  for (int r = 0; r < size; ++r) {
    const Row& x = rows[static_cast<std::size_t>(r)];
    // comm: the same messages without compute, what the overlap has to hide. A wait below it
    // is the part left exposed; a wait above it is waiting for a slower rank. busy: compute / total.
    std::printf("%-5d %-28.28s %6d %10.3f %10.3f %10.3f %10.3f %10.3f %9.4f %7.1f%%\n", r,
                &names[static_cast<std::size_t>(r) * sizeof name], x.blocks, 1e3 * x.total_s, 1e3 * x.compute_s,
                1e3 * x.wait_s, 1e3 * x.host_s, 1e3 * x.comm_s, x.flops / x.total_s / 1e12, 100.0 * x.compute_s / x.total_s);
    flops += x.flops;
    slowest = std::max(slowest, x.total_s);
    mean += x.total_s / size;
    self_sum += x.self_tflops;
    busiest = std::max(busiest, x.compute_s);
    mean_compute += x.compute_s / size;
    wait = std::max(wait, x.wait_s);
  }
  // imbalance: how much longer the busiest rank computes than the ranks' mean (ranks wait for
  // each other, so their totals agree whatever the balance).
  std::printf("summary pass=%s ranks=%d aggregate_tflops=%.5f slowest_ms=%.3f max_wait_ms=%.3f imbalance_pct=%.1f", pass,
              size, flops / slowest / 1e12, 1e3 * slowest, 1e3 * wait, 100.0 * (busiest / mean_compute - 1.0));
  // Weak scaling against each rank's own shard attended alone, on its GPU, in the same run.
  if (self_sum > 0) std::printf(" alone_sum_tflops=%.5f efficiency_pct=%.1f", self_sum, 100.0 * flops / slowest / 1e12 / self_sum);
  std::printf("\n\n");
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1, local = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  int rc = 0;
  try {
    const Args a = parse(argc, argv);
    const std::string device =
        a.device == "cpu" || a.device.find(':') != std::string::npos ? a.device : a.device + ":" + std::to_string(local);
    ejk::Context ctx(device);
    const ejk::DType t = ejk::parse_dtype(a.dtype);
    const ejk::Shape qs{a.batch, a.shard, a.heads, a.dim}, ks{a.batch, a.shard, a.kv_heads, a.dim};
    const auto seed = static_cast<std::uint64_t>(rank) * 4 + 1;
    const ejk::Tensor q = ctx.random(qs, t, seed), k = ctx.random(ks, t, seed + 1), v = ctx.random(ks, t, seed + 2),
                      dout = ctx.random(qs, t, seed + 3);
    const ejk::RingAttentionOptions o{.causal = a.causal,
                                      .sliding_window = {a.window, -1},
                                      .layout = a.striped ? ejk::RingLayout::striped : ejk::RingLayout::contiguous,
                                      .transport = a.host ? ejk::RingTransport::host : ejk::RingTransport::automatic};
    if (rank == 0)
      std::printf("ring attention: %d rank(s), shard %lld tokens per rank (sequence %lld), batch %lld, heads %lld/%lld, "
                  "head_dim %lld, %s%s%s%s\n\n",
                  size, static_cast<long long>(a.shard), static_cast<long long>(a.shard * size), static_cast<long long>(a.batch),
                  static_cast<long long>(a.heads), static_cast<long long>(a.kv_heads), static_cast<long long>(a.dim),
                  a.dtype.c_str(), a.causal ? ", causal" : "",
                  a.window >= 0 ? (", window " + std::to_string(a.window)).c_str() : "", a.striped ? ", striped" : "");
    // Repetitions alternate the ring over every rank with the same shard's ring on each rank
    // alone (MPI_COMM_SELF: one block, no transfers), so that both see the same GPUs in the same
    // state; unmasked rings only (a masked shard alone is other work).
    const bool alone = size > 1 && !a.causal && a.window < 0;
    Timed fwd, bwd, fwd1, bwd1;
    auto pass = [&](MPI_Comm comm, Timed& f, Timed& b, bool split, bool keep) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = std::chrono::steady_clock::now();
      const auto r = ejk::ring_attention(ctx, q, k, v, comm, o, split ? &f.split : nullptr);
      const double tf = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = std::chrono::steady_clock::now();
      if (a.backward) (void)ejk::ring_attention_bwd(ctx, q, k, v, r.out, dout, r.lse, comm, o, split ? &b.split : nullptr);
      const double tb = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (keep) f.totals.push_back(tf), b.totals.push_back(tb);
    };
    for (int i = 0; i <= a.warmup + a.reps; ++i) {
      const bool split = i == a.warmup + a.reps;  // the last call, with figures
      pass(MPI_COMM_WORLD, fwd, bwd, split, i >= a.warmup && !split);
      if (alone) pass(MPI_COMM_SELF, fwd1, bwd1, split, i >= a.warmup && !split);
    }
    const std::string name = device + " (" + ctx.device().info().name + ")";
    // Forward messages: a k and v block; backward: that and its dk, dv sums in f32.
    const std::size_t kv = static_cast<std::size_t>(2 * k.numel()) * ejk::dtype_size(t);
    report("forward", median(fwd.totals, fwd.split, ring_messages(kv, a.reps), alone ? fwd1.tflops() : 0), name,
           fwd.split.transport, rank, size);
    if (a.backward)
      report("backward",
             median(bwd.totals, bwd.split, ring_messages(kv + static_cast<std::size_t>(2 * k.numel()) * 4, a.reps),
                    alone ? bwd1.tflops() : 0),
             name, bwd.split.transport, rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] ejk_ring_attention_bench: %s\n", rank, e.what());
    rc = 1;
  }
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
