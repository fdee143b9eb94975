#pragma once
// Distributed tuning over MPI ranks (`mpirun -n N ejk tune`): rank 0 hands out invocations one
// at a time to every rank (itself included), each rank tunes on its own device, and every
// measurement comes back to rank 0. docs/scale-out.md describes the protocol and failures.
//
// launched_by_mpi() is inline, for every program; the rest is in libejk_mpi (ejk::mpi), built with
// EJK_WITH_MPI (which defines EJK_HAVE_MPI for code built against ejk::mpi in the build tree).
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ejk/bundle.hpp"
#include "ejk/export.hpp"
#include "ejk/invocation.hpp"
#include "ejk/tuner.hpp"

namespace ejk {

// True when an MPI launcher started this process: Open MPI's mpirun sets
// OMPI_COMM_WORLD_SIZE; PMI and PMIx launchers (srun, MPICH's Hydra) set PMI_SIZE / PMIX_RANK.
inline bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

// The process's MPI environment: MPI_Init_thread when constructed (unless MPI is already
// initialized), MPI_Finalize when destroyed (only if this object initialized it; destroyed by
// an exception with other ranks running, MPI_Abort instead, so that none of them waits for this
// one forever: say what went wrong before the session ends). MPI
// allows one initialization per process, so one session per process. Throws Error when MPI cannot
// give the thread level the service thread of distributed tuning needs.
class EJK_API MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Rank and rank count among the processes of this host (MPI_COMM_TYPE_SHARED).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  std::string host() const { return host_; }

 private:
  bool owns_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
};

struct DistributedTask {
  Invocation invocation;
  std::string device;  // device name as rank 0 resolved it ("cpu", "opencl:0", "auto")
};

struct DistributedTuneOptions {
  TuneOptions tune;
  // Every rank tunes on this device. Empty: each task's device, with the index of a GPU
  // backend moved by the rank's local rank (opencl:0 on local rank 1 of a host with two
  // OpenCL devices tunes on opencl:1), so the ranks of one host use different devices.
  std::string device;
};

// What rank 0 knows about one task at the end.
struct DistributedResult {
  std::optional<TuneResult> result;  // absent when the task failed on every rank that tried it
  int rank = -1;                     // the rank that produced `result`
  std::string host;                  // that rank's host
  DeviceRecord device;               // the device it was measured on
  // Why a rank failed on this task: with `result` present, the failure rank 0 redid;
  // without it, why the task failed.
  std::string error;
  bool redone = false;  // rank 0 tuned it again after another rank failed on it
};

struct DistributedOutcome {
  int rank = 0, size = 1;
  // Rank 0: one per task, in task order. Other ranks: empty.
  std::vector<DistributedResult> results;
  // Rank 0: one line per rank that failed ("rank 1 on host (cpu): what"), in rank order.
  std::vector<std::string> rank_failures;
  // Rank 0: how many tasks each rank tuned (redone ones count for rank 0).
  std::vector<int> tasks_per_rank;
};

// Called on rank 0 (from one thread at a time) with each task's result as soon as it is
// known, before tune_distributed returns: where to store results so that a run aborted by a
// dying rank keeps everything measured until then.
using DistributedResultSink = std::function<void(std::size_t task, const DistributedResult&)>;

// Every rank calls this with the same session; the tasks and options matter on rank 0 only
// (other ranks receive theirs as messages, so they need not read the recipe). Rank 0 tunes
// too. A task that throws on a rank other than 0 is reported, that rank gets no more tasks,
// and rank 0 tunes the task again; a task that fails on rank 0 is marked failed. A rank that
// dies ends the whole job (Open MPI aborts it); what rank 0 had received is in the sink.
// EJK_TEST_FAIL_RANK=r makes rank r throw on every task it receives, r:die makes it exit at
// its first task as a crash would (failure tests).
EJK_API DistributedOutcome tune_distributed(const MpiSession& session, const std::vector<DistributedTask>& tasks,
                                            const DistributedTuneOptions& options,
                                            const DistributedResultSink& sink = {});

}  // namespace ejk
