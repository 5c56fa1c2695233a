// The operator table: every operator factorjit knows, with its name, arity and kind.
//
// This is the one list of operators. The DSL validates against it, the printer and the formula
// parser take names from it, and codegen/lower_ops.cpp gives each one its lowering to kernel-IR
// primitives (its state update included), from which every backend emits code. Adding an operator
// means a row here, a builder in expr.hpp and a lowering in codegen: nothing else changes.
// Cross-sectional operators are not lowered to kernel IR: the planner gives each a row step, and each
// backend's row-step code defines what it computes over a row (runtime/cpu/row_ops.cpp).
#pragma once

#include <cstdint>
#include <string_view>

namespace fj {

enum class OpKind : std::uint8_t {
    Leaf,         // a named input or a scalar constant
    Elementwise,  // f(args at the same row)
    Lag,          // delay(x, k): x at row t-k
    Window,       // reduction of window(x, d, min_periods)
    PairWindow,   // reduction of two windows of equal length (corr, cov)
    CrossSection, // f(a whole row of x, over the columns), optionally within the groups of a second panel g
                  // (group ids): rank, zscore, ...; the planner gives each one a row step of its own
    Recursive,    // f(x at row t, its own value at row t - 1), unbounded memory: ema(x, span) (Node::value: span)
};

#define FJ_OPS(X)                                                                  \
    /*  enum          name            kind          arity infix  */                \
    X(Input,         "input",        Leaf,         0,    nullptr)                 \
    X(Const,         "const",        Leaf,         0,    nullptr)                 \
    X(Neg,           "neg",          Elementwise,  1,    "-")                     \
    X(Not,           "not",          Elementwise,  1,    "!")                     \
    X(Abs,           "abs",          Elementwise,  1,    nullptr)                 \
    X(Sign,          "sign",         Elementwise,  1,    nullptr)                 \
    X(Sqrt,          "sqrt",         Elementwise,  1,    nullptr)                 \
    X(Exp,           "exp",          Elementwise,  1,    nullptr)                 \
    X(Log,           "log",          Elementwise,  1,    nullptr)                 \
    X(Add,           "add",          Elementwise,  2,    "+")                     \
    X(Sub,           "sub",          Elementwise,  2,    "-")                     \
    X(Mul,           "mul",          Elementwise,  2,    "*")                     \
    X(Div,           "div",          Elementwise,  2,    "/")                     \
    X(Pow,           "pow",          Elementwise,  2,    nullptr)                 \
    X(SignedPower,   "signedpower",  Elementwise,  2,    nullptr)                 \
    X(Min,           "fmin",         Elementwise,  2,    nullptr) /* min(x, y) */ \
    X(Max,           "fmax",         Elementwise,  2,    nullptr) /* max(x, y) */ \
    X(Lt,            "lt",           Elementwise,  2,    "<")                     \
    X(Le,            "le",           Elementwise,  2,    "<=")                    \
    X(Gt,            "gt",           Elementwise,  2,    ">")                     \
    X(Ge,            "ge",           Elementwise,  2,    ">=")                    \
    X(Eq,            "eq",           Elementwise,  2,    "==")                    \
    X(Ne,            "ne",           Elementwise,  2,    "!=")                    \
    X(And,           "and",          Elementwise,  2,    "&&")                    \
    X(Or,            "or",           Elementwise,  2,    "||")                    \
    X(Where,         "where",        Elementwise,  3,    nullptr)                 \
    X(Delay,         "delay",        Lag,          1,    nullptr)                 \
    X(WSum,          "sum",          Window,       1,    nullptr)                 \
    X(WMean,         "mean",         Window,       1,    nullptr)                 \
    X(WCount,        "count",        Window,       1,    nullptr)                 \
    X(WVar,          "var",          Window,       1,    nullptr)                 \
    X(WStd,          "std",          Window,       1,    nullptr)                 \
    X(WMin,          "min",          Window,       1,    nullptr)                 \
    X(WMax,          "max",          Window,       1,    nullptr)                 \
    X(WArgMin,       "argmin",       Window,       1,    nullptr) /* ts_argmin */ \
    X(WArgMax,       "argmax",       Window,       1,    nullptr) /* ts_argmax */ \
    X(WTsRank,       "ts_rank",      Window,       1,    nullptr)                 \
    X(WProduct,      "product",      Window,       1,    nullptr)                 \
    X(WDecayLinear,  "decay_linear", Window,       1,    nullptr)                 \
    X(WSkew,         "skew",         Window,       1,    nullptr)                 \
    X(WKurt,         "kurt",         Window,       1,    nullptr) /* excess */    \
    X(WMedian,       "median",       Window,       1,    nullptr)                 \
    X(WQuantile,     "quantile",     Window,       1,    nullptr) /* value: q */  \
    X(WSlope,        "slope",        Window,       1,    nullptr)                 \
    X(WRSquare,      "rsquare",      Window,       1,    nullptr)                 \
    X(WResid,        "resid",        Window,       1,    nullptr)                 \
    X(Ema,           "ema",          Recursive,    1,    nullptr) /* value: span */ \
    X(WCorr,         "corr",         PairWindow,   2,    nullptr)                 \
    X(WCov,          "cov",          PairWindow,   2,    nullptr)                 \
    X(Rank,          "rank",         CrossSection, 1,    nullptr)                 \
    X(ZScore,        "zscore",       CrossSection, 1,    nullptr)                 \
    X(Demean,        "demean",       CrossSection, 1,    nullptr)                 \
    X(Scale,         "scale",        CrossSection, 1,    nullptr) /* a = 1 */     \
    X(GroupNeutralize, "group_neutralize", CrossSection, 2, nullptr) /* (x, g) */ \
    X(GroupRank,     "group_rank",   CrossSection, 2,    nullptr)                 \
    X(GroupZScore,   "group_zscore", CrossSection, 2,    nullptr)

enum class Op : std::uint8_t {
#define FJ_OP_ENUM(e, name, kind, arity, infix) e,
    FJ_OPS(FJ_OP_ENUM)
#undef FJ_OP_ENUM
};

#define FJ_OP_COUNT(e, name, kind, arity, infix) +1
constexpr int kOpCount = 0 FJ_OPS(FJ_OP_COUNT);
#undef FJ_OP_COUNT

struct OpInfo {
    Op op;
    std::string_view name;
    OpKind kind;
    int arity;
    const char* infix;  // operator spelling in formulas, or nullptr for call syntax
};

const OpInfo& op_info(Op op);
inline std::string_view op_name(Op op) { return op_info(op).name; }
inline bool is_cross_section(Op op) { return op_info(op).kind == OpKind::CrossSection; }
inline bool is_windowed(Op op) {
    const OpKind k = op_info(op).kind;
    return k == OpKind::Window || k == OpKind::PairWindow;
}

}  // namespace fj
