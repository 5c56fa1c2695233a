// fj::compile and fj::Program: named outputs compiled together, run on panels.
#pragma once

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

class Program {
public:
    struct Impl;
    explicit Program(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

    const std::vector<std::string>& output_names() const;
    const std::vector<std::string>& input_names() const;  // the inputs the outputs read, sorted
    Backend backend() const;                              // the backend chosen at compile time

    // Computes every output. All inputs must have the same shape and dtype; outputs must have that
    // shape and dtype too. Inputs the program does not read are ignored; a missing input, a missing
    // output or any mismatch throws fj::InputError before anything is written.
    void run(const std::map<std::string, Panel>& inputs, const std::map<std::string, Panel>& outputs) const;

    // Regions, halos, kernels and the generated IR, for humans.
    std::string explain() const;

private:
    std::shared_ptr<Impl> impl_;
};

Program compile(const std::vector<std::pair<std::string, Expr>>& outputs, const CompileOptions& options = {});

}  // namespace fj
