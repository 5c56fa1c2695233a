#include "runtime/chunk_plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "runtime/program.hpp"

namespace fj::rt {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Columns per column chunk are a multiple of this where there are that many: whole warps of a GPU
// kernel and whole SIMD vectors of the CPU's, so no chunk but the last has a ragged edge.
constexpr std::int64_t kColumnQuantum = 32;

struct Counts {
    int inputs = 0, outputs = 0, intermediates = 0;
    int budgeted(const ChunkRequest& r) const {
        return (r.count_inputs ? inputs : 0) + (r.count_outputs ? outputs : 0) + intermediates;
    }
};

Counts counts_of(const codegen::Plan& plan) {
    return {static_cast<int>(plan.inputs.size()), static_cast<int>(plan.outputs.size()), plan.peak_intermediates()};
}

std::string bytes_str(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        ++u;
    }
    return fmt::format("{:.3g} {}", b, units[u]);
}

// Fills count, chunk_bytes and total_bytes from the axis and the chunk size.
void finish(ChunkPlan& c, const ChunkRequest& r, std::int64_t elem) {
    if (c.axis == ChunkAxis::Time) {
        c.count = ceil_div(c.rows, c.chunk_rows);
        const std::int64_t run_rows = c.count == 1 ? c.rows : std::min(c.rows, c.chunk_rows + c.halo);
        c.chunk_bytes = c.panels * run_rows * c.cols * elem;
    } else {
        c.count = ceil_div(c.cols, c.chunk_cols);
        c.chunk_bytes = c.panels * c.rows * c.chunk_cols * elem;
    }
    c.total_bytes = c.chunk_bytes * std::min<std::int64_t>(std::max(1, r.in_flight), c.count) + r.fixed_bytes;
}

bool rates_known(const ChunkRates& r) {
    return r.in_bytes_per_s > 0 && r.compute_bytes_per_s > 0 && r.out_bytes_per_s > 0;
}

}  // namespace

void RateMeter::add(Stage stage, std::int64_t bytes, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_[stage] += static_cast<double>(bytes);
    seconds_[stage] += seconds;
}

ChunkRates RateMeter::rates(const ChunkRates& fallback, double min_seconds) const {
    std::lock_guard<std::mutex> lock(mutex_);
    ChunkRates r = fallback;
    auto rate = [&](int s, double fb) { return seconds_[s] >= min_seconds && bytes_[s] > 0 ? bytes_[s] / seconds_[s] : fb; };
    r.in_bytes_per_s = rate(In, fallback.in_bytes_per_s);
    r.compute_bytes_per_s = rate(Compute, fallback.compute_bytes_per_s);
    r.out_bytes_per_s = rate(Out, fallback.out_bytes_per_s);
    return r;
}

Chunk ChunkPlan::chunk(std::int64_t i) const {
    Chunk c;
    c.index = i;
    if (axis == ChunkAxis::Time) {
        c.row_begin = i * chunk_rows;
        c.row_end = std::min(rows, c.row_begin + chunk_rows);
        c.read_begin = std::max<std::int64_t>(0, c.row_begin - halo);
        c.col_begin = 0;
        c.col_end = cols;
    } else {
        c.row_begin = c.read_begin = 0;
        c.row_end = rows;
        c.col_begin = i * chunk_cols;
        c.col_end = std::min(cols, c.col_begin + chunk_cols);
    }
    return c;
}

std::string ChunkPlan::describe() const {
    if (count == 0) return "no chunks (empty panel)";
    if (count == 1) return fmt::format("one chunk (the whole {} x {} panel), {}", rows, cols, bytes_str(static_cast<double>(chunk_bytes)));
    if (axis == ChunkAxis::Time)
        return fmt::format("{} chunks over time of {} rows (+{} halo), {} each, {} in all", count, chunk_rows, halo,
                           bytes_str(static_cast<double>(chunk_bytes)), bytes_str(static_cast<double>(total_bytes)));
    return fmt::format("{} chunks over columns of {} columns, {} each, {} in all", count, chunk_cols,
                       bytes_str(static_cast<double>(chunk_bytes)), bytes_str(static_cast<double>(total_bytes)));
}

// A pipeline of three stages (in, compute, out) over `count` chunks with `in_flight` chunks' memory:
// the first chunk passes every stage, and each further chunk adds the time of the slowest stage, or,
// when fewer than three chunks can be in flight, the share of the chunk's whole time that cannot overlap.
// Each stage of each chunk pays the fixed overhead. Halo rows are read and computed again per chunk.
double pipeline_seconds(const ChunkPlan& c, const codegen::Plan& plan, const ChunkRequest& r) {
    if (c.count == 0) return 0;
    const Counts n = counts_of(plan);
    const double elem = static_cast<double>(dtype_size(r.dtype));
    double run_rows, out_rows, cols;
    if (c.axis == ChunkAxis::Time) {
        run_rows = (static_cast<double>(c.rows) + static_cast<double>(c.count - 1) * static_cast<double>(c.halo)) /
                   static_cast<double>(c.count);
        out_rows = static_cast<double>(c.rows) / static_cast<double>(c.count);
        cols = static_cast<double>(c.cols);
    } else {
        run_rows = out_rows = static_cast<double>(c.rows);
        cols = static_cast<double>(c.cols) / static_cast<double>(c.count);
    }
    const double in_b = n.inputs * run_rows * cols * elem, out_b = n.outputs * out_rows * cols * elem;
    const double comp_b = (n.inputs + n.outputs) * run_rows * cols * elem;
    const double o = r.rates.chunk_overhead_s;
    const double t_in = r.rates.in_bytes_per_s > 0 ? in_b / r.rates.in_bytes_per_s + o : o;
    const double t_c = r.rates.compute_bytes_per_s > 0 ? comp_b / r.rates.compute_bytes_per_s + o : o;
    const double t_out = r.rates.out_bytes_per_s > 0 ? out_b / r.rates.out_bytes_per_s + o : o;
    const double sum = t_in + t_c + t_out, slowest = std::max({t_in, t_c, t_out});
    const double depth = std::clamp(r.in_flight, 1, 3);
    return sum + static_cast<double>(c.count - 1) * std::max(slowest, sum / depth);
}

ChunkPlan plan_chunks(const codegen::Plan& plan, const ChunkRequest& r) {
    if (r.rows < 0 || r.cols < 0 || r.budget_bytes < 0 || r.fixed_bytes < 0 || r.chunk_rows < 0 || r.chunk_cols < 0)
        throw InputError(fmt::format("chunk plan: negative shape, budget or chunk size ({} x {}, budget {}, fixed {}, "
                                     "chunk_rows {}, chunk_cols {})",
                                     r.rows, r.cols, r.budget_bytes, r.fixed_bytes, r.chunk_rows, r.chunk_cols));
    const std::int64_t elem = static_cast<std::int64_t>(dtype_size(r.dtype));
    ChunkPlan c;
    c.rows = r.rows;
    c.cols = r.cols;
    c.halo = plan.halo;
    c.panels = counts_of(plan).budgeted(r);
    c.chunk_rows = r.rows;
    c.chunk_cols = r.cols;
    if (r.rows == 0 || r.cols == 0) {
        c.count = 0;
        c.total_bytes = r.fixed_bytes;
        return c;
    }
    const bool row_steps = plan.has_row_steps();

    // Forced sizes: the caller knows best (tests, tuning); the budget is not consulted.
    if (r.chunk_cols > 0) {
        if (row_steps)
            throw InputError(fmt::format("chunk plan: chunks over columns ({} columns forced) cannot split a row step "
                                         "('{}' needs whole rows); chunk over time (chunk_rows) instead",
                                         r.chunk_cols, op_name(plan.first_row_step()->row_op()->op)));
        c.axis = ChunkAxis::Columns;
        c.chunk_cols = std::min(r.chunk_cols, r.cols);
        finish(c, r, elem);
        return c;
    }
    if (r.chunk_rows > 0) {
        c.chunk_rows = std::min(r.chunk_rows, r.rows);
        finish(c, r, elem);
        return c;
    }

    // What the chunks in flight may take together, and what one row (over time) or column (over columns)
    // of a chunk costs.
    constexpr std::int64_t unlimited = std::numeric_limits<std::int64_t>::max();
    std::int64_t avail = unlimited;
    if (r.budget_bytes > 0) {
        avail = r.budget_bytes - r.fixed_bytes;
        if (avail <= 0)
            throw RunError(fmt::format("chunk plan: a memory budget of {} leaves nothing for panels after the run's "
                                       "fixed {}",
                                       bytes_str(static_cast<double>(r.budget_bytes)),
                                       bytes_str(static_cast<double>(r.fixed_bytes))));
    }
    const std::int64_t in_flight = std::max(1, r.in_flight);
    const std::int64_t row_cost = static_cast<std::int64_t>(c.panels) * r.cols * elem;    // bytes per row run
    const std::int64_t col_cost = static_cast<std::int64_t>(c.panels) * r.rows * elem;    // bytes per column
    const bool whole_fits = row_cost == 0 || avail == unlimited || row_cost <= avail / r.rows;
    const std::int64_t min_rows = r.min_rows > 0 ? r.min_rows : std::max<std::int64_t>(256, 8 * c.halo);

    // Over time: the largest chunk the budget allows with in_flight chunks at once.
    std::int64_t max_rows = r.rows;
    if (!whole_fits) {
        const std::int64_t run_rows = avail / in_flight / row_cost;  // rows run per chunk, halo included
        max_rows = std::min(r.rows, run_rows - c.halo);
    }
    // Over columns (no row steps): the same for whole columns, when time chunks would be too small to
    // carry their halo cheaply (more than 1/8 of the rows they run is halo), or do not fit at all.
    if (!whole_fits && !row_steps && (max_rows < 1 || 8 * c.halo > max_rows)) {
        std::int64_t max_cols = std::min(r.cols, avail / in_flight / std::max<std::int64_t>(col_cost, 1));
        if (max_cols >= kColumnQuantum) max_cols = max_cols / kColumnQuantum * kColumnQuantum;
        if (max_cols >= 1 && (max_cols >= std::min(r.cols, kColumnQuantum) || max_rows < 1)) {
            c.axis = ChunkAxis::Columns;
            const std::int64_t fewest = ceil_div(r.cols, max_cols);
            const std::int64_t wanted = std::max(fewest, std::min<std::int64_t>(r.min_chunks, r.cols / kColumnQuantum));
            std::int64_t per = ceil_div(r.cols, std::max<std::int64_t>(wanted, 1));
            if (per > kColumnQuantum) per = std::min(max_cols, ceil_div(per, kColumnQuantum) * kColumnQuantum);
            c.chunk_cols = std::max<std::int64_t>(1, per);
            finish(c, r, elem);
            return c;
        }
    }
    if (max_rows < 1)
        throw RunError(fmt::format("chunk plan: a memory budget of {} is too small: a chunk of one row over time carries "
                                   "{} halo row(s) and {} panel(s) of {} columns, {} with {} chunk(s) in flight{}",
                                   bytes_str(static_cast<double>(r.budget_bytes)), c.halo, c.panels, r.cols,
                                   bytes_str(static_cast<double>((1 + c.halo) * row_cost * in_flight + r.fixed_bytes)),
                                   in_flight,
                                   row_steps ? " (row steps: chunks over columns are not possible)"
                                             : fmt::format(" (nor does one column of {} rows: {})", r.rows,
                                                           bytes_str(static_cast<double>(col_cost * in_flight)))));

    // Between the fewest chunks the budget allows and the most that still own min_rows each: min_chunks
    // asks for more where the rows allow; known rates choose by the pipeline model.
    const std::int64_t fewest = ceil_div(r.rows, max_rows);
    const std::int64_t most = std::max(fewest, r.rows / min_rows);
    std::int64_t n = std::max(fewest, std::min<std::int64_t>(r.min_chunks, most));
    if (rates_known(r.rates) && most > n) {
        double best = std::numeric_limits<double>::infinity();
        std::int64_t best_n = n;
        // Every count up to 64, then a geometric sweep: the model is smooth, and this stays cheap.
        for (std::int64_t k = n; k <= most; k = k < 64 ? k + 1 : k + k / 8) {
            ChunkPlan t = c;
            t.chunk_rows = ceil_div(r.rows, k);
            finish(t, r, elem);
            const double s = pipeline_seconds(t, plan, r);
            if (s < best) {
                best = s;
                best_n = k;
            }
        }
        n = best_n;
    }
    c.chunk_rows = ceil_div(r.rows, n);
    // Whole quanta, rounding down (the budget's bound stays met) but never below one quantum.
    if (r.row_quantum > 1 && c.chunk_rows > r.row_quantum && c.chunk_rows < r.rows)
        c.chunk_rows = c.chunk_rows / r.row_quantum * r.row_quantum;
    finish(c, r, elem);
    return c;
}

std::int64_t worker_budget(const std::vector<int>& workers, const std::function<std::int64_t(int)>& device_budget) {
    std::map<int, std::int64_t> on_device;  // workers per device
    for (int d : workers) ++on_device[d];
    std::int64_t share = on_device.empty() ? 0 : std::numeric_limits<std::int64_t>::max();
    for (const auto& [ordinal, count] : on_device) share = std::min(share, device_budget(ordinal) / count);
    return share;
}

}  // namespace fj::rt
