// Ring attention over the ranks of MPI_COMM_WORLD (one rank when started without mpirun), each
// rank holding a shard of the sequence, checked against flash attention over the whole sequence
// on rank 0's device. Uses only the installed public API and ejk::mpi.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

#include <ejk/ejk.hpp>
#include <ejk/ring_attention.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1, status = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  try {
    ejk::Context ctx("cpu");
    const std::int64_t batch = 1, shard = 24, heads = 2, dim = 16, seq = shard * ranks;
    // The whole sequence, made alike on every rank from one seed; each rank takes its shard.
    const ejk::Tensor q = ctx.random({batch, seq, heads, dim}, ejk::DType::f32, 1);
    const ejk::Tensor k = ctx.random({batch, seq, heads, dim}, ejk::DType::f32, 2);
    const ejk::Tensor v = ctx.random({batch, seq, heads, dim}, ejk::DType::f32, 3);
    auto slice = [&](const ejk::Tensor& t) {
      const std::vector<double> all = t.read();
      const auto row = static_cast<std::size_t>(heads * dim), first = static_cast<std::size_t>(rank * shard) * row;
      return ctx.from({batch, shard, heads, dim}, ejk::DType::f32,
                      std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(first),
                                          all.begin() + static_cast<std::ptrdiff_t>(first + shard * row)));
    };
    const ejk::AttentionOutput ring = ejk::ring_attention(ctx, slice(q), slice(k), slice(v), MPI_COMM_WORLD, {.causal = true});
    const ejk::AttentionOutput whole = ejk::flash_attention(ctx, q, k, v, {.causal = true});
    const std::vector<double> got = ring.out.read(), all = whole.out.read();
    const std::size_t first = static_cast<std::size_t>(rank * shard * heads * dim);
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - all[first + i]));
    double largest = worst;
    MPI_Allreduce(&worst, &largest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("ring attention over %d rank%s on cpu: largest difference from flash attention %.2e\n", ranks,
                  ranks == 1 ? "" : "s", largest);
    if (!(largest <= 1e-5)) status = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
