#include "runtime/cuda/host_pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "dsl/error.hpp"
#include "runtime/chunk_run.hpp"
#include "runtime/fault_inject.hpp"
#include "runtime/thread_pool.hpp"

namespace fj::rt::cuda {

struct HostPipeline::Slot {
    CUstream stream = nullptr;
    CUevent done = nullptr;  // recorded after the chunk's copy out
    void* pinned_in = nullptr;
    void* pinned_out = nullptr;
    std::size_t in_capacity = 0, out_capacity = 0;
    std::int64_t chunk = -1;  // the chunk in flight here, or -1
};

namespace {

// Frees pinned memory; errors at teardown are moot (the process may be exiting, the context gone).
void free_host(void* p) {
    if (p)
        if (const Driver* d = driver()) d->cuMemFreeHost(p);
}

// Rows [row0, row0 + rows) x columns [col0, col0 + cols) of a host panel, to or from a dense buffer of those rows
// (ld = cols), on the threads of the shared pool in blocks of about 4 MB.
void copy_rows(const Panel& p, std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t cols, void* dense,
               bool to_dense) {
    const std::size_t elem = dtype_size(p.dtype);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * elem;
    if (rows <= 0 || cols <= 0) return;
    auto* panel = static_cast<char*>(p.data) + (static_cast<std::size_t>(row0) * static_cast<std::size_t>(p.ld) +
                                                static_cast<std::size_t>(col0)) * elem;
    auto* buf = static_cast<char*>(dense);
    const std::size_t panel_row = static_cast<std::size_t>(p.ld) * elem;
    const std::int64_t block = std::max<std::int64_t>(1, static_cast<std::int64_t>((std::size_t{4} << 20) / std::max<std::size_t>(row_bytes, 1)));
    const std::int64_t tasks = (rows + block - 1) / block;
    ThreadPool::shared(thread_count(0)).parallel_for(tasks, [&](std::int64_t t, int) {
        const std::int64_t r0 = t * block, r1 = std::min(rows, r0 + block);
        if (panel_row == row_bytes) {  // whole rows of a dense panel: one copy
            char* a = panel + static_cast<std::size_t>(r0) * panel_row;
            char* b = buf + static_cast<std::size_t>(r0) * row_bytes;
            const std::size_t n = static_cast<std::size_t>(r1 - r0) * row_bytes;
            to_dense ? std::memcpy(b, a, n) : std::memcpy(a, b, n);
            return;
        }
        for (std::int64_t r = r0; r < r1; ++r) {
            char* a = panel + static_cast<std::size_t>(r) * panel_row;
            char* b = buf + static_cast<std::size_t>(r) * row_bytes;
            to_dense ? std::memcpy(b, a, row_bytes) : std::memcpy(a, b, row_bytes);
        }
    });
}

// Whether the caller's panel lies in page-locked memory (cuMemHostAlloc'd or cuMemHostRegister'ed, by us or by
// CuPy, PyTorch or the caller): then the copies read or write it directly, at PCIe speed, without staging. Both
// ends of its extent are asked (pageable memory answers CUDA_ERROR_INVALID_VALUE).
bool page_locked(const Panel& p) {
    if (p.rows <= 0 || p.cols <= 0) return false;
    const auto* first = static_cast<const char*>(p.data);
    const char* last = first + ((p.rows - 1) * p.ld + p.cols) * static_cast<std::int64_t>(dtype_size(p.dtype)) - 1;
    for (const char* at : {first, last}) {
        unsigned type = 0;
        if (driver_api().cuPointerGetAttribute(&type, 2 /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE */,
                                               reinterpret_cast<CUdeviceptr>(at)) != 0 ||
            type != 1 /* CU_MEMORYTYPE_HOST */)
            return false;
    }
    return true;
}

}  // namespace

HostPipeline::HostPipeline(const Device& dev) : dev_(dev) {}

HostPipeline::~HostPipeline() {
    wait_all();
    const Driver* d = driver();
    for (auto& s : slots_) {
        free_host(s->pinned_in);
        free_host(s->pinned_out);
        if (d && s->done) d->cuEventDestroy(s->done);
        if (d && s->stream) d->cuStreamDestroy(s->stream);
    }
}

void HostPipeline::wait_all() noexcept {
    const Driver* d = driver();
    if (!d) return;
    for (auto& s : slots_) {
        if (s->stream) d->cuStreamSynchronize(s->stream);  // (a failed stream's error was or will be reported)
        s->chunk = -1;
    }
}

HostPipeline::Slot& HostPipeline::slot(int s, std::size_t in_bytes, std::size_t out_bytes) {
    while (static_cast<int>(slots_.size()) <= s) {
        auto sl = std::make_unique<Slot>();
        FJ_CU(cuStreamCreate, &sl->stream, 0u);
        slots_.push_back(std::move(sl));
        FJ_CU(cuEventCreate, &slots_.back()->done, 0x2u /* CU_EVENT_DISABLE_TIMING */);
    }
    Slot& sl = *slots_[static_cast<std::size_t>(s)];
    auto grow = [](void*& buffer, std::size_t& capacity, std::size_t bytes) {
        if (capacity >= bytes) return;
        free_host(buffer);
        buffer = nullptr;
        capacity = 0;
        FJ_CU(cuMemHostAlloc, &buffer, std::max<std::size_t>(bytes, 1), 0u);
        capacity = bytes;
    };
    grow(sl.pinned_in, sl.in_capacity, in_bytes);
    grow(sl.pinned_out, sl.out_capacity, out_bytes);
    return sl;
}

void HostPipeline::run(const ChunkPlan& chunks, ChunkQueue& queue, SharedProgress& progress, const std::vector<Panel>& inputs,
                       const std::vector<Panel>& outputs, DType dtype, const std::string& label, const Enqueue& enqueue) {
    if (chunks.count <= 0) return;
    const std::size_t elem = dtype_size(dtype);
    const std::size_t n_in = inputs.size(), n_out = outputs.size();
    std::int64_t run_elems = 0, own_elems = 0;  // the largest chunk's elements run (halo included) and owned
    for (std::int64_t c = 0; c < chunks.count; ++c) {
        const Chunk k = chunks.chunk(c);
        run_elems = std::max(run_elems, k.rows_run() * k.cols());
        own_elems = std::max(own_elems, k.rows() * k.cols());
    }
    const std::size_t in_bytes = n_in * static_cast<std::size_t>(run_elems) * elem;
    const std::size_t out_bytes = n_out * static_cast<std::size_t>(own_elems) * elem;
    const int slots = static_cast<int>(std::min<std::int64_t>(kSlots, chunks.count));
    std::vector<bool> in_locked(n_in), out_locked(n_out);
    for (std::size_t i = 0; i < n_in; ++i) in_locked[i] = page_locked(inputs[i]);
    for (std::size_t o = 0; o < n_out; ++o) out_locked[o] = page_locked(outputs[o]);

    // Device buffers per slot, from the stream-ordered pool on the slot's stream (freed there after its work).
    std::vector<std::unique_ptr<RunMemory>> mem;
    std::vector<CUdeviceptr> dev_in(static_cast<std::size_t>(slots)), dev_out(static_cast<std::size_t>(slots));
    std::vector<std::int64_t> staged_bytes(static_cast<std::size_t>(slots), 0);  // input bytes of the chunk in a slot
    std::int64_t current = -1;
    std::exception_ptr stopped_by_caller;  // what the progress callback threw: it propagates as it is
    try {
        for (int s = 0; s < slots; ++s) {
            Slot& sl = slot(s, in_bytes, out_bytes);
            mem.push_back(std::make_unique<RunMemory>(dev_, sl.stream));
            dev_in[static_cast<std::size_t>(s)] = mem.back()->alloc(in_bytes);
            dev_out[static_cast<std::size_t>(s)] = mem.back()->alloc(n_out * static_cast<std::size_t>(run_elems) * elem);
        }
        // The chunk slot s holds: wait for it, then copy its rows into the caller's outputs.
        auto deliver = [&](int s) {
            Slot& sl = *slots_[static_cast<std::size_t>(s)];
            if (sl.chunk < 0) return;
            current = sl.chunk;
            FJ_CU(cuEventSynchronize, sl.done);
            const Chunk c = chunks.chunk(sl.chunk);
            const std::size_t each = static_cast<std::size_t>(c.rows() * c.cols()) * elem;
            for (std::size_t o = 0; o < n_out; ++o)
                if (!out_locked[o])
                    copy_rows(outputs[o], c.row_begin, c.rows(), c.col_begin, c.cols(), static_cast<char*>(sl.pinned_out) + o * each, false);
            sl.chunk = -1;
            try {
                progress.chunk_done(c, staged_bytes[static_cast<std::size_t>(s)], static_cast<std::int64_t>(each * n_out));
            } catch (...) {
                stopped_by_caller = std::current_exception();
                throw;
            }
        };
        // Chunks as the queue hands them out, slot after slot: a slot is delivered before it takes the next.
        std::int64_t issued = 0;
        while (true) {
            const int s = static_cast<int>(issued % slots);
            deliver(s);
            const std::int64_t ci = queue.next();
            if (ci < 0) break;
            current = ci;
            fault_point(FaultKind::Chunk, "cuda chunk");
            Slot& sl = *slots_[static_cast<std::size_t>(s)];
            const Chunk c = chunks.chunk(ci);
            const std::int64_t w = c.cols(), rr = c.rows_run();
            const std::size_t each = static_cast<std::size_t>(rr * w) * elem;
            std::vector<DevView> ins(n_in), outs(n_out);
            for (std::size_t i = 0; i < n_in; ++i) {
                ins[i] = {dev_in[static_cast<std::size_t>(s)] + i * each, w};
                if (in_locked[i]) {
                    copy_2d(sl.stream, true, sub_panel(inputs[i], c.read_begin, rr, c.col_begin, w), ins[i].ptr, w);
                } else {
                    char* staged = static_cast<char*>(sl.pinned_in) + i * each;
                    copy_rows(inputs[i], c.read_begin, rr, c.col_begin, w, staged, true);
                    FJ_CU(cuMemcpyHtoDAsync, ins[i].ptr, staged, each, sl.stream);
                }
            }
            staged_bytes[static_cast<std::size_t>(s)] = static_cast<std::int64_t>(n_in * each);
            for (std::size_t o = 0; o < n_out; ++o) outs[o] = {dev_out[static_cast<std::size_t>(s)] + o * each, w};
            enqueue(ins, outs, rr, w, *mem[static_cast<std::size_t>(s)], sl.stream);
            // The rows the chunk owns (after its warm-up rows), back to pinned memory.
            const std::size_t owned = static_cast<std::size_t>(c.rows() * w) * elem;
            const std::size_t skip = static_cast<std::size_t>(c.halo_rows() * w) * elem;
            for (std::size_t o = 0; o < n_out; ++o) {
                if (out_locked[o]) copy_2d(sl.stream, false, sub_panel(outputs[o], c.row_begin, c.rows(), c.col_begin, w), outs[o].ptr + skip, w);
                else FJ_CU(cuMemcpyDtoHAsync, static_cast<char*>(sl.pinned_out) + o * owned, outs[o].ptr + skip, owned, sl.stream);
            }
            FJ_CU(cuEventRecord, sl.done, sl.stream);
            sl.chunk = ci;
            ++issued;
        }
        // The last chunks, in the order they were taken.
        for (std::int64_t k = std::max<std::int64_t>(0, issued - slots); k < issued; ++k) deliver(static_cast<int>(k % slots));
    } catch (...) {
        wait_all();
        if (stopped_by_caller) std::rethrow_exception(stopped_by_caller);
        std::string what = "an exception that is not a std::exception";
        try {
            throw;
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        const std::string where = current < 0 ? std::string("before its first chunk")
                                  : chunks.count == 1 ? std::string("in its only chunk")
                                                      : fmt::format("in chunk {} of {} (rows {}-{}, columns {}-{})", current + 1, chunks.count,
                                                                    chunks.chunk(current).row_begin, chunks.chunk(current).row_end,
                                                                    chunks.chunk(current).col_begin, chunks.chunk(current).col_end);
        throw RunError(fmt::format("{}: a run of host panels ({} x {}, {}) failed {}: {}", label, chunks.rows, chunks.cols,
                                   chunks.describe(), where, what));
    }
}

}  // namespace fj::rt::cuda
