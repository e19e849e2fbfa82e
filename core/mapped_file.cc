#include "core/mapped_file.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/user_error.h"

namespace tetra {
namespace {

// ---------------------------------------------------------------------------
// SIGBUS around reads of a mapping. The handler is process-wide and installed
// once; the jump target is per thread, so reads on several threads are
// guarded independently (a fault is delivered to the thread that faulted). A
// SIGBUS outside a guarded read goes to whatever handled it before.

thread_local sigjmp_buf* tls_fault_jump = nullptr;
struct sigaction previous_sigbus;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  if (sigjmp_buf* jump = tls_fault_jump) siglongjmp(*jump, 1);
  sigaction(SIGBUS, &previous_sigbus, nullptr);
  if (previous_sigbus.sa_flags & SA_SIGINFO) {
    previous_sigbus.sa_sigaction(signal, info, context);
  } else if (previous_sigbus.sa_handler != SIG_DFL && previous_sigbus.sa_handler != SIG_IGN) {
    previous_sigbus.sa_handler(signal);
  } else if (info->si_code <= 0) {
    raise(signal);  // sent by kill(); a fault recurs by itself when the handler returns
  }
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action = {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    TETRA_CHECK(sigaction(SIGBUS, &action, &previous_sigbus) == 0) << std::strerror(errno);
  });
}

// Runs read(src); false when it faulted. The fences keep the compiler from
// moving the jump target's stores across the read (they look dead to it).
bool ReadCatchingSigbus(absl::FunctionRef<void(const uint8_t*)> read, const uint8_t* src) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, /*savemask=*/1) != 0) {
    tls_fault_jump = nullptr;
    return false;
  }
  tls_fault_jump = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  read(src);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  tls_fault_jump = nullptr;
  return true;
}

}  // namespace

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path, const std::string& what,
                                            const std::string& hint) {
  ASSIGN_OR_RETURN(InputFile file, InputFile::Open(path, what, hint));
  const uint8_t* data = nullptr;
  if (file.size() > 0) {
    void* mapped = mmap(nullptr, file.size(), PROT_READ, MAP_SHARED, file.fd(), 0);
    if (mapped == MAP_FAILED) {
      return UserError(absl::StrFormat("cannot map %s %s (%d bytes) into memory: %s", what, path,
                                       file.size(), std::strerror(errno)),
                       "the address space may be limited; check `ulimit -v`",
                       absl::StatusCode::kResourceExhausted);
    }
    data = static_cast<const uint8_t*>(mapped);
  }
  InstallSigbusHandler();
  return MappedFile(std::move(file), data);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : file_(std::move(other.file_)), data_(std::exchange(other.data_, nullptr)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    file_ = std::move(other.file_);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

MappedFile::~MappedFile() { Unmap(); }

void MappedFile::Unmap() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), file_.size());
  data_ = nullptr;
}

absl::Status MappedFile::ReadRange(int64_t offset, int64_t size,
                                   absl::FunctionRef<void(const uint8_t*)> read) const {
  TETRA_CHECK(0 <= offset && 0 <= size && size <= file_.size() - offset)
      << "bytes [" << offset << ", +" << size << ") of " << path() << " (" << file_.size()
      << " bytes)";
  if (size == 0) return absl::OkStatus();
  const bool completed = ReadCatchingSigbus(read, data_ + offset);
  ASSIGN_OR_RETURN(const int64_t now, file_.CurrentSize());
  if (!completed || now < offset + size) {
    return UserError(
        absl::StrFormat("%s %s shrank from %d to %d bytes while tetra was reading it: bytes "
                        "[%d, %d) are gone (it was truncated or rewritten in place)",
                        file_.what(), path(), file_.size(), now, offset, offset + size),
        "never modify a data or weights file while a run reads it; restore the file and "
        "resume from the last checkpoint",
        absl::StatusCode::kDataLoss);
  }
  return absl::OkStatus();
}

}  // namespace tetra
