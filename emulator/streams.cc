#include "emulator/streams.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "emulator/emulated_device.h"
#include "emulator/failure.h"

struct CUstream_st {
  int device;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  uint64_t posted = 0, done = 0;
  bool stopping = false;
  std::thread worker;
};

struct CUevent_st {
  bool timing;
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t recorded = 0, completed = 0;
  std::chrono::steady_clock::time_point when;
};

namespace tetra::emulator {
namespace {

void Work(CUstream_st* s) {
  RunningScope scope(absl::StrFormat("a stream of emulated GPU %d", s->device));
  std::unique_lock<std::mutex> lock(s->mutex);
  while (true) {
    s->changed.wait(lock, [s] { return s->stopping || !s->queue.empty(); });
    if (s->queue.empty()) return;
    std::function<void()> work = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    work();
    lock.lock();
    ++s->done;
    s->changed.notify_all();
  }
}

struct Streams {
  std::mutex mutex;
  std::vector<CUstream_st*> live;
  std::map<int, CUstream_st*> defaults;
};

Streams& AllStreams() {
  static Streams* streams = new Streams;
  return *streams;
}

CUstream_st* Start(int device) {
  auto* s = new CUstream_st;
  s->device = device;
  s->worker = std::thread(Work, s);
  return s;
}

void Wait(CUstream_st* s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  const uint64_t target = s->posted;
  s->changed.wait(lock, [&] { return s->done >= target; });
}

}  // namespace

cudaStream_t CreateStream(int device) {
  CUstream_st* s = Start(device);
  std::lock_guard<std::mutex> lock(AllStreams().mutex);
  AllStreams().live.push_back(s);
  return s;
}

void DestroyStream(cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(AllStreams().mutex);
    auto& live = AllStreams().live;
    auto it = std::find(live.begin(), live.end(), stream);
    if (it == live.end()) Fail(absl::StrFormat("cudaStreamDestroy(%p): not a live stream", stream));
    live.erase(it);
  }
  Wait(stream);
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->stopping = true;
    stream->changed.notify_all();
  }
  stream->worker.join();
  delete stream;
}

cudaStream_t Resolve(cudaStream_t stream, int device) {
  std::lock_guard<std::mutex> lock(AllStreams().mutex);
  if (stream == nullptr) {
    CUstream_st*& s = AllStreams().defaults[device];
    if (s == nullptr) s = Start(device);  // lives as long as the process
    return s;
  }
  const auto& live = AllStreams().live;
  if (std::find(live.begin(), live.end(), stream) == live.end()) {
    Fail(absl::StrFormat("work posted on stream %p, which is not a live stream", stream));
  }
  return stream;
}

int StreamDevice(cudaStream_t stream) { return stream->device; }

void Enqueue(cudaStream_t stream, std::function<void()> work) {
  CUstream_st* s = Resolve(stream, CurrentDevice());
  std::lock_guard<std::mutex> lock(s->mutex);
  s->queue.push_back(std::move(work));
  ++s->posted;
  s->changed.notify_all();
}

void WaitForStream(cudaStream_t stream) { Wait(Resolve(stream, CurrentDevice())); }

bool StreamIdle(cudaStream_t stream) {
  CUstream_st* s = Resolve(stream, CurrentDevice());
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->done == s->posted;
}

void SynchronizeDevice(int device) {
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard<std::mutex> lock(AllStreams().mutex);
    for (CUstream_st* s : AllStreams().live) {
      if (s->device == device) streams.push_back(s);
    }
    auto it = AllStreams().defaults.find(device);
    if (it != AllStreams().defaults.end()) streams.push_back(it->second);
  }
  for (CUstream_st* s : streams) Wait(s);
}

cudaEvent_t CreateEvent(bool timing) {
  auto* e = new CUevent_st;
  e->timing = timing;
  return e;
}

void DestroyEvent(cudaEvent_t event) {
  WaitForEvent(event);  // a record still queued would touch it
  delete event;
}

void RecordEvent(cudaEvent_t event, cudaStream_t stream) {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    generation = ++event->recorded;
  }
  Enqueue(stream, [event, generation] {
    std::lock_guard<std::mutex> lock(event->mutex);
    if (generation > event->completed) {
      event->completed = generation;
      event->when = std::chrono::steady_clock::now();
    }
    event->changed.notify_all();
  });
}

void StreamWaitEvent(cudaStream_t stream, cudaEvent_t event) {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    generation = event->recorded;
  }
  Enqueue(stream, [event, generation] {
    std::unique_lock<std::mutex> lock(event->mutex);
    event->changed.wait(lock, [&] { return event->completed >= generation; });
  });
}

bool EventDone(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(event->mutex);
  return event->completed >= event->recorded;
}

void WaitForEvent(cudaEvent_t event) {
  std::unique_lock<std::mutex> lock(event->mutex);
  const uint64_t target = event->recorded;
  event->changed.wait(lock, [&] { return event->completed >= target; });
}

cudaError_t ElapsedMs(cudaEvent_t start, cudaEvent_t end, float* ms) {
  if (!start->timing || !end->timing) return cudaErrorInvalidResourceHandle;
  if (!EventDone(start) || !EventDone(end)) return cudaErrorNotReady;
  if (start == end) {
    *ms = 0;
    return cudaSuccess;
  }
  std::scoped_lock lock(start->mutex, end->mutex);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

}  // namespace tetra::emulator
