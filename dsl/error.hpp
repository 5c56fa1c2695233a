// Errors of factorjit. Every failure the library reports is an fj::Error (or a subclass) whose
// message carries the whole story: which operator, which argument or input, which call failed and
// the compiler's log. Library code never aborts or exits the process.
#pragma once

#include <stdexcept>
#include <string>

namespace fj {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// An expression that cannot be built: bad window length, mismatched corr windows, bad arity...
class ExprError : public Error {
public:
    using Error::Error;
};

// Formula text that does not parse. what() holds "line L, column C: message" followed by the
// offending line and a caret under the column.
class ParseError : public ExprError {
public:
    ParseError(const std::string& message, int line, int column)
        : ExprError(message), line_(line), column_(column) {}
    int line() const { return line_; }
    int column() const { return column_; }

private:
    int line_, column_;
};

// Inputs handed to Program::run that do not fit the program: unknown or missing input, shape or
// dtype mismatch, bad leading dimension.
class InputError : public Error {
public:
    using Error::Error;
};

// A backend failure: LLVM, NVRTC, the CUDA driver. The message names the call and its error.
class BackendError : public Error {
public:
    using Error::Error;
};

}  // namespace fj
