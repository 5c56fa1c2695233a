// The progress bar of long commands: shown on stderr only when it is a terminal and only once the work
// has taken more than a second (short runs print nothing), redrawn at most ten times a second, and
// erased when the work ends, so that what follows (-v's summary, an error) starts on a clean line.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "runtime/program.hpp"

namespace fj::cli {

class ProgressBar {
public:
    ProgressBar() : tty_(::isatty(STDERR_FILENO) == 1) {}
    ~ProgressBar() { finish(); }
    ProgressBar(const ProgressBar&) = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;

    void update(const fj::RunProgress& p) {
        if (!tty_ || p.elapsed_s < 1.0 || p.elapsed_s - last_ < 0.1) return;
        last_ = p.elapsed_s;
        const double f = p.rows_total > 0 ? static_cast<double>(p.rows_done) / static_cast<double>(p.rows_total) : 1.0;
        constexpr int width = 30;
        const int full = std::clamp(static_cast<int>(f * width), 0, width);
        const double mb_s = static_cast<double>(p.bytes_in + p.bytes_out) / 1e6 / p.elapsed_s;
        std::fprintf(stderr, "\rfactorjit: [%s%s] %3d%%  chunk %lld/%lld  %.0f MB/s  %.1f s", std::string(full, '#').c_str(),
                     std::string(width - full, ' ').c_str(), static_cast<int>(f * 100), static_cast<long long>(p.chunks_done),
                     static_cast<long long>(p.chunks_total), mb_s, p.elapsed_s);
        std::fflush(stderr);
        shown_ = true;
    }
    void finish() {
        if (!shown_) return;
        std::fputs("\r\033[K", stderr);
        std::fflush(stderr);
        shown_ = false;
    }

private:
    bool tty_;
    bool shown_ = false;
    double last_ = -1;
};

}  // namespace fj::cli
