// Logging and fatal checks. Every line carries the rank when one is set, and a
// failed TETRA_CHECK prints file:line, rank and host before aborting: broken
// invariants are bugs, so they crash (user errors are absl::Status instead).
#ifndef TETRA_CORE_LOGGING_H_
#define TETRA_CORE_LOGGING_H_

#include <sstream>
#include <string>

namespace tetra {

// Called once by the launcher; -1 (the default) means "not distributed".
void SetLogRank(int rank);
int LogRank();
// This machine's name (gethostname), "unknown" where it has none.
std::string HostName();

// Streams one line to stderr when destroyed; aborts if `fatal`.
class LogLine {
 public:
  LogLine(const char* file, int line, bool fatal);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  template <typename T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  bool fatal_;
  std::ostringstream stream_;
};

}  // namespace tetra

#define TETRA_LOG() ::tetra::LogLine(__FILE__, __LINE__, /*fatal=*/false)
#define TETRA_CHECK(cond) \
  if (cond) {             \
  } else                  \
    ::tetra::LogLine(__FILE__, __LINE__, /*fatal=*/true) << "check failed: " #cond " "

#endif  // TETRA_CORE_LOGGING_H_
