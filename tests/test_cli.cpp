// The `factorjit` command line, run as a separate process on .npy files written here.
//
// The .npy writer and reader below are deliberately independent of cli/npy.cpp, so that a bug there
// cannot hide itself. Every eval result is compared with a direct fj::compile / Program::run of the
// same expression on the same data (same backend: the CPU), element by element, NaN-aware.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "alphas/alpha101.hpp"
#include "factorjit.hpp"

namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------
// Scratch directories and running the binary.

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::path(FJ_TEST_TMP) / ("cli_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'') q += "'\\''";
        else q += c;
    }
    return q + "'";
}

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

struct CliResult {
    int rc = -1;
    std::string out, err;
};

// Runs the CLI with `args` in `dir` (the working directory), capturing stdout and stderr.
CliResult run_cli(const fs::path& dir, const std::vector<std::string>& args) {
    std::string cmd = "cd " + quote(dir.string()) + " && " + quote(FJ_CLI_PATH);
    for (const auto& a : args) cmd += " " + quote(a);
    cmd += " >" + quote((dir / "stdout.txt").string()) + " 2>" + quote((dir / "stderr.txt").string());
    const int status = std::system(cmd.c_str());
    CliResult r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(dir / "stdout.txt");
    r.err = slurp(dir / "stderr.txt");
    fs::remove(dir / "stdout.txt");
    fs::remove(dir / "stderr.txt");
    return r;
}

// ---------------------------------------------------------------------------------------------------
// A tiny .npy writer and reader, independent of cli/npy.cpp.

void write_npy_raw(const fs::path& p, const std::string& descr, bool fortran, const std::string& shape,
                   const void* data, std::size_t nbytes, int major = 1) {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
    const std::size_t prefix = major == 1 ? 10 : 12;
    while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
    dict += '\n';
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    const std::uint32_t len = static_cast<std::uint32_t>(dict.size());
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>((len >> 8) & 0xff);
    if (major != 1) {
        out += static_cast<char>((len >> 16) & 0xff);
        out += static_cast<char>((len >> 24) & 0xff);
    }
    out += dict;
    out.append(static_cast<const char*>(data), nbytes);
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    REQUIRE(f.good());
}

struct WriteOpts {
    bool fortran = false;
    int major = 1;
    bool one_d = false;  // write shape (rows,); cols must be 1
};

// `rowmajor` holds rows x cols values; written in C or Fortran order as asked.
template <class T>
void write_panel(const fs::path& p, const std::vector<T>& rowmajor, std::int64_t rows, std::int64_t cols,
                 WriteOpts o = {}) {
    std::vector<T> file = rowmajor;
    if (o.fortran)
        for (std::int64_t t = 0; t < rows; ++t)
            for (std::int64_t j = 0; j < cols; ++j) file[j * rows + t] = rowmajor[t * cols + j];
    const std::string shape = o.one_d ? "(" + std::to_string(rows) + ",)"
                                      : "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
    write_npy_raw(p, sizeof(T) == 4 ? "<f4" : "<f8", o.fortran, shape, file.data(), file.size() * sizeof(T),
                  o.major);
}

struct ReadBack {
    std::string descr;
    bool fortran = true;
    std::vector<std::int64_t> shape;
    std::string data;  // raw bytes

    template <class T>
    std::vector<T> values() const {
        std::vector<T> v(data.size() / sizeof(T));
        std::memcpy(v.data(), data.data(), v.size() * sizeof(T));
        return v;
    }
};

ReadBack read_back(const fs::path& p) {
    const std::string s = slurp(p);
    ReadBack r;
    REQUIRE(s.size() >= 10);
    REQUIRE(s.compare(0, 6, std::string("\x93NUMPY", 6)) == 0);
    CHECK(s[6] == 1);  // the CLI writes version 1.0
    const std::size_t len = static_cast<unsigned char>(s[8]) | (static_cast<unsigned char>(s[9]) << 8);
    CHECK((10 + len) % 64 == 0);  // numpy aligns the data to 64 bytes
    const std::string dict = s.substr(10, len);
    REQUIRE(dict.size() == len);
    const auto d = dict.find("'descr': '");
    REQUIRE(d != std::string::npos);
    r.descr = dict.substr(d + 10, dict.find('\'', d + 10) - (d + 10));
    r.fortran = dict.find("'fortran_order': False") == std::string::npos;
    const auto sh = dict.find("'shape': (");
    REQUIRE(sh != std::string::npos);
    std::string dims = dict.substr(sh + 10, dict.find(')', sh) - (sh + 10));
    std::replace(dims.begin(), dims.end(), ',', ' ');
    std::istringstream in(dims);
    for (std::int64_t x; in >> x;) r.shape.push_back(x);
    r.data = s.substr(10 + len);
    return r;
}

// ---------------------------------------------------------------------------------------------------
// Data and the direct reference.

// Price-like random walks with a few NaNs, deterministic.
template <class T>
std::vector<T> make_panel(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    std::vector<T> v(static_cast<std::size_t>(rows * cols));
    std::uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    auto next = [&] {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
    };
    for (std::int64_t j = 0; j < cols; ++j) {
        double x = 100 + 10 * next();
        for (std::int64_t t = 0; t < rows; ++t) {
            x += next() - 0.5;
            v[t * cols + j] = static_cast<T>(x);
        }
    }
    for (std::size_t k = 3; k < v.size(); k += 37) v[k] = static_cast<T>(NAN);
    return v;
}

template <class T>
std::vector<T> direct(const std::string& expr, const std::map<std::string, const std::vector<T>*>& inputs,
                      std::int64_t rows, std::int64_t cols, fj::ParseOptions popts = {}) {
    fj::CompileOptions opts;
    opts.backend = fj::Backend::Cpu;
    const fj::Program prog = fj::compile({{"out0", fj::parse(expr, popts)}}, opts);
    std::map<std::string, fj::Panel> in;
    for (const auto& [name, v] : inputs) in[name] = fj::Panel::host(v->data(), rows, cols);
    std::vector<T> out(static_cast<std::size_t>(rows * cols), static_cast<T>(-12345));
    prog.run(in, {{"out0", fj::Panel::host(out.data(), rows, cols)}});
    return out;
}

// Element-wise equality with NaN == NaN; also insists the result is not all NaN (a vacuous pass).
template <class T>
void check_same(const std::vector<T>& got, const std::vector<T>& want) {
    REQUIRE(got.size() == want.size());
    std::size_t valid = 0, bad = 0, first_bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
        if (!both_nan && !(got[i] == want[i])) {
            if (bad++ == 0) first_bad = i;
        }
        if (!std::isnan(want[i])) ++valid;
    }
    INFO("first mismatch at " << first_bad << ": got " << got[first_bad] << ", want " << want[first_bad]);
    CHECK(bad == 0);
    CHECK(valid > got.size() / 2);
}

// Results of two float32 runs that may differ only in where running sums were re-seeded (chunks): equal NaN
// placement, values within twice float32's rounding of each other's magnitude.
void check_close_f32(const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    std::size_t bad = 0, valid = 0, first_bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const bool ok = std::isnan(want[i]) ? std::isnan(got[i])
                                            : std::fabs(got[i] - want[i]) <= 2e-5 * std::max(1.0f, std::fabs(want[i]));
        if (!ok && bad++ == 0) first_bad = i;
        valid += !std::isnan(want[i]);
    }
    INFO("first mismatch at " << first_bad << ": got " << got[first_bad] << ", want " << want[first_bad]);
    CHECK(bad == 0);
    CHECK(valid > got.size() / 2);
}

constexpr std::int64_t kRows = 64, kCols = 7;
const char* const kCorr = "corr(window(A, 5), window(B, 5))";
const char* const kMix = "mean(window(A, 3)) - delta(B, 1) * 2";

// a.npy, b.npy (float32, 64 x 7, C order) in dir; returns their data.
struct AB {
    std::vector<float> a, b;
};
AB write_ab(const fs::path& dir) {
    AB d{make_panel<float>(kRows, kCols, 1), make_panel<float>(kRows, kCols, 2)};
    write_panel(dir / "a.npy", d.a, kRows, kCols);
    write_panel(dir / "b.npy", d.b, kRows, kCols);
    return d;
}

// Hidden temporary files left next to the outputs.
std::vector<std::string> leftovers(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (!n.empty() && n[0] == '.') names.push_back(n);
    }
    return names;
}

// A failing command: exit status 2, `factorjit: error:` and every `needles` on stderr, no output file
// created, and an existing output file left untouched. `out` is the output path the args name.
void expect_failure(const fs::path& dir, const std::vector<std::string>& args,
                    const std::vector<std::string>& needles, const fs::path& out) {
    fs::remove(out);
    CliResult r = run_cli(dir, args);
    INFO("stderr: " << r.err);
    CHECK(r.rc == 2);
    CHECK(r.err.find("factorjit: error:") != std::string::npos);
    for (const auto& n : needles) {
        INFO("expected on stderr: " << n);
        CHECK(r.err.find(n) != std::string::npos);
    }
    CHECK(r.out.empty());
    CHECK_FALSE(fs::exists(out));

    if (fs::exists(out.parent_path()) && fs::is_directory(out.parent_path())) {
        {
            std::ofstream f(out, std::ios::binary);
            f << "keep me";
        }
        r = run_cli(dir, args);
        CHECK(r.rc == 2);
        CHECK(slurp(out) == "keep me");
        fs::remove(out);
        CHECK(leftovers(out.parent_path()).empty());
    }
    CHECK(leftovers(dir).empty());
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("eval matches a direct compile and run (float32)") {
    const fs::path dir = scratch("basic");
    const AB d = write_ab(dir);
    for (const char* expr : {kCorr, kMix}) {
        INFO(expr);
        const CliResult r =
            run_cli(dir, {"eval", "-e", expr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "--backend", "cpu"});
        INFO("stderr: " << r.err);
        REQUIRE(r.rc == 0);
        CHECK(r.out.empty());
        CHECK(r.err.empty());  // nothing printed on success without -v
        const ReadBack o = read_back(dir / "out.npy");
        CHECK(o.descr == "<f4");
        CHECK_FALSE(o.fortran);
        CHECK(o.shape == std::vector<std::int64_t>{kRows, kCols});
        check_same(o.values<float>(), direct<float>(expr, {{"A", &d.a}, {"B", &d.b}}, kRows, kCols));
        CHECK(leftovers(dir).empty());
    }
}

TEST_CASE("options in any order, long forms, an existing output is replaced") {
    const fs::path dir = scratch("order");
    const AB d = write_ab(dir);
    {
        std::ofstream f(dir / "out.npy");
        f << "old contents";
    }
    const CliResult r = run_cli(dir, {"eval", "--backend=cpu", "-o", "out.npy", "--input", "B=b.npy", "--threads",
                                      "1", "--expr", kCorr, "-i", "A=a.npy"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    check_same(read_back(dir / "out.npy").values<float>(),
               direct<float>(kCorr, {{"A", &d.a}, {"B", &d.b}}, kRows, kCols));
}

TEST_CASE("two -e/-o pairs: the k-th -o gets the k-th -e") {
    const fs::path dir = scratch("pairs");
    const AB d = write_ab(dir);
    const CliResult r = run_cli(dir, {"eval", "-i", "A=a.npy", "-i", "B=b.npy", "-e", kCorr, "-e", kMix, "-o",
                                      "corr.npy", "-o", "mix.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    check_same(read_back(dir / "corr.npy").values<float>(),
               direct<float>(kCorr, {{"A", &d.a}, {"B", &d.b}}, kRows, kCols));
    check_same(read_back(dir / "mix.npy").values<float>(),
               direct<float>(kMix, {{"A", &d.a}, {"B", &d.b}}, kRows, kCols));
}

TEST_CASE("an expression starting with '-' is an expression, not an option") {
    const fs::path dir = scratch("negexpr");
    const AB d = write_ab(dir);
    const CliResult r = run_cli(dir, {"eval", "-e", "-A", "-i", "A=a.npy", "-o", "out.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    check_same(read_back(dir / "out.npy").values<float>(), direct<float>("-A", {{"A", &d.a}}, kRows, kCols));
}

TEST_CASE("inputs no expression uses are ignored") {
    const fs::path dir = scratch("unused");
    const AB d = write_ab(dir);
    // Z has another shape and dtype, Y does not exist: neither matters, neither is read.
    write_panel(dir / "z.npy", make_panel<double>(10, 3, 9), 10, 3);
    const CliResult r = run_cli(dir, {"eval", "-e", kCorr, "-i", "Z=z.npy", "-i", "A=a.npy", "-i", "Y=missing.npy",
                                      "-i", "B=b.npy", "-o", "out.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    const ReadBack o = read_back(dir / "out.npy");
    CHECK(o.descr == "<f4");
    CHECK(o.shape == std::vector<std::int64_t>{kRows, kCols});
    check_same(o.values<float>(), direct<float>(kCorr, {{"A", &d.a}, {"B", &d.b}}, kRows, kCols));
}

TEST_CASE("a 1-D input is one column; the output is 1-D too") {
    const fs::path dir = scratch("oned");
    const std::int64_t rows = 200;
    const auto a = make_panel<float>(rows, 1, 3), b = make_panel<float>(rows, 1, 4);
    write_panel(dir / "a.npy", a, rows, 1, {.one_d = true});
    write_panel(dir / "b.npy", b, rows, 1, {.one_d = true});
    const CliResult r = run_cli(
        dir, {"eval", "-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    const ReadBack o = read_back(dir / "out.npy");
    CHECK(o.shape == std::vector<std::int64_t>{rows});
    check_same(o.values<float>(), direct<float>(kCorr, {{"A", &a}, {"B", &b}}, rows, 1));
}

TEST_CASE("a 1-D input streamed in chunks of 37 rows, and an empty panel under a tiny budget") {
    const fs::path dir = scratch("oned_chunks");
    const std::int64_t rows = 1000;
    const auto a = make_panel<float>(rows, 1, 5), b = make_panel<float>(rows, 1, 6);
    write_panel(dir / "a.npy", a, rows, 1, {.one_d = true});
    write_panel(dir / "b.npy", b, rows, 1, {.one_d = true});
    const CliResult r = run_cli(dir, {"eval", "-v", "-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy",
                                      "--backend", "cpu", "--chunk-rows", "37"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("28 chunks over time of 37 rows (+4 halo)") != std::string::npos);
    const ReadBack o = read_back(dir / "out.npy");
    CHECK(o.shape == std::vector<std::int64_t>{rows});
    check_close_f32(o.values<float>(), direct<float>(kCorr, {{"A", &a}, {"B", &b}}, rows, 1));
    write_panel(dir / "e.npy", std::vector<float>{}, 0, kCols);
    const CliResult e = run_cli(dir, {"eval", "-e", "mean(window(A, 3))", "-i", "A=e.npy", "-o", "eo.npy", "--backend",
                                      "cpu", "--max-memory", "1K"});
    INFO("stderr: " << e.err);
    REQUIRE(e.rc == 0);
    CHECK(read_back(dir / "eo.npy").shape == std::vector<std::int64_t>{0, kCols});
}

TEST_CASE("Fortran-order input gives the same result as C order") {
    const fs::path dir = scratch("fortran");
    const AB d = write_ab(dir);
    write_panel(dir / "af.npy", d.a, kRows, kCols, {.fortran = true});
    write_panel(dir / "bf.npy", d.b, kRows, kCols, {.fortran = true});
    auto c = run_cli(dir, {"eval", "-e", kMix, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "c.npy", "--backend", "cpu"});
    auto f = run_cli(dir, {"eval", "-e", kMix, "-i", "A=af.npy", "-i", "B=bf.npy", "-o", "f.npy", "--backend", "cpu"});
    INFO("stderr: " << c.err << f.err);
    REQUIRE(c.rc == 0);
    REQUIRE(f.rc == 0);
    const ReadBack rc = read_back(dir / "c.npy"), rf = read_back(dir / "f.npy");
    CHECK_FALSE(rf.fortran);  // outputs are C order
    CHECK(rf.shape == rc.shape);
    check_same(rf.values<float>(), rc.values<float>());
    check_same(rf.values<float>(), direct<float>(kMix, {{"A", &d.a}, {"B", &d.b}}, kRows, kCols));
}

TEST_CASE("Fortran order: many columns and very long columns") {
    // Shapes that make the reader transpose in several chunks, and columns longer than one chunk.
    const fs::path dir = scratch("fortran_big");
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{40, 30011}, {2'100'003, 3}}) {
        INFO(rows << " x " << cols);
        std::vector<double> a(static_cast<std::size_t>(rows * cols));
        for (std::size_t k = 0; k < a.size(); ++k) a[k] = static_cast<double>(k % 1000003) * 0.5;
        write_panel(dir / "a.npy", a, rows, cols, {.fortran = true});
        const CliResult r =
            run_cli(dir, {"eval", "-e", "A * 2 + 1", "-i", "A=a.npy", "-o", "out.npy", "--backend", "cpu"});
        INFO("stderr: " << r.err);
        REQUIRE(r.rc == 0);
        const ReadBack o = read_back(dir / "out.npy");
        CHECK(o.shape == std::vector<std::int64_t>{rows, cols});
        const auto got = o.values<double>();
        REQUIRE(got.size() == a.size());
        std::size_t bad = 0;
        for (std::size_t k = 0; k < a.size(); ++k) bad += got[k] != a[k] * 2 + 1;
        CHECK(bad == 0);
    }
    fs::remove_all(dir);
}

TEST_CASE("version 2.0 and 3.0 headers read like 1.0") {
    const fs::path dir = scratch("v2");
    const AB d = write_ab(dir);
    write_panel(dir / "a2.npy", d.a, kRows, kCols, {.major = 2});
    write_panel(dir / "b3.npy", d.b, kRows, kCols, {.major = 3});
    const CliResult r = run_cli(
        dir, {"eval", "-e", kCorr, "-i", "A=a2.npy", "-i", "B=b3.npy", "-o", "out.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    check_same(read_back(dir / "out.npy").values<float>(),
               direct<float>(kCorr, {{"A", &d.a}, {"B", &d.b}}, kRows, kCols));
}

TEST_CASE("float64 in, float64 out") {
    const fs::path dir = scratch("f64");
    const auto a = make_panel<double>(kRows, kCols, 5), b = make_panel<double>(kRows, kCols, 6);
    write_panel(dir / "a.npy", a, kRows, kCols);
    write_panel(dir / "b.npy", b, kRows, kCols, {.fortran = true});
    const CliResult r = run_cli(
        dir, {"eval", "-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    const ReadBack o = read_back(dir / "out.npy");
    CHECK(o.descr == "<f8");
    CHECK(o.shape == std::vector<std::int64_t>{kRows, kCols});
    check_same(o.values<double>(), direct<double>(kCorr, {{"A", &a}, {"B", &b}}, kRows, kCols));
}

TEST_CASE("--round-windows rounds non-integer windows, the default floors them") {
    const fs::path dir = scratch("round");
    const AB d = write_ab(dir);
    const std::string expr = "mean(window(A, 2.7))";
    auto r = run_cli(dir, {"eval", "-e", expr, "-i", "A=a.npy", "-o", "round.npy", "--round-windows", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    r = run_cli(dir, {"eval", "-e", expr, "-i", "A=a.npy", "-o", "floor.npy", "--backend", "cpu"});
    REQUIRE(r.rc == 0);
    check_same(read_back(dir / "round.npy").values<float>(),
               direct<float>("mean(window(A, 3))", {{"A", &d.a}}, kRows, kCols));
    check_same(read_back(dir / "floor.npy").values<float>(),
               direct<float>("mean(window(A, 2))", {{"A", &d.a}}, kRows, kCols));
}

TEST_CASE("the default backend prints nothing and agrees with the CPU") {
    // auto picks CUDA where a GPU is usable: equal within float32 rounding, NaN placement identical.
    const fs::path dir = scratch("auto");
    const AB d = write_ab(dir);
    const CliResult r = run_cli(dir, {"eval", "-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.empty());
    CHECK(r.out.empty());
    const auto got = read_back(dir / "out.npy").values<float>();
    const auto want = direct<float>(kCorr, {{"A", &d.a}, {"B", &d.b}}, kRows, kCols);
    REQUIRE(got.size() == want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        bad += std::isnan(want[i]) ? !std::isnan(got[i]) : !(std::fabs(got[i] - want[i]) <= 1e-5f);
    CHECK(bad == 0);
}

TEST_CASE("outputs get the mode of an ordinary new file") {
    const fs::path dir = scratch("mode");
    write_ab(dir);
    const CliResult r = run_cli(dir, {"eval", "-e", "A", "-i", "A=a.npy", "-o", "out.npy", "--backend", "cpu"});
    REQUIRE(r.rc == 0);
    const mode_t mask = ::umask(0);
    ::umask(mask);
    const auto perms = fs::status(dir / "out.npy").permissions();
    CHECK(static_cast<unsigned>(perms) == (0666u & ~static_cast<unsigned>(mask)));
}

TEST_CASE("an expression that reads no input takes the shape of the first -i") {
    const fs::path dir = scratch("const");
    write_ab(dir);
    const CliResult r = run_cli(dir, {"eval", "-e", "1 + 2", "-i", "A=a.npy", "-o", "out.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    const ReadBack o = read_back(dir / "out.npy");
    CHECK(o.shape == std::vector<std::int64_t>{kRows, kCols});
    const auto v = o.values<float>();
    CHECK(std::count(v.begin(), v.end(), 3.0f) == kRows * kCols);

    const CliResult none = run_cli(dir, {"eval", "-e", "1 + 2", "-o", "none.npy"});
    CHECK(none.rc == 2);
    CHECK(none.err.find("shape") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "none.npy"));
}

TEST_CASE("an empty panel (0 rows) gives an empty output") {
    const fs::path dir = scratch("empty");
    write_panel(dir / "a.npy", std::vector<float>{}, 0, kCols);
    const CliResult r =
        run_cli(dir, {"eval", "-e", "mean(window(A, 3))", "-i", "A=a.npy", "-o", "out.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    const ReadBack o = read_back(dir / "out.npy");
    CHECK(o.shape == std::vector<std::int64_t>{0, kCols});
    CHECK(o.data.empty());
}

TEST_CASE("-v reports the backend and timings on stderr") {
    const fs::path dir = scratch("verbose");
    write_ab(dir);
    const CliResult r = run_cli(
        dir, {"eval", "-v", "-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "--backend", "cpu"});
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.find("backend cpu") != std::string::npos);
    CHECK(r.err.find(" ms") != std::string::npos);
    CHECK(r.out.empty());
}

TEST_CASE("usage: --help, no arguments, unknown command, compile without -e") {
    const fs::path dir = scratch("usage");
    CliResult r = run_cli(dir, {"--help"});
    CHECK(r.rc == 0);
    CHECK(r.out.find("usage") != std::string::npos);
    CHECK(r.out.find("eval") != std::string::npos);

    r = run_cli(dir, {"eval", "--help"});
    CHECK(r.rc == 0);
    CHECK(r.out.find("-i") != std::string::npos);
    CHECK(r.out.find("--backend") != std::string::npos);

    r = run_cli(dir, {"explain", "--help"});
    CHECK(r.rc == 0);
    CHECK(r.out.find("usage") != std::string::npos);

    r = run_cli(dir, {});
    CHECK(r.rc == 2);
    CHECK(r.err.find("usage") != std::string::npos);

    r = run_cli(dir, {"frobnicate"});
    CHECK(r.rc == 2);
    CHECK(r.err.find("factorjit: error: unknown command 'frobnicate'") != std::string::npos);

    r = run_cli(dir, {"compile"});
    CHECK(r.rc == 2);
    CHECK(r.err.find("factorjit: error:") != std::string::npos);
}

TEST_CASE("explain prints steps, halos and kernels") {
    const fs::path dir = scratch("explain");
    const CliResult r = run_cli(dir, {"explain", "-e", kCorr, "-e", "mean(window(corr(window(A, 5), window(B, 5)), 4))",
                                      "--backend", "cpu"});
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.rc == 0);
    const bool mentions = r.out.find("halo") != std::string::npos || r.out.find("fj_") != std::string::npos;
    CHECK(mentions);

    const CliResult bad = run_cli(dir, {"explain", "-e", "corr(window(A, 5), window(B, 6))"});
    CHECK(bad.rc == 2);
    CHECK(bad.err.find("factorjit: error: bad expression") != std::string::npos);
}

TEST_CASE("failures: exit 2, a helpful message, no output written") {
    const fs::path dir = scratch("fail");
    write_ab(dir);
    const std::string out = (dir / "out.npy").string();
    auto eval = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = {"eval", "--backend", "cpu"};
        args.insert(args.end(), extra.begin(), extra.end());
        return args;
    };

    SUBCASE("unknown input name") {
        expect_failure(dir, eval({"-e", "A + C", "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy"}),
                       {"unknown input 'C'", "known inputs: A, B"}, out);
    }
    SUBCASE("shape mismatch") {
        write_panel(dir / "w.npy", make_panel<float>(kRows, 6, 7), kRows, 6);
        expect_failure(dir, eval({"-e", "A + W", "-i", "A=a.npy", "-i", "W=w.npy", "-o", "out.npy"}),
                       {"'A'", "a.npy", "(64, 7)", "'W'", "w.npy", "(64, 6)", "shape"}, out);
    }
    SUBCASE("1-D against 2-D is a shape mismatch") {
        write_panel(dir / "s.npy", make_panel<float>(kRows, 1, 7), kRows, 1, {.one_d = true});
        expect_failure(dir, eval({"-e", "A + S", "-i", "A=a.npy", "-i", "S=s.npy", "-o", "out.npy"}),
                       {"(64, 7)", "(64,)"}, out);
    }
    SUBCASE("dtype mismatch") {
        write_panel(dir / "d.npy", make_panel<double>(kRows, kCols, 7), kRows, kCols);
        expect_failure(dir, eval({"-e", "A + D", "-i", "A=a.npy", "-i", "D=d.npy", "-o", "out.npy"}),
                       {"'A'", "'D'", "float32", "float64", "d.npy"}, out);
    }
    SUBCASE("missing file") {
        expect_failure(dir, eval({"-e", kCorr, "-i", "A=a.npy", "-i", "B=nope.npy", "-o", "out.npy"}),
                       {"nope.npy", "No such file"}, out);
    }
    SUBCASE("a directory as input") {
        fs::create_directories(dir / "adir");
        expect_failure(dir, eval({"-e", "A", "-i", "A=adir", "-o", "out.npy"}), {"adir"}, out);
    }
    SUBCASE("not a .npy file") {
        std::ofstream(dir / "text.npy") << "hello, world\n";
        expect_failure(dir, eval({"-e", "A", "-i", "A=text.npy", "-o", "out.npy"}), {"text.npy", "not a .npy"}, out);
    }
    SUBCASE("empty file") {
        std::ofstream(dir / "empty.npy").close();
        expect_failure(dir, eval({"-e", "A", "-i", "A=empty.npy", "-o", "out.npy"}), {"empty.npy"}, out);
    }
    SUBCASE("truncated data") {
        const auto a = make_panel<float>(kRows, kCols, 1);
        write_npy_raw(dir / "t.npy", "<f4", false, "(64, 7)", a.data(), a.size() * 4 - 4);
        expect_failure(dir, eval({"-e", kCorr, "-i", "A=t.npy", "-i", "B=b.npy", "-o", "out.npy"}),
                       {"t.npy", "truncated"}, out);
    }
    SUBCASE("truncated header") {
        const std::string head("\x93NUMPY\x01\x00\x76\x00{'descr'", 17);
        std::ofstream(dir / "h.npy", std::ios::binary) << head;
        expect_failure(dir, eval({"-e", "A", "-i", "A=h.npy", "-o", "out.npy"}), {"h.npy"}, out);
    }
    SUBCASE("3-D array") {
        const std::vector<float> v(2 * 3 * 4, 1.0f);
        write_npy_raw(dir / "c.npy", "<f4", false, "(2, 3, 4)", v.data(), v.size() * 4);
        expect_failure(dir, eval({"-e", "A", "-i", "A=c.npy", "-o", "out.npy"}), {"c.npy", "3-D", "(2, 3, 4)"}, out);
    }
    SUBCASE("0-D array") {
        const float v = 1.0f;
        write_npy_raw(dir / "z.npy", "<f4", false, "()", &v, 4);
        expect_failure(dir, eval({"-e", "A", "-i", "A=z.npy", "-o", "out.npy"}), {"z.npy", "0-D"}, out);
    }
    SUBCASE("int64 dtype") {
        const std::vector<std::int64_t> v(kRows * kCols, 3);
        write_npy_raw(dir / "i.npy", "<i8", false, "(64, 7)", v.data(), v.size() * 8);
        expect_failure(dir, eval({"-e", "A", "-i", "A=i.npy", "-o", "out.npy"}), {"i.npy", "'<i8'", "int64"}, out);
    }
    SUBCASE("big-endian float32") {
        const std::vector<float> v(kRows * kCols, 3);
        write_npy_raw(dir / "be.npy", ">f4", false, "(64, 7)", v.data(), v.size() * 4);
        expect_failure(dir, eval({"-e", "A", "-i", "A=be.npy", "-o", "out.npy"}), {"be.npy", "big-endian"}, out);
    }
    SUBCASE("object dtype") {
        const std::string pickle(64, '\0');
        write_npy_raw(dir / "o.npy", "|O", false, "(2, 2)", pickle.data(), pickle.size());
        expect_failure(dir, eval({"-e", "A", "-i", "A=o.npy", "-o", "out.npy"}), {"o.npy", "object"}, out);
    }
    SUBCASE("syntax error in an expression shows the caret") {
        expect_failure(dir, eval({"-e", "corr(window(A, 5), window(B, 5)", "-i", "A=a.npy", "-i", "B=b.npy", "-o",
                                  "out.npy"}),
                       {"bad expression", "corr(window(A, 5), window(B, 5)", "^"}, out);
    }
    SUBCASE("invalid expression (window < 1)") {
        expect_failure(dir, eval({"-e", "mean(window(A, 0))", "-i", "A=a.npy", "-o", "out.npy"}),
                       {"bad expression", "window"}, out);
    }
    SUBCASE("-e and -o counts differ") {
        expect_failure(dir, eval({"-e", kCorr, "-e", kMix, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy"}),
                       {"2 expressions", "1 output file"}, out);
    }
    SUBCASE("missing option value") {
        expect_failure(dir, eval({"-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o"}), {"-o", "needs a value"},
                       out);
    }
    SUBCASE("missing -i value form") {
        expect_failure(dir, eval({"-e", kCorr, "-i", "a.npy", "-o", "out.npy"}), {"NAME=FILE"}, out);
    }
    SUBCASE("unknown option") {
        expect_failure(dir, eval({"-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "--frobnicate"}),
                       {"unknown option '--frobnicate'"}, out);
    }
    SUBCASE("stray argument") {
        expect_failure(dir, eval({"-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "extra"}),
                       {"unexpected argument 'extra'"}, out);
    }
    SUBCASE("bad --backend and --threads") {
        expect_failure(dir, eval({"-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "--backend", "gpu"}),
                       {"auto, cpu or cuda"}, out);
        expect_failure(dir, eval({"-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "--threads", "x"}),
                       {"--threads"}, out);
    }
    SUBCASE("the same input name twice") {
        expect_failure(dir, eval({"-e", "A", "-i", "A=a.npy", "-i", "A=b.npy", "-o", "out.npy"}), {"'A'", "twice"}, out);
    }
    SUBCASE("the same output twice") {
        expect_failure(dir, eval({"-e", "A", "-e", "-A", "-i", "A=a.npy", "-o", "out.npy", "-o", "./out.npy"}),
                       {"twice"}, out);
    }
    SUBCASE("no -e") {
        expect_failure(dir, eval({"-i", "A=a.npy", "-o", "out.npy"}), {"-e"}, out);
    }
    SUBCASE("output directory missing: nothing at all is written") {
        // The first output could be written, the second cannot: neither may appear.
        expect_failure(dir,
                       eval({"-e", kCorr, "-e", kMix, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "-o",
                             "no/such/dir/mix.npy"}),
                       {"no/such/dir/mix.npy"}, out);
    }
    SUBCASE("output is a directory") {
        fs::create_directories(dir / "odir");
        expect_failure(dir, eval({"-e", kCorr, "-e", kMix, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "out.npy", "-o",
                                  "odir"}),
                       {"odir", "directory"}, out);
    }
}

// FJ_FAIL_AT for the commands run in this scope (runtime/fault_inject.hpp).
struct FailAt {
    explicit FailAt(const std::string& v) { ::setenv("FJ_FAIL_AT", v.c_str(), 1); }
    ~FailAt() { ::unsetenv("FJ_FAIL_AT"); }
};

TEST_CASE("streaming: chunks over time match an unchunked run within the contract; Fortran order chunked alike") {
    const fs::path dir = scratch("stream");
    constexpr std::int64_t rows = 3000;
    const std::vector<float> a = make_panel<float>(rows, kCols, 21), b = make_panel<float>(rows, kCols, 22);
    write_panel(dir / "a.npy", a, rows, kCols);
    write_panel(dir / "b.npy", b, rows, kCols);
    write_panel(dir / "af.npy", a, rows, kCols, {.fortran = true});
    write_panel(dir / "bf.npy", b, rows, kCols, {.fortran = true});
    for (const char* expr : {kCorr, kMix}) {
        INFO(expr);
        const auto want = direct<float>(expr, {{"A", &a}, {"B", &b}}, rows, kCols);
        for (const std::vector<std::string>& extra :
             {std::vector<std::string>{}, {"--chunk-rows", "7"}, {"--chunk-rows", "250"}, {"--max-memory", "64K"}}) {
            INFO((extra.empty() ? std::string("default") : extra[0] + " " + extra[1]));
            std::vector<std::string> args = {"eval", "-v", "-e", expr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "c.npy",
                                             "--backend", "cpu"};
            args.insert(args.end(), extra.begin(), extra.end());
            const CliResult c = run_cli(dir, args);
            INFO("stderr: " << c.err);
            REQUIRE(c.rc == 0);
            const ReadBack rc = read_back(dir / "c.npy");
            CHECK(rc.shape == std::vector<std::int64_t>{rows, kCols});
            check_close_f32(rc.values<float>(), want);
            if (!extra.empty() && extra[1] == "250") CHECK(c.err.find("12 chunks over time of 250 rows") != std::string::npos);
            // Fortran order: transposed chunk by chunk, the same chunks, the same bits.
            args[5] = "A=af.npy";
            args[7] = "B=bf.npy";
            args[9] = "f.npy";
            const CliResult f = run_cli(dir, args);
            INFO("stderr: " << f.err);
            REQUIRE(f.rc == 0);
            check_same(read_back(dir / "f.npy").values<float>(), rc.values<float>());
            CHECK(leftovers(dir).empty());
        }
    }
    // Element-wise: no halo, chunking cannot move a bit.
    const CliResult e = run_cli(dir, {"eval", "-e", "A * 2 + 1", "-i", "A=a.npy", "-o", "e.npy", "--backend", "cpu",
                                      "--chunk-rows", "13"});
    REQUIRE(e.rc == 0);
    const auto got = read_back(dir / "e.npy").values<float>();
    for (std::size_t i = 0; i < got.size(); ++i)
        REQUIRE((std::isnan(a[i]) ? std::isnan(got[i]) : got[i] == a[i] * 2 + 1));
    // -v reports what moved.
    const CliResult v = run_cli(dir, {"eval", "-v", "-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy", "-o", "c.npy",
                                      "--backend", "cpu", "--chunk-rows", "1000"});
    INFO("stderr: " << v.err);
    CHECK(v.err.find("3 chunks over time of 1000 rows (+4 halo)") != std::string::npos);
    CHECK(v.err.find("read 168 KB") != std::string::npos);  // 2 x (3000 + 2 x 4 halo rows) x 7 x 4 bytes
    CHECK(v.err.find("wrote 84 KB") != std::string::npos);
    CHECK(v.err.find("/s moved") != std::string::npos);
}

TEST_CASE("--max-memory and --max-device-memory take sizes with units; bad or too small values exit 2") {
    const fs::path dir = scratch("budget");
    write_ab(dir);
    const fs::path out = dir / "out.npy";
    auto eval = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = {"eval", "--backend", "cpu", "-e", kCorr, "-i", "A=a.npy", "-i", "B=b.npy",
                                         "-o", "out.npy"};
        args.insert(args.end(), extra.begin(), extra.end());
        return args;
    };
    for (const char* bad : {"0", "-5M", "12Q", "abc", "1.5", "", "8GG", "1e9"}) {
        INFO("--max-memory '" << bad << "'");
        expect_failure(dir, eval({"--max-memory", bad}), {"--max-memory needs a size", "256M"}, out);
    }
    expect_failure(dir, eval({"--max-device-memory", "lots"}), {"--max-device-memory needs a size"}, out);
    expect_failure(dir, eval({"--chunk-rows", "0"}), {"--chunk-rows"}, out);
    // Too small for one row and its halo of 4 rows of 4 panels: refused before anything is written.
    expect_failure(dir, eval({"--max-memory", "100"}), {"--max-memory 100", "too small", "halo"}, out);
    for (const char* good : {"64K", "1.5M", "2GiB", "512kb", "1000000"}) {
        INFO("--max-memory " << good);
        const CliResult r = run_cli(dir, eval({"--max-memory", good, "--max-device-memory", "8G"}));
        INFO("stderr: " << r.err);
        CHECK(r.rc == 0);
    }
}

TEST_CASE("streaming failures part-way (allocation, read, run, write): exit 2 naming the chunk, no output written") {
    const fs::path dir = scratch("stream_fail");
    constexpr std::int64_t rows = 3000;
    write_panel(dir / "a.npy", make_panel<float>(rows, kCols, 31), rows, kCols);
    write_panel(dir / "b.npy", make_panel<float>(rows, kCols, 32), rows, kCols);
    write_panel(dir / "af.npy", make_panel<float>(rows, kCols, 31), rows, kCols, {.fortran = true});
    const fs::path out = dir / "out.npy";
    const std::vector<std::string> args = {"eval", "--backend", "cpu", "-e", kCorr, "-e", kMix, "-i", "A=a.npy", "-i",
                                           "B=b.npy", "-o", "out.npy", "-o", "mix.npy", "--chunk-rows", "250"};
    {
        const FailAt f("alloc:2");
        expect_failure(dir, args, {"out of memory"}, out);
    }
    {
        const FailAt f("read:5");  // the third chunk's first input (two reads a chunk)
        std::vector<std::string> fortran = args;
        fortran[8] = "A=af.npy";
        expect_failure(dir, fortran, {"reading of chunk 3 of 12 (rows 500-750)", "injected read failure"}, out);
    }
    {
        const FailAt f("chunk:4");
        expect_failure(dir, args, {"computing of chunk 4 of 12 (rows 750-1000)", "injected chunk failure"}, out);
    }
    {
        const FailAt f("write:7");  // the fourth chunk's first output (two writes a chunk)
        expect_failure(dir, args, {"writing of chunk 4 of 12 (rows 750-1000)", "out.npy", "injected write failure"}, out);
    }
    CHECK_FALSE(fs::exists(dir / "mix.npy"));
    // Disarmed: the same command works.
    const CliResult r = run_cli(dir, args);
    INFO("stderr: " << r.err);
    CHECK(r.rc == 0);
    CHECK(leftovers(dir).empty());
}

}  // TEST_SUITE("cli")

namespace {

// ---------------------------------------------------------------------------------------------------
// factorjit alpha101

// The eleven panels of docs/alpha101.md in `dir`, rows x cols of T: prices from make_panel (around 100),
// volumes around 1e6, returns, cap and group ids. `skip` names panels not written.
template <class T>
std::map<std::string, std::vector<T>> write_alpha_panels(const fs::path& dir, std::int64_t rows, std::int64_t cols,
                                                         const std::vector<std::string>& skip = {}) {
    std::map<std::string, std::vector<T>> p;
    p["close"] = make_panel<T>(rows, cols, 11);
    p["open"] = make_panel<T>(rows, cols, 12);
    std::vector<T> hi = make_panel<T>(rows, cols, 13), lo = make_panel<T>(rows, cols, 14);
    for (std::size_t i = 0; i < hi.size(); ++i) {
        hi[i] = static_cast<T>(std::max(p["close"][i], p["open"][i]) + std::fabs(static_cast<double>(hi[i]) - 100) / 10);
        lo[i] = static_cast<T>(std::min(p["close"][i], p["open"][i]) - std::fabs(static_cast<double>(lo[i]) - 100) / 10);
    }
    p["high"] = hi;
    p["low"] = lo;
    p["vwap"] = make_panel<T>(rows, cols, 15);
    std::vector<T> v = make_panel<T>(rows, cols, 16), r(v.size()), cap(v.size()), sec(v.size()), ind(v.size()), sub(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<T>(1e4 * static_cast<double>(v[i]));
        const std::size_t j = i % static_cast<std::size_t>(cols);
        r[i] = i < static_cast<std::size_t>(cols) ? static_cast<T>(NAN) : static_cast<T>(p["close"][i] / p["close"][i - cols] - 1);
        cap[i] = static_cast<T>(1e6 * static_cast<double>(p["close"][i]));
        sec[i] = static_cast<T>(j % 2);
        ind[i] = static_cast<T>(j % 3);
        sub[i] = static_cast<T>(j % 4);
    }
    p["volume"] = v;
    p["returns"] = r;
    p["cap"] = cap;
    p["sector"] = sec;
    p["industry"] = ind;
    p["subindustry"] = sub;
    for (auto it = p.begin(); it != p.end();) {
        if (std::find(skip.begin(), skip.end(), it->first) != skip.end()) {
            it = p.erase(it);
            continue;
        }
        write_panel(dir / (it->first + ".npy"), it->second, rows, cols);
        ++it;
    }
    return p;
}

// The names after "compiled N alphas ... :" on stdout, and the names of the "left out" lines.
struct Alpha101Report {
    std::vector<std::string> compiled, left_out;
};
Alpha101Report read_report(const std::string& out) {
    Alpha101Report rep;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("compiled ", 0) == 0) {
            std::istringstream names(line.substr(line.find("ms:") + 3));
            for (std::string n; names >> n;) rep.compiled.push_back(n);
        } else if (line.rfind("  alpha", 0) == 0) {
            rep.left_out.push_back(line.substr(2, 8));
        }
    }
    return rep;
}

// What the command computes: the alphas it compiled, as one program, run directly on the CPU.
template <class T>
std::map<std::string, std::vector<T>> direct_alphas(const std::vector<std::string>& names,
                                                    const std::map<std::string, std::vector<T>>& panels,
                                                    std::int64_t rows, std::int64_t cols) {
    std::vector<std::pair<std::string, fj::Expr>> program;
    for (const fj::alpha101::Alpha& a : fj::alpha101::all())
        if (std::find(names.begin(), names.end(), a.name) != names.end())
            program.emplace_back(std::string(a.name), fj::parse(a.formula));
    fj::CompileOptions opts;
    opts.backend = fj::Backend::Cpu;
    const fj::Program prog = fj::compile(program, opts);
    std::map<std::string, fj::Panel> in;
    for (const auto& [name, v] : panels) in[name] = fj::Panel::host(v.data(), rows, cols);
    std::map<std::string, std::vector<T>> out;
    std::map<std::string, fj::Panel> out_panels;
    for (const auto& [name, e] : program) out[name].assign(static_cast<std::size_t>(rows * cols), static_cast<T>(-12345));
    for (auto& [name, v] : out) out_panels[name] = fj::Panel::host(v.data(), rows, cols);
    prog.run(in, out_panels);
    return out;
}

std::vector<std::string> npy_files(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace

TEST_SUITE("cli") {

TEST_CASE("alpha101: computes every alpha it can as one program, lists the others, writes alphaNNN.npy") {
    const fs::path dir = scratch("alpha101");
    constexpr std::int64_t rows = 80, cols = 6;
    fs::create_directories(dir / "data");
    const auto panels = write_alpha_panels<double>(dir / "data", rows, cols);
    const CliResult r = run_cli(dir, {"alpha101", "--data", "data", "--out", "out", "--repeat", "2", "--backend", "cpu"});
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.err.empty());
    CHECK(r.out.find("data data: float64 (80, 6)") != std::string::npos);
    CHECK(r.out.find("as one program (backend cpu) in ") != std::string::npos);
    CHECK(r.out.find("run 1 of 2: ") != std::string::npos);
    CHECK(r.out.find("run 2 of 2: ") != std::string::npos);
    const Alpha101Report rep = read_report(r.out);
    REQUIRE(!rep.compiled.empty());
    CHECK(rep.compiled.size() + rep.left_out.size() == 101);
    CHECK(r.out.find("wrote " + std::to_string(rep.compiled.size()) + " files to out") != std::string::npos);
    // Every alpha left out says why: an operator not supported yet, with the column of the formula.
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind("  alpha", 0) == 0) {
            INFO(line);
            CHECK(line.find("is not supported yet (column ") != std::string::npos);
        }
    // Exactly the computed alphas' files, each equal to a direct run of the same program.
    std::vector<std::string> want_files;
    for (const std::string& n : rep.compiled) want_files.push_back(n + ".npy");
    std::sort(want_files.begin(), want_files.end());
    CHECK(npy_files(dir / "out") == want_files);
    const auto want = direct_alphas<double>(rep.compiled, panels, rows, cols);
    for (const std::string& n : rep.compiled) {
        INFO(n);
        const ReadBack o = read_back(dir / "out" / (n + ".npy"));
        CHECK(o.descr == "<f8");
        CHECK(o.shape == std::vector<std::int64_t>{rows, cols});
        const std::vector<double> got = o.values<double>();
        const std::vector<double>& w = want.at(n);
        REQUIRE(got.size() == w.size());
        std::size_t differ = 0;
        for (std::size_t i = 0; i < got.size(); ++i) differ += !(got[i] == w[i] || (std::isnan(got[i]) && std::isnan(w[i])));
        CHECK(differ == 0);
    }
    // alpha101 = (close - open) / ((high - low) + .001) needs no unsupported operator: always computed.
    CHECK(std::find(rep.compiled.begin(), rep.compiled.end(), "alpha101") != rep.compiled.end());

    // Without --out nothing is written; float32 in, float32 out.
    const fs::path dir32 = scratch("alpha101_f32");
    fs::create_directories(dir32 / "data");
    write_alpha_panels<float>(dir32 / "data", rows, cols);
    const CliResult r32 = run_cli(dir32, {"alpha101", "--data", "data", "--backend=cpu", "--threads", "1"});
    INFO("stdout: " << r32.out << "\nstderr: " << r32.err);
    CHECK(r32.rc == 0);
    CHECK(r32.out.find("float32 (80, 6)") != std::string::npos);
    CHECK(r32.out.find("run 1 of 1: ") != std::string::npos);
    CHECK(r32.out.find("wrote") == std::string::npos);
    CHECK(npy_files(dir32) == std::vector<std::string>{"data"});
}

TEST_CASE("alpha101: an alpha whose panel is missing is left out and says which") {
    const fs::path dir = scratch("alpha101_missing");
    fs::create_directories(dir / "data");
    write_alpha_panels<double>(dir / "data", 40, 5, {"cap", "vwap"});
    const CliResult r = run_cli(dir, {"alpha101", "--data", "data", "--backend", "cpu"});
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.rc == 0);
    // #41 reads vwap and needs no operator beyond pow: the missing panel is its reason.
    CHECK(r.out.find("  alpha041: needs vwap.npy, not in data") != std::string::npos);
    CHECK(r.out.find("compiled ") != std::string::npos);
    const Alpha101Report rep = read_report(r.out);
    CHECK(std::find(rep.compiled.begin(), rep.compiled.end(), "alpha041") == rep.compiled.end());
    CHECK(std::find(rep.left_out.begin(), rep.left_out.end(), "alpha041") != rep.left_out.end());
}

TEST_CASE("alpha101: failures exit 2 with a message and write nothing") {
    const fs::path dir = scratch("alpha101_fail");
    fs::create_directories(dir / "data");
    write_alpha_panels<double>(dir / "data", 40, 5);
    fs::create_directories(dir / "out");
    {
        std::ofstream f(dir / "out" / "alpha101.npy", std::ios::binary);
        f << "keep me";
    }
    auto fails = [&](const std::vector<std::string>& args, const std::string& needle) {
        const CliResult r = run_cli(dir, args);
        INFO("args: " << args.size() << "; stdout: " << r.out << "\nstderr: " << r.err);
        CHECK(r.rc == 2);
        CHECK(r.err.find("factorjit: error: " + needle) != std::string::npos);
        CHECK(npy_files(dir / "out") == std::vector<std::string>{"alpha101.npy"});
        CHECK(slurp(dir / "out" / "alpha101.npy") == "keep me");
    };
    // A panel of another dtype, then of another shape: named with both files.
    write_panel(dir / "data" / "volume.npy", make_panel<float>(40, 5, 3), 40, 5);
    fails({"alpha101", "--data", "data", "--out", "out", "--backend", "cpu"}, "data/");
    CHECK(run_cli(dir, {"alpha101", "--data", "data", "--out", "out"}).err.find("must have the same shape and dtype") !=
          std::string::npos);
    write_panel(dir / "data" / "volume.npy", make_panel<double>(41, 5, 3), 41, 5);
    fails({"alpha101", "--data", "data", "--out", "out", "--backend", "cpu"}, "data/");
    write_panel(dir / "data" / "volume.npy", make_panel<double>(40, 5, 3), 40, 5);
    // A file that is not a .npy.
    {
        std::ofstream f(dir / "data" / "close.npy", std::ios::binary);
        f << "not numpy";
    }
    fails({"alpha101", "--data", "data", "--out", "out", "--backend", "cpu"}, "data/close.npy");
    // No data at all, a folder that is not there, bad options.
    fs::create_directories(dir / "empty");
    fails({"alpha101", "--data", "empty", "--out", "out"}, "none of the 101 alphas can be computed from empty");
    fails({"alpha101", "--data", "nowhere", "--out", "out"}, "--data 'nowhere': not a folder");
    fails({"alpha101", "--out", "out"}, "alpha101 needs --data DIR");
    fails({"alpha101", "--data", "data", "--repeat", "0"}, "--repeat needs a whole number >= 1, not '0'");
    fails({"alpha101", "--data", "data", "--backend", "gpu"}, "--backend must be auto, cpu or cuda");
    fails({"alpha101", "--data", "data", "--frobnicate"}, "unknown option '--frobnicate'");
    CHECK(leftovers(dir / "out").empty());

    // A backend that cannot compile anything (no CUDA driver here) is one error, not 101 left-out lines.
    const CliResult cuda = run_cli(dir, {"alpha101", "--data", "data", "--out", "out", "--backend", "cuda"});
    INFO("stdout: " << cuda.out << "\nstderr: " << cuda.err);
    if (cuda.rc == 2) {
        CHECK(cuda.err.find("factorjit: error: ") == 0);
        CHECK(cuda.out.find("left out") == std::string::npos);
        CHECK(npy_files(dir / "out") == std::vector<std::string>{"alpha101.npy"});
    } else {
        CHECK(cuda.rc == 0);  // a GPU: the alphas without cross-sectional steps run there
        CHECK(cuda.out.find("(backend cuda)") != std::string::npos);
        fs::remove_all(dir / "out");
    }

    const CliResult help = run_cli(dir, {"alpha101", "--help"});
    CHECK(help.rc == 0);
    CHECK(help.out.find("usage: factorjit alpha101 --data DIR") != std::string::npos);
    CHECK(run_cli(dir, {"--help"}).out.find("alpha101") != std::string::npos);
}

TEST_CASE("factorjit bench: runs and times on the CPU, refuses bad options") {
    const fs::path dir = scratch("bench");
    const CliResult r = run_cli(dir, {"bench", "-e", "corr(window(A, 20), window(B, 20))", "-e", "rank(A)", "--rows", "300",
                                      "--cols", "70", "--backend", "cpu", "--repeat", "3"});
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("on the cpu backend") != std::string::npos);
    CHECK(r.out.find("300 x 70 float32, host panels, 0.3 MB") != std::string::npos);  // (A, B in; 2 out: 4 x 84 kB)
    CHECK(r.out.find("run 3 of 3: ") != std::string::npos);
    CHECK(r.out.find("median ") != std::string::npos);
    CHECK(r.out.find("(CPU backend: no GPU telemetry)") != std::string::npos);
    auto fails = [&](const std::vector<std::string>& args, const std::string& why) {
        const CliResult f = run_cli(dir, args);
        INFO("stderr: " << f.err);
        CHECK(f.rc == 2);
        CHECK(f.err.find(why) != std::string::npos);
    };
    fails({"bench"}, "bench needs at least one -e EXPR");
    fails({"bench", "-e", "A", "--rows", "0"}, "--rows needs a whole number >= 1, not '0'");
    fails({"bench", "-e", "A", "--dtype", "int8"}, "--dtype must be float32 or float64");
    fails({"bench", "-e", "corr(A", "--backend", "cpu"}, "bad expression");
    CHECK(run_cli(dir, {"bench", "--help"}).out.find("usage: factorjit bench -e EXPR") != std::string::npos);
}

}  // TEST_SUITE("cli")
