// Long order statistics on the CPU, column by column (runtime/cpu/column_ops.hpp says how; the definitions are
// docs/operators.md's, computed here exactly as the fused lowering computes them, codegen/lower_ops.cpp).
#include "runtime/cpu/column_ops.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

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

// Output rows of a task's time tile, unless asked. Short tiles keep the coordinates few (the Fenwick tree small, and
// the walk from one row's order statistic to the next short: the tile's values lie between the window's); long ones
// re-read fewer rows (d - 1 a tile).
std::int64_t auto_tile_rows(int d) { return std::max<std::int64_t>(256, 4 * static_cast<std::int64_t>(d - 1)); }

// Counts of the window's values per coordinate (0 .. n - 1), as a Fenwick tree over a power-of-two size (so that
// the k-th descent needs no bound check), beside the plain count of each coordinate: add, the count of coordinates
// below c and the k-th smallest value's coordinate, each O(log n).
class Fenwick {
public:
    void reset(int n) {
        size_ = 1;
        while (size_ < n) size_ *= 2;
        tree_.assign(static_cast<std::size_t>(size_) + 1, 0);
        count_.assign(static_cast<std::size_t>(size_), 0);
    }
    void add(int c, int delta) {
        count_[static_cast<std::size_t>(c)] += delta;
        for (int i = c + 1; i <= size_; i += i & -i) tree_[static_cast<std::size_t>(i)] += delta;
    }
    // A value leaves coordinate `from` and one enters `to`, the common case of a row. The two paths to the root
    // meet, and above that the changes cancel: only the slots below the meeting are written. (Two full updates
    // a row wrote the slots near the root twice, each write waiting for the last one's: half of a column step's
    // time; bench/RESULTS.md, "Column steps".)
    void move(int from, int to) {
        --count_[static_cast<std::size_t>(from)];
        ++count_[static_cast<std::size_t>(to)];
        int a = from + 1, b = to + 1;
        while (a != b) {
            if (a < b) {
                --tree_[static_cast<std::size_t>(a)];
                a += a & -a;
            } else {
                ++tree_[static_cast<std::size_t>(b)];
                b += b & -b;
            }
        }
    }
    int count(int c) const { return count_[static_cast<std::size_t>(c)]; }
    int count_below(int c) const {
        int s = 0;
        for (int i = c; i > 0; i -= i & -i) s += tree_[static_cast<std::size_t>(i)];
        return s;
    }
    // The coordinate of the k-th smallest counted value (k from 0; k < the count of all), and in *below the count
    // of values below it. Without branches on the counts: which way a step goes is data, not a prediction.
    int kth(int k, int* below) const {
        int pos = 0, rest = k;
        for (int step = size_; step > 0; step >>= 1) {
            const int v = tree_[static_cast<std::size_t>(pos + step)];
            const bool right = v <= rest;
            pos = right ? pos + step : pos;
            rest = right ? rest - v : rest;
        }
        *below = k - rest;
        return pos;
    }
    // The smallest counted coordinate above c, looking at most `look` places ahead; -1 if none there.
    int next_above(int c, int look) const {
        const int end = std::min(size_, c + 1 + look);
        for (int i = c + 1; i < end; ++i)
            if (count_[static_cast<std::size_t>(i)] > 0) return i;
        return -1;
    }

private:
    std::vector<std::int32_t> tree_, count_;
    int size_ = 1;
};

// A value's order key (unsigned, in the order of the non-NaN doubles; -0 and +0 one key) and its row.
struct Keyed {
    std::uint64_t key;
    std::uint32_t row;
};

std::uint64_t order_key(double x) {
    const std::uint64_t bits = std::bit_cast<std::uint64_t>(x == 0 ? 0.0 : x);
    return bits >> 63 ? ~bits : bits | (std::uint64_t{1} << 63);
}

// Sorts by key: a least-significant-digit radix sort of bytes, skipping the bytes every key shares (float32 values
// as doubles end in three zero bytes, and a tile of prices shares its exponent): 3-5 passes where std::sort took
// half of a column step's time (bench/RESULTS.md, "Column steps").
void sort_keys(std::vector<Keyed>& a, std::vector<Keyed>& tmp) {
    const std::size_t n = a.size();
    if (n < 64) {
        std::sort(a.begin(), a.end(), [](const Keyed& l, const Keyed& r) { return l.key < r.key; });
        return;
    }
    std::array<std::array<std::uint32_t, 256>, 8> count{};
    for (const Keyed& e : a)
        for (int b = 0; b < 8; ++b) ++count[b][(e.key >> (8 * b)) & 0xff];
    tmp.resize(n);
    for (int b = 0; b < 8; ++b) {
        std::array<std::uint32_t, 256>& c = count[b];
        if (c[(a[0].key >> (8 * b)) & 0xff] == n) continue;
        std::uint32_t sum = 0;
        for (std::uint32_t& k : c) sum += std::exchange(k, sum);
        for (const Keyed& e : a) tmp[c[(e.key >> (8 * b)) & 0xff]++] = e;
        a.swap(tmp);
    }
}

// The longest walk over the counts from one row's order statistic to the next before the descent is taken instead.
constexpr int kWalk = 48;

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
    std::vector<Keyed> order, spare;           // a column's valid values' keys with their rows, sorted
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
        if (!std::isnan(v[i])) s.order.push_back({order_key(v[i]), static_cast<std::uint32_t>(i)});
    // Equal values (-0 and +0 among them) are one key and one coordinate, so prefix counts split below / equal
    // exactly. A zero is +0 whatever its sign, so that results do not depend on which of its equal values a tile
    // sorted first (the definition does not tell -0 from +0; the fused lowering keeps the sign of the zero its
    // sorted states hold).
    sort_keys(s.order, s.spare);
    s.distinct.clear();
    std::uint64_t last = 0;
    for (const Keyed& e : s.order) {
        if (s.distinct.empty() || e.key != last) {
            const double value = v[e.row];
            s.distinct.push_back(value == 0 ? 0.0 : value);
            last = e.key;
        }
        s.coord[e.row] = static_cast<int>(s.distinct.size()) - 1;
    }
    s.counts.reset(static_cast<int>(s.distinct.size()));
    int n = 0;  // valid values in the window
    // Median and quantile: the coordinate of the last row's order statistic and the count of values below it. The
    // window moves by a row, so the next one is a few counted coordinates away as a rule: a walk over the counts
    // finds it, and the Fenwick tree's descent where the walk would be long (a jump after a burst of NaN).
    int at = 0, below_at = 0;
    for (int i = 0; i < span; ++i) {
        const int enters = s.coord[static_cast<std::size_t>(i)];
        const int leaves = i >= st.d ? s.coord[static_cast<std::size_t>(i - st.d)] : -1;
        if (enters >= 0 && leaves >= 0) {
            s.counts.move(leaves, enters);
        } else if (enters >= 0) {
            s.counts.add(enters, 1);
            ++n;
        } else if (leaves >= 0) {
            s.counts.add(leaves, -1);
            --n;
        }
        below_at += (enters >= 0 && enters < at) - (leaves >= 0 && leaves < at);
        if (i < skip) continue;
        double r = kNaN;
        if (n >= st.need) {
            if (st.op == Op::WTsRank) {
                // (values below + values at or below, itself included, + 1) / 2: the average-tie rank, a
                // half-integer, exact; divided by n once, as the fused lowering and the reference round it.
                if (const int c = s.coord[static_cast<std::size_t>(i)]; c >= 0) {
                    const int below = s.counts.count_below(c), at_or_below = below + s.counts.count(c);
                    r = static_cast<double>(below + at_or_below + 1) * 0.5 / static_cast<double>(n);
                }
            } else {
                // numpy's / pandas' linear interpolation between the values at floor(q (n - 1)) and the next.
                const double pos = st.q * static_cast<double>(n - 1), lo = std::floor(pos), frac = pos - lo;
                const int k = static_cast<int>(lo);
                int steps = 0;
                while (below_at > k && steps++ < kWalk) below_at -= s.counts.count(--at);
                while (below_at + s.counts.count(at) <= k && steps++ < kWalk) below_at += s.counts.count(at++);
                if (steps >= kWalk) at = s.counts.kth(k, &below_at);
                const int c = at;
                int below = below_at;
                const double vlo = s.distinct[static_cast<std::size_t>(c)];
                r = vlo;
                if (frac != 0 && k + 1 < n) {
                    // The next value: the same coordinate while it holds more, else the next counted one (a few
                    // places on, as a rule: the tile's other values lie between), else the (k + 1)-th's descent.
                    int next = below + s.counts.count(c) > k + 1 ? c : s.counts.next_above(c, 16);
                    if (next < 0) next = s.counts.kth(k + 1, &below);
                    const double vhi = s.distinct[static_cast<std::size_t>(next)];
                    r = vhi == vlo ? vlo : vlo + frac * (vhi - vlo);
                }
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
