// The subcommands of the `factorjit` command line and the few helpers they share.
//
// Each subcommand takes its arguments (without the program and subcommand names), writes results and
// returns the exit status. Failures are thrown: fj::Error (bad expression, bad input file, backend
// failure) or fj::cli::UsageError (bad command line); main() prints them as `factorjit: error: ...` and
// exits with status 2.
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsl/parse.hpp"
#include "runtime/program.hpp"

namespace fj::cli {

// A command line that cannot be understood; `command` names the subcommand whose --help would help.
class UsageError : public std::runtime_error {
public:
    UsageError(const std::string& message, std::string command)
        : std::runtime_error(message), command_(std::move(command)) {}
    const std::string& command() const { return command_; }

private:
    std::string command_;
};

// One command-line option as seen by a subcommand's parser: "-e X", "--backend cpu", "--backend=cpu".
// next() yields the options in order; value() takes the option's value (the next argument as is, even
// when it starts with '-': "-e -A" is the expression -A).
class ArgCursor {
public:
    ArgCursor(const std::vector<std::string>& args, std::string command)
        : args_(args), command_(std::move(command)) {}

    bool next() {
        if (i_ >= args_.size()) return false;
        const std::string& a = args_[i_++];
        inline_value_.reset();
        const auto eq = a.find('=');
        if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
            opt_ = a.substr(0, eq);
            inline_value_ = a.substr(eq + 1);
        } else {
            opt_ = a;
        }
        return true;
    }
    const std::string& opt() const { return opt_; }
    bool is(std::string_view a, std::string_view b = {}) const { return opt_ == a || (!b.empty() && opt_ == b); }

    std::string value(std::string_view what) {
        if (inline_value_) return *inline_value_;
        if (i_ >= args_.size())
            throw UsageError("option " + opt_ + " needs a value (" + std::string(what) + ")", command_);
        return args_[i_++];
    }
    // For flags: "--round-windows=1" is a mistake worth reporting.
    void no_value() const {
        if (inline_value_) throw UsageError("option " + opt_ + " takes no value", command_);
    }
    [[noreturn]] void unknown() const {
        if (!opt_.empty() && opt_[0] == '-') throw UsageError("unknown option '" + opt_ + "'", command_);
        throw UsageError("unexpected argument '" + opt_ + "'", command_);
    }
    const std::string& command() const { return command_; }

private:
    const std::vector<std::string>& args_;
    std::string command_;
    std::size_t i_ = 0;
    std::string opt_;
    std::optional<std::string> inline_value_;
};

inline fj::Backend parse_backend(const std::string& s, const std::string& command) {
    if (s == "auto") return fj::Backend::Auto;
    if (s == "cpu") return fj::Backend::Cpu;
    if (s == "cuda") return fj::Backend::Cuda;
    throw UsageError("--backend must be auto, cpu or cuda, not '" + s + "'", command);
}

inline const char* backend_name(fj::Backend b) {
    switch (b) {
        case fj::Backend::Cpu: return "cpu";
        case fj::Backend::Cuda: return "cuda";
        case fj::Backend::Auto: break;
    }
    return "auto";
}

inline int parse_threads(const std::string& s, const std::string& command) {
    int n = -1;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n < 0)
        throw UsageError("--threads needs a whole number >= 0 (0: all cores), not '" + s + "'", command);
    return n;
}

// A size in bytes with an optional binary suffix: "256M", "8G", "1.5G", "64K", "100000", "2GiB", "512MB"
// (K, M, G, T = powers of 1024, case-insensitive, with or without a trailing "B"/"iB"). Zero, negative,
// fractional bytes, overflow and anything else are a UsageError naming the option.
inline std::int64_t parse_byte_size(const std::string& s, const std::string& option, const std::string& command) {
    auto bad = [&](const std::string& why) -> UsageError {
        return UsageError(option + " needs a size such as 256M, 8G or 1000000 (bytes; K, M, G, T are powers of "
                          "1024), not '" + s + "'" + (why.empty() ? "" : ": " + why),
                          command);
    };
    std::size_t i = 0;
    while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
    const std::string number = s.substr(0, i);
    if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1) throw bad("");
    std::string suffix = s.substr(i);
    for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (suffix.size() >= 2 && suffix.compare(suffix.size() - 2, 2, "IB") == 0) suffix.resize(suffix.size() - 2);
    else if (suffix.size() >= 2 && suffix.back() == 'B') suffix.pop_back();
    else if (suffix == "B") suffix.clear();
    double scale = 1;
    if (suffix == "K") scale = 1024.0;
    else if (suffix == "M") scale = 1024.0 * 1024;
    else if (suffix == "G") scale = 1024.0 * 1024 * 1024;
    else if (suffix == "T") scale = 1024.0 * 1024 * 1024 * 1024;
    else if (!suffix.empty()) throw bad("unknown unit '" + s.substr(i) + "'");
    const double bytes = std::strtod(number.c_str(), nullptr) * scale;
    if (!(bytes >= 1)) throw bad("it must be at least one byte");
    if (bytes > 9.0e18) throw bad("too large");
    if (bytes != std::floor(bytes)) throw bad("not a whole number of bytes");
    return static_cast<std::int64_t>(bytes);
}

// An expression given with -e, parsed; a failure names the text it came from.
inline fj::Expr parse_expr_arg(const std::string& text, const fj::ParseOptions& options) {
    try {
        return fj::parse(text, options);
    } catch (const fj::ExprError& e) {
        throw fj::ExprError("bad expression -e '" + text + "': " + e.what());
    }
}

// The -e expressions of explain and compile as outputs out0, out1, ...
inline std::vector<std::pair<std::string, fj::Expr>> numbered_outputs(const std::vector<std::string>& texts,
                                                                     const fj::ParseOptions& options) {
    std::vector<std::pair<std::string, fj::Expr>> named;
    for (std::size_t k = 0; k < texts.size(); ++k) named.emplace_back("out" + std::to_string(k), parse_expr_arg(texts[k], options));
    return named;
}

}  // namespace fj::cli

// The subcommands. Each handles its own --help.
int cmd_eval(const std::vector<std::string>& args);     // cli/cmd_eval.cpp
int cmd_explain(const std::vector<std::string>& args);  // cli/cmd_explain.cpp
int cmd_compile(const std::vector<std::string>& args);  // cli/cmd_compile.cpp: CUDA kernels ahead of time
int cmd_alpha101(const std::vector<std::string>& args); // cli/cmd_alpha101.cpp: the 101 Formulaic Alphas
int cmd_bench(const std::vector<std::string>& args);    // cli/cmd_bench.cpp: timings with GPU telemetry
