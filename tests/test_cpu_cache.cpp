// The CPU backend's disk cache of compiled kernels (runtime/cpu/compile.cpp, runtime/kernel_cache.hpp): a
// second process links the object files the first one compiled and computes the same bits; damaged files are
// never linked (they fail the checks, are compiled again and replaced). Through the command line, since the
// disk cache is read once per process.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A C-order float64 .npy file of rows x cols.
void write_f64_npy(const fs::path& p, std::int64_t rows, std::int64_t cols, const std::vector<double>& v) {
    std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
    while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
    dict += '\n';
    std::ofstream f(p, std::ios::binary);
    f.write("\x93NUMPY\x01\x00", 8);
    const auto len = static_cast<std::uint16_t>(dict.size());
    f.put(static_cast<char>(len & 0xff));
    f.put(static_cast<char>(len >> 8));
    f.write(dict.data(), static_cast<std::streamsize>(dict.size()));
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
}

int run(const fs::path& dir, const std::string& args) {
    const std::string cmd = "cd '" + dir.string() + "' && FJ_CACHE_DIR='" + (dir / "cache").string() + "' '" +
                            FJ_CLI_PATH + "' " + args + " >stdout.txt 2>stderr.txt";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<fs::path> entries(const fs::path& cache) {
    std::vector<fs::path> out;
    if (fs::exists(cache))
        for (const auto& e : fs::directory_iterator(cache))
            if (e.path().filename().string().rfind("cpu-", 0) == 0) out.push_back(e.path());
    return out;
}

}  // namespace

TEST_CASE("cpu disk cache: a new process links the kernels compiled before, and recompiles damaged entries") {
    const fs::path dir = fs::path(FJ_TEST_TMP) / "cpu_cache";
    fs::remove_all(dir);
    fs::create_directories(dir);
    constexpr std::int64_t rows = 300, cols = 13;
    std::mt19937_64 rng(3);
    std::normal_distribution<double> n01;
    std::vector<double> a(rows * cols), b(rows * cols);
    for (std::size_t i = 0; i < a.size(); ++i) {
        a[i] = 100 + n01(rng);
        b[i] = 50 + n01(rng);
    }
    write_f64_npy(dir / "A.npy", rows, cols, a);
    write_f64_npy(dir / "B.npy", rows, cols, b);
    const std::string eval = "eval --backend cpu -i A=A.npy -i B=B.npy -e 'corr(window(A, 10), window(B, 10))' -o ";

    REQUIRE(run(dir, eval + "c1.npy") == 0);
    INFO("stderr: " << slurp(dir / "stderr.txt"));
    const std::vector<fs::path> files = entries(dir / "cache");
    REQUIRE(!files.empty());
    const std::string first = slurp(dir / "c1.npy");
    REQUIRE(!first.empty());

    // Read from the disk cache: the same bits.
    REQUIRE(run(dir, eval + "c2.npy") == 0);
    CHECK(slurp(dir / "c2.npy") == first);

    // Damaged entries (one byte of the object changed, or cut short): compiled again, the same bits.
    for (std::size_t i = 0; i < files.size(); ++i) {
        std::string bytes = slurp(files[i]);
        if (i % 2 == 0) bytes[bytes.size() / 2] ^= 0x5a;
        else bytes.resize(bytes.size() / 2);
        std::ofstream(files[i], std::ios::binary | std::ios::trunc) << bytes;
    }
    REQUIRE(run(dir, eval + "c3.npy") == 0);
    CHECK(slurp(dir / "c3.npy") == first);
    REQUIRE(run(dir, eval + "c4.npy") == 0);  // (the replaced entries read back)
    CHECK(slurp(dir / "c4.npy") == first);
}
