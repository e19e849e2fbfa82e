#include "launch/child_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/timer.h"

namespace tetra {
namespace {

constexpr double kKillAfterTermS = 10;  // SIGTERM's grace before SIGKILL
constexpr int kPollMs = 200;

volatile std::sig_atomic_t child_pid = 0;
volatile std::sig_atomic_t stop_signal = 0;

void PassOn(int signal) {
  stop_signal = signal;
  if (child_pid > 0) kill(child_pid, SIGTERM);
}

// Installs PassOn for SIGTERM and SIGINT while it lives.
class ForwardStopSignals {
 public:
  ForwardStopSignals() {
    struct sigaction action = {};
    action.sa_handler = PassOn;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &previous_term_);
    sigaction(SIGINT, &action, &previous_int_);
  }
  ~ForwardStopSignals() {
    sigaction(SIGTERM, &previous_term_, nullptr);
    sigaction(SIGINT, &previous_int_, nullptr);
    child_pid = 0;
  }

 private:
  struct sigaction previous_term_ = {}, previous_int_ = {};
};

[[noreturn]] void ExecChild(const std::vector<std::string>& argv,
                            const std::vector<std::string>& environment, int error_pipe) {
  dup2(error_pipe, STDERR_FILENO);
  for (const std::string& assignment : environment) putenv(const_cast<char*>(assignment.c_str()));
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "tetra: error: cannot run %s: %s\n", args[0], std::strerror(errno));
  _exit(127);
}

// Echoes what the child writes to standard error and hands on each line.
class LineReader {
 public:
  explicit LineReader(const std::function<bool(std::string_view)>& on_line) : on_line_(on_line) {}

  // Reads what is there; false once the pipe has closed.
  bool ReadFrom(int fd) {
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) {
      if (!pending_.empty()) Hand(pending_);
      return false;
    }
    fwrite(buffer, 1, n, stderr);
    fflush(stderr);
    pending_.append(buffer, n);
    for (size_t end; (end = pending_.find('\n')) != std::string::npos; pending_.erase(0, end + 1)) {
      Hand(std::string_view(pending_).substr(0, end));
    }
    return true;
  }
  bool failed() const { return failed_; }

 private:
  void Hand(std::string_view line) {
    if (on_line_ && on_line_(line)) failed_ = true;
  }

  const std::function<bool(std::string_view)>& on_line_;
  std::string pending_;
  bool failed_ = false;
};

// The child, watched: ends it when it outlives its grace after a failure,
// or asks it to stop when the job may grow.
class Watcher {
 public:
  Watcher(pid_t pid, const WatchRules& rules, ChildExit& exit)
      : pid_(pid), rules_(rules), exit_(exit) {}

  // Reads the child's standard error from `fd` until the child has exited;
  // returns its wait status.
  int Run(int fd, LineReader& reader) {
    bool open = true;
    int status = 0;
    for (;;) {
      if (open) {
        pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
        if (poll(&p, 1, kPollMs) > 0) open = reader.ReadFrom(fd);
      } else {
        usleep(kPollMs * 1000);
      }
      // Orphans of a lost host may hold the pipe open: the child's exit decides.
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        for (pollfd p = {.fd = fd, .events = POLLIN, .revents = 0}; open && poll(&p, 1, 0) > 0;) {
          open = reader.ReadFrom(fd);
        }
        return status;
      }
      if (reader.failed() && !since_failure_) since_failure_.emplace();
      EndAfterGrace();
      AskToGrow();
    }
  }

 private:
  void EndAfterGrace() {
    if (since_failure_ && !since_term_ && since_failure_->Seconds() > rules_.grace_s) {
      std::fprintf(stderr,
                   "tetra launch: the job failed and the launcher is still running %.0f s "
                   "later (waiting for a host it lost?): ending it\n",
                   rules_.grace_s);
      kill(pid_, SIGTERM);
      since_term_.emplace();
      exit_.ended = true;
    }
    if (since_term_ && since_term_->Seconds() > kKillAfterTermS) kill(pid_, SIGKILL);
  }

  void AskToGrow() {
    if (!rules_.stop_to_grow || exit_.to_grow || since_failure_ ||
        since_check_.Seconds() < rules_.check_interval_s) {
      return;
    }
    since_check_.Reset();
    if (!rules_.stop_to_grow()) return;
    exit_.to_grow = true;
    kill(pid_, SIGTERM);
  }

  const pid_t pid_;
  const WatchRules& rules_;
  ChildExit& exit_;
  std::optional<Timer> since_failure_, since_term_;
  Timer since_check_;
};

}  // namespace

absl::StatusOr<ChildExit> RunWatched(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& environment,
                                     const WatchRules& rules) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  ForwardStopSignals forward;
  stop_signal = 0;
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    close(fds[0]);
    ExecChild(argv, environment, fds[1]);
  }
  child_pid = pid;
  close(fds[1]);
  // A stop asked for before the child existed is passed on now.
  if (stop_signal != 0) kill(pid, SIGTERM);
  LineReader reader(rules.failed_line);
  ChildExit exit;
  const int status = Watcher(pid, rules, exit).Run(fds[0], reader);
  close(fds[0]);
  exit.stopped = stop_signal != 0;
  if (WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
  return exit;
}

}  // namespace tetra
