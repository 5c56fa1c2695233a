// `factorjit eval`: evaluate factor expressions on .npy panels, write .npy results.
//
// The order of work is chosen so that every mistake a user can make is reported before anything
// expensive happens and before any output is touched:
//   1. command line, expressions (parse), input names, duplicate outputs, sizes (--max-memory);
//   2. the headers of the inputs the expressions use (shape, dtype, truncation), without their data;
//   3. a temporary file next to every output (an unwritable directory fails here);
//   4. compile; plan the chunks (a --max-memory too small for one chunk fails here);
//   5. stream: reading, computing and writing chunks over time overlapped (cli/eval_stream.hpp), each
//      output's rows written in place into its temporary file;
//   6. rename every temporary file into place.
// Any failure before step 6's renames leaves every output path as it was (the temporary files are
// removed by PendingFile's destructor). Memory: C-order inputs are memory-mapped and read in place
// (Fortran-order ones are transposed chunk by chunk into buffers); outputs exist only as the buffers of
// the chunks in flight, so --max-memory bounds what the panels take and panels larger than RAM work.
#include <algorithm>
#include <charconv>
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
#include "cli/device_option.hpp"
#include "cli/eval_stream.hpp"
#include "cli/npy.hpp"
#include "cli/progress_bar.hpp"
#include "codegen/plan.hpp"
#include "factorjit.hpp"
#include "runtime/chunk_plan.hpp"
#include "runtime/thread_pool.hpp"

namespace {

using namespace fj::cli;

const char* const kUsage = R"USAGE(usage: factorjit eval -e EXPR -i NAME=FILE.npy [-i ...] -o OUT.npy [-e EXPR -o OUT.npy ...]
                      [--backend auto|cpu|cuda] [--threads N] [--round-windows]
                      [--max-memory SIZE] [--max-device-memory SIZE] [--chunk-rows N]
                      [--devices all|0,1,...] [-v]

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
  --max-memory SIZE      host memory the panels' chunks may take at once, e.g. 256M or 4G (K, M, G, T:
                         powers of 1024; default: no limit). Inputs are mapped, outputs streamed, so
                         panels larger than RAM work; the compiler's own memory is not counted
  --max-device-memory SIZE   GPU memory a run may take (CUDA; default: what is free), on each GPU
  --devices LIST         CUDA: the GPUs to spread each chunk's rows over: all, or ordinals such as 0,1
                         (default: one GPU, FJ_CUDA_DEVICE or 0); each GPU its own streams and budget
  --chunk-rows N         output rows per chunk (default: chosen from the shape, the memory limit and
                         the expected rates of reading, computing and writing)
  -v, --verbose          print the backend, the chunks, timings and bandwidth to stderr
  -h, --help             print this help

All inputs the expressions use must have the same shape and dtype; outputs get that shape and dtype.
The work goes in chunks over time (each re-reading the rows its windows need before it), so reading,
computing and writing overlap; results equal an unchunked run within the accuracy contract. A progress
bar is shown on a terminal for runs longer than a second. Outputs are written into temporary files and
renamed into place only when everything succeeded. Errors exit with status 2.
)USAGE";

struct InputArg {
    std::string name, path;
};

struct EvalArgs {
    std::vector<std::string> exprs, outputs;
    std::vector<InputArg> inputs;
    fj::CompileOptions compile;
    fj::ParseOptions parse;
    std::int64_t max_memory = 0, max_device_memory = 0, chunk_rows = 0;
    std::vector<int> devices;
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
        } else if (c.is("--max-memory")) {
            a.max_memory = parse_byte_size(c.value("a size such as 256M"), "--max-memory", "eval");
        } else if (c.is("--max-device-memory")) {
            a.max_device_memory = parse_byte_size(c.value("a size such as 8G"), "--max-device-memory", "eval");
        } else if (c.is("--devices")) {
            a.devices = parse_devices_option(c.value("all or ordinals such as 0,1"), "eval");
        } else if (c.is("--chunk-rows")) {
            const std::string v = c.value("a number of rows");
            long long n = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            if (ec != std::errc() || end != v.data() + v.size() || n < 1)
                throw UsageError("--chunk-rows needs a whole number of rows >= 1, not '" + v + "'", "eval");
            a.chunk_rows = n;
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

    // Inputs, opened for chunked reading (mapped). The header is read again: the file may have changed.
    std::vector<std::unique_ptr<NpyReader>> readers;
    std::vector<StreamInput> stream_in;
    if (!shape_only) {
        for (std::size_t k = 0; k < used.size(); ++k) {
            readers.push_back(std::make_unique<NpyReader>(used[k]->path));
            const NpyHeader& h = readers.back()->header();
            if (h.shape != headers[k].shape || h.dtype != headers[k].dtype)
                throw fj::InputError(fmt::format("{}: the file changed while factorjit was reading it", used[k]->path));
            stream_in.push_back({used[k]->name, readers.back().get()});
        }
    }

    // Chunks over time: memory from --max-memory; sizes between the budget's largest and the halo's
    // smallest from rates assumed for a local disk's page cache and one CPU socket (ChunkRates).
    const std::int64_t rows = ref.rows(), cols = ref.cols();
    const fj::codegen::Plan plan = fj::codegen::make_plan(named, ref.dtype);
    constexpr int kInFlight = 3;  // one chunk read ahead, one computing, one being written
    fj::rt::ChunkRequest req;
    req.rows = rows;
    req.cols = cols;
    req.dtype = ref.dtype;
    req.budget_bytes = a.max_memory;
    req.in_flight = kInFlight;
    req.chunk_rows = a.chunk_rows;
    req.rates = {2e9, 1.5e9, 1e9, 1e-3};
    if (program.backend() == fj::Backend::Cpu) {
        // The CPU backend's threads take a chunk's time tiles (2048 rows for short halos) as their tasks:
        // chunks of whole tiles, at least one per thread, keep every thread busy within a chunk.
        req.row_quantum = std::max<std::int64_t>(2048, 8 * plan.halo);
        req.min_rows = req.row_quantum * fj::rt::thread_count(a.compile.threads);
    }
    fj::rt::ChunkPlan chunks;
    try {
        chunks = fj::rt::plan_chunks(plan, req);
    } catch (const fj::RunError& e) {
        throw fj::RunError(fmt::format("--max-memory {}: {}", a.max_memory, e.what()));
    }

    // Stream into the temporary files, then rename them all.
    std::vector<StreamOutput> stream_out;
    for (std::size_t k = 0; k < pending.size(); ++k) {
        pending[k]->begin_npy(ref.shape, ref.dtype);
        stream_out.push_back({named[k].first, pending[k].get()});
    }
    fj::RunOptions run_options;
    run_options.max_device_bytes = a.max_device_memory;
    run_options.devices = a.devices;
    ProgressBar bar;
    const StreamStats stats =
        run_stream(program, stream_in, stream_out, rows, cols, ref.dtype, chunks, kInFlight, run_options,
                   [&](const fj::RunProgress& p) { bar.update(p); });
    bar.finish();
    const auto t_commit0 = clock::now();
    for (auto& p : pending) p->finish_npy();
    for (auto& p : pending) p->commit();
    const double t_commit = ms_since(t_commit0);

    if (a.verbose) {
        const double wall = std::max(stats.wall_s, 1e-9);
        std::fprintf(stderr,
                     "factorjit: backend %s%s; %s %s; parse+compile %.1f ms; %s\n"
                     "factorjit: streamed in %.1f ms: read %s (busy %.1f ms), run busy %.1f ms, wrote %s (busy %.1f "
                     "ms), close+rename %.1f ms; %s/s moved (%zu output%s)\n",
                     backend_name(program.backend()),
                     a.devices.empty() ? "" : (" on " + describe_devices(a.devices)).c_str(), std::string(fj::dtype_name(ref.dtype)).c_str(),
                     ref.shape_str().c_str(), t_compile, chunks.describe().c_str(), stats.wall_s * 1e3,
                     human_bytes(static_cast<double>(stats.bytes_read)).c_str(), stats.read_s * 1e3,
                     stats.compute_s * 1e3, human_bytes(static_cast<double>(stats.bytes_written)).c_str(),
                     stats.write_s * 1e3, t_commit,
                     human_bytes(static_cast<double>(stats.bytes_read + stats.bytes_written) / wall).c_str(),
                     pending.size(), pending.size() == 1 ? "" : "s");
    }
    return 0;
}
