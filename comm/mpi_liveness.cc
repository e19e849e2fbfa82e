#include "comm/mpi_liveness.h"

#include <chrono>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/timer.h"

namespace tetra {
namespace {

constexpr int kProbeTag = 1, kAnswerTag = 2;
constexpr int kHostNameBytes = 64;

}  // namespace

MpiLiveness::MpiLiveness() {
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  int size = 0;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size);
  char mine[kHostNameBytes] = {};
  HostName().copy(mine, kHostNameBytes - 1);
  std::vector<char> all(static_cast<size_t>(size) * kHostNameBytes);
  MPI_Allgather(mine, kHostNameBytes, MPI_CHAR, all.data(), kHostNameBytes, MPI_CHAR, comm_);
  for (int r = 0; r < size; ++r) hosts_.emplace_back(all.data() + r * kHostNameBytes);
}

MpiLiveness::~MpiLiveness() { MPI_Comm_free(&comm_); }

void MpiLiveness::AnswerProbes() {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kProbeTag, comm_, &arrived, &status) != MPI_SUCCESS ||
        !arrived) {
      return;
    }
    char byte = 0;
    MPI_Recv(&byte, 1, MPI_CHAR, status.MPI_SOURCE, kProbeTag, comm_, MPI_STATUS_IGNORE);
    MPI_Request answer;
    MPI_Isend(nullptr, 0, MPI_CHAR, status.MPI_SOURCE, kAnswerTag, comm_, &answer);
    MPI_Request_free(&answer);  // an empty message: nothing to keep alive
  }
}

std::string MpiLiveness::MissingRanks(double window_s) {
  const int size = static_cast<int>(hosts_.size());
  static const char kProbe = 0;
  std::vector<MPI_Request> answers(size, MPI_REQUEST_NULL);
  for (int r = 0; r < size; ++r) {
    if (r == rank_) continue;
    MPI_Irecv(nullptr, 0, MPI_CHAR, r, kAnswerTag, comm_, &answers[r]);
    MPI_Request probe;
    MPI_Isend(&kProbe, 1, MPI_CHAR, r, kProbeTag, comm_, &probe);
    MPI_Request_free(&probe);
  }
  Timer timer;
  int all_answered = 0;
  while (timer.Seconds() < window_s) {
    AnswerProbes();
    MPI_Testall(size, answers.data(), &all_answered, MPI_STATUSES_IGNORE);
    if (all_answered) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Unanswered requests stay pending: the job is about to end.
  std::map<std::string, std::vector<int>> missing;  // by host
  for (int r = 0; r < size; ++r) {
    int done = 1;
    if (answers[r] != MPI_REQUEST_NULL) MPI_Test(&answers[r], &done, MPI_STATUS_IGNORE);
    if (!done) missing[hosts_[r]].push_back(r);
  }
  std::vector<std::string> parts;
  for (const auto& [host, ranks] : missing) {
    parts.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "),
                                 " on host ", host));
  }
  return absl::StrCat(absl::StrJoin(parts, "; "), " did not answer a liveness probe within ",
                      window_s, " s");
}

}  // namespace tetra
