#pragma once
// Point-to-point messages of serialized JSON over MPI_COMM_WORLD, for the scale-out code.
#include <mpi.h>

#include <string>

namespace ejk::mpi {

// Message tags of distributed tuning.
enum Tag : int { ready = 1, result = 2, task = 3 };

// Throws Error naming `what` when an MPI call fails.
void check(int code, const char* what);

void send(const std::string& bytes, int dest, int tag);

struct Message {
  int source = -1;
  int tag = -1;
  std::string bytes;
};

// Receives a message whose envelope MPI_Probe or MPI_Iprobe returned.
Message receive(const MPI_Status& probed);
// Blocks for the next message from `source` (MPI_ANY_SOURCE for any) with `tag` (or MPI_ANY_TAG).
Message receive(int source, int tag);

}  // namespace ejk::mpi
