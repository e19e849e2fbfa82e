#include "core/cuda/stream.h"

#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/device_work.h"

namespace tetra::cuda {
namespace {
thread_local cudaStream_t g_current_stream = nullptr;
}  // namespace

Stream::Stream() { TETRA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::Synchronize() const {
  CountDeviceWork(DeviceWork::kHostWait);
  TETRA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(bool timing) {
  TETRA_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::Record(cudaStream_t stream) const { TETRA_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::Wait(cudaStream_t stream) const {
  TETRA_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void Event::Synchronize() const {
  CountDeviceWork(DeviceWork::kHostWait);
  TETRA_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::Done() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  TETRA_CUDA_CHECK(status);
  return true;
}

float Event::ElapsedMs(const Event& start) const {
  float ms = 0;
  TETRA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

cudaStream_t CurrentStream() { return g_current_stream; }
void SetCurrentStream(cudaStream_t stream) { g_current_stream = stream; }

}  // namespace tetra::cuda
