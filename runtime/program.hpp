// fj::compile and fj::Program: named outputs compiled together, run on panels.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dsl/expr.hpp"
#include "runtime/panel.hpp"

namespace fj {

enum class Backend : std::uint8_t { Auto, Cpu, Cuda };

struct CompileOptions {
    Backend backend = Backend::Auto;
    int threads = 0;               // CPU worker threads; 0: FJ_THREADS or the hardware's count
    std::int64_t tile_rows = 0;    // rows per time tile (before the halo); 0: chosen from the shape
    std::int64_t block_cols = 0;   // CPU: columns per task; 0: chosen from the shape
    // Window sums as double-double for float32 panels too (always so for float64). Costs about twice the
    // arithmetic; needed only when a column's level moves by more than ~2^14 times its window spread
    // within a time tile (see docs/operators.md's float32 contract and README).
    bool exact_sums = false;
    // CUDA: let NVRTC contract a * b + c into one fused multiply-add. Off by default, so that both backends
    // round the same IEEE operations alike (they then differ only in exp, log and pow); on, CUDA results move
    // in the last bits, still within the accuracy contract.
    bool fma_contraction = false;
    // Subexpressions computed by a step of their own and kept as intermediate panels (of the panels' dtype)
    // for the steps that read them, instead of being fused into those steps' kernels: for inspecting a
    // subexpression's kernel (explain()) or splitting a very large program. Results stay within the contract
    // (an intermediate is rounded to the panel's dtype, as an output is).
    std::vector<Expr> materialize;
};

// Where a run stands, for RunOptions::progress. Counts are cumulative since the run began.
struct RunProgress {
    std::int64_t rows_done = 0, rows_total = 0;      // output rows finished (all outputs of those rows)
    std::int64_t chunks_done = 0, chunks_total = 0;  // chunks of the run's chunk plan (1: the whole panel)
    std::int64_t bytes_in = 0;   // bytes of input moved so far: host->device copies, or bytes read (CLI)
    std::int64_t bytes_out = 0;  // bytes of output moved so far: device->host copies, or bytes written
    double elapsed_s = 0;        // since the run began
};

// How one run may use memory and report progress (docs/runtime.md). The defaults run the whole panel as
// one chunk when it fits.
struct RunOptions {
    // Device memory a run may take (CUDA): 0 = what is free on the device when the run starts.
    std::int64_t max_device_bytes = 0;
    // Host memory a run may take for its own buffers (intermediates, staging): 0 = unlimited. The caller's
    // panels are not counted; on the CPU a budget makes the run go through chunks over time so that the
    // intermediates of only one chunk exist at once.
    std::int64_t max_host_bytes = 0;
    // Forces the chunking (tests, tuning): rows of output per chunk over time, or columns per chunk over
    // columns (only for programs without row steps). 0: chosen by the chunk planner (runtime/chunk_plan.hpp).
    std::int64_t chunk_rows = 0;
    std::int64_t chunk_cols = 0;
    // Called after each chunk finishes, from the thread that runs the program (on CUDA: the host thread
    // that waits for the chunk; with several devices, that device's thread), never concurrently for one run.
    // An exception it throws stops the run and propagates out of run(). Called at least once (at the end)
    // when set.
    std::function<void(const RunProgress&)> progress;
    // The GPUs (CUDA device ordinals) a run of host panels spreads its chunks over time across, each with its
    // own context, streams, pinned staging and device budget (max_device_bytes applies to each device).
    // Empty: the program's one device (FJ_CUDA_DEVICE, default 0), as without this option. Every GPU:
    // fj::all_cuda_devices() (runtime/devices.hpp). An ordinal may appear twice ({0, 0}: two workers share
    // device 0 and its budget), a testing aid for the hand-out on a machine with one GPU. Panels in device
    // memory run on the device that holds them whatever this says (panels on two devices are refused with
    // fj::InputError, as are device panels mixed with host panels, always). The CPU backend ignores it.
    std::vector<int> devices;
};

// A run that failed after it started: a chunk, an allocation or a kernel failed. The message names the
// chunk (rows, columns) and the cause; the caller's inputs are untouched, the outputs' contents are
// unspecified, what the run took is freed, and the program can run again.
class RunError : public Error {
public:
    using Error::Error;
};

class Program {
public:
    struct Impl;
    explicit Program(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

    const std::vector<std::string>& output_names() const;
    const std::vector<std::string>& input_names() const;  // the inputs the outputs read, sorted
    Backend backend() const;                              // the backend chosen at compile time

    // Computes every output. All inputs must have the same shape and dtype; outputs must have that
    // shape and dtype too. Inputs the program does not read are ignored; a missing input, a missing
    // output or any mismatch throws fj::InputError before anything is written. A failure after the run
    // started throws fj::RunError (or fj::BackendError from a backend call) with context.
    void run(const std::map<std::string, Panel>& inputs, const std::map<std::string, Panel>& outputs,
             const RunOptions& options = {}) const;

    // Enqueues the run on `stream` (a CUstream of the program's device, as void*; nullptr: the legacy
    // default stream) and returns without waiting: on CUDA the panels must be device panels, and they
    // must stay valid until the stream reaches the run's end. Checks of the call (shapes, names) throw
    // here; failures of the work itself are reported by the next run or synchronisation. Several
    // programs may run concurrently on different streams. Backends without streams (the CPU) run
    // synchronously and ignore `stream`: the outputs are complete when run_async returns.
    void run_async(const std::map<std::string, Panel>& inputs, const std::map<std::string, Panel>& outputs,
                   void* stream, const RunOptions& options = {}) const;

    // Regions, halos, kernels and the generated IR, for humans.
    std::string explain() const;

private:
    std::shared_ptr<Impl> impl_;
};

Program compile(const std::vector<std::pair<std::string, Expr>>& outputs, const CompileOptions& options = {});

}  // namespace fj
