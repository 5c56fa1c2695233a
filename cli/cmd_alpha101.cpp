// `factorjit alpha101`: the 101 Formulaic Alphas (alphas/alpha101.hpp) on the panels of a data folder,
// compiled as ONE program, so that subexpressions the alphas share (adv20, rank(volume), delta(close, 1),
// ...) are computed once.
//
// Not every alpha can be computed by every build: the library may lack an operator the paper uses
// (ts_rank, decay_linear, ...), or the folder a panel (cap, the group ids). Such alphas are left out,
// each with the reason, and the rest are compiled and run; the command fails only when nothing is left
// or when something goes wrong with what is left (a bad file, mixed shapes or dtypes, a failed run).
//
// Order of work, as in `factorjit eval`: formulas; the headers of the panels they read (shapes and dtypes
// agree before any data is read); a temporary file per output (a bad --out fails before the work);
// compile; read; run K times; write every temporary file, then rename them all. A failure before the
// renames leaves --out as it was.
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "alphas/alpha101.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/npy.hpp"
#include "factorjit.hpp"

namespace {

using namespace fj::cli;
namespace fs = std::filesystem;

const char* const kUsage = R"USAGE(usage: factorjit alpha101 --data DIR [--out DIR] [--backend auto|cpu|cuda] [--repeat K]
                         [--threads N] [--round-windows] [--explain FILE] [--devices all|0,1,...]

Computes the 101 Formulaic Alphas (Kakushadze 2016; docs/alpha101.md) on the panels in DIR, compiled
together as one program, and prints the compile time and the time of each run.

  --data DIR         the input panels: DIR/open.npy, high, low, close, volume, vwap, returns, cap and
                     the group ids sector, industry, subindustry (IndClass.*); 2-D (T x N, rows = time)
                     float32 or float64, all of one shape and dtype. Only the panels that the
                     computable alphas read are needed
  --out DIR          write alpha001.npy ... alpha101.npy there (created if missing), of the inputs'
                     shape and dtype; without it nothing is written
  --backend B        auto (default: CUDA when a GPU is usable, else CPU), cpu or cuda
  --repeat K         run the program K times (default 1), each timed
  --threads N        CPU worker threads (default 0: FJ_THREADS or all cores)
  --round-windows    round the paper's fractional windows (9.91 -> 10) instead of flooring them
  --devices LIST     CUDA: spread the runs' chunks over time across these GPUs: all, or ordinals such
                     as 0,1 (default: one GPU, FJ_CUDA_DEVICE or 0)
  --explain FILE     write the program's explanation there after the runs: its steps, kernels, where
                     each kernel came from (compiled, with its parts' times, or the disk cache), each
                     step's time in the last run, and the memory its panels took at once
  -h, --help         print this help

Alphas that use an operator this build does not support yet, or a panel DIR does not have, are left
out and listed with the reason; the others are computed. The exit status is 0 when at least one alpha
was computed and written, 2 when none could be compiled or on any error (bad file, mixed shapes or
dtypes, a failed run); outputs are renamed into place only when everything succeeded.
)USAGE";

struct Args {
    std::string data, out, explain;
    int repeat = 1;
    fj::CompileOptions compile;
    fj::ParseOptions parse;
    std::vector<int> devices;
    bool help = false;
};

Args parse_args(const std::vector<std::string>& argv) {
    Args a;
    ArgCursor c(argv, "alpha101");
    while (c.next()) {
        if (c.is("-h", "--help")) {
            a.help = true;
            return a;
        } else if (c.is("--data")) {
            a.data = c.value("a folder of .npy panels");
            if (a.data.empty()) throw UsageError("--data needs a folder, not an empty string", "alpha101");
        } else if (c.is("--out")) {
            a.out = c.value("an output folder");
            if (a.out.empty()) throw UsageError("--out needs a folder, not an empty string", "alpha101");
        } else if (c.is("--backend")) {
            a.compile.backend = parse_backend(c.value("auto, cpu or cuda"), "alpha101");
        } else if (c.is("--repeat")) {
            const std::string v = c.value("a number of runs");
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), a.repeat);
            if (ec != std::errc() || end != v.data() + v.size() || a.repeat < 1)
                throw UsageError("--repeat needs a whole number >= 1, not '" + v + "'", "alpha101");
        } else if (c.is("--threads")) {
            a.compile.threads = parse_threads(c.value("a number of threads"), "alpha101");
        } else if (c.is("--explain")) {
            a.explain = c.value("a file for the explanation");
            if (a.explain.empty()) throw UsageError("--explain needs a file, not an empty string", "alpha101");
        } else if (c.is("--round-windows")) {
            c.no_value();
            a.parse.round_windows = true;
        } else if (c.is("--devices")) {
            a.devices = parse_devices_option(c.value("all or ordinals such as 0,1"), "alpha101");
        } else {
            c.unknown();
        }
    }
    if (a.data.empty()) throw UsageError("alpha101 needs --data DIR (the folder of input .npy panels)", "alpha101");
    return a;
}

// The first line of an error message: compile errors can carry a compiler log, parse errors a caret.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// "'Ts_Rank' is not supported yet (column 8)" from a ParseError's "line 1, column 8: ..." text.
std::string parse_reason(const fj::ParseError& e) {
    std::string m = first_line(e.what());
    const std::string prefix = fmt::format("line {}, column {}: ", e.line(), e.column());
    if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size()) + fmt::format(" (column {})", e.column());
    return m;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The process's CPU time (all threads, user and system): printed next to each wall time, since the machines
// these runs are timed on are often shared.
double process_cpu_ms() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) * 1e-3; };
    return ms(u.ru_utime) + ms(u.ru_stime);
}

struct Candidate {
    std::string name;
    fj::Expr expr;
};

struct LeftOut {
    std::string name, reason;
};

// Kernels are generated at a program's first run for a dtype. A run on a few rows of stand-in data (ones;
// the panels' columns and dtype) does that here, so that the compile time printed is the compile time, the
// timed runs are runs, and a code generator's error is found while alphas can still be left out.
void generate_kernels(const fj::Program& program, const NpyHeader& shape) {
    const std::int64_t rows = std::min<std::int64_t>(shape.rows(), 8), cols = shape.cols();
    if (rows == 0 || cols == 0) return;
    const std::size_t n = static_cast<std::size_t>(rows * cols);
    std::vector<AlignedBuffer> buffers;
    auto panel = [&] {
        buffers.push_back(aligned_alloc_bytes(n * fj::dtype_size(shape.dtype)));
        void* p = buffers.back().get();
        if (shape.dtype == fj::DType::F32) std::fill_n(static_cast<float*>(p), n, 1.0f);
        else std::fill_n(static_cast<double*>(p), n, 1.0);
        return shape.dtype == fj::DType::F32 ? fj::Panel::host(static_cast<const float*>(p), rows, cols)
                                             : fj::Panel::host(static_cast<const double*>(p), rows, cols);
    };
    std::map<std::string, fj::Panel> ins, outs;
    for (const std::string& name : program.input_names()) ins[name] = panel();
    for (const std::string& name : program.output_names()) outs[name] = panel();
    program.run(ins, outs);
}

// Compiles the candidates as one program and generates its kernels. When that fails, each alpha is
// compiled alone to find the ones that cannot be (their errors go to `left_out`), and the rest are
// compiled together again (nullopt when none is left); an error that no single alpha explains is thrown.
std::optional<fj::Program> compile_all(std::vector<Candidate>& cands, std::vector<LeftOut>& left_out,
                                       const fj::CompileOptions& options, const NpyHeader& shape) {
    auto compile = [&](const std::vector<Candidate>& cs) {
        std::vector<std::pair<std::string, fj::Expr>> named;
        for (const Candidate& c : cs) named.emplace_back(c.name, c.expr);
        fj::Program program = fj::compile(named, options);
        generate_kernels(program, shape);
        return program;
    };
    std::string joint_error;
    try {
        return compile(cands);
    } catch (const fj::Error& e) {
        joint_error = e.what();  // found out below, alpha by alpha
    }
    std::vector<Candidate> ok;
    std::vector<LeftOut> failed;
    for (Candidate& c : cands) {
        try {
            (void)compile({c});
            ok.push_back(std::move(c));
        } catch (const fj::Error& e) {
            failed.push_back({c.name, first_line(e.what())});
        }
    }
    // Every alpha failing as the whole program did is not about the alphas (no CUDA driver, ...): say that once.
    const bool same_everywhere = std::all_of(failed.begin(), failed.end(), [&](const LeftOut& l) {
        return l.reason == first_line(joint_error);
    });
    if (ok.empty() && same_everywhere) throw fj::BackendError(joint_error);
    left_out.insert(left_out.end(), failed.begin(), failed.end());
    cands = std::move(ok);
    if (cands.empty()) return std::nullopt;
    return compile(cands);
}

}  // namespace

int cmd_alpha101(const std::vector<std::string>& argv) {
    using clock = std::chrono::steady_clock;
    const Args a = parse_args(argv);
    if (a.help) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    ::setenv("FJ_QUIET", "1", 0);  // the backend is printed below; no separate fallback note

    std::error_code ec;
    if (!fs::is_directory(a.data, ec))
        throw fj::InputError(
            fmt::format("--data '{}': not a folder (it should hold open.npy, close.npy, ...)", a.data));

    // Formulas: those that parse are candidates; the others are left out with the parser's reason.
    std::vector<Candidate> cands;
    std::vector<LeftOut> left_out;
    for (const fj::alpha101::Alpha& alpha : fj::alpha101::all()) {
        try {
            cands.push_back({std::string(alpha.name), fj::parse(alpha.formula, a.parse)});
        } catch (const fj::ExprError& e) {
            const auto* pe = dynamic_cast<const fj::ParseError*>(&e);
            left_out.push_back({std::string(alpha.name), pe ? parse_reason(*pe) : first_line(e.what())});
        }
    }

    // Panels: an alpha whose panel is not in the folder is left out; the panels that are there must agree.
    std::map<std::string, std::string> path_of;  // input name -> file, for the inputs present
    std::set<std::string> missing;
    {
        std::vector<Candidate> kept;
        for (Candidate& c : cands) {
            std::vector<std::string> absent;
            for (const std::string& in : fj::input_names({c.expr})) {
                if (path_of.count(in)) continue;
                const fs::path p = fs::path(a.data) / (in + ".npy");
                if (!missing.count(in) && fs::exists(p, ec)) {
                    path_of[in] = p.string();
                } else {
                    missing.insert(in);
                    absent.push_back(in + ".npy");
                }
            }
            if (absent.empty()) {
                kept.push_back(std::move(c));
            } else {
                std::string list;
                for (const std::string& f : absent) list += (list.empty() ? "" : ", ") + f;
                left_out.push_back({c.name, fmt::format("needs {}, not in {}", list, a.data)});
            }
        }
        cands = std::move(kept);
    }
    // Only the panels of the alphas kept are read.
    std::set<std::string> used;
    for (const Candidate& c : cands)
        for (const std::string& in : fj::input_names({c.expr})) used.insert(in);
    std::map<std::string, NpyHeader> headers;
    const NpyHeader* ref = nullptr;
    std::string ref_name;
    for (const std::string& in : used) {
        auto [it, fresh] = headers.emplace(in, read_npy_header(path_of.at(in)));
        if (!ref) {
            ref = &it->second;
            ref_name = in;
            continue;
        }
        const NpyHeader& hh = it->second;
        if (hh.shape != ref->shape || hh.dtype != ref->dtype)
            throw fj::InputError(fmt::format(
                "{} is {} {} but {} is {} {}: all input panels must have the same shape and dtype",
                path_of.at(in), fj::dtype_name(hh.dtype), hh.shape_str(), path_of.at(ref_name),
                fj::dtype_name(ref->dtype), ref->shape_str()));
    }

    std::sort(left_out.begin(), left_out.end(), [](const LeftOut& x, const LeftOut& y) { return x.name < y.name; });
    auto print_left_out = [&] {
        if (left_out.empty()) return;
        std::printf("left out %zu of 101 alphas:\n", left_out.size());
        for (const LeftOut& l : left_out) std::printf("  %s: %s\n", l.name.c_str(), l.reason.c_str());
    };
    if (cands.empty()) {
        print_left_out();
        std::fflush(stdout);
        throw fj::InputError(
            fmt::format("none of the 101 alphas can be computed from {} (the reasons are listed above)", a.data));
    }
    {
        std::string inputs;
        for (const std::string& in : used) inputs += " " + in;
        std::printf("data %s: %s %s; panels:%s\n", a.data.c_str(), std::string(fj::dtype_name(ref->dtype)).c_str(),
                    ref->shape_str().c_str(), inputs.c_str());
    }

    // Output files, before the work: a bad --out fails now. Left-out alphas' files are removed with them.
    std::map<std::string, std::unique_ptr<PendingFile>> pending;
    if (!a.out.empty()) {
        fs::create_directories(a.out, ec);
        if (ec || !fs::is_directory(a.out))
            throw fj::InputError(fmt::format("--out '{}': cannot create the folder{}", a.out,
                                             ec ? ": " + ec.message() : std::string()));
        for (const Candidate& c : cands)
            pending[c.name] = std::make_unique<PendingFile>((fs::path(a.out) / (c.name + ".npy")).string());
    }

    // Compile.
    const auto t_compile0 = clock::now();
    const double cpu_compile0 = process_cpu_ms();
    const std::size_t left_before = left_out.size();
    const std::optional<fj::Program> compiled = compile_all(cands, left_out, a.compile, *ref);
    const double t_compile = ms_since(t_compile0), cpu_compile = process_cpu_ms() - cpu_compile0;
    if (left_out.size() != left_before)
        std::sort(left_out.begin(), left_out.end(), [](const LeftOut& x, const LeftOut& y) { return x.name < y.name; });
    for (const LeftOut& l : left_out) pending.erase(l.name);
    print_left_out();
    std::fflush(stdout);
    if (!compiled) throw fj::ExprError("none of the 101 alphas could be compiled (the reasons are listed above)");
    const fj::Program& program = *compiled;
    std::string names;
    for (const Candidate& c : cands) names += " " + c.name;
    std::printf("compiled %zu alpha%s as one program (backend %s) in %.1f ms, CPU time %.1f ms:%s\n", cands.size(),
                cands.size() == 1 ? "" : "s", backend_name(program.backend()), t_compile, cpu_compile, names.c_str());
    std::fflush(stdout);

    // Read the panels the program reads.
    std::map<std::string, NpyArray> arrays;
    std::map<std::string, fj::Panel> in_panels;
    for (const std::string& in : program.input_names()) {
        NpyArray arr = read_npy(path_of.at(in));
        if (arr.header.shape != ref->shape || arr.header.dtype != ref->dtype)
            throw fj::InputError(fmt::format("{}: the file changed while factorjit was reading it", path_of.at(in)));
        in_panels[in] = arr.panel();
        arrays.emplace(in, std::move(arr));
    }

    // Run K times into the same outputs.
    std::map<std::string, AlignedBuffer> out_data;
    std::map<std::string, fj::Panel> out_panels;
    for (const Candidate& c : cands) {
        AlignedBuffer buf = aligned_alloc_bytes(std::max<std::size_t>(ref->data_bytes, 1));
        fj::Panel p;
        p.data = buf.get();
        p.rows = ref->rows();
        p.cols = ref->cols();
        p.ld = p.cols;
        p.dtype = ref->dtype;
        p.memory = fj::Memory::Host;
        out_panels[c.name] = p;
        out_data.emplace(c.name, std::move(buf));
    }
    const bool empty = ref->rows() == 0 || ref->cols() == 0;
    fj::RunOptions run_options;
    run_options.devices = a.devices;
    if (!a.devices.empty()) std::printf("runs on %s\n", describe_devices(a.devices).c_str());
    for (int k = 0; k < a.repeat; ++k) {
        const auto t0 = clock::now();
        const double cpu0 = process_cpu_ms();
        if (!empty) program.run(in_panels, out_panels, run_options);
        const double wall = ms_since(t0);
        std::printf("run %d of %d: %.3f ms (CPU time %.3f ms)\n", k + 1, a.repeat, wall, process_cpu_ms() - cpu0);
        std::fflush(stdout);
    }

    if (!a.explain.empty()) {
        const std::string text = program.explain();
        std::FILE* f = std::fopen(a.explain.c_str(), "w");
        bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
        if (f && std::fclose(f) != 0) ok = false;
        if (!ok) throw fj::InputError(fmt::format("--explain '{}': cannot write the file", a.explain));
    }

    // Write everything, then rename everything.
    if (!pending.empty()) {
        for (auto& [name, file] : pending) file->write_npy(ref->shape, ref->dtype, out_data.at(name).get());
        for (auto& [name, file] : pending) file->commit();
        std::printf("wrote %zu files to %s\n", pending.size(), a.out.c_str());
    }
    return 0;
}
