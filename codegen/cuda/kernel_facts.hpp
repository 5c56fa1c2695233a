// Facts about a kernel's IR that every CUDA kernel shape reads (codegen/cuda/column_scan.cpp,
// window_scan.cpp, chained_scan.cpp) and that instruction printing (instructions.hpp) follows: which
// instructions are live, which values are integers of bounded size or exact float32 numbers, which states
// are sticky (NaN until set, then fixed) or run counters, which lagged loads only rows before the pass would
// read. Computed once per kernel and set of options (CudaKernelAnalysis, emit.hpp), by KernelFacts' constructor.
// Internal to codegen/cuda/.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "codegen/cuda/emit.hpp"

namespace fj::codegen::detail {

using ir::Inst;
using ir::Prim;
using ir::Type;

[[noreturn]] void bad_ir(const ir::Kernel& k, std::size_t i, const std::string& what);

struct RingInfo {
    int size = 1;
    bool in_regs = false;  // shift register, indexed only by constants (dynamic reads become selects)
};

// operand_closure()'s judgement of each instruction it reaches: take its operands too (Expand), not
// (Leaf), or stop the walk (Fail).
enum class Reach { Expand, Leaf, Fail };

struct KernelFacts {
    // Verifies the kernel (ir::verify) and computes every fact below. The options that matter: dtype,
    // unroll, reg_ring_max, big_body_shapes (and the kernel's halo).
    KernelFacts(const ir::Kernel& k, const CudaEmitOptions& o);

    const ir::Kernel& kernel;
    const CudaEmitOptions& options;  // (the analysis keeps them)
    // Rows per batch: the option's, fewer for big bodies (a column scan with echo rings may take more).
    int batch_rows = 1;
    std::vector<RingInfo> rings;
    std::set<std::pair<int, int>> loads;  // (input slot, lag) pairs read by the body
    // Bodies of more than kBigBody live instructions (many fused outputs) keep the code shape of codegen
    // v5: with the guarded warm-up batches or fj_rsqrt, two such kernels (every operator in one program,
    // float32, fixed leading dimensions) stored wrong comparison results on the H200 when ptxas optimised
    // at -O2 or -O3, and right ones at -O1, while the same source run on the host was right (bench/
    // RESULTS.md, 2026-11-29). Until that is understood, only the small bodies the benchmarks need get them.
    static constexpr std::size_t kBigBody = 300;
    bool big_body = false;
    bool fast_rsqrt = false;              // float32 RSqrt as fj_rsqrt (see print_header())
    std::vector<bool> live;               // instructions whose value an effect needs
    // Integer-valued values (counts, row numbers, 0/1 flags as numbers), kept in 64-bit integers: their
    // arithmetic and comparisons then run on the integer pipes instead of the float64 one, with the same
    // results (every such value is an integer below 2^53 in magnitude, where float64 is exact too).
    std::vector<bool> int_value;          // instruction computed as `long long iv<i>`
    std::vector<bool> need_double;        // ... whose float64 value is read too (`v<i>` = (double)iv<i>)
    std::vector<bool> int_state;          // state kept as `long long s<k>`
    std::vector<bool> int32, int32_state;  // ... as `int` (bounded below 2^31)
    // Run counters (run_counters()): state -> its select `c ? 0 : s + 1`, or -1; and back.
    std::vector<std::int32_t> counter_select;
    std::vector<std::int32_t> counter_state;  // instruction -> the state whose select it is, or -1
    std::vector<bool> counter_part;       // the counter's load and `+ 1`, not emitted
    // Float32 panels: values that are exactly float32 numbers (inputs, float-exact constants, their
    // abs/neg, selects of such, states only ever holding such), see float_values().
    std::vector<bool> fexact;             // value is a float32 number (or NaN)
    std::vector<bool> fmat;               // ... computed as `const float fv<i>` (state loads, selects)
    std::vector<bool> float_state;        // state kept as `float s<k>`
    std::vector<bool> state_fexact;       // state only ever holds float32 numbers (or NaN)
    std::vector<bool> narrow;             // computed in float32 from rounded operands (see narrow_values())
    // Sticky states: NaN until a row sets them, then fixed for the pass (the shift of window sums).
    // The pass's first rows run until every live one is set and finite; the batched loops after them
    // treat each as a loop invariant (see KernelFacts::sticky_states()).
    std::vector<bool> sticky_state;
    std::vector<int> sticky_of;           // instruction -> its sticky state: the setting select, or the
                                          // NaN test of the state; -1 for other instructions
    std::vector<bool> live_sticky;        // sticky states whose setting select is emitted
    std::vector<bool> depends_on_state;   // value depends on a state
    // (input, lag) -> whether every load of it is pass-only (see pass_only_lags()).
    std::map<std::pair<int, int>, bool> pass_only_lag;
    // Refolds (kernel_ir.hpp): each refold's Refold instruction, and its RefoldValues in body order.
    std::vector<std::int32_t> refold_at;
    std::vector<std::vector<std::int32_t>> refold_values;
    // Whether sticky_states() sees through a store's RefoldValue: the batched loops then keep a window's
    // shift as a loop invariant that a refold moves, instead of testing, selecting and storing it on every row.
    static constexpr bool kStickyThroughRefolds = true;
    // Sticky states whose one store goes through a RefoldValue of a refold that can only set them to a
    // number (a row's valid value, or themselves): the RefoldValue, or -1. Where the batched loops (and the
    // loop after presets) treat the state as set, its Refold's block stores the export into the state
    // itself (and into its float32 copy sf<k>), and the store in the body is skipped as for other sticky
    // states (see sticky_states()).
    std::vector<std::int32_t> sticky_refold;

    // Calls f(o) for each value instruction i reads: its operands a, b, c; for a RefoldValue also its refold's
    // Refold instruction; for a Refold also the main-body values its refold's body reads (Outer).
    template <class F>
    void for_operands(std::size_t i, F&& f) const {
        const Inst& x = kernel.body[i];
        for (std::int32_t o : {x.a, x.b, x.c})
            if (o >= 0) f(o);
        if (x.op == Prim::RefoldValue) f(refold_at[static_cast<std::size_t>(x.slot)]);
        if (x.op == Prim::Refold)
            for (const Inst& y : kernel.refolds[static_cast<std::size_t>(x.slot)].body)
                if (y.op == Prim::Outer) f(y.a);
    }
    // Instructions an effect (state store, ring push, output) needs, through the operands of those needed,
    // except the operands of `given` ones (values that come from elsewhere; empty: none).
    std::vector<bool> live_from_effects(const std::vector<bool>& given) const;
    // The (input, lag) loads of the live instructions.
    std::set<std::pair<int, int>> loads_of(const std::vector<bool>& live) const;
    // The instructions `need` holds and their operands, transitively, marked in `need` (operands come before
    // their users: one walk from the last). `reach` judges each instruction the walk arrives at: Expand (take
    // its operands too), Leaf (not), or Fail (the walk stops and returns false).
    bool operand_closure(std::vector<bool>& need, const std::function<Reach(std::size_t)>& reach) const;
    // How many live instructions read each value.
    std::vector<int> use_counts() const;
    // A run counter's store: an int32 state stored as `c ? 0 : s + 1`, its `+ 1` and its load read once.
    // Gives the load (the select is the store's operand, `+ 1` the select's third), or -1.
    std::int32_t counter_load(std::size_t store, const std::vector<int>& uses) const;
    // The sticky state whose value instruction i is (its load or its setting select), or -1.
    int sticky_value(std::int32_t i) const;
    // A float expression for value i exists (see InstructionPrinter::float_exact()).
    bool float_available(std::int32_t i) const;
    // Whether instruction i can use operand o's float form instead of its float64 value.
    bool float_use(std::size_t i, std::int32_t o) const;
    static bool is_compare(Prim p);
    static bool float_repr(double v);
    bool is_int(std::int32_t i) const { return i >= 0 && int_value[static_cast<std::size_t>(i)]; }
    // Whether value i depends on any state (directly or through its operands).
    bool reads_state(std::int32_t i) const { return depends_on_state[static_cast<std::size_t>(i)]; }

private:
    void integer_values();
    void float_values();
    void narrow_values();
    void sticky_states();
    // Whether RefoldValue `value` (a store's, of sticky state st with setting select `select` and condition
    // `valid`) leaves the state sticky (see sticky_states()).
    bool refold_keeps_sticky(std::int32_t value, std::int32_t select, std::int32_t valid, int st) const;
    void run_counters();
    void pass_only_lags();
};

}  // namespace fj::codegen::detail
