#include "runtime/cuda/row_kernels.hpp"

#include <fmt/format.h>

#include "dsl/error.hpp"

namespace fj::rt::cuda {

namespace {

// The operators the kernel knows, by code. Each is defined once in the source below, over one group's
// valid values in sorted order (the same definitions as runtime/cpu/row_ops.cpp).
struct RowKernelOp {
    Op op;
    int code;
    bool grouped;
};
constexpr RowKernelOp kOps[] = {
    {Op::Rank, 0, false},   {Op::ZScore, 1, false},         {Op::Demean, 2, false},     {Op::Scale, 3, false},
    {Op::GroupRank, 0, true}, {Op::GroupZScore, 1, true}, {Op::GroupNeutralize, 2, true},
};

const RowKernelOp& find(Op op) {
    for (const RowKernelOp& o : kOps)
        if (o.op == op) return o;
    throw BackendError(fmt::format("cuda: '{}' has no row kernel", op_name(op)));
}

// The kernel, for T = float or double. Keys: (group id, value) as order-preserving unsigned 64-bit integers
// (-0 and +0 equal), then the column, so that the sort's order is total and results do not depend on the
// launch. Three arrays of the padded length (hi, lo, column) and the groups' first positions.
constexpr const char* kSource = R"(// factorjit row kernels (runtime/cuda/row_kernels.cpp): cross-sectional operators, a block per row.
typedef unsigned long long fj_u64;
struct fj_row_params {
    const FJ_T* x; long long x_ld;
    const FJ_T* g; long long g_ld;
    FJ_T* out; long long out_ld;
    long long rows, cols, op, padded;
    fj_u64* scratch;
};
__device__ __forceinline__ fj_u64 fj_order_key(double v) {
    if (v == 0.0) v = 0.0;  // -0 and +0 tie
    const fj_u64 b = (fj_u64)__double_as_longlong(v);
    return (b >> 63) ? ~b : (b | (1ULL << 63));
}
__device__ __forceinline__ double fj_from_key(fj_u64 k) {
    return __longlong_as_double((long long)((k >> 63) ? (k & ~(1ULL << 63)) : ~k));
}
__device__ __forceinline__ double fj_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
extern "C" __global__ void __launch_bounds__(1024) FJ_NAME(const fj_row_params p) {
    extern __shared__ __align__(16) unsigned char fj_smem[];
    __shared__ int fj_nvalid, fj_nseg;
    const long long P = p.padded;
    fj_u64* hi;
    if (p.scratch) hi = p.scratch + (long long)blockIdx.x * P * 3;
    else hi = reinterpret_cast<fj_u64*>(fj_smem);
    fj_u64* lo = hi + P;
    int* col = reinterpret_cast<int*>(lo + P);
    int* seg = col + P;
    const bool grouped = p.g != 0;
    const double nan = __longlong_as_double(0x7ff8000000000000LL);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (long long t = blockIdx.x; t < p.rows; t += gridDim.x) {
        const FJ_T* xr = p.x + t * p.x_ld;
        const FJ_T* gr = grouped ? p.g + t * p.g_ld : 0;
        FJ_T* orow = p.out + t * p.out_ld;
        if (threadIdx.x == 0) { fj_nvalid = 0; fj_nseg = 0; }
        __syncthreads();
        // Keys; NaN values and NaN group ids are left out (their outputs are NaN) and sort last.
        for (long long i = threadIdx.x; i < P; i += blockDim.x) {
            fj_u64 h = ~0ULL, l = ~0ULL;
            if (i < p.cols) {
                const double v = (double)xr[i];
                const double gv = grouped ? (double)gr[i] : 0.0;
                if (v == v && gv == gv) {
                    h = grouped ? fj_order_key(gv) : 0ULL;
                    l = fj_order_key(v);
                    atomicAdd(&fj_nvalid, 1);
                } else {
                    orow[i] = (FJ_T)nan;
                }
            }
            hi[i] = h; lo[i] = l; col[i] = (int)i;
        }
        __syncthreads();
        // Bitonic sort by (hi, lo, col): a total order.
        for (long long k = 2; k <= P; k <<= 1) {
            for (long long j = k >> 1; j > 0; j >>= 1) {
                for (long long i = threadIdx.x; i < P; i += blockDim.x) {
                    const long long m = i ^ j;
                    if (m <= i) continue;
                    const bool greater = hi[i] != hi[m] ? hi[i] > hi[m] : lo[i] != lo[m] ? lo[i] > lo[m] : col[i] > col[m];
                    if (greater == ((i & k) == 0)) {
                        const fj_u64 a = hi[i]; hi[i] = hi[m]; hi[m] = a;
                        const fj_u64 b = lo[i]; lo[i] = lo[m]; lo[m] = b;
                        const int c = col[i]; col[i] = col[m]; col[m] = c;
                    }
                }
                __syncthreads();
            }
        }
        const int n_valid = fj_nvalid;
        for (int i = threadIdx.x; i < n_valid; i += blockDim.x)
            if (i == 0 || hi[i] != hi[i - 1]) seg[atomicAdd(&fj_nseg, 1)] = i;
        __syncthreads();
        const int nseg = fj_nseg;
        // A warp per group: [s0, s1) of the sorted keys.
        for (int s = warp; s < nseg; s += warps) {
            const int s0 = seg[s];
            int a = s0 + 1, b = n_valid;
            while (a < b) { const int m = (a + b) >> 1; if (hi[m] == hi[s0]) a = m + 1; else b = m; }
            const int s1 = a, n = s1 - s0;
            if (p.op == 0) {  // rank: average-tie rank / n; ties are runs of equal keys
                for (int i = s0 + lane; i < s1; i += 32) {
                    const fj_u64 key = lo[i];
                    int first = s0, last = i;
                    while (first < last) { const int m = (first + last) >> 1; if (lo[m] < key) first = m + 1; else last = m; }
                    int end = i + 1, e1 = s1;
                    while (end < e1) { const int m = (end + e1) >> 1; if (lo[m] == key) end = m + 1; else e1 = m; }
                    orow[col[i]] = (FJ_T)(((double)(first - s0 + 1 + end - s0) / 2.0) / (double)n);
                }
                continue;
            }
            double sum = 0, sabs = 0, mn = 1.0 / 0.0, mx = -1.0 / 0.0;
            for (int i = s0 + lane; i < s1; i += 32) {
                const double v = fj_from_key(lo[i]);
                sum += v; sabs += fabs(v); mn = fmin(mn, v); mx = fmax(mx, v);
            }
            sum = fj_warp_sum(sum);
            sabs = fj_warp_sum(sabs);
            for (int o = 16; o > 0; o >>= 1) {
                mn = fmin(mn, __shfl_xor_sync(0xffffffffu, mn, o));
                mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            }
            if (p.op == 3) {  // scale: x / sum(|x|)
                for (int i = s0 + lane; i < s1; i += 32) orow[col[i]] = (FJ_T)(fj_from_key(lo[i]) / sabs);
                continue;
            }
            const bool constant = mn == mx;
            // The mean as a rounded value and the mean of the deviations from it (runtime/cpu/row_ops.cpp, Mean).
            const double mhi = sum / (double)n;
            double d = 0;
            if (isfinite(mhi))
                for (int i = s0 + lane; i < s1; i += 32) d += fj_from_key(lo[i]) - mhi;
            const double mlo = isfinite(mhi) ? fj_warp_sum(d) / (double)n : 0.0;
            if (p.op == 2) {  // demean; exactly 0 for a constant group
                for (int i = s0 + lane; i < s1; i += 32)
                    orow[col[i]] = (FJ_T)(constant ? 0.0 : (fj_from_key(lo[i]) - mhi) - mlo);
                continue;
            }
            // zscore, ddof = 1: NaN for fewer than 2 values, a constant group, an overflowing sum of squares
            if (n < 2 || constant) {
                for (int i = s0 + lane; i < s1; i += 32) orow[col[i]] = (FJ_T)nan;
                continue;
            }
            double ss = 0;
            for (int i = s0 + lane; i < s1; i += 32) {
                const double dev = (fj_from_key(lo[i]) - mhi) - mlo;
                ss += dev * dev;
            }
            ss = fj_warp_sum(ss);
            if (isinf(ss)) ss = nan;
            const double sd = sqrt(ss / (double)(n - 1));
            for (int i = s0 + lane; i < s1; i += 32) orow[col[i]] = (FJ_T)(((fj_from_key(lo[i]) - mhi) - mlo) / sd);
        }
        __syncthreads();
    }
}
)";

}  // namespace

int row_kernel_op_code(Op op) { return find(op).code; }
bool row_kernel_grouped(Op op) { return find(op).grouped; }

std::string row_kernel_name(DType dtype) { return fmt::format("fj_rows_{}", dtype_name(dtype)); }

std::string row_kernels_source(DType dtype) {
    return fmt::format("#define FJ_T {}\n#define FJ_NAME {}\n", dtype == DType::F32 ? "float" : "double", row_kernel_name(dtype)) +
           kSource;
}

int row_kernel_key_bytes(DType) { return 24; }  // hi, lo (8 bytes each), the column and the group start (4 each)

std::int64_t row_kernel_padded(std::int64_t cols) {
    std::int64_t p = 2;
    while (p < cols) p <<= 1;
    return p;
}

std::int64_t row_kernel_smem_columns(DType dtype, int smem_bytes) {
    std::int64_t p = 2;
    while (2 * p * row_kernel_key_bytes(dtype) <= smem_bytes) p *= 2;
    return p;
}

}  // namespace fj::rt::cuda
