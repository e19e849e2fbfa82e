// CUDA streams and events as small owning (move-only) types, and the stream
// the op API's CUDA kernels are enqueued on.
#ifndef TETRA_CORE_CUDA_STREAM_H_
#define TETRA_CORE_CUDA_STREAM_H_

#include <cuda_runtime.h>

namespace tetra::cuda {

// A non-blocking stream (no implicit ordering with the legacy default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void Synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An event; with timing enabled it measures elapsed time between two records.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void Record(cudaStream_t stream) const;
  // Makes `stream` wait for this event's last record (no host block).
  void Wait(cudaStream_t stream) const;
  void Synchronize() const;
  bool Done() const;
  // Milliseconds from `start`'s record to this one's (both timing events).
  float ElapsedMs(const Event& start) const;

 private:
  cudaEvent_t event_ = nullptr;
};

// The stream every op-API CUDA kernel of this thread is enqueued on; nullptr
// (the default) is the legacy default stream, ordered with host copies.
cudaStream_t CurrentStream();
void SetCurrentStream(cudaStream_t stream);

}  // namespace tetra::cuda

#endif  // TETRA_CORE_CUDA_STREAM_H_
