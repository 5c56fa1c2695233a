// The CPU benchmarks' timer: a warm-up call (page faults, compilation, caches), then the median of `reps` calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace fj::bench {

inline double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <class F>
double median_time(int reps, F f) {
    f();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const double s = now();
        f();
        t.push_back(now() - s);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace fj::bench
