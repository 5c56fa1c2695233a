// Formula text to fj::Expr: fj::parse("corr(window(A,20), window(B,20))").
#pragma once

#include <string_view>

#include "dsl/expr.hpp"

namespace fj {

struct ParseOptions {
    // Window lengths that are not integers (Alpha101 writes e.g. 9.91) are floored, as the paper says;
    // set this to round to the nearest integer instead, as most public alpha101 codes do.
    bool round_windows = false;
};

// Throws fj::ParseError (line, column, caret) for syntax errors and fj::ExprError for invalid
// expressions (window < 1, ...), naming the operator.
Expr parse(std::string_view text, const ParseOptions& options = {});

}  // namespace fj
