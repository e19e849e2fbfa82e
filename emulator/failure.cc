#include "emulator/failure.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "emulator/emulated_device.h"

namespace tetra::emulator {
namespace {

thread_local std::string running;

}  // namespace

RunningScope::RunningScope(std::string what) : previous_(std::move(running)) {
  running = std::move(what);
}

RunningScope::~RunningScope() { running = std::move(previous_); }

const std::string& Running() { return running; }

void Explain(const std::string& why) {
  std::fprintf(stderr, "tetra emulated GPU: %s\n", why.c_str());
}

void Fail(std::string_view what) {
  std::string message = "tetra emulated GPU: ";
  message += what;
  if (!running.empty()) message += " (in " + running + ")";
  message += "\n";
  std::fputs(message.c_str(), stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace tetra::emulator
