// Emulated streams and events. Each stream has a worker thread that runs what
// was posted on it in posting order while the host goes on, as a GPU runs a
// stream's work; an event marks a point in a stream that the host or another
// stream can wait for.
#ifndef TETRA_EMULATOR_STREAMS_H_
#define TETRA_EMULATOR_STREAMS_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace tetra::emulator {

// A stream of `device` (non_blocking or not: the emulator orders neither with
// the default stream).
cudaStream_t CreateStream(int device);
// Waits for the stream's work, then ends its worker.
void DestroyStream(cudaStream_t stream);
// nullptr is `device`'s default stream.
cudaStream_t Resolve(cudaStream_t stream, int device);
int StreamDevice(cudaStream_t stream);
// Everything posted so far on every stream of `device` has run.
void SynchronizeDevice(int device);
bool StreamIdle(cudaStream_t stream);

cudaEvent_t CreateEvent(bool timing);
void DestroyEvent(cudaEvent_t event);
void RecordEvent(cudaEvent_t event, cudaStream_t stream);
// `stream` waits (without the host) for the event's last record to complete.
void StreamWaitEvent(cudaStream_t stream, cudaEvent_t event);
bool EventDone(cudaEvent_t event);
void WaitForEvent(cudaEvent_t event);
// cudaErrorNotReady, cudaErrorInvalidResourceHandle (a timing-less event) or success.
cudaError_t ElapsedMs(cudaEvent_t start, cudaEvent_t end, float* ms);

}  // namespace tetra::emulator

#endif  // TETRA_EMULATOR_STREAMS_H_
