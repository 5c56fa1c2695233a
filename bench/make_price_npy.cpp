// Writes the demo's two correlated float32 price panels (examples/price_panels.hpp) as A.npy and B.npy,
// the data of the `factorjit eval` measurements in bench/RESULTS.md ("The stream runtime").
// Built as build/make_price_npy (every bench/*.cpp is a target), or alone: g++ -O2 -std=c++20 -I. bench/make_price_npy.cpp
// Run: make_price_npy DIR [ROWS COLS]      (default 50000 1000)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/price_panels.hpp"

namespace {

// A C-order version 1.0 header padded (with spaces and a newline) so the data starts at 64 bytes.
bool write_npy(const std::string& path, const std::vector<float>& v, long rows, long cols) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
    std::string header = std::string("\x93NUMPY\x01\x00", 8);
    std::size_t total = 10 + dict.size() + 1;
    total = (total + 63) / 64 * 64;
    dict.append(total - 10 - dict.size() - 1, ' ');
    dict += '\n';
    header += static_cast<char>(dict.size() & 0xff);
    header += static_cast<char>(dict.size() >> 8);
    header += dict;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
              std::fwrite(v.data(), sizeof(float), v.size(), f) == v.size();
    return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: make_price_npy DIR [ROWS COLS]\n");
        return 2;
    }
    const std::string dir = argv[1];
    const long rows = argc > 2 ? std::atol(argv[2]) : 50000, cols = argc > 3 ? std::atol(argv[3]) : 1000;
    std::vector<float> a, b;
    fj::examples::make_prices(rows, cols, a, b);
    if (!write_npy(dir + "/A.npy", a, rows, cols) || !write_npy(dir + "/B.npy", b, rows, cols)) {
        std::fprintf(stderr, "make_price_npy: cannot write %s/A.npy or B.npy\n", dir.c_str());
        return 1;
    }
    return 0;
}
