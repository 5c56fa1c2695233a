// The smallest useful tool on the installed package: a 20-day rolling correlation of two series, checked
// against a direct two-pass computation of its last row. Exits with 1 when they differ.
#include <factorjit.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
    const std::int64_t rows = 250, cols = 3;
    std::vector<double> a(rows * cols), b(rows * cols), c(rows * cols);
    for (std::int64_t t = 0; t < rows; ++t)
        for (std::int64_t j = 0; j < cols; ++j) {
            a[t * cols + j] = 100 + std::sin(0.1 * t + j) + 0.01 * t;
            b[t * cols + j] = 50 + std::cos(0.07 * t * (j + 1));
        }
    try {
        fj::CompileOptions options;
        options.backend = fj::Backend::Cpu;
        fj::Program p = fj::compile({{"c", fj::parse("correlation(A, B, 20)")}}, options);
        p.run({{"A", fj::Panel::host(a.data(), rows, cols)}, {"B", fj::Panel::host(b.data(), rows, cols)}},
              {{"c", fj::Panel::host(c.data(), rows, cols)}});
    } catch (const fj::Error& e) {
        std::fprintf(stderr, "factorjit: %s\n", e.what());
        return 1;
    }
    for (std::int64_t j = 0; j < cols; ++j) {
        double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
        for (std::int64_t t = rows - 20; t < rows; ++t) ma += a[t * cols + j] / 20, mb += b[t * cols + j] / 20;
        for (std::int64_t t = rows - 20; t < rows; ++t) {
            const double x = a[t * cols + j] - ma, y = b[t * cols + j] - mb;
            sab += x * y, saa += x * x, sbb += y * y;
        }
        const double want = sab / std::sqrt(saa * sbb), got = c[(rows - 1) * cols + j];
        std::printf("column %lld: corr %.12f (direct %.12f)\n", static_cast<long long>(j), got, want);
        if (!(std::fabs(got - want) <= 1e-9)) return 1;
    }
    return 0;
}
