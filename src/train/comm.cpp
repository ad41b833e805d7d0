#include "train/comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"

#ifdef TFORMER_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C interface only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace tformer {

namespace {

// Started by mpirun (Open MPI's launcher sets these; PMIx's for other launchers such as srun).
bool started_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

[[maybe_unused]] int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end && *end == '\0' && x > 0 ? static_cast<int>(x) : fallback;
}

#ifdef TFORMER_HAVE_MPI
constexpr int kArrivalTag = 7701;  // a rank tells rank 0 it entered collective #c
#endif

}  // namespace

Comm& Comm::world() {
  static Comm* comm = [] {
    auto* c = new Comm();  // never destroyed: finalize() ends MPI
    if (const char* t = std::getenv("TFORMER_MPI_TIMEOUT")) {
      char* end = nullptr;
      const double v = std::strtod(t, &end);
      if (end && *end == '\0' && v > 0) c->timeout_ = v;
    }
    if (!started_by_mpirun()) return c;
#ifdef TFORMER_HAVE_MPI
    int provided = 0;
    // Serialized: the collectives of an overlapped step run on a thread of their own, never two at once.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    c->any_thread_ = provided >= MPI_THREAD_SERIALIZED;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size_);
    {
      // The ranks on this host, as MPI itself sees them (also under srun, where mpirun's
      // OMPI_COMM_WORLD_LOCAL_SIZE is not set).
      MPI_Comm local;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
      MPI_Comm_size(local, &c->local_size_);
      MPI_Comm_free(&local);
    }
    c->last_seen_.assign(static_cast<size_t>(c->size_), 0);
    c->last_heard_.assign(static_cast<size_t>(c->size_), std::chrono::steady_clock::now());
    c->mpi_ = true;
#else
    if (env_int("OMPI_COMM_WORLD_SIZE", 1) > 1)
      fail_input("mpirun",
                 "this tformer was built without MPI (no libopenmpi-dev when it was configured), so it "
                 "cannot run under mpirun; install libopenmpi-dev and rebuild");
#endif
    return c;
  }();
  return *comm;
}

#ifdef TFORMER_HAVE_MPI

// Rank 0 reads the other ranks' arrival notes as they come (each a collective's number), and rank 1
// rank 0's; last_seen_ keeps the latest of each.
void Comm::drain_arrivals() {
  if (rank_ > 1) return;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kArrivalTag, MPI_COMM_WORLD, &flag, &st);
    if (!flag) return;
    int64_t c = 0;
    MPI_Recv(&c, 1, MPI_INT64_T, st.MPI_SOURCE, kArrivalTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int64_t& seen = last_seen_[static_cast<size_t>(st.MPI_SOURCE)];
    seen = std::max(seen, c);
    last_heard_[static_cast<size_t>(st.MPI_SOURCE)] = std::chrono::steady_clock::now();
  }
}

void Comm::wait(void* request, const char* what, bool with_deadline) {
  using Clock = std::chrono::steady_clock;
  auto* req = static_cast<MPI_Request*>(request);
  const auto t0 = Clock::now();
  auto beat = t0, deadline_from = t0, last_poll = t0;
  last_seen_[static_cast<size_t>(rank_)] = collectives_;
  for (int spin = 0;; ++spin) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) break;
    drain_arrivals();
    const auto now = Clock::now();
    // A gap of seconds between two polls means this process itself was not running (stopped, as
    // by SIGSTOP and then the SIGCONT with which Open MPI ends the job): its deadline restarts, so
    // that it never blames the ranks that were waiting for it.
    if (now - last_poll > std::chrono::seconds(1)) {
      deadline_from = now;
      for (auto& t : last_heard_) t = now;
    }
    last_poll = now;
    // Still here, waiting (not in a wait without a deadline, as while rank 0 tokenizes: no one
    // times out there, and the notes would pile up unread).
    if (with_deadline && now - beat > std::chrono::milliseconds(250)) {
      send_note();
      beat = now;
    }
    const double waited = std::chrono::duration<double>(now - deadline_from).count();
    if (with_deadline && waited > timeout_) {
      // The ranks that never entered this collective, or entered it and then fell silent (a
      // waiting rank's heartbeat comes every 250 ms).
      std::string culprits;
      if (rank_ <= 1)
        for (int q = 0; q < (rank_ == 0 ? size_ : 1); ++q) {
          if (q == rank_) continue;
          const double silent = std::chrono::duration<double>(now - last_heard_[static_cast<size_t>(q)]).count();
          if (last_seen_[static_cast<size_t>(q)] < collectives_ || silent > 2.0)
            culprits += fmt::format("{}{}", culprits.empty() ? "" : ", ", q);
        }
      std::fprintf(stderr,
                   "tformer: error: rank %d: no answer within %.0f s in %s (collective #%lld)%s; ending the job\n",
                   rank_, timeout_, what, static_cast<long long>(collectives_),
                   culprits.empty()
                       ? ""
                       : fmt::format(": rank {} stopped answering (stopped, hung or unreachable)", culprits).c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    if (spin > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  drain_arrivals();  // the notes that came after it completed
  seconds_waiting_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

// Before each collective, a rank tells rank 0 that it has entered it (and rank 0 tells rank 1), so
// that the rank that times out can name who never arrived. The note is sent without waiting
// (MPI_Isend, its request freed) from a ring of buffers that outlives its delivery.
void Comm::arrive() {
  ++collectives_;
  send_note();
}

// The note itself (also sent every quarter second while a rank waits, as its heartbeat).
void Comm::send_note() {
  static int64_t ring[4096];
  static int64_t sent = 0;
  int64_t& note = ring[++sent % 4096];
  note = collectives_;
  const int to = rank_ == 0 ? 1 : 0;
  if (size_ < 2) return;
  MPI_Request r;
  MPI_Isend(&note, 1, MPI_INT64_T, to, kArrivalTag, MPI_COMM_WORLD, &r);
  MPI_Request_free(&r);
}
#define TFORMER_ARRIVE() arrive()

void Comm::barrier(bool with_deadline) {
  if (!mpi_) return;
  TFORMER_ARRIVE();
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  wait(&r, "a barrier", with_deadline);
}

std::vector<uint64_t> Comm::allgather(uint64_t value, bool with_deadline) {
  std::vector<uint64_t> all(static_cast<size_t>(size_), value);
  if (!mpi_) return all;
  TFORMER_ARRIVE();
  MPI_Request r;
  MPI_Iallgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &r);
  wait(&r, "an allgather", with_deadline);
  return all;
}

std::vector<double> Comm::allgather(const std::vector<double>& mine) {
  if (!mpi_) return mine;
  std::vector<double> all(mine.size() * static_cast<size_t>(size_));
  TFORMER_ARRIVE();
  MPI_Request r;
  MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
                 MPI_DOUBLE, MPI_COMM_WORLD, &r);
  wait(&r, "an allgather of the losses");
  return all;
}

void Comm::alltoallv(const float* send, const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& send_offsets, float* recv, const std::vector<int64_t>& recv_counts,
                     const std::vector<int64_t>& recv_offsets) {
  if (!mpi_) {
    std::copy(send + send_offsets[0], send + send_offsets[0] + send_counts[0], recv + recv_offsets[0]);
    return;
  }
  // Counts and offsets in floats, each within an int (MPI's; 2^31 floats are 8 GiB).
  std::vector<int> sc(static_cast<size_t>(size_)), rc(sc.size()), so(sc.size()), ro(sc.size());
  for (size_t q = 0; q < sc.size(); ++q) {
    for (int64_t v : {send_counts[q], recv_counts[q], send_offsets[q], recv_offsets[q]})
      TF_CHECK(v >= 0 && v < (int64_t{1} << 31), "alltoallv: {} floats do not fit an MPI count", v);
    sc[q] = static_cast<int>(send_counts[q]);
    rc[q] = static_cast<int>(recv_counts[q]);
    so[q] = static_cast<int>(send_offsets[q]);
    ro[q] = static_cast<int>(recv_offsets[q]);
  }
  for (int q = 0; q < size_; ++q)
    if (q != rank_) bytes_sent_ += static_cast<uint64_t>(send_counts[static_cast<size_t>(q)]) * sizeof(float);
  TFORMER_ARRIVE();
  MPI_Request r;
  MPI_Ialltoallv(send, sc.data(), so.data(), MPI_FLOAT, recv, rc.data(), ro.data(), MPI_FLOAT, MPI_COMM_WORLD, &r);
  wait(&r, "the gradient exchange (all-to-all)");
}

void Comm::allgatherv(float* data, const std::vector<int64_t>& counts, const std::vector<int64_t>& offsets) {
  if (!mpi_) return;
  std::vector<int> c(static_cast<size_t>(size_)), o(static_cast<size_t>(size_));
  for (size_t q = 0; q < c.size(); ++q) {
    TF_CHECK(counts[q] < (int64_t{1} << 31) && offsets[q] < (int64_t{1} << 31),
             "allgatherv: {} floats at {} do not fit an MPI count", counts[q], offsets[q]);
    c[q] = static_cast<int>(counts[q]);
    o[q] = static_cast<int>(offsets[q]);
  }
  bytes_sent_ +=
      static_cast<uint64_t>(counts[static_cast<size_t>(rank_)]) * sizeof(float) * static_cast<uint64_t>(size_ - 1);
  TFORMER_ARRIVE();
  MPI_Request r;
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, c.data(), o.data(), MPI_FLOAT, MPI_COMM_WORLD, &r);
  wait(&r, "the gradient gather (all-gather)");
}

namespace {
std::vector<int> mpi_counts(const std::vector<int64_t>& v, const char* what) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    TF_CHECK(v[i] >= 0 && v[i] < (int64_t{1} << 31), "{}: {} does not fit an MPI count", what, v[i]);
    out[i] = static_cast<int>(v[i]);
  }
  return out;
}
}  // namespace

std::vector<double> Comm::allgatherv(const std::vector<double>& mine, const std::vector<int64_t>& counts) {
  if (!mpi_) return mine;
  std::vector<int64_t> offsets(counts.size());
  int64_t total = 0;
  for (size_t q = 0; q < counts.size(); ++q) {
    offsets[q] = total;
    total += counts[q];
  }
  std::vector<double> all(static_cast<size_t>(total));
  const std::vector<int> c = mpi_counts(counts, "allgatherv"), o = mpi_counts(offsets, "allgatherv");
  TFORMER_ARRIVE();
  MPI_Request r;
  MPI_Iallgatherv(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), c.data(), o.data(), MPI_DOUBLE,
                  MPI_COMM_WORLD, &r);
  wait(&r, "an allgather of the gradient norm's pieces");
  return all;
}

void Comm::gatherv(const float* mine, float* all, const std::vector<int64_t>& counts,
                   const std::vector<int64_t>& offsets) {
  if (!mpi_) {
    std::copy(mine, mine + counts[0], all + offsets[0]);
    return;
  }
  const std::vector<int> c = mpi_counts(counts, "gatherv"), o = mpi_counts(offsets, "gatherv");
  TFORMER_ARRIVE();
  MPI_Request r;
  MPI_Igatherv(mine, c[static_cast<size_t>(rank_)], MPI_FLOAT, all, c.data(), o.data(), MPI_FLOAT, 0, MPI_COMM_WORLD,
               &r);
  wait(&r, "the gather of the optimizer's moments");
}

void Comm::abort(int status) {
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, status);
  std::exit(status);
}

void Comm::finalize() {
  if (!mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  mpi_ = false;
}

#else  // one process: every collective is the identity

void Comm::wait(void*, const char*, bool) {}
void Comm::arrive() {}
void Comm::send_note() {}
void Comm::drain_arrivals() {}
void Comm::barrier(bool) {}
std::vector<uint64_t> Comm::allgather(uint64_t value, bool) { return {value}; }
std::vector<double> Comm::allgather(const std::vector<double>& mine) { return mine; }
void Comm::alltoallv(const float* send, const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& send_offsets, float* recv, const std::vector<int64_t>&,
                     const std::vector<int64_t>& recv_offsets) {
  std::copy(send + send_offsets[0], send + send_offsets[0] + send_counts[0], recv + recv_offsets[0]);
}
void Comm::allgatherv(float*, const std::vector<int64_t>&, const std::vector<int64_t>&) {}
std::vector<double> Comm::allgatherv(const std::vector<double>& mine, const std::vector<int64_t>&) { return mine; }
void Comm::gatherv(const float* mine, float* all, const std::vector<int64_t>& counts,
                   const std::vector<int64_t>& offsets) {
  std::copy(mine, mine + counts[0], all + offsets[0]);
}
void Comm::abort(int status) { std::exit(status); }
void Comm::finalize() {}

#endif

}  // namespace tformer
