// Printing CUDA C++ source: literals, comments, indented lines, and the header every kernel shape
// starts its translation unit with (codegen/cuda/column_scan.cpp, window_scan.cpp, chained_scan.cpp).
// Internal to codegen/cuda/.
#pragma once

#include <cstdint>
#include <cstring>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace fj::codegen::detail {

// An f64 literal that reads back to the same bits: %.17g for finite values, bit patterns otherwise.
inline std::string lit(double v) {
    if (std::isfinite(v)) {
        std::string s = fmt::format("{:.17g}", v);
        if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
        return s;
    }
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return fmt::format("__longlong_as_double(0x{:016x}LL)", bits);
}

// A float literal with the exact bits of (float)v.
inline std::string flit(double v) {
    const float f = static_cast<float>(v);
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return fmt::format("__int_as_float(0x{:08x})", bits);
}

// Comment text must not end the comment or the line.
inline std::string comment_safe(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    for (std::size_t p; (p = s.find("*/")) != std::string::npos;) s.replace(p, 2, "* /");
    return s;
}

// The source being printed, a line at a time.
class Source {
public:
    template <class... A>
    void line(int indent, fmt::format_string<A...> f, A&&... a) {
        text_.append(static_cast<std::size_t>(indent) * 2, ' ');
        text_ += fmt::format(f, std::forward<A>(a)...);
        text_ += '\n';
    }
    std::string take() { return std::move(text_); }

private:
    std::string text_;
};

struct KernelFacts;

// What a kernel's header declares besides the facts: the column scan's rows per batch (its comment), its
// echo rings' and L2 hints' macros; window scans' copy and barrier macros and tensor maps.
struct HeaderParts {
    int batch_rows = 1;
    bool echo_rings = false;
    bool cache_hints = false;
    bool window_scan = false;
    bool flags = false;  // the repair flags' words (column scans that raise flags, and their repair pass)
};
// The comment naming the kernel, its macros and device functions, and its parameter struct.
void print_header(Source& out, const KernelFacts& facts, const HeaderParts& parts);

}  // namespace fj::codegen::detail
