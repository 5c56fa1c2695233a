#include "runtime/cuda/column_kernels.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "dsl/error.hpp"

namespace fj::rt::cuda {

namespace {

// The kernel, for FJ_T = float or double (runtime/cuda/column_kernels.hpp says how it works). No warp intrinsics
// and no assumption on the block's size but FJ_MAX_THREADS, so that the same source also runs on the host with a
// few threads a block (tests/test_column_steps.cpp emulates it there: FJ_SMEM_DECL, __shared__ and the
// intrinsics defined by the test).
constexpr const char* kSource = R"(// factorjit column kernels (runtime/cuda/column_kernels.cpp): long order statistics, a block per (column, time tile).
typedef unsigned long long fj_u64;
typedef unsigned short fj_u16;
struct fj_column_params {
    const FJ_T* x; long long x_ld;
    FJ_T* out; long long out_ld;
    long long rows, cols, op, d, need;
    double q;
    long long padded, tile, bits, tiles;
    unsigned char* scratch; long long bytes;
};
#define FJ_MAX_THREADS 256
#define FJ_NAN_KEY 0xffffffffffffffffULL
#ifndef FJ_SMEM_DECL
#define FJ_SMEM_DECL extern __shared__ __align__(16) unsigned char fj_smem[]
#endif
// An unsigned key in the order of the (non-NaN) doubles; -0 and +0 are one value, +0.
__device__ __forceinline__ fj_u64 fj_order_key(double v) {
    if (v == 0.0) v = 0.0;
    const fj_u64 b = (fj_u64)__double_as_longlong(v);
    return (b >> 63) ? ~b : (b | (1ULL << 63));
}
__device__ __forceinline__ double fj_from_key(fj_u64 k) {
    return __longlong_as_double((long long)((k >> 63) ? (k & ~(1ULL << 63)) : ~k));
}
// The values at positions [l, r) of the tile whose coordinate is below c (c < 2^levels): one step per level of
// the wavelet matrix z (each level: the zeros before every position 0 .. n, stride apart).
__device__ int fj_count_below(const fj_u16* z, int levels, int stride, int n, int l, int r, int c) {
    int below = 0;
    for (int lev = 0; lev < levels; ++lev) {
        const fj_u16* zl = z + lev * stride;
        const int zeros = zl[n], l0 = zl[l], r0 = zl[r];
        if ((c >> (levels - 1 - lev)) & 1) {
            below += r0 - l0;
            l = zeros + (l - l0);
            r = zeros + (r - r0);
        } else {
            l = l0;
            r = r0;
        }
    }
    return below;
}
// The coordinate of the k-th smallest (from 0; k < r - l) value at positions [l, r).
__device__ int fj_kth(const fj_u16* z, int levels, int stride, int n, int l, int r, int k) {
    int c = 0;
    for (int lev = 0; lev < levels; ++lev) {
        const fj_u16* zl = z + lev * stride;
        const int zeros = zl[n], l0 = zl[l], r0 = zl[r];
        if (k < r0 - l0) {
            l = l0;
            r = r0;
        } else {
            k -= r0 - l0;
            c |= 1 << (levels - 1 - lev);
            l = zeros + (l - l0);
            r = zeros + (r - r0);
        }
    }
    return c;
}
extern "C" __global__ void __launch_bounds__(FJ_MAX_THREADS) FJ_NAME(const fj_column_params p) {
    FJ_SMEM_DECL;
    __shared__ int fj_scan[FJ_MAX_THREADS + 1];
    __shared__ int fj_valid;
    const int t = threadIdx.x, nt = blockDim.x;
    const int P = (int)p.padded, levels = (int)p.bits, d = (int)p.d, stride = P + 1;
    unsigned char* base = p.scratch ? p.scratch + (long long)blockIdx.x * p.bytes : fj_smem;
    fj_u64* key = (fj_u64*)base;           // P sort keys (NaN and padding: all ones), sorted
    int* idx = (int*)(key + P);            // the row of each key; after the coordinates, two sequences:
    fj_u16* seq = (fj_u16*)idx;            //   the rows' coordinates, level by level
    fj_u16* coord = (fj_u16*)(idx + P);    // each row's coordinate (NaN: the count of valid values)
    fj_u16* z = coord + P;                 // levels x (P + 1): the zeros before each position
    const double nan = __longlong_as_double(0x7ff8000000000000LL), inf = __longlong_as_double(0x7ff0000000000000LL);
    const long long tasks = p.cols * p.tiles;
    for (long long task = blockIdx.x; task < tasks; task += gridDim.x) {
        const long long j = task % p.cols, out0 = (task / p.cols) * p.tile;
        const long long read0 = out0 - (d - 1) > 0 ? out0 - (d - 1) : 0;
        const long long out1 = out0 + p.tile < p.rows ? out0 + p.tile : p.rows;
        const int n = (int)(out1 - read0), skip = (int)(out0 - read0);
        for (int i = t; i < P; i += nt) {
            fj_u64 k = FJ_NAN_KEY;
            if (i < n) {
                const double v = (double)p.x[(read0 + i) * p.x_ld + j];
                if (v == v) k = fj_order_key(v);
            }
            key[i] = k;
            idx[i] = i;
        }
        if (t == 0) fj_valid = 0;
        __syncthreads();
        // Bitonic sort by (key, row): a total order, so every launch sorts alike.
        for (int size = 2; size <= P; size <<= 1)
            for (int half = size >> 1; half > 0; half >>= 1) {
                for (int i = t; i < P; i += nt) {
                    const int o = i ^ half;
                    if (o <= i) continue;
                    const fj_u64 ki = key[i], ko = key[o];
                    const int ri = idx[i], ro = idx[o];
                    const bool greater = ki > ko || (ki == ko && ri > ro);
                    if (greater == ((i & size) == 0)) {
                        key[i] = ko;
                        key[o] = ki;
                        idx[i] = ro;
                        idx[o] = ri;
                    }
                }
                __syncthreads();
            }
        for (int i = t; i < P; i += nt)
            if (key[i] != FJ_NAN_KEY && (i + 1 == P || key[i + 1] == FJ_NAN_KEY)) fj_valid = i + 1;
        __syncthreads();
        const int m = fj_valid;  // valid values in the tile; their coordinates are below m
        // Each row's coordinate: the first sorted place of its value.
        for (int i = t; i < P; i += nt) {
            const int row = idx[i];
            if (row >= n) continue;
            int c = m;
            if (i < m) {
                const fj_u64 k = key[i];
                int lo = 0, hi = i;
                while (lo < hi) {
                    const int mid = (lo + hi) >> 1;
                    if (key[mid] < k) lo = mid + 1;
                    else hi = mid;
                }
                c = lo;
            }
            coord[row] = (fj_u16)c;
        }
        __syncthreads();
        // The wavelet matrix, top bit first: per level the zeros before each position (a scan of each thread's
        // run of positions), then the positions stably partitioned by the bit, zeros first.
        fj_u16* cur = seq;
        fj_u16* nxt = seq + P;
        for (int i = t; i < n; i += nt) cur[i] = coord[i];
        const int run = (n + nt - 1) / nt;
        const int begin = t * run < n ? t * run : n, end = begin + run < n ? begin + run : n;
        __syncthreads();
        for (int lev = 0; lev < levels; ++lev) {
            const int bit = levels - 1 - lev;
            fj_u16* zl = z + lev * stride;
            int zeros = 0;
            for (int i = begin; i < end; ++i) zeros += ((cur[i] >> bit) & 1) == 0;
            fj_scan[t] = zeros;
            __syncthreads();
            if (t == 0) {
                int sum = 0;
                for (int w = 0; w < nt; ++w) {
                    const int here = fj_scan[w];
                    fj_scan[w] = sum;
                    sum += here;
                }
                fj_scan[nt] = sum;
                zl[n] = (fj_u16)sum;
            }
            __syncthreads();
            int before = fj_scan[t];
            const int total = fj_scan[nt];
            for (int i = begin; i < end; ++i) {
                zl[i] = (fj_u16)before;
                const int v = cur[i];
                if ((v >> bit) & 1) nxt[total + (i - before)] = (fj_u16)v;
                else nxt[before++] = (fj_u16)v;
            }
            __syncthreads();
            fj_u16* swap = cur;
            cur = nxt;
            nxt = swap;
        }
        // Each output row's window, positions [i - d + 1, i], a thread a row.
        for (int i = skip + t; i < n; i += nt) {
            const int l = i - d + 1 > 0 ? i - d + 1 : 0, r = i + 1;
            const int valid = fj_count_below(z, levels, stride, n, l, r, m);
            double res = nan;
            if (valid >= p.need) {
                if (p.op == 0) {
                    // (values below + values at or below, itself included, + 1) / 2, divided by the count once.
                    const int c = coord[i];
                    if (c < m) {
                        const int below = fj_count_below(z, levels, stride, n, l, r, c);
                        const int at_or_below = fj_count_below(z, levels, stride, n, l, r, c + 1);
                        res = (double)(below + at_or_below + 1) * 0.5 / (double)valid;
                    }
                } else {
                    // numpy's linear interpolation, rounded step by step as the CPU rounds it (no contraction).
                    const double pos = __dmul_rn(p.q, (double)(valid - 1)), lo = floor(pos), frac = __dsub_rn(pos, lo);
                    const int k = (int)lo;
                    const double vlo = fj_from_key(key[fj_kth(z, levels, stride, n, l, r, k)]);
                    const double vhi = k + 1 < valid ? fj_from_key(key[fj_kth(z, levels, stride, n, l, r, k + 1)]) : inf;
                    res = frac == 0.0 || vhi == vlo ? vlo : __dadd_rn(vlo, __dmul_rn(frac, __dsub_rn(vhi, vlo)));
                }
            }
            p.out[(read0 + i) * p.out_ld + j] = (FJ_T)res;
        }
        __syncthreads();
    }
}
)";

}  // namespace

int column_kernel_op_code(Op op) {
    switch (op) {
    case Op::WTsRank: return 0;
    case Op::WMedian:
    case Op::WQuantile: return 1;
    default: break;
    }
    throw BackendError(fmt::format("cuda: '{}' has no column kernel", op_name(op)));
}

std::string column_kernel_name(DType dtype) { return fmt::format("fj_columns_{}", dtype_name(dtype)); }

std::string column_kernels_source(DType dtype) {
    return fmt::format("#define FJ_T {}\n#define FJ_NAME {}\n", dtype == DType::F32 ? "float" : "double",
                       column_kernel_name(dtype)) +
           kSource;
}

ColumnLaunch column_kernel_launch(int d, std::int64_t rows, std::int64_t cols, int smem_bytes, int sms) {
    if (d < 1 || d > kColumnKernelMaxPadded)
        throw BackendError(fmt::format("cuda: a column step's window of {} rows; the column kernel takes 1 to {}", d,
                                       kColumnKernelMaxPadded));
    ColumnLaunch l;
    // Tiles of at least 3 (d - 1) output rows where P allows (the d - 1 rows read again before each stay a quarter or
    // less), and at least 1,024 rows read.
    l.padded = 1024;
    while (l.padded < 4 * static_cast<std::int64_t>(d - 1) && l.padded < kColumnKernelMaxPadded) l.padded *= 2;
    l.tile = l.padded - (d - 1);
    l.bits = 1;
    while ((std::int64_t{1} << l.bits) <= l.padded + 1) ++l.bits;
    l.tiles = rows > 0 ? (rows + l.tile - 1) / l.tile : 0;
    l.bytes = (14 * l.padded + 2 * l.bits * (l.padded + 1) + 15) / 16 * 16;
    // (The kernel's static shared memory: the scan's 257 counters and the valid count.)
    l.in_smem = l.bytes + 1040 + 16 <= smem_bytes;
    const std::int64_t tasks = cols * l.tiles;
    l.grid = l.in_smem ? std::min<std::int64_t>(tasks, std::int64_t{1} << 30) : std::min<std::int64_t>(tasks, 4LL * std::max(1, sms));
    return l;
}

}  // namespace fj::rt::cuda
