// What the prototypes of bench/proto (experiments, not library code) share: the error check, the data
// (the same walks as bench_gpu.cpp), a float64 reference read back column by column, and the median of
// timed launches. Header-only, for nvcc on the GPU machine.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            std::fprintf(stderr, "%s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            std::exit(1);                                                                      \
        }                                                                                      \
    } while (0)

__device__ unsigned long long mixbits(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
__device__ float gauss(unsigned long long k) {
    const unsigned long long h = mixbits(k);
    const float u1 = ((unsigned)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
    const float u2 = ((unsigned)(h & 0xffffffu) + 0.5f) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * __logf(u1)) * __cosf(6.2831853f * u2);
}
// Random walks around 100 (steps 0.1 N(0,1)), B = 0.5 A + N(0,1); one NaN in about 20,000 values of A;
// columns 5 and 6 constant over rows 1000-1999 (A, then B).
__global__ void gen(float* a, float* b, long long rows, long long cols, unsigned long long seed) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    const unsigned long long base = (seed * 0x100000001b3ULL + (unsigned long long)j) * 0x2545F4914F6CDD1DULL;
    double p = 100.0 + 5.0 * gauss(base);
    for (long long t = 0; t < rows; ++t) {
        const unsigned long long k = base + 2ULL * (unsigned long long)t * 0x9E3779B97F4A7C15ULL;
        p += 0.1 * gauss(k);
        const bool hole = (mixbits(k + 7) % 20000) == 0;
        const bool flat = t >= 1000 && t < 2000;
        a[t * cols + j] = hole ? __int_as_float(0x7fc00000) : (j == 5 && flat) ? 100.0f : (float)p;
        b[t * cols + j] = (j == 6 && flat) ? 50.0f : (float)(0.5 * p + gauss(k + 1));
    }
}

std::vector<double> host_column(const float* d, long long rows, long long cols, long long j) {
    std::vector<float> f(rows);
    CK(cudaMemcpy2D(f.data(), 4, d + j, cols * 4, 4, rows, cudaMemcpyDeviceToHost));
    return std::vector<double>(f.begin(), f.end());
}

// Window by window, two-pass, float64: NaN unless all w pairs are finite and neither side is constant.
double ref_corr(const std::vector<double>& x, const std::vector<double>& y, long long t, int w) {
    if (t + 1 < w) return NAN;
    double mx = 0, my = 0;
    for (long long i = t - w + 1; i <= t; ++i) {
        if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return NAN;
        mx += x[i], my += y[i];
    }
    mx /= w, my /= w;
    double cxy = 0, vx = 0, vy = 0;
    for (long long i = t - w + 1; i <= t; ++i)
        cxy += (x[i] - mx) * (y[i] - my), vx += (x[i] - mx) * (x[i] - mx), vy += (y[i] - my) * (y[i] - my);
    if (vx <= 0 || vy <= 0) return NAN;
    return std::clamp(cxy / std::sqrt(vx * vy), -1.0, 1.0);
}

// Two generated panels (A, B), an output panel, and the copy-bandwidth floor of 2 reads + 1 write of one
// panel, measured here.
struct Panels {
    float *a = nullptr, *b = nullptr, *o = nullptr;
    size_t bytes = 0;
    double bw = 0, floor_ms = 0;  // bytes/s of a device-to-device copy (read + write); the floor, ms
};
template <class Launch>
float median_ms(Launch&& launch, int reps);
inline Panels make_panels(long long rows, long long cols) {
    Panels p;
    p.bytes = static_cast<size_t>(rows) * cols * 4;
    CK(cudaMalloc(&p.a, p.bytes));
    CK(cudaMalloc(&p.b, p.bytes));
    CK(cudaMalloc(&p.o, p.bytes));
    gen<<<(cols + 127) / 128, 128>>>(p.a, p.b, rows, cols, 1);
    CK(cudaDeviceSynchronize());
    const float copy_ms = median_ms([&] { CK(cudaMemcpyAsync(p.o, p.a, p.bytes, cudaMemcpyDeviceToDevice)); }, 7);
    p.bw = 2.0 * p.bytes / (copy_ms * 1e-3), p.floor_ms = 3.0 * p.bytes / p.bw * 1e3;
    return p;
}

// The median of `reps` timed runs of launch() (CUDA events on the legacy stream, after two warm-ups), ms.
template <class Launch>
float median_ms(Launch&& launch, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    launch(), launch();
    std::vector<float> ts;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms);
    }
    CK(cudaGetLastError());
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}
