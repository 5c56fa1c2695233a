// Long order statistics on the CPU, column by column (runtime/cpu/column_ops.hpp says how; the definitions are
// docs/operators.md's, computed here exactly as the fused lowering computes them, codegen/lower_ops.cpp).
#include "runtime/cpu/column_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "dsl/error.hpp"
#include "runtime/thread_pool.hpp"

namespace fj::cpu {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Adjacent columns a task gathers: each row of the tile is then one read of 64 (float32) or 128 bytes
// instead of one cache line per value.
constexpr std::int64_t kBlockCols = 16;

// Output rows of a task's time tile, unless asked: long enough that the d - 1 rows it re-reads before them stay
// a small share (<= 1/8), as the kernels' tiles.
std::int64_t auto_tile_rows(int d) { return std::max<std::int64_t>(2048, 8 * static_cast<std::int64_t>(d - 1)); }

// Counts of the window's values per coordinate (0 .. n - 1), as a Fenwick tree: add, count of coordinates <= c
// and the k-th smallest value's coordinate, each O(log n).
class Fenwick {
public:
    void reset(int n) {
        n_ = n;
        tree_.assign(static_cast<std::size_t>(n) + 1, 0);
        top_ = 1;
        while (top_ * 2 <= n_) top_ *= 2;
    }
    void add(int c, int delta) {
        for (int i = c + 1; i <= n_; i += i & -i) tree_[static_cast<std::size_t>(i)] += delta;
    }
    int count_le(int c) const {
        int s = 0;
        for (int i = c + 1; i > 0; i -= i & -i) s += tree_[static_cast<std::size_t>(i)];
        return s;
    }
    // The coordinate of the k-th smallest counted value (k from 0; k < the count of all).
    int kth(int k) const {
        int pos = 0;
        for (int step = top_; step > 0; step >>= 1)
            if (pos + step <= n_ && tree_[static_cast<std::size_t>(pos + step)] <= k) {
                pos += step;
                k -= tree_[static_cast<std::size_t>(pos)];
            }
        return pos;
    }

private:
    std::vector<std::int32_t> tree_;
    int n_ = 0, top_ = 1;
};

// What a column step computes, from its node.
struct Stat {
    Op op;
    int d;
    int need;  // the fewest valid values that give a result: max(min_periods, 1)
    double q;  // median: 0.5
};

struct Scratch {
    std::vector<double> values;               // the task's columns, each as `span` consecutive rows
    std::vector<double> results;              // each column's output rows
    std::vector<std::pair<double, int>> order;  // a column's valid values with their rows, sorted
    std::vector<int> coord;                   // each row's coordinate (-1: NaN)
    std::vector<double> distinct;             // the value of each coordinate
    Fenwick counts;
};

// One column of a task: `span` rows of values, the first `skip` of them only read (the window's rows before
// the tile), results for the others.
void one_column(const Stat& st, const double* v, int span, int skip, double* out, Scratch& s) {
    s.order.clear();
    s.coord.assign(static_cast<std::size_t>(span), -1);
    for (int i = 0; i < span; ++i)
        if (!std::isnan(v[i])) s.order.emplace_back(v[i], i);
    // Equal values (-0 and +0 among them) are one coordinate, so prefix counts split below / equal exactly.
    std::sort(s.order.begin(), s.order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // A coordinate's value is the first of its equal values in the sort, which is not the same one for every
    // tile: a zero is +0 whatever its sign, so that results do not depend on the tiles (the definition does
    // not tell -0 from +0; the fused lowering keeps the sign of the zero its sorted states hold).
    s.distinct.clear();
    for (const auto& [value, row] : s.order) {
        if (s.distinct.empty() || s.distinct.back() != value) s.distinct.push_back(value == 0 ? 0.0 : value);
        s.coord[static_cast<std::size_t>(row)] = static_cast<int>(s.distinct.size()) - 1;
    }
    s.counts.reset(static_cast<int>(s.distinct.size()));
    int n = 0;  // valid values in the window
    for (int i = 0; i < span; ++i) {
        if (const int c = s.coord[static_cast<std::size_t>(i)]; c >= 0) {
            s.counts.add(c, 1);
            ++n;
        }
        if (i >= st.d)
            if (const int c = s.coord[static_cast<std::size_t>(i - st.d)]; c >= 0) {
                s.counts.add(c, -1);
                --n;
            }
        if (i < skip) continue;
        double r = kNaN;
        if (n >= st.need) {
            if (st.op == Op::WTsRank) {
                // (values below + values at or below, itself included, + 1) / 2: the average-tie rank, a
                // half-integer, exact; divided by n once, as the fused lowering and the reference round it.
                if (const int c = s.coord[static_cast<std::size_t>(i)]; c >= 0) {
                    const int below = c > 0 ? s.counts.count_le(c - 1) : 0, at_or_below = s.counts.count_le(c);
                    r = static_cast<double>(below + at_or_below + 1) * 0.5 / static_cast<double>(n);
                }
            } else {
                // numpy's / pandas' linear interpolation between the values at floor(q (n - 1)) and the next.
                const double pos = st.q * static_cast<double>(n - 1), lo = std::floor(pos), frac = pos - lo;
                const int k = static_cast<int>(lo);
                const double vlo = s.distinct[static_cast<std::size_t>(s.counts.kth(k))];
                const double vhi = k + 1 < n ? s.distinct[static_cast<std::size_t>(s.counts.kth(k + 1))] : kInf;
                r = frac == 0 || vhi == vlo ? vlo : vlo + frac * (vhi - vlo);
            }
        }
        out[i - skip] = r;
    }
}

template <class T>
void run_typed(const Stat& st, const RowPanel& x, const std::vector<RowPanel>& outputs, std::int64_t rows,
               std::int64_t cols, std::int64_t tile, rt::ThreadPool& pool) {
    const std::int64_t halo = st.d - 1;
    const std::int64_t tiles = (rows + tile - 1) / tile, blocks = (cols + kBlockCols - 1) / kBlockCols;
    std::vector<Scratch> scratch(static_cast<std::size_t>(pool.size()));
    pool.parallel_for(tiles * blocks, [&](std::int64_t task, int worker) {
        Scratch& s = scratch[static_cast<std::size_t>(worker)];
        const std::int64_t b = task % blocks, t = task / blocks;  // blocks fastest: neighbouring tasks share rows
        const std::int64_t c0 = b * kBlockCols, c1 = std::min(cols, c0 + kBlockCols), width = c1 - c0;
        const std::int64_t out0 = t * tile, out1 = std::min(rows, out0 + tile), read0 = std::max<std::int64_t>(0, out0 - halo);
        const std::int64_t span = out1 - read0, skip = out0 - read0, owned = out1 - out0;
        s.values.resize(static_cast<std::size_t>(width * span));
        s.results.resize(static_cast<std::size_t>(width * owned));
        const T* src = static_cast<const T*>(x.data);
        for (std::int64_t r = read0; r < out1; ++r)
            for (std::int64_t j = 0; j < width; ++j)
                s.values[static_cast<std::size_t>(j * span + (r - read0))] = static_cast<double>(src[r * x.ld + c0 + j]);
        for (std::int64_t j = 0; j < width; ++j)
            one_column(st, s.values.data() + j * span, static_cast<int>(span), static_cast<int>(skip),
                       s.results.data() + j * owned, s);
        for (const RowPanel& o : outputs) {
            T* dst = static_cast<T*>(o.data);
            for (std::int64_t r = out0; r < out1; ++r)
                for (std::int64_t j = 0; j < width; ++j)
                    dst[r * o.ld + c0 + j] = static_cast<T>(s.results[static_cast<std::size_t>(j * owned + (r - out0))]);
        }
    });
}

}  // namespace

void run_column_step(const Node& stat, const RowPanel& x, const std::vector<RowPanel>& outputs, std::int64_t rows,
                     std::int64_t cols, DType dtype, std::int64_t tile_rows, rt::ThreadPool& pool) {
    if (stat.op != Op::WTsRank && stat.op != Op::WMedian && stat.op != Op::WQuantile)
        throw BackendError(fmt::format("cpu: '{}' has no column-step implementation", op_name(stat.op)));
    if (stat.d < 1) throw BackendError(fmt::format("cpu: column step '{}': window length {}", op_name(stat.op), stat.d));
    if (rows <= 0 || cols <= 0) return;
    const Stat st{stat.op, stat.d, std::max(stat.min_periods, 1), stat.op == Op::WMedian ? 0.5 : stat.value};
    const std::int64_t tile = tile_rows > 0 ? tile_rows : auto_tile_rows(stat.d);
    if (dtype == DType::F32) run_typed<float>(st, x, outputs, rows, cols, tile, pool);
    else run_typed<double>(st, x, outputs, rows, cols, tile, pool);
}

}  // namespace fj::cpu
