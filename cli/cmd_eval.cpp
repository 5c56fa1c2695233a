// `factorjit eval`: evaluate factor expressions on .npy panels, write .npy results.
//
// The order of work is chosen so that every mistake a user can make is reported before anything
// expensive happens and before any output is touched:
//   1. command line, expressions (parse), input names, duplicate outputs;
//   2. the headers of the inputs the expressions use (shape, dtype, truncation), without their data;
//   3. a temporary file next to every output (an unwritable directory fails here);
//   4. compile; read the inputs' data; run;
//   5. write every temporary file, then rename them all into place.
// Any failure before step 5's renames leaves every output path as it was (the temporary files are
// removed by PendingFile's destructor). Memory: the inputs the expressions use plus the outputs, each
// allocated once; nothing is copied.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "cli/npy.hpp"
#include "factorjit.hpp"

namespace {

using namespace fj::cli;

const char* const kUsage = R"USAGE(usage: factorjit eval -e EXPR -i NAME=FILE.npy [-i ...] -o OUT.npy [-e EXPR -o OUT.npy ...]
                      [--backend auto|cpu|cuda] [--threads N] [--round-windows] [-v]

Evaluates factor expressions on panels stored as .npy files and writes each result as a .npy file.

  -e, --expr EXPR        a factor expression, e.g. "corr(window(close, 20), window(volume, 20))";
                         repeat for several outputs: they are compiled and run together
  -o, --output FILE      where the result of the k-th -e goes (as many -o as -e)
  -i, --input NAME=FILE  the panel an expression calls NAME: a 2-D (T x N, rows = time) or 1-D (one
                         column) float32 or float64 .npy, C or Fortran order; inputs no expression
                         uses are ignored
  --backend B            auto (default: CUDA when a GPU is usable, else CPU), cpu or cuda
  --threads N            CPU worker threads (default 0: FJ_THREADS or all cores)
  --round-windows        round non-integer window lengths (9.91 -> 10) instead of flooring them
  -v, --verbose          print the backend and timings to stderr
  -h, --help             print this help

All inputs the expressions use must have the same shape and dtype; outputs get that shape and dtype.
Outputs are written to temporary files and renamed into place only when everything succeeded.
Errors exit with status 2.
)USAGE";

struct InputArg {
    std::string name, path;
};

struct EvalArgs {
    std::vector<std::string> exprs, outputs;
    std::vector<InputArg> inputs;
    fj::CompileOptions compile;
    fj::ParseOptions parse;
    bool verbose = false;
    bool help = false;
};

EvalArgs parse_args(const std::vector<std::string>& argv) {
    EvalArgs a;
    ArgCursor c(argv, "eval");
    while (c.next()) {
        if (c.is("-h", "--help")) {
            a.help = true;
            return a;
        } else if (c.is("-e", "--expr")) {
            a.exprs.push_back(c.value("an expression"));
        } else if (c.is("-o", "--output")) {
            std::string out = c.value("an output file name");
            if (out.empty()) throw UsageError("-o needs a file name, not an empty string", "eval");
            a.outputs.push_back(std::move(out));
        } else if (c.is("-i", "--input")) {
            const std::string v = c.value("NAME=FILE.npy");
            const auto eq = v.find('=');
            if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
                throw UsageError(fmt::format("-i '{}': expected NAME=FILE.npy", v), "eval");
            InputArg in{v.substr(0, eq), v.substr(eq + 1)};
            for (const InputArg& other : a.inputs)
                if (other.name == in.name)
                    throw UsageError(fmt::format("input '{}' is given twice (-i {}={} and -i {}={})", in.name,
                                                 other.name, other.path, in.name, in.path),
                                     "eval");
            a.inputs.push_back(std::move(in));
        } else if (c.is("--backend")) {
            a.compile.backend = parse_backend(c.value("auto, cpu or cuda"), "eval");
        } else if (c.is("--threads")) {
            a.compile.threads = parse_threads(c.value("a number of threads"), "eval");
        } else if (c.is("--round-windows")) {
            c.no_value();
            a.parse.round_windows = true;
        } else if (c.is("-v", "--verbose")) {
            c.no_value();
            a.verbose = true;
        } else {
            c.unknown();
        }
    }
    if (a.exprs.empty()) throw UsageError("eval needs at least one -e EXPR", "eval");
    if (a.exprs.size() != a.outputs.size())
        throw UsageError(fmt::format("{} expression{} (-e) but {} output file{} (-o): the k-th -o receives "
                                     "the result of the k-th -e",
                                     a.exprs.size(), a.exprs.size() == 1 ? "" : "s", a.outputs.size(),
                                     a.outputs.size() == 1 ? "" : "s"),
                         "eval");
    // Two -o naming the same file would race for one path.
    std::map<std::string, std::string> seen;  // canonical path -> as given
    for (const std::string& out : a.outputs) {
        std::error_code ec;
        const std::filesystem::path abs = std::filesystem::absolute(out, ec);
        std::string key = ec ? out : std::filesystem::weakly_canonical(abs, ec).string();
        if (ec) key = out;
        if (auto [it, fresh] = seen.emplace(key, out); !fresh)
            throw UsageError(fmt::format("the output file '{}' is given twice (-o {} and -o {})", out,
                                         it->second, out),
                             "eval");
    }
    return a;
}

std::string describe(const InputArg& in, const NpyHeader& h) {
    return fmt::format("'{}' ({}: {} {})", in.name, in.path, fj::dtype_name(h.dtype), h.shape_str());
}

std::string human_bytes(double b) {
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000 && u < 4) {
        b /= 1000;
        ++u;
    }
    return fmt::format("{:.3g} {}", b, units[u]);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int cmd_eval(const std::vector<std::string>& argv) {
    using clock = std::chrono::steady_clock;
    const EvalArgs a = parse_args(argv);
    if (a.help) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    const auto t_start = clock::now();
    // The library notes on stderr when `auto` falls back to the CPU; eval prints nothing on success
    // unless asked to (-v reports the backend, and then the note says why the GPU was not used).
    if (!a.verbose) ::setenv("FJ_QUIET", "1", 0);

    // Expressions.
    std::vector<fj::Expr> exprs;
    for (const std::string& text : a.exprs) exprs.push_back(parse_expr_arg(text, a.parse));

    // Inputs the expressions read, in the order the command line gives them.
    std::vector<const InputArg*> used;
    {
        const std::vector<std::string> names = fj::input_names(exprs);
        for (const std::string& name : names) {
            const auto it = std::find_if(a.inputs.begin(), a.inputs.end(),
                                         [&](const InputArg& in) { return in.name == name; });
            if (it != a.inputs.end()) continue;
            std::string where;
            for (std::size_t k = 0; k < exprs.size(); ++k) {
                const auto own = fj::input_names({exprs[k]});
                if (std::find(own.begin(), own.end(), name) != own.end()) {
                    where = a.exprs[k];
                    break;
                }
            }
            std::vector<std::string> known;
            for (const InputArg& in : a.inputs) known.push_back(in.name);
            throw fj::InputError(fmt::format(
                "unknown input '{}' in -e '{}': no -i {}=FILE.npy gives it; {}", name, where, name,
                known.empty() ? std::string("no inputs were given (-i NAME=FILE.npy)")
                              : fmt::format("known inputs: {}", fmt::join(known, ", "))));
        }
        for (const InputArg& in : a.inputs)
            if (std::find(names.begin(), names.end(), in.name) != names.end()) used.push_back(&in);
    }
    // Expressions that read no input at all (constants) still need a shape: take the first input's.
    const bool shape_only = used.empty();
    if (shape_only) {
        if (a.inputs.empty())
            throw fj::InputError(
                "the expressions read no input, so the output shape is unknown: give an -i NAME=FILE.npy "
                "whose shape the outputs should have");
        used.push_back(&a.inputs.front());
    }

    // Headers: shapes and dtypes agree before any data is read.
    std::vector<NpyHeader> headers;
    for (const InputArg* in : used) headers.push_back(read_npy_header(in->path));
    const NpyHeader& ref = headers.front();
    for (std::size_t k = 1; k < used.size(); ++k) {
        const NpyHeader& h = headers[k];
        if (h.shape != ref.shape)
            throw fj::InputError(fmt::format("inputs {} and {} have different shapes; all inputs the "
                                             "expressions use must have the same shape and dtype",
                                             describe(*used[0], ref), describe(*used[k], h)));
        if (h.dtype != ref.dtype)
            throw fj::InputError(fmt::format("inputs {} and {} have different dtypes; all inputs the "
                                             "expressions use must have the same shape and dtype",
                                             describe(*used[0], ref), describe(*used[k], h)));
    }

    // Temporary output files: a bad output path fails now, before the work.
    std::vector<std::unique_ptr<PendingFile>> pending;
    for (const std::string& out : a.outputs) pending.push_back(std::make_unique<PendingFile>(out));

    // Compile.
    std::vector<std::pair<std::string, fj::Expr>> named;
    for (std::size_t k = 0; k < exprs.size(); ++k) named.emplace_back("out" + std::to_string(k), exprs[k]);
    const fj::Program program = fj::compile(named, a.compile);
    const double t_compile = ms_since(t_start);

    // Read.
    const auto t_read0 = clock::now();
    std::map<std::string, NpyArray> arrays;
    std::map<std::string, fj::Panel> in_panels;
    double in_bytes = 0;
    if (!shape_only) {
        for (std::size_t k = 0; k < used.size(); ++k) {
            NpyArray arr = read_npy(used[k]->path);
            if (arr.header.shape != headers[k].shape || arr.header.dtype != headers[k].dtype)
                throw fj::InputError(fmt::format("{}: the file changed while factorjit was reading it",
                                                 used[k]->path));
            in_bytes += static_cast<double>(arr.header.data_bytes);
            in_panels[used[k]->name] = arr.panel();
            arrays.emplace(used[k]->name, std::move(arr));
        }
    }
    const double t_read = ms_since(t_read0);

    // Run.
    const auto t_run0 = clock::now();
    std::vector<AlignedBuffer> out_data;
    std::map<std::string, fj::Panel> out_panels;
    for (std::size_t k = 0; k < exprs.size(); ++k) {
        out_data.push_back(aligned_alloc_bytes(ref.data_bytes));
        fj::Panel p;
        p.data = out_data.back().get();
        p.rows = ref.rows();
        p.cols = ref.cols();
        p.ld = p.cols;
        p.dtype = ref.dtype;
        p.memory = fj::Memory::Host;
        out_panels[named[k].first] = p;
    }
    if (ref.rows() > 0 && ref.cols() > 0) program.run(in_panels, out_panels);
    const double t_run = ms_since(t_run0);

    // Write everything, then rename everything.
    const auto t_write0 = clock::now();
    for (std::size_t k = 0; k < pending.size(); ++k)
        pending[k]->write_npy(ref.shape, ref.dtype, out_data[k].get());
    for (auto& p : pending) p->commit();
    const double t_write = ms_since(t_write0);

    if (a.verbose)
        std::fprintf(stderr,
                     "factorjit: backend %s; %s %s; parse+compile %.1f ms, read %.1f ms (%s), run %.1f ms, "
                     "write %.1f ms (%zu output%s)\n",
                     backend_name(program.backend()), std::string(fj::dtype_name(ref.dtype)).c_str(),
                     ref.shape_str().c_str(), t_compile, t_read, human_bytes(in_bytes).c_str(), t_run, t_write,
                     pending.size(), pending.size() == 1 ? "" : "s");
    return 0;
}
