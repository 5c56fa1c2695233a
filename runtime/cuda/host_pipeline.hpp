// Host panels through the GPU in chunks (runtime/chunk_plan.hpp), so that copying in, computing and copying out
// overlap and a run needs device memory for a few chunks only (docs/runtime.md, "The CUDA pipeline").
//
// Slots, each a stream with its own pinned staging buffers and device buffers, take chunks in turn. For chunk c
// in slot s the host thread
//   1. waits for the chunk slot s held before (c - slots) and copies its results from pinned memory into the
//      caller's output rows (threads of the shared pool: pageable memory moves at memory speed that way, where
//      cuMemcpy from pageable memory manages 8-11 GB/s on the H200's host),
//   2. copies chunk c's input rows (its halo included) from the caller's panels into the slot's pinned buffer,
//   3. enqueues on the slot's stream: the copy to the device, the plan's steps, the copy of the rows the chunk
//      owns back to pinned memory, and an event.
// So while the GPU computes chunk c and copies c - 1 out, the host stages c + 1 and delivers c - 2.
// Pinned buffers are kept for the executable's life and grown when a run needs more (pinning costs about
// 50 ms a GB once). A failure anywhere waits for the slots' streams, so nothing is left writing into memory
// that is freed or reused, and rethrows with the chunk it happened in.
//
// Several GPUs (RunOptions::devices): one pipeline per device (per worker), each on a host thread of its own,
// takes its chunks from a shared ChunkQueue (runtime/chunk_queue.hpp) instead of in order; a chunk writes only
// the output rows it owns, so the order in which chunks finish does not matter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/chunk_plan.hpp"
#include "runtime/chunk_queue.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/memory.hpp"
#include "runtime/panel.hpp"
#include "runtime/program.hpp"

namespace fj::rt::cuda {

class HostPipeline {
public:
    explicit HostPipeline(const Device& dev);
    ~HostPipeline();
    HostPipeline(const HostPipeline&) = delete;
    HostPipeline& operator=(const HostPipeline&) = delete;

    // Enqueues a chunk's computation on `stream`: inputs and outputs as dense device views of rows x cols
    // (the plan's order), intermediates from `mem` (stream-ordered on that stream).
    using Enqueue = std::function<void(const std::vector<DevView>& inputs, const std::vector<DevView>& outputs,
                                       std::int64_t rows, std::int64_t cols, RunMemory& mem, CUstream stream)>;

    // Runs the chunks of `chunks` that `queue` hands it over host panels (all of them in host memory), reporting
    // each finished chunk to `progress`. Returns when every chunk it took is in the caller's outputs, or once the
    // queue is stopped and its chunks in flight are done. A failure throws fj::RunError whose message starts
    // with `label` (the device and worker) and names the chunk; a progress callback's exception propagates as is.
    void run(const ChunkPlan& chunks, ChunkQueue& queue, SharedProgress& progress, const std::vector<Panel>& inputs,
             const std::vector<Panel>& outputs, DType dtype, const std::string& label, const Enqueue& enqueue);

    // Slots a run uses at most (chunks in flight: one staged, one computed, one delivered).
    static constexpr int kSlots = 3;

private:
    struct Slot;
    Slot& slot(int s, std::size_t in_bytes, std::size_t out_bytes);
    void wait_all() noexcept;

    const Device& dev_;
    std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace fj::rt::cuda
