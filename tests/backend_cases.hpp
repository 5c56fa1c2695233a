// One test body for every backend and dtype: compile named expressions, run them on host panels,
// and hold every output to docs/operators.md's accuracy contract against tests/reference.
//
//   TEST_CASE_TEMPLATE_DEFINE("window ops", T, ops_windows) {
//       fj::test::check_against_reference(exprs, data, rows, cols, T::dtype, T::options());
//   }
//   TEST_CASE_TEMPLATE_APPLY(ops_windows, fj::test::CpuTargets);   // and later CudaTargets
//
// What a run must get right, beyond the values:
//   * every output cell is written: outputs are poisoned (12345.0, then -9876.5 on a second run) and
//     the two runs must agree bit for bit, so a cell left alone shows as a difference;
//   * nothing outside [0, cols) of a row is written (padding up to ld is poisoned and re-read), and
//     padding of the inputs is never used (it holds 7.7e30, which would show in any result);
//   * inputs are not written.
// Accuracy (docs/operators.md, "Accuracy contract"), per element:
//   float64: |got - ref| <= 1e-9 * max(1, |ref|);
//   float32: |got - ref| <= 1e-5 * max(1, |ref|), and overall ||got - ref||_F / ||ref||_F <= 1e-6;
//   NaN exactly where the reference has NaN; infinities equal (for float32, a finite reference beyond
//   float32's range must come out as that infinity); corr outputs within [-1, 1]; var/std exactly 0
//   where the reference is exactly 0 (see exact_zero_applies for when that is a fair demand).
// The float32 reference is the float64 reference of the float32-rounded inputs: both sides read the
// same numbers, so the only float32 error the contract allows for is the final rounding of each result
// (2^-24 relative) plus the float64 algorithm's own error; that is why the float32 bounds hold for
// every operator on the data sets used here, not only the smooth ones.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dsl/expr.hpp"
#include "reference.hpp"
#include "runtime/backend.hpp"
#include "runtime/panel.hpp"
#include "runtime/program.hpp"
#include "test_data.hpp"

namespace fj::test {

using NamedExprs = std::vector<std::pair<std::string, fj::Expr>>;

// Three rows x three columns, each a level change followed by a tiny move: var(window(A, 2)) at the last row
// is (x2 - x1)^2 / 2, however far the first row was. Column 0: 1e4, then 100 -> 100.0001 (var 5e-9);
// column 1: a 1.6 % move, then a 2e-6 relative one; column 2: 1e6-level steps of 1e-3 (float64 only
// distinguishes them; in float32 the window is constant and var exactly 0). For the numerics suite (with
// exact sums) and the spikes suite (without).
inline Inputs level_change_inputs() {
    return {
        {"A", {1e4, 110.0, 1e6 + 5.0, 100.0, 94.687117673667814, 1e6, 100.0001, 94.686946652936655, 1e6 + 1e-3}},
        {"B", {1.0, 1.0, 1.0, 2.0, 2.5, 2.0, 3.0, 2.0, 3.0}},
    };
}
inline NamedExprs level_change_program() {
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    return {
        {"var2", fj::var(fj::window(A, 2))},
        {"std2", fj::std(fj::window(A, 2))},
        {"corr2", fj::corr(fj::window(A, 2), fj::window(B, 2))},
        {"cov2", fj::cov(fj::window(A, 2), fj::window(B, 2))},
    };
}

struct Tolerance {
    double f64 = 1e-9;             // per element, times max(1, |ref|)
    double f32 = 1e-5;             // per element, times max(1, |ref|)
    double f32_frobenius = 1e-6;   // ||got - ref||_F / ||ref||_F over the cells where both are finite
};

// Runs a compiled program on host panels. The default calls program.run; a backend whose test wants the
// data elsewhere (CUDA device memory) stages it here and copies the outputs back into `outputs`.
using Runner = std::function<void(const fj::Program&, const std::map<std::string, fj::Panel>& inputs,
                                  const std::map<std::string, fj::Panel>& outputs)>;

struct CheckOptions {
    std::int64_t ld_in = 0;   // leading dimension of the input panels; 0: cols
    std::int64_t ld_out = 0;  // of the output panels; 0: cols
    Tolerance tol;            // for every output ...
    std::map<std::string, Tolerance> tol_for;  // ... unless named here
    std::string label;        // the data set, for messages
    Runner runner;            // empty: program.run
};

// ------------------------------------------------------------------------------------------------
// Targets: a backend and a dtype, as types for TEST_CASE_TEMPLATE.

template <fj::Backend B, fj::DType D>
struct Target {
    static constexpr fj::Backend backend = B;
    static constexpr fj::DType dtype = D;
    static fj::CompileOptions options(fj::CompileOptions o = {}) {
        o.backend = B;
        return o;
    }
};
using CpuF64 = Target<fj::Backend::Cpu, fj::DType::F64>;
using CpuF32 = Target<fj::Backend::Cpu, fj::DType::F32>;
using CudaF64 = Target<fj::Backend::Cuda, fj::DType::F64>;
using CudaF32 = Target<fj::Backend::Cuda, fj::DType::F32>;
using CpuTargets = std::tuple<CpuF64, CpuF32>;
using CudaTargets = std::tuple<CudaF64, CudaF32>;

// Whether T's backend runs in this build and on this machine (a message where it does not): the GPU machine
// builds without LLVM, CI has no GPU.
template <class T>
bool available() {
    std::string why;
    if (T::backend == fj::Backend::Cpu && !fj::rt::cpu_backend()) {
        MESSAGE("skipped: this build has no CPU backend");
        return false;
    }
    if (T::backend == fj::Backend::Cuda && !fj::rt::cuda_backend(&why)) {
        MESSAGE("skipped: no usable GPU for the CUDA backend: " << why);
        return false;
    }
    return true;
}

inline const char* backend_name(fj::Backend b) {
    switch (b) {
    case fj::Backend::Auto: return "auto";
    case fj::Backend::Cpu: return "cpu";
    case fj::Backend::Cuda: return "cuda";
    }
    return "?";
}

// ------------------------------------------------------------------------------------------------
// Host buffers of either dtype with a leading dimension.

class HostBuffer {
public:
    HostBuffer(fj::DType dtype, std::int64_t rows, std::int64_t cols, std::int64_t ld)
        : dtype_(dtype), rows_(rows), cols_(cols), ld_(ld) {
        const std::size_t n = static_cast<std::size_t>(rows * ld) + 1;  // +1: never a null data pointer
        if (dtype == fj::DType::F32) f_.assign(n, 0.0f); else d_.assign(n, 0.0);
    }
    double get(std::int64_t t, std::int64_t j) const {
        const std::size_t i = static_cast<std::size_t>(t * ld_ + j);
        return dtype_ == fj::DType::F32 ? static_cast<double>(f_[i]) : d_[i];
    }
    void set(std::int64_t t, std::int64_t j, double v) {
        const std::size_t i = static_cast<std::size_t>(t * ld_ + j);
        if (dtype_ == fj::DType::F32) f_[i] = static_cast<float>(v); else d_[i] = v;
    }
    // Cells with `cells`, padding (columns cols..ld-1) with `pad`.
    void fill(double cells, double pad) {
        for (std::int64_t t = 0; t < rows_; ++t)
            for (std::int64_t j = 0; j < ld_; ++j) set(t, j, j < cols_ ? cells : pad);
    }
    void load(const std::vector<double>& row_major, double pad) {
        for (std::int64_t t = 0; t < rows_; ++t)
            for (std::int64_t j = 0; j < ld_; ++j)
                set(t, j, j < cols_ ? row_major[static_cast<std::size_t>(t * cols_ + j)] : pad);
    }
    std::vector<double> cells() const {
        std::vector<double> v(static_cast<std::size_t>(rows_ * cols_));
        for (std::int64_t t = 0; t < rows_; ++t)
            for (std::int64_t j = 0; j < cols_; ++j) v[static_cast<std::size_t>(t * cols_ + j)] = get(t, j);
        return v;
    }
    // The first padding cell that no longer holds `pad`, as "(row, col) value", or "".
    std::string padding_changed(double pad) const {
        for (std::int64_t t = 0; t < rows_; ++t)
            for (std::int64_t j = cols_; j < ld_; ++j)
                if (!(get(t, j) == static_cast<double>(dtype_ == fj::DType::F32 ? static_cast<float>(pad) : pad))) {
                    std::ostringstream s;
                    s << "(row " << t << ", col " << j << ") holds " << get(t, j);
                    return s.str();
                }
        return "";
    }
    bool same_bytes(const HostBuffer& o) const { return bytes_equal(f_, o.f_) && bytes_equal(d_, o.d_); }
    fj::Panel panel() {
        return dtype_ == fj::DType::F32 ? fj::Panel::host(f_.data(), rows_, cols_, ld_)
                                        : fj::Panel::host(d_.data(), rows_, cols_, ld_);
    }

private:
    template <class V>
    static bool bytes_equal(const std::vector<V>& a, const std::vector<V>& b) {  // NaN payloads included
        return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(V)) == 0);
    }
    fj::DType dtype_;
    std::int64_t rows_, cols_, ld_;
    std::vector<float> f_;
    std::vector<double> d_;
};

// ------------------------------------------------------------------------------------------------
// Helpers.

inline std::string fmt_num(double v) {
    std::ostringstream s;
    s.precision(17);
    s << v;
    return s.str();
}

inline bool same_value(double a, double b) {  // bitwise, except that every NaN equals every NaN
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::memcmp(&a, &b, sizeof a) == 0;
}

inline bool has_window(const fj::Node* n) {
    for (const fj::Node* m : fj::topo_order({n}))
        if (fj::is_windowed(m->op) || fj::op_info(m->op).kind == fj::OpKind::Recursive) return true;
    return false;
}

// "var/std exactly 0 on constant windows" can be demanded of a backend only where its window holds the
// same equal values as the reference's: the argument is a per-row function of the inputs (element-wise
// ops and delays, computed the same IEEE way). Over a windowed argument (std of a rolling mean) the
// backend's inner values may differ from the reference's in the last bits, and the window is then not
// constant for it; the ordinary tolerance applies there.
inline bool exact_zero_applies(const fj::Node* root) {
    return (root->op == fj::Op::WVar || root->op == fj::Op::WStd) && !has_window(root->args[0]);
}

inline Inputs as_dtype(const Inputs& data, fj::DType dtype) {
    if (dtype == fj::DType::F64) return data;
    Inputs r;
    for (const auto& [name, v] : data) r[name] = round_to_f32(v);
    return r;
}

inline std::string describe(const fj::CompileOptions& o) {
    std::ostringstream s;
    s << "backend " << backend_name(o.backend) << ", threads " << o.threads << ", tile_rows " << o.tile_rows
      << ", block_cols " << o.block_cols;
    return s.str();
}

inline std::string context(fj::DType dtype, const fj::CompileOptions& o, std::int64_t rows, std::int64_t cols,
                           const CheckOptions& check) {
    std::ostringstream s;
    s << fj::dtype_name(dtype) << ", " << describe(o) << ", data '" << check.label << "' " << rows << " x " << cols
      << ", ld_in " << (check.ld_in ? check.ld_in : cols) << ", ld_out " << (check.ld_out ? check.ld_out : cols);
    return s.str();
}

// ------------------------------------------------------------------------------------------------
// Running.

// Runs `program` twice on host panels of `dtype` holding `data` (already of that dtype's values) and
// returns every output, row-major with ld = cols. Failures of the run's hygiene (padding written,
// cells not written, inputs changed, an exception) are reported through doctest; then nullopt.
inline std::optional<std::map<std::string, std::vector<double>>> run_on_host(
    const fj::Program& program, const Inputs& data, std::int64_t rows, std::int64_t cols, fj::DType dtype,
    const CheckOptions& check, const std::string& where) {
    constexpr double kPadIn = 7.7e30, kPadOut = -3.3e33;
    constexpr double kPoison[2] = {12345.0, -9876.5};
    const std::int64_t ld_in = check.ld_in ? check.ld_in : cols;
    const std::int64_t ld_out = check.ld_out ? check.ld_out : cols;

    std::map<std::string, HostBuffer> in_buf, in_copy;
    for (const auto& [name, v] : data) {
        HostBuffer b(dtype, rows, cols, ld_in);
        b.load(v, kPadIn);
        in_buf.emplace(name, b);
        in_copy.emplace(name, b);
    }
    std::map<std::string, fj::Panel> in_panels;
    for (auto& [name, b] : in_buf) in_panels.emplace(name, b.panel());

    std::map<std::string, std::vector<double>> results[2];
    bool ok = true;
    for (int pass = 0; pass < 2; ++pass) {
        std::map<std::string, HostBuffer> out_buf;
        for (const std::string& name : program.output_names()) {
            HostBuffer b(dtype, rows, cols, ld_out);
            b.fill(kPoison[pass], kPadOut);
            out_buf.emplace(name, b);
        }
        std::map<std::string, fj::Panel> out_panels;
        for (auto& [name, b] : out_buf) out_panels.emplace(name, b.panel());
        try {
            if (check.runner) check.runner(program, in_panels, out_panels);
            else program.run(in_panels, out_panels);
        } catch (const std::exception& e) {
            FAIL_CHECK(where << ": run threw: " << std::string(e.what()));
            return std::nullopt;
        }
        for (const auto& [name, b] : out_buf) {
            const std::string pad = b.padding_changed(kPadOut);
            if (!pad.empty()) {
                FAIL_CHECK(where << ": output '" << name << "' padding beyond cols was written: " << pad);
                ok = false;
            }
            results[pass][name] = b.cells();
        }
    }
    for (const auto& [name, b] : in_buf)
        if (!b.same_bytes(in_copy.at(name))) {
            FAIL_CHECK(where << ": input '" << name << "' was modified by the run");
            ok = false;
        }
    for (const auto& [name, v] : results[0]) {
        const std::vector<double>& w = results[1].at(name);
        for (std::size_t i = 0; i < v.size(); ++i)
            if (!same_value(v[i], w[i])) {
                FAIL_CHECK(where << ": output '" << name << "' cell (row " << static_cast<std::int64_t>(i) / cols
                                 << ", col " << static_cast<std::int64_t>(i) % cols << ") not written (poisoned runs "
                                 << "differ: " << fmt_num(v[i]) << " vs " << fmt_num(w[i]) << ")");
                ok = false;
                break;
            }
    }
    if (!ok) return std::nullopt;
    return results[0];
}

// Compiles and runs; reports a throw through doctest and returns nullopt.
inline std::optional<std::map<std::string, std::vector<double>>> compile_and_run(
    const NamedExprs& exprs, const Inputs& data, std::int64_t rows, std::int64_t cols, fj::DType dtype,
    const fj::CompileOptions& options, const CheckOptions& check = {}) {
    const std::string where = context(dtype, options, rows, cols, check);
    std::optional<fj::Program> program;
    try {
        program.emplace(fj::compile(exprs, options));
    } catch (const std::exception& e) {
        std::ostringstream names;
        for (const auto& [name, e2] : exprs) names << " " << name << " = " << e2.str() << ";";
        FAIL_CHECK(where << ": compile threw: " << std::string(e.what()) << "\n  program:" << names.str());
        return std::nullopt;
    }
    return run_on_host(*program, as_dtype(data, dtype), rows, cols, dtype, check, where);
}

// ------------------------------------------------------------------------------------------------
// Comparing.

// One output against its reference; "" when it meets the contract, else what is wrong and where.
inline std::string compare_output(const std::vector<double>& got, const std::vector<double>& ref, std::int64_t cols,
                                  fj::DType dtype, const fj::Node* root, const Tolerance& tol) {
    const bool f32 = dtype == fj::DType::F32;
    const double elem_tol = f32 ? tol.f32 : tol.f64;
    const bool is_corr = root->op == fj::Op::WCorr;
    const bool exact_zero = exact_zero_applies(root);
    std::int64_t bad = 0, first = -1;
    std::string first_why;
    double worst = 0;  // the largest err / (tol * max(1, |ref|)) among finite cells
    std::int64_t worst_at = -1;
    long double err2 = 0, ref2 = 0;
    std::size_t last_flagged = static_cast<std::size_t>(-1);
    auto flag = [&](std::size_t i, const std::string& why) {  // a cell counts once, whatever is wrong with it
        if (last_flagged == i) return;
        last_flagged = i;
        if (bad++ == 0) {
            first = static_cast<std::int64_t>(i);
            first_why = why;
        }
    };
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double r = ref[i], g = got[i];
        if (std::isnan(r) || std::isnan(g)) {
            if (std::isnan(r) != std::isnan(g)) flag(i, "NaN placement differs");
            continue;
        }
        // The reference as the output dtype can hold it: beyond float32's range it is an infinity.
        const double r_out = f32 ? static_cast<double>(static_cast<float>(r)) : r;
        if (std::isinf(r_out) || std::isinf(g)) {
            if (!(g == r_out)) flag(i, "infinity differs");
            continue;
        }
        const double err = std::fabs(g - r);
        const double lim = elem_tol * std::max(1.0, std::fabs(r));
        if (!(err <= lim)) flag(i, "error beyond " + fmt_num(elem_tol) + " * max(1, |ref|)");
        if (err / lim > worst) {
            worst = err / lim;
            worst_at = static_cast<std::int64_t>(i);
        }
        if (is_corr && !(g >= -1.0 && g <= 1.0)) flag(i, "corr outside [-1, 1]");
        if (exact_zero && r == 0.0 && g != 0.0) flag(i, "var/std of a constant window is not exactly 0");
        // Float32's subnormal range holds values only to an absolute 1e-45: the per-element bound covers
        // them, the relative Frobenius measure would count a result that underflowed as a 100 % error.
        if (!f32 || std::fabs(r) >= static_cast<double>(std::numeric_limits<float>::min())) {
            err2 += static_cast<long double>(err) * err;
            ref2 += static_cast<long double>(r) * r;
        }
    }
    std::ostringstream s;
    if (bad) {
        s << bad << " of " << ref.size() << " cells bad; first at (row " << first / cols << ", col " << first % cols
          << "): got " << fmt_num(got[first]) << ", reference " << fmt_num(ref[first]) << ": " << first_why;
        if (worst_at >= 0 && worst > 1)
            s << "; largest error at (row " << worst_at / cols << ", col " << worst_at % cols << "): got "
              << fmt_num(got[worst_at]) << ", reference " << fmt_num(ref[worst_at]) << " (" << fmt_num(worst)
              << " x the bound)";
    }
    if (f32 && ref2 > 0) {
        const double frob = static_cast<double>(std::sqrt(err2 / ref2));
        if (!(frob <= tol.f32_frobenius)) {
            if (bad) s << "; ";
            s << "relative Frobenius error " << fmt_num(frob) << " > " << fmt_num(tol.f32_frobenius);
        }
    }
    return s.str();
}

// The checker: compile `exprs` for `options.backend`, run on `dtype` host panels of `data` (float32 panels
// hold the float32-rounded data; the reference sees those same values as float64) and check each output
// against the reference. Returns whether everything passed; every failure is a doctest failure naming the
// expression, dtype, options, data set, the first bad (row, col), the value and the reference.
inline bool check_against_reference(const NamedExprs& exprs, const Inputs& data, std::int64_t rows, std::int64_t cols,
                                    fj::DType dtype, const fj::CompileOptions& options, const CheckOptions& check = {}) {
    const Inputs data_t = as_dtype(data, dtype);
    std::vector<fj::Expr> roots;
    for (const auto& [name, e] : exprs) roots.push_back(e);
    const std::vector<std::vector<double>> refs = reference(roots, data_t, rows, cols);

    const auto got = compile_and_run(exprs, data, rows, cols, dtype, options, check);
    if (!got) return false;
    const std::string where = context(dtype, options, rows, cols, check);
    bool all_ok = true;
    for (std::size_t k = 0; k < exprs.size(); ++k) {
        const auto& [name, e] = exprs[k];
        auto it = got->find(name);
        if (it == got->end()) {
            FAIL_CHECK(where << ": output '" << name << "' missing from the program's outputs");
            all_ok = false;
            continue;
        }
        auto t = check.tol_for.find(name);
        const std::string msg =
            compare_output(it->second, refs[k], cols, dtype, e.node(), t == check.tol_for.end() ? check.tol : t->second);
        CHECK_MESSAGE(msg.empty(), "`" << e.str() << "` (output '" << name << "'), " << where << ": " << msg);
        all_ok = all_ok && msg.empty();
    }
    return all_ok;
}

// Same, with one data set.
inline bool check_against_reference(const NamedExprs& exprs, const Dataset& ds, fj::DType dtype,
                                    const fj::CompileOptions& options, CheckOptions check = {}) {
    if (check.label.empty()) check.label = ds.label;
    return check_against_reference(exprs, ds.inputs, ds.rows, ds.cols, dtype, options, check);
}

// Each expression as its own one-output program (a failure then points at one operator), output "out".
inline bool check_each(const std::vector<fj::Expr>& exprs, const Dataset& ds, fj::DType dtype,
                       const fj::CompileOptions& options, const CheckOptions& check = {}) {
    bool ok = true;
    for (const fj::Expr& e : exprs) ok = check_against_reference({{"out", e}}, ds, dtype, options, check) && ok;
    return ok;
}

// A program, its data (values of its dtype already) and a judge of each output beside the reference's,
// for properties beyond the contract's bounds; backends run it with check_judged(), the emulated CUDA
// kernels (test_cuda_emulated.cpp) with their own runner.
struct JudgedCase {
    NamedExprs exprs;
    Dataset ds;
    fj::DType dtype = fj::DType::F64;
    std::function<void(std::size_t k, const std::vector<double>& got, const std::vector<double>& ref)> judge;
};

// What users try first: corr of a panel with itself is 1 wherever it is defined, and with a negative
// power-of-two multiple of itself -1: exactly in float32 (the float64 value is within a few of its steps
// and rounds there), within 8 float64 steps in float64 (where exact results would take a correctly rounded
// square root and division). docs/operators.md's bounds allow more; this is what a user sees. NaN placement as
// the reference's. Price-like messy data, `rows` x `cols`.
inline JudgedCase corr_with_itself(fj::DType dtype, std::int64_t rows, std::int64_t cols) {
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    JudgedCase c;
    c.dtype = dtype;
    c.exprs = {{"aa", fj::corr(fj::window(A, 20), fj::window(A, 20))}, {"ab", fj::corr(fj::window(A, 20), fj::window(B, 20))}};
    c.ds = dataset("price, messy", rows, cols, messy(Flavour::Price), 61);
    c.ds.inputs = as_dtype(c.ds.inputs, dtype);
    std::vector<double>& b = c.ds.inputs.at("B");
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = -2.0 * c.ds.inputs.at("A")[i];
    c.judge = [dtype](std::size_t k, const std::vector<double>& got, const std::vector<double>& ref) {
        const double want = k == 0 ? 1.0 : -1.0;
        const double tol = dtype == fj::DType::F32 ? 0.0 : 8 * std::numeric_limits<double>::epsilon();
        std::size_t defined = 0, off = 0, nan_differs = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
            nan_differs += std::isnan(got[i]) != std::isnan(ref[i]);
            if (std::isnan(got[i])) continue;
            ++defined;
            off += !(std::abs(got[i] - want) <= tol);
        }
        CHECK(defined > got.size() / 3);
        CHECK(nan_differs == 0);
        CHECK_MESSAGE(off == 0, off << " of " << defined << " outputs are further than " << tol << " from " << want);
    };
    return c;
}

// Float64 data beyond about 1e154 in magnitude: the window sums of squares and products overflow, and var,
// std, cov and corr must then say NaN, not a wrong number (they said 0, 0, NaN and -1), while a column of
// ordinary data beside them keeps its results. Outputs that are not NaN are held to the reference
// (long double: it has the range), and the overflow must have happened somewhere.
inline JudgedCase float64_overflow() {
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    JudgedCase c;
    c.exprs = {{"var", fj::var(fj::window(A, 20))},
               {"std", fj::std(fj::window(A, 20))},
               {"cov", fj::cov(fj::window(A, 20), fj::window(B, 20))},
               {"corr", fj::corr(fj::window(A, 20), fj::window(B, 20))}};
    const std::int64_t cols = 6;
    c.ds = dataset("normal, x 1e160 but column 0", 120, cols, clean(Flavour::Normal), 71);
    for (auto& [name, v] : c.ds.inputs)
        for (std::size_t i = 0; i < v.size(); ++i)
            if (i % cols != 0) v[i] *= 1e160;
    c.judge = [cols](std::size_t, const std::vector<double>& got, const std::vector<double>& ref) {
        std::size_t nan_big = 0, wrong = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
            const bool big = i % cols != 0;
            if (std::isnan(got[i])) {
                nan_big += big;
                wrong += !big && !std::isnan(ref[i]);
            } else {
                wrong += !(got[i] == ref[i] ||
                           (std::isfinite(ref[i]) && std::abs(got[i] - ref[i]) <= 1e-9 * std::max(1.0, std::abs(ref[i]))));
            }
        }
        CHECK(nan_big > 0);
        CHECK_MESSAGE(wrong == 0, wrong << " outputs are neither NaN (overflow) nor the reference's value");
    };
    return c;
}

// Runs a judged case on a backend and judges every output.
inline void check_judged(const JudgedCase& c, const fj::CompileOptions& options, const CheckOptions& check = {}) {
    const auto got = compile_and_run(c.exprs, c.ds.inputs, c.ds.rows, c.ds.cols, c.dtype, options, check);
    REQUIRE(got);
    std::vector<fj::Expr> roots;
    for (const auto& [name, e] : c.exprs) roots.push_back(e);
    const auto refs = reference(roots, c.ds.inputs, c.ds.rows, c.ds.cols);
    for (std::size_t k = 0; k < c.exprs.size(); ++k) {
        CAPTURE(c.exprs[k].second.str());
        c.judge(k, got->at(c.exprs[k].first), refs[k]);
    }
}

}  // namespace fj::test

TYPE_TO_STRING(fj::test::CpuF64);
TYPE_TO_STRING(fj::test::CpuF32);
TYPE_TO_STRING(fj::test::CudaF64);
TYPE_TO_STRING(fj::test::CudaF32);
