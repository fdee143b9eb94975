// The MPI environment of a process and the byte messages of the scale-out code.
#include <exception>
#include <limits>

#include "ejk/distributed.hpp"
#include "ejk/error.hpp"
#include "mpi/messages.hpp"

namespace ejk {

namespace mpi {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw Error(std::string(what) + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

void send(const std::string& bytes, int dest, int tag) {
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw Error("MPI message of " + std::to_string(bytes.size()) + " bytes is larger than one send allows");
  check(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD), "MPI_Send");
}

Message receive(const MPI_Status& probed) {
  int count = 0;
  check(MPI_Get_count(&probed, MPI_BYTE, &count), "MPI_Get_count");
  Message m;
  m.source = probed.MPI_SOURCE;
  m.tag = probed.MPI_TAG;
  m.bytes.resize(static_cast<std::size_t>(count));
  check(MPI_Recv(m.bytes.data(), count, MPI_BYTE, m.source, m.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  return m;
}

Message receive(int source, int tag) {
  MPI_Status st;
  check(MPI_Probe(source, tag, MPI_COMM_WORLD, &st), "MPI_Probe");
  return receive(st);
}

}  // namespace mpi

MpiSession::MpiSession() {
  int initialized = 0;
  mpi::check(MPI_Initialized(&initialized), "MPI_Initialized");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    mpi::check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    owns_ = true;
  } else {
    mpi::check(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  // Rank 0's service thread talks to the other ranks while its main thread tunes; the main
  // thread makes no MPI call meanwhile, so calls are serialized.
  if (provided < MPI_THREAD_SERIALIZED) {
    if (owns_) MPI_Finalize();
    owns_ = false;
    throw Error("this MPI offers thread level " + std::to_string(provided) +
                "; distributed tuning needs MPI_THREAD_SERIALIZED or better");
  }
  mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  MPI_Comm local = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
             "MPI_Comm_split_type");
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, static_cast<std::size_t>(len));
}

MpiSession::~MpiSession() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Left by an exception, this rank may have peers blocked on a message it will never send;
  // MPI_Finalize would wait for them forever, MPI_Abort ends the job and mpirun reports it.
  if (size_ > 1 && std::uncaught_exceptions() > 0) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
}

}  // namespace ejk
