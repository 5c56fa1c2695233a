// The kernel IR: what a fused time-series step of a plan computes, shared by every backend.
//
// A kernel is a straight-line program run once per row, in time order, by a lane that owns one column
// (a CUDA thread; a SIMD lane on the CPU). Values are float64 (or booleans). Operators never appear
// here: codegen/lower_ops.cpp turns each operator into these primitives (its state update included),
// so a backend implements the primitives once and every operator, present and future, follows.
//
// One execution ("pass") of a kernel covers the rows [row_begin, row_end) of a set of columns:
//   * every state slot starts at its `init` value and every ring starts empty (all entries NaN);
//   * for each row t in order, the body runs top to bottom;
//   * Output stores its value only for rows t >= out_begin: the rows before it (at most `halo` of them)
//     only warm up the states, so that tiles over time can run independently.
// Inputs are read at any row t - lag (lag >= 0), with NaN for t - lag < 0: windows re-read the value that
// leaves them (from cache) instead of keeping it. Rings keep values that cannot be re-read (a window
// over a windowed result, a delay of one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fj::ir {

enum class Type : std::uint8_t { F64, Bool, Void };

#define FJ_PRIMS(X)                                                                                       \
    /* leaves */                                                                                          \
    X(Const)        /* F64: imm */                                                                        \
    X(Input)        /* F64: input #slot at row t-lag, converted to f64; NaN if t-lag < 0 */               \
    X(RowIndex)     /* F64: t */                                                                          \
    X(RowInPass)    /* Bool: t-lag >= row_begin (row t-lag was run by this pass) */                       \
    X(LoadState)    /* F64: state #slot */                                                                \
    X(RingRead)     /* F64: ring #slot at lag (0 = this row, after its push); NaN if not pushed */        \
    /* effects */                                                                                         \
    X(StoreState)   /* state #slot := a */                                                                \
    X(RingPush)     /* ring #slot: this row's value := a (once per row, before reads of this row) */      \
    X(Output)       /* output #slot := a, stored (as the panel dtype) only when t >= out_begin */         \
    /* refolds (struct Refold): a window's sums recomputed from its own rows on the rare rows that need it */ \
    X(Refold)       /* Void: where Bool a holds (per column), runs refold #slot of Kernel::refolds */     \
    X(RefoldValue)  /* F64: export #lag of refold #slot where its Refold ran on this row, else a */      \
    X(Outer)        /* refold bodies only: the main-body value a (computed before the Refold) */         \
    X(Fold)         /* refold epilogues only, F64: sum #slot over the lags (imm 0), or its low part (1) */ \
    X(Flag)         /* Void: where Bool a holds on a row, this column's pass needs refold #slot (flag_refolds) */ \
    /* arithmetic, IEEE-754 double, no fast-math */                                                       \
    X(Add) X(Sub) X(Mul) X(Div) X(Neg) X(Abs) X(Sqrt) X(Exp) X(Log) X(Pow)                                \
    X(Floor)                                                                                              \
    /* Recip = 1/a, RSqrt = 1/sqrt(a), each within 4 ulp (backends may refine a hardware estimate); */   \
    /* for a = 0, inf or NaN the result is unspecified (NaN allowed): lowering masks those cases; in */   \
    /* float32 kernels also for subnormal a (float32 data's window moments are far above that range). */ \
    X(Recip) X(RSqrt)                                                                                     \
    X(Fma)          /* a * b + c rounded once (exact products for double-double sums) */                  \
    /* the smaller / larger of a and b; which one when either is NaN is unspecified (lowering masks it) */ \
    X(Min) X(Max)                                                                                         \
    /* comparisons -> Bool; ordered (false when either is NaN) except CmpUNE (true when either is NaN) */ \
    X(CmpLT) X(CmpLE) X(CmpGT) X(CmpGE) X(CmpEQ) X(CmpONE) X(CmpUNE)                                      \
    X(IsNaN)                                                                                              \
    /* Bool logic */                                                                                      \
    X(And) X(Or) X(Not)                                                                                   \
    /* a ? b : c (b, c both F64 or both Bool), Bool -> 1.0 / 0.0 */                                       \
    X(Select) X(BoolToF64)

enum class Prim : std::uint8_t {
#define FJ_PRIM_ENUM(p) p,
    FJ_PRIMS(FJ_PRIM_ENUM)
#undef FJ_PRIM_ENUM
};

const char* prim_name(Prim p);

// An instruction's result is named by its index in Kernel::body (SSA). Operands a, b, c are indices.
struct Inst {
    Prim op;
    Type type = Type::F64;
    std::int32_t a = -1, b = -1, c = -1;
    std::int32_t slot = -1;  // input, output, state or ring number
    std::int32_t lag = 0;    // Input, RowInPass, RingRead
    double imm = 0;          // Const
};

struct StateSlot {
    double init = 0;
    std::string what;  // for dumps: "n window(A,20)"
    // > 0 for a rounding bound E (E := E + size or E + c * size: codegen/guard_form.hpp) whose size is, on every
    // row, a window's sum of non-negative terms over at most bound_rows rows (a sum of squares): then bound_rows
    // times the sizes of rows at most bound_rows apart (the first of them no later than the first row, the last
    // no earlier than the last) is at least the sizes of all rows (each term is in a sampled window, and in at
    // most bound_rows windows). A backend that tests a bound once over many rows may add only those (the CUDA
    // column scan's repair flags: docs/numerics.md).
    std::int32_t bound_rows = 0;
};

struct Ring {
    std::int32_t size = 1;  // entries kept: the largest lag read + 1
    std::string what;
};

// A value that repeats one computed `lag` rows earlier: body[later] at row t equals body[earlier] at row
// t - lag wherever row t - lag was run by the same pass, and no refold listing `earlier` in its refreshes ran
// on rows t - lag + 1 .. t (where one did, `earlier` is as the refold recomputed it). A window's leaving term is its entering term d rows
// on (lower_ops.cpp states each such pair); a backend may keep the earlier value instead of computing the
// later one again (the CUDA column scan, in shared memory), or ignore the hint: both are right.
struct Echo {
    std::int32_t later = -1, earlier = -1, lag = 0;
};

// A refold recomputes window sums from the window's own rows, for the rows where running sums would break
// the accuracy contract (a leaving value that dominated them, a level far from their shift: docs/numerics.md).
// Where its Refold instruction's condition holds on a row (per column), a backend runs `body`:
//   * instructions [0, per_lag) once for each lag k = 0 .. rows - 1, in any order: Input, RowInPass and
//     RingRead read at their lag + k (RingRead: lag + rows - 1 within the ring); Outer reads a main-body
//     value computed before the Refold instruction;
//   * `sums`: per-lag values summed over k, with a compensated (Neumaier) sum: Fold(slot i) is the sum,
//     Fold with imm 1 the part of it the rounded sum misses;
//   * instructions [per_lag, size), the epilogue, once: arithmetic on Folds and Outers;
//   * RefoldValue(slot r, lag e, a) in the main body is body[exports[e]] on such rows and `a` elsewhere. Each
//     refold has one Refold instruction; its RefoldValues follow it.
// Rows where the condition does not hold cost a backend the test and nothing else.
struct Refresh {
    std::int32_t main = -1;   // a main-body value whose past values a backend may keep (an echo's `earlier`)
    std::int32_t value = -1;  // per-lag body value: what `main` is on row t - k under the states the refold sets
};

struct Refold {
    std::int32_t rows = 0;
    std::int32_t per_lag = 0;
    std::vector<Inst> body;
    std::vector<std::int32_t> sums;
    std::vector<std::int32_t> exports;
    // Echoes (below) whose earlier value a refold changes: a backend keeping `main`'s past values refreshes
    // rows t - rows + 1 .. t from `value`, or does not keep them.
    std::vector<Refresh> refreshes;
};

struct Kernel {
    std::string name;                 // readable, e.g. "fj_corr_A_B_w20"
    std::vector<std::string> inputs;  // panel names, in slot order
    std::vector<std::string> outputs;
    std::vector<StateSlot> states;
    std::vector<Ring> rings;
    std::vector<Inst> body;
    std::vector<Echo> echoes;
    std::vector<Refold> refolds;
    std::int32_t halo = 0;            // warm-up rows a tile needs before its first output row
    std::int32_t max_input_lag = 0;   // the largest lag of any Input

    // Structural hash of everything that affects generated code, the name included (it is the symbol).
    std::uint64_t hash() const;
    // Human-readable listing, one instruction a line.
    std::string dump() const;
};

// Checks that `kernel` is well formed, whatever backend runs it: every operand index points backwards
// (SSA) at a value of the type its instruction takes, every input, output, state and ring slot is in
// range, rings have at least one entry and are read within them, lags are not negative, and echoes name
// instructions of the body at a positive lag. Throws fj::BackendError naming the kernel, the instruction
// (index and primitive) and what is wrong. The planner runs it on what it makes; the CUDA emitter on what
// it is given (a malformed kernel would otherwise become wrong code, or an index out of bounds).
void verify(const Kernel& kernel);

// `kernel` as if no refold's condition ever held: Refold instructions dropped, RefoldValues replaced by their
// fallbacks, and what then feeds no output removed (states, rings and instructions renumbered in order).
// For backends that guard their sums otherwise (or not yet: docs/numerics.md says which).
Kernel without_refolds(const Kernel& kernel);

// `kernel` as without_refolds gives it, but with each Refold instruction kept as a Flag of its condition (and
// what computes the condition kept): for backends that run a pass without refolds first and run it again, with
// them, only where a flag was raised on some row of it (the CUDA column scan and its repair pass:
// docs/numerics.md). Raising a flag changes no value of the pass.
Kernel flag_refolds(const Kernel& kernel);

}  // namespace fj::ir
