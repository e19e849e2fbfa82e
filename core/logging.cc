#include "core/logging.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace tetra {
namespace {
int g_rank = -1;
}  // namespace

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "unknown";
  return host;
}

void SetLogRank(int rank) { g_rank = rank; }
int LogRank() { return g_rank; }

LogLine::LogLine(const char* file, int line, bool fatal) : fatal_(fatal) {
  if (fatal_) {
    stream_ << "FATAL " << file << ":" << line << " [host " << HostName();
    if (g_rank >= 0) stream_ << ", rank " << g_rank;
    stream_ << "] ";
  } else if (g_rank >= 0) {
    stream_ << "[rank " << g_rank << "] ";
  }
}

LogLine::~LogLine() {
  stream_ << "\n";
  std::fputs(stream_.str().c_str(), stderr);
  std::fflush(stderr);
  if (fatal_) std::abort();
}

}  // namespace tetra
