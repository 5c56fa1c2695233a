// Cross-sectional operators on the CPU (docs/operators.md, "Cross-sectional"): each defined once, as a
// function of one group's valid values, in the table kRowOps; run_row_step does the rest for all of them:
// rows over the thread pool, NaN values left out (they stay NaN), the groups of a row found by sorting
// its columns by group id (and by value first, for the ranks), float32 or float64 panels read and
// written, arithmetic in float64.
#include "runtime/cpu/row_ops.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "dsl/error.hpp"
#include "runtime/thread_pool.hpp"

namespace fj::cpu {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// (order key, position): what the row's sorts move.
struct Keyed {
    std::uint64_t key;
    std::uint32_t pos;
};

// Per-worker buffers, reused row after row.
struct Scratch {
    std::vector<double> x, g, result;        // one row, as float64
    std::vector<std::int64_t> members;       // the valid columns of the row, grouped
    std::vector<double> values, out;         // one group's values and results
    std::vector<Keyed> sorted, tmp;          // the row's order (by value, by group id), and the sorts' buffer
    std::vector<double> order_g;             // the group ids that by_group was made for
    std::vector<std::int64_t> by_group;      // the columns whose id is not NaN, by id, then by column
};

// ---- sorting ---------------------------------------------------------------------------------------

// An unsigned key in the order of the (non-NaN) doubles: equal keys for equal values, -0 and +0 included.
std::uint64_t order_key(double x) {
    const std::uint64_t bits = std::bit_cast<std::uint64_t>(x == 0 ? 0.0 : x);
    return bits >> 63 ? ~bits : bits | (std::uint64_t{1} << 63);
}

// Sorts by key; equal keys keep their order where `stable` (the radix sort always does). Rows are long
// (thousands of columns) and their keys share most bytes (float32 values as doubles end in zero bytes; group
// ids differ in a few high bits): a least-significant-digit radix sort over the bytes that differ, 8 bits a
// pass, where that beats a comparison sort. Measured with bench/bench_rows (2,000 x 4,000 float32, 100 + N(0,1), 50 group ids, 2
// cores of a busy VM), per cell: rank 84 ns with std::sort of (value, position) pairs, 20-25 ns with this;
// group_neutralize 81 -> 18-25 ns; group_rank 160 -> 54 ns sorting each group of ~80 values on its own, 32-39
// ns sorting the row by value, then stably by group (by_value below); mean(window(A, 20)) 2.8-3.2 ns.
void sort_keyed(std::vector<Keyed>& a, std::vector<Keyed>& tmp, bool stable) {
    const std::size_t n = a.size();
    if (n < 256) {  // the radix sort's 8 x 256 counters cost more than a short comparison sort
        const auto less = [](const Keyed& l, const Keyed& r) { return l.key < r.key; };
        if (stable) std::stable_sort(a.begin(), a.end(), less);
        else std::sort(a.begin(), a.end(), less);
        return;
    }
    std::array<std::array<std::uint32_t, 256>, 8> count{};
    for (const Keyed& e : a)
        for (int b = 0; b < 8; ++b) ++count[b][(e.key >> (8 * b)) & 0xff];
    tmp.resize(n);
    for (int b = 0; b < 8; ++b) {
        std::array<std::uint32_t, 256>& c = count[b];
        if (c[(a[0].key >> (8 * b)) & 0xff] == n) continue;  // every key has this byte: nothing to order
        std::uint32_t sum = 0;
        for (std::uint32_t& k : c) {
            const std::uint32_t here = k;
            k = sum;
            sum += here;
        }
        for (const Keyed& e : a) tmp[c[(e.key >> (8 * b)) & 0xff]++] = e;
        a.swap(tmp);
    }
}

// ---- the operators, over one group's valid values v (column order) -> out (same order) -------------

bool all_equal(std::span<const double> v) {
    return std::all_of(v.begin(), v.end(), [&](double x) { return x == v.front(); });
}

// The mean as a rounded value and a correction: hi is the first pass's mean, lo the mean of the deviations
// from it. hi alone is off by up to half its ulp (1e-10 at a level of 1e6), which would be a relative error of
// 1e-8 in a deviation of 0.01; deviation() subtracts both, so deviations are accurate to their own size. Not
// where the sum is infinite: IEEE decides there (lo = 0).
struct Mean {
    double hi = 0, lo = 0;
    double deviation(double x) const { return (x - hi) - lo; }
};

Mean mean_of(std::span<const double> v) {
    const double n = static_cast<double>(v.size());
    double s = 0;
    for (double x : v) s += x;
    Mean m{s / n, 0};
    if (!std::isfinite(m.hi)) return m;
    double d = 0;
    for (double x : v) d += x - m.hi;
    m.lo = d / n;
    return m;
}

// Average-tie rank divided by the count, in (0, 1]: the run of equal values at sorted positions
// i..j-1 (0-based) shares the rank (i + 1 + j) / 2. one_row hands the values in ascending order (the
// table's by_value), so the sort below is only for other callers.
void rank(std::span<const double> v, std::span<double> out, Scratch& s) {
    const std::size_t n = v.size();
    if (std::is_sorted(v.begin(), v.end())) {
        for (std::size_t i = 0; i < n;) {
            std::size_t j = i + 1;
            while (j < n && v[j] == v[i]) ++j;  // a run of equal values: ties (-0 and +0 too)
            const double r = (static_cast<double>(i + 1 + j) / 2.0) / static_cast<double>(n);
            std::fill(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j), r);
            i = j;
        }
        return;
    }
    s.sorted.resize(n);
    for (std::size_t k = 0; k < n; ++k) s.sorted[k] = {order_key(v[k]), static_cast<std::uint32_t>(k)};
    sort_keyed(s.sorted, s.tmp, false);  // ties share a rank: their order does not matter
    for (std::size_t i = 0; i < n;) {
        std::size_t j = i + 1;
        while (j < n && s.sorted[j].key == s.sorted[i].key) ++j;  // a run of equal values: ties
        const double r = (static_cast<double>(i + 1 + j) / 2.0) / static_cast<double>(n);
        for (std::size_t k = i; k < j; ++k) out[s.sorted[k].pos] = r;
        i = j;
    }
}

// x - mean; exactly 0 for a constant group, whatever the mean's rounding.
void demean(std::span<const double> v, std::span<double> out, Scratch&) {
    if (all_equal(v)) {
        std::fill(out.begin(), out.end(), 0.0);
        return;
    }
    const Mean m = mean_of(v);
    for (std::size_t k = 0; k < v.size(); ++k) out[k] = m.deviation(v[k]);
}

// (x - mean) / std, ddof = 1: NaN for fewer than 2 values and for a constant group (0 / 0), tested
// exactly so that rounding never makes a huge score of a constant group; NaN too where the sum of squares
// overflows (deviations beyond about 1e154), as var and std of windows are, rather than x / inf = 0.
void zscore(std::span<const double> v, std::span<double> out, Scratch&) {
    const std::size_t n = v.size();
    if (n < 2 || all_equal(v)) {
        std::fill(out.begin(), out.end(), kNaN);
        return;
    }
    const Mean m = mean_of(v);
    double ss = 0;
    for (double x : v) ss += m.deviation(x) * m.deviation(x);
    if (std::isinf(ss)) ss = kNaN;
    const double sd = std::sqrt(ss / static_cast<double>(n - 1));
    for (std::size_t k = 0; k < n; ++k) out[k] = m.deviation(v[k]) / sd;
}

// x / sum(abs(x)) (scale(x, a) multiplies by a afterwards, element-wise: dsl/expr.cpp).
void scale(std::span<const double> v, std::span<double> out, Scratch&) {
    double s = 0;
    for (double x : v) s += std::fabs(x);
    for (std::size_t k = 0; k < v.size(); ++k) out[k] = v[k] / s;
}

using GroupFn = void (*)(std::span<const double>, std::span<double>, Scratch&);

struct RowOpDef {
    Op op;
    GroupFn fn;
    bool grouped;   // within the groups of the second argument's ids, else over the whole row
    bool by_value;  // fn gets each group's values in ascending order (else in column order): the sort that
                    // groups a row orders its values too, cheaper than sorting each group again
};

// The one table: a new cross-sectional operator is a function above and a row here.
constexpr RowOpDef kRowOps[] = {
    {Op::Rank, rank, false, true},
    {Op::ZScore, zscore, false, false},
    {Op::Demean, demean, false, false},
    {Op::Scale, scale, false, false},
    {Op::GroupNeutralize, demean, true, false},
    {Op::GroupRank, rank, true, true},
    {Op::GroupZScore, zscore, true, false},
};

const RowOpDef* find_op(Op op) {
    for (const RowOpDef& d : kRowOps)
        if (d.op == op) return &d;
    return nullptr;
}

// ---- rows ------------------------------------------------------------------------------------------

template <class T>
void load(const RowPanel& p, std::int64_t t, std::int64_t cols, std::vector<double>& row) {
    const T* src = static_cast<const T*>(p.data) + t * p.ld;
    row.resize(static_cast<std::size_t>(cols));
    for (std::int64_t j = 0; j < cols; ++j) row[static_cast<std::size_t>(j)] = static_cast<double>(src[j]);
}

template <class T>
void store(const RowPanel& p, std::int64_t t, std::int64_t cols, const std::vector<double>& row) {
    T* dst = static_cast<T*>(p.data) + t * p.ld;
    for (std::int64_t j = 0; j < cols; ++j) dst[j] = static_cast<T>(row[static_cast<std::size_t>(j)]);
}

// The columns with a group id, by id, then by column, for the row's ids s.g: remade only when the ids differ
// from the last row's (bitwise), as group ids seldom change from one row to the next (the 101 alphas' industry
// panels never do), so that a row of group_neutralize or group_zscore costs no sort.
const std::vector<std::int64_t>& columns_by_group(std::int64_t cols, Scratch& s) {
    const std::size_t n = static_cast<std::size_t>(cols);
    if (s.order_g.size() == n && std::memcmp(s.order_g.data(), s.g.data(), n * sizeof(double)) == 0) return s.by_group;
    s.sorted.clear();
    for (std::size_t j = 0; j < n; ++j)
        if (!std::isnan(s.g[j])) s.sorted.push_back({order_key(s.g[j]), static_cast<std::uint32_t>(j)});
    sort_keyed(s.sorted, s.tmp, true);
    s.by_group.resize(s.sorted.size());
    for (std::size_t k = 0; k < s.sorted.size(); ++k) s.by_group[k] = s.sorted[k].pos;
    s.order_g.assign(s.g.begin(), s.g.end());
    return s.by_group;
}

// One row: s.x (and s.g) in, s.result out.
void one_row(const RowOpDef& def, std::int64_t cols, Scratch& s) {
    s.result.assign(static_cast<std::size_t>(cols), kNaN);
    s.members.clear();
    if (def.grouped && !def.by_value) {
        // The valid columns in the order the sort below would give: by group id, then by column.
        for (const std::int64_t j : columns_by_group(cols, s))
            if (!std::isnan(s.x[static_cast<std::size_t>(j)])) s.members.push_back(j);
    } else {
        for (std::int64_t j = 0; j < cols; ++j) {
            const std::size_t i = static_cast<std::size_t>(j);
            if (!std::isnan(s.x[i]) && !(def.grouped && std::isnan(s.g[i]))) s.members.push_back(j);
        }
    }
    // The order of the members: by value where the operator wants it, then (stably) by group id, so that
    // a group's columns are next to each other, in ascending value or column order.
    if (def.by_value) {
        const std::size_t m = s.members.size();
        s.sorted.resize(m);
        for (std::size_t k = 0; k < m; ++k) {
            const auto j = static_cast<std::size_t>(s.members[k]);
            s.sorted[k] = {order_key(s.x[j]), static_cast<std::uint32_t>(j)};
        }
        sort_keyed(s.sorted, s.tmp, false);  // equal values: any order
        if (def.grouped) {
            for (Keyed& e : s.sorted) e.key = order_key(s.g[e.pos]);
            sort_keyed(s.sorted, s.tmp, true);
        }
        for (std::size_t k = 0; k < m; ++k) s.members[k] = s.sorted[k].pos;
    }
    for (std::size_t begin = 0; begin < s.members.size();) {
        std::size_t end = begin + 1;
        if (def.grouped) {
            const double id = s.g[static_cast<std::size_t>(s.members[begin])];
            while (end < s.members.size() && s.g[static_cast<std::size_t>(s.members[end])] == id) ++end;
        } else {
            end = s.members.size();
        }
        const std::size_t n = end - begin;
        s.values.resize(n);
        s.out.resize(n);
        for (std::size_t k = 0; k < n; ++k) s.values[k] = s.x[static_cast<std::size_t>(s.members[begin + k])];
        def.fn(s.values, s.out, s);
        for (std::size_t k = 0; k < n; ++k) s.result[static_cast<std::size_t>(s.members[begin + k])] = s.out[k];
        begin = end;
    }
}

// rank over whole rows of a float32 panel, the operator the alphas use most (A1: 134 of 159 row steps): each
// valid cell's order key and column packed into one 64-bit word (key high), sorted by an LSD radix sort over
// the key bits that differ, and the ranks written straight to the outputs; no float64 copy of the row, no
// list of members. The ranks equal one_row's (the same ties: equal float32 values, -0 and +0 together; the
// same value, see rank_of below), so results do not depend on which path ran. bench/RESULTS.md, "A1 on the
// CPU", has the times.

// Per-worker buffers of rank_rows_f32, reused row after row.
struct RankScratch {
    std::vector<std::uint32_t> key;     // the row's order keys, column order
    std::vector<std::uint64_t> a, tmp;  // (key, column) words and the radix sort's second buffer
};

// The order keys of a row (unsigned, in the order of the floats, -0 with +0; NaN or not), the bits that differ
// between valid keys and the count of NaNs: integer operations without branches, so that the loop vectorises.
struct RowKeys {
    std::uint32_t varying = 0;
    std::size_t nans = 0;
};

RowKeys row_keys(const float* src, std::size_t cols, std::uint32_t* key) {
    std::uint32_t all_or = 0, all_and = ~0u;
    std::size_t nans = 0;
    for (std::size_t j = 0; j < cols; ++j) {
        const std::uint32_t raw = std::bit_cast<std::uint32_t>(src[j]), magnitude = raw & 0x7fffffffu;
        const std::uint32_t bits = magnitude == 0 ? 0u : raw;  // -0 as +0
        const std::uint32_t k = bits ^ (static_cast<std::uint32_t>(static_cast<std::int32_t>(bits) >> 31) | 0x80000000u);
        key[j] = k;
        const bool nan = magnitude > 0x7f800000u;
        nans += nan;
        all_or |= nan ? 0u : k;
        all_and &= nan ? ~0u : k;
    }
    return {all_or ^ all_and, nans};
}

// P passes of an LSD radix sort of a[0..n) by the key bits lo .. lo + span - 1, in digits of ceil(span / P)
// bits; the pass count a template argument, so that the counting loop is unrolled (10-20 % of rank's time
// in a one-thread benchmark of rows of 5,000). Returns the buffer holding the result (a or tmp).
template <int P>
std::uint64_t* radix_passes(std::uint64_t* a, std::uint64_t* tmp, std::size_t n, int lo, int span) {
    const int bits = (span + P - 1) / P;
    const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
    std::array<std::array<std::uint32_t, 2048>, P> count;
    for (std::array<std::uint32_t, 2048>& c : count)
        std::fill(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(mask + 1), 0u);
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t k = a[i] >> (32 + lo);
        ++count[0][k & mask];
        if constexpr (P > 1) ++count[1][(k >> bits) & mask];
        if constexpr (P > 2) ++count[2][(k >> (2 * bits)) & mask];
    }
    for (int p = 0; p < P; ++p) {
        std::array<std::uint32_t, 2048>& c = count[static_cast<std::size_t>(p)];
        const int shift = 32 + lo + p * bits;
        std::uint32_t sum = 0;
        for (std::size_t d = 0; d <= mask; ++d) {
            const std::uint32_t here = c[d];
            c[d] = sum;
            sum += here;
        }
        for (std::size_t i = 0; i < n; ++i) tmp[c[(a[i] >> shift) & mask]++] = a[i];
        std::swap(a, tmp);
    }
    return a;
}

// Sorts a[0..n) by the key (the high 32 bits), whose differing bits are `varying`: an LSD radix sort over
// those bits only, in digits of at most 11 bits (2,048 counters), so that prices (100 + N(0,1): 22 bits
// differ) take two passes and most rows three; a short row a comparison sort. Returns the buffer that holds
// the result (a or tmp).
std::uint64_t* sort_packed(std::uint64_t* a, std::uint64_t* tmp, std::size_t n, std::uint32_t varying) {
    if (varying == 0) return a;  // one value
    if (n < 256) {
        std::sort(a, a + n);
        return a;
    }
    const int lo = std::countr_zero(varying), span = 32 - std::countl_zero(varying) - lo;
    switch ((span + 10) / 11) {
    case 1: return radix_passes<1>(a, tmp, n, lo, span);
    case 2: return radix_passes<2>(a, tmp, n, lo, span);
    default: return radix_passes<3>(a, tmp, n, lo, span);
    }
}

// The rank of the run of equal values at sorted positions i..j-1 of n, (i + 1 + j) / 2 / n, as float32: the
// product s * (1 / 2n) (s = i + 1 + j) in float64 rounds to the same float32 as the quotient (the division
// per run took 14 % of the samples of rank's row loop in a profile of the 101 alphas). Both are within
// 2^-52 of s / 2n relative; a float32 rounding boundary that is not s / 2n itself lies at least 2^-25 / 2n
// relative from it, and s / 2n can be a boundary only for 2n >= 2^25; so below n = 2^23 they agree
// (tests/test_rank_rows.cpp checks every s for n <= 5,000). Wider rows divide.
struct RankOf {
    std::size_t n;
    double inv_2n;
    explicit RankOf(std::size_t count) : n(count), inv_2n(1.0 / (2.0 * static_cast<double>(count))) {}
    float operator()(std::size_t i, std::size_t j) const {
        if (n >= (std::size_t{1} << 23))
            return static_cast<float>((static_cast<double>(i + 1 + j) / 2.0) / static_cast<double>(n));
        return static_cast<float>(static_cast<double>(i + 1 + j) * inv_2n);
    }
};

void rank_rows_f32(const RowPanel& x, const std::vector<RowPanel>& outputs, std::int64_t rows, std::int64_t cols,
                   rt::ThreadPool& pool) {
    const std::int64_t tasks = std::min<std::int64_t>(rows, 8 * static_cast<std::int64_t>(pool.size()));
    const std::size_t width = static_cast<std::size_t>(cols);
    pool.parallel_for(tasks, [&](std::int64_t task, int) {
        RankScratch s;
        s.key.resize(width);
        s.a.resize(width);
        s.tmp.resize(width);
        const std::int64_t begin = rows * task / tasks, end = rows * (task + 1) / tasks;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (std::int64_t t = begin; t < end; ++t) {
            const float* src = static_cast<const float*>(x.data) + t * x.ld;
            const RowKeys keys = row_keys(src, width, s.key.data());
            std::uint64_t* a = s.a.data();
            std::size_t n = width;
            if (keys.nans == 0) {
                for (std::size_t j = 0; j < width; ++j) a[j] = std::uint64_t{s.key[j]} << 32 | j;
            } else {
                n = 0;
                for (std::size_t j = 0; j < width; ++j) {
                    const bool valid = !std::isnan(src[j]);
                    a[n] = std::uint64_t{s.key[j]} << 32 | j;  // kept only where valid: n moves on
                    n += valid;
                    if (!valid)
                        for (const RowPanel& o : outputs)
                            static_cast<float*>(o.data)[t * o.ld + static_cast<std::int64_t>(j)] = nan;
                }
            }
            const std::uint64_t* sorted = sort_packed(a, s.tmp.data(), n, keys.varying);
            const RankOf rank_of(n);
            for (std::size_t i = 0; i < n;) {
                std::size_t j = i + 1;
                while (j < n && (sorted[j] >> 32) == (sorted[i] >> 32)) ++j;  // a run of equal values: ties
                const float r = rank_of(i, j);
                for (const RowPanel& o : outputs) {
                    float* dst = static_cast<float*>(o.data) + t * o.ld;
                    for (std::size_t k = i; k < j; ++k) dst[sorted[k] & 0xffffffffu] = r;
                }
                i = j;
            }
        }
    });
}

template <class T>
void rows_of(const RowOpDef& def, const RowPanel& x, const RowPanel* g, const std::vector<RowPanel>& outputs,
             std::int64_t rows, std::int64_t cols, rt::ThreadPool& pool) {
    // Contiguous blocks of rows, several per thread for balance; each row is computed alone, so neither
    // the blocks nor the thread count change a result.
    const std::int64_t tasks = std::min<std::int64_t>(rows, 8 * static_cast<std::int64_t>(pool.size()));
    pool.parallel_for(tasks, [&](std::int64_t task, int) {
        Scratch s;
        const std::int64_t begin = rows * task / tasks, end = rows * (task + 1) / tasks;
        for (std::int64_t t = begin; t < end; ++t) {
            load<T>(x, t, cols, s.x);
            if (g) load<T>(*g, t, cols, s.g);
            one_row(def, cols, s);
            for (const RowPanel& o : outputs) store<T>(o, t, cols, s.result);
        }
    });
}

}  // namespace

bool has_row_op(Op op) { return find_op(op) != nullptr; }

void run_row_step(Op op, const RowPanel& x, const RowPanel* g, const std::vector<RowPanel>& outputs,
                  std::int64_t rows, std::int64_t cols, DType dtype, rt::ThreadPool& pool) {
    const RowOpDef* def = find_op(op);
    if (!def) throw BackendError(fmt::format("cpu: '{}' has no row-step implementation", op_name(op)));
    if (def->grouped != (g != nullptr))
        throw BackendError(fmt::format("cpu: row step '{}' needs {} group panel", op_name(op), def->grouped ? "a" : "no"));
    if (rows <= 0 || cols <= 0) return;
    if (cols > std::numeric_limits<std::uint32_t>::max())  // Keyed::pos
        throw InputError(fmt::format("cpu: row step '{}': {} columns; at most 2^32 - 1", op_name(op), cols));
    if (dtype == DType::F32 && op == Op::Rank) rank_rows_f32(x, outputs, rows, cols, pool);
    else if (dtype == DType::F32) rows_of<float>(*def, x, g, outputs, rows, cols, pool);
    else rows_of<double>(*def, x, g, outputs, rows, cols, pool);
}

}  // namespace fj::cpu
