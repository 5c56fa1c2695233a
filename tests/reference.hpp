// The test reference: a plain evaluator of fj::Expr over whole panels, written for obviousness.
//
// It computes docs/operators.md's definitions directly: node by node over the whole panel (each node once,
// memoized by node pointer), every window recomputed from scratch from the valid values of its rows
// t-d+1..t, two-pass mean and variance, explicit equality tests for constant windows; cross-sectional
// operators row by row, each group gathered by comparing every column's group id with every other's, ranks
// by counting the smaller and equal values (no sort). Nothing here is
// shared with the library, so a bug in the library's planner or kernels cannot hide in the reference.
//
// Window accumulations (sum, mean, var, cov, corr) use long double: the reference should be far more
// accurate than the tolerance it is held to (1e-9 relative for float64), and a float64 two-pass over
// 1e6-offset data already loses about 1e-10. Element-wise operators use the C library's double
// functions, as docs/operators.md says (IEEE-754 division, pow, exp, log, sqrt).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dsl/expr.hpp"

namespace fj::test {

// Input name -> row-major data, rows * cols values (leading dimension = cols). NaN means missing.
using Inputs = std::map<std::string, std::vector<double>>;

// The value of `e` at every cell, row-major, rows * cols. Throws std::invalid_argument when an input
// the expression reads is missing or has the wrong size.
std::vector<double> reference(const fj::Expr& e, const Inputs& inputs, std::int64_t rows, std::int64_t cols);

// Several expressions at once, sharing the work of common subexpressions.
std::vector<std::vector<double>> reference(const std::vector<fj::Expr>& exprs, const Inputs& inputs,
                                           std::int64_t rows, std::int64_t cols);

// The reductions of one window, given its valid (non-NaN) values oldest first. Exposed so that tests can
// pin the definitions on hand-made windows. `min_periods` is the node's.
double window_reduce(fj::Op op, const std::vector<double>& values, int min_periods);
// Any window reduction, given the window's d rows oldest first with NaN where a value is missing (or the row is
// before the panel's first): argmin, argmax and decay_linear need the rows' positions, ts_rank the newest row.
// `value`: the node's parameter (quantile's q).
double window_reduce_rows(fj::Op op, const std::vector<double>& rows, int min_periods, double value = 0);
// ema(x, span) over one column, oldest first (pandas ewm(span, adjust=False, ignore_na=True).mean()).
std::vector<double> ema_column(const std::vector<double>& x, double span);
// corr / cov over the rows where both are valid: xs[i] and ys[i] come from the same row.
double pair_window_reduce(fj::Op op, const std::vector<double>& xs, const std::vector<double>& ys, int min_periods);

// A cross-sectional operator over one group of a row: `values` are the group's valid (non-NaN) values,
// in column order; returns the result for each (rank, zscore, demean or scale; the group operators are
// these within each (row, group): Rank for GroupRank, ZScore for GroupZScore, Demean for GroupNeutralize).
std::vector<double> cross_section_reduce(fj::Op op, const std::vector<double>& values);

}  // namespace fj::test
