// The processes of a data-parallel training run (docs/distributed.md): one process, or the N ranks
// that `mpirun -np N tformer train ...` starts. tformer links Open MPI when the build found it
// (TFORMER_HAVE_MPI); MPI is initialised only when the process was started by mpirun (its
// environment says so), so every other command, and a plain `tformer train`, never touches it.
//
// The collectives are the few a data-parallel step needs, each with a deadline: a rank that does
// not answer within timeout_seconds() (a stopped or hung process; Open MPI 4.1's collectives have no
// timeout of their own) makes the others print which ranks they waited for and abort the whole job
// (MPI_Abort), so that the job ends instead of hanging; a rank that dies is seen by mpirun itself,
// which ends the job naming it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tformer {

class Comm {
 public:
  // The run's communicator: MPI's world when started by mpirun (built with MPI), else a single
  // process. Started by mpirun but built without MPI: an Error saying so.
  static Comm& world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks on this host (mpirun's local size), for dividing its cores among them.
  int local_size() const { return local_size_; }
  bool distributed() const { return size_ > 1; }
  // Whether a thread other than the one that started MPI may call the collectives (one thread at
  // a time: MPI_THREAD_SERIALIZED), as the overlapped reduction's thread does.
  bool any_thread() const { return any_thread_ || !mpi_; }

  // Seconds a rank waits in a collective before giving up on the ranks that have not joined it
  // ($TFORMER_MPI_TIMEOUT, default 300: longer than any evaluation or checkpoint write).
  double timeout_seconds() const { return timeout_; }

  // with_deadline false: wait as long as it takes (the others wait while rank 0 tokenizes a corpus);
  // a rank that dies is still seen by mpirun.
  void barrier(bool with_deadline = true);
  // Each rank's value, in rank order, on every rank.
  std::vector<uint64_t> allgather(uint64_t value, bool with_deadline = true);
  // Each rank's `mine` (the same count on every rank), concatenated in rank order, on every rank.
  std::vector<double> allgather(const std::vector<double>& mine);
  // All-to-all of floats: send_counts[q] floats from send + send_offsets[q] go to rank q;
  // recv_counts[q] floats from rank q land at recv + recv_offsets[q].
  void alltoallv(const float* send, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_offsets,
                 float* recv, const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_offsets);
  // data holds counts[q] floats of rank q at offsets[q]; each rank's own part is sent to every rank.
  void allgatherv(float* data, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets);
  // Each rank's `mine` (counts[q] doubles on rank q), concatenated in rank order, on every rank.
  std::vector<double> allgatherv(const std::vector<double>& mine, const std::vector<int64_t>& counts);
  // Rank q's counts[q] floats at mine land at all + offsets[q] on rank 0 (all: rank 0's only).
  void gatherv(const float* mine, float* all, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets);
  // Ends every rank of the job with this exit status (after a message the caller printed).
  [[noreturn]] void abort(int status);
  // MPI_Finalize when MPI was initialised (main calls it once, at the end).
  void finalize();

  // What the collectives have cost so far on this rank: bytes it sent (its payload, as the
  // algorithms' models count it: an all-to-all's parts for the others, an all-gather's own part
  // once per other rank) and seconds it waited for collectives to complete.
  uint64_t bytes_sent() const { return bytes_sent_; }
  double seconds_in_collectives() const { return seconds_waiting_; }

 private:
  Comm() = default;
  void wait(void* request, const char* what, bool with_deadline = true);  // MPI_Request*: polls it
  void arrive();          // the note that this rank entered a collective
  void drain_arrivals();  // rank 0 (and 1) reading the others' notes
  void send_note();       // this rank's collective number, to rank 0 (rank 0's to rank 1)

  int rank_ = 0, size_ = 1, local_size_ = 1;
  double timeout_ = 300;
  bool mpi_ = false;
  bool any_thread_ = false;
  uint64_t bytes_sent_ = 0;
  double seconds_waiting_ = 0;
  int64_t collectives_ = 0;                                        // collectives entered, for the timeout message
  std::vector<int64_t> last_seen_;                                 // per rank, the last collective it said it entered
  std::vector<std::chrono::steady_clock::time_point> last_heard_;  // and when it last said anything
};

}  // namespace tformer
