#include "runtime/cuda/row_kernels.hpp"

#include <algorithm>

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
// launch. Three arrays of the padded length (hi, lo, column) and the groups' first positions; for float32
// rows without groups ("packed") one array: the value's 32-bit order key above the column, a third of the
// shared memory and of the sort's traffic (A1's 150 ranks of 5,000 columns took 16.7 ms each the general way).
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
__device__ __forceinline__ unsigned fj_order_key32(float v) {
    if (v == 0.0f) v = 0.0f;
    const unsigned b = __float_as_uint(v);
    return (b >> 31) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float fj_from_key32(unsigned k) {
    return __uint_as_float((k >> 31) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ double fj_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// A sum (kind 0), minimum (1) or maximum (2) over a warp, or over the block when `whole` (every thread of the
// block calls it then), in a fixed order: results do not depend on timing.
__device__ double fj_reduce(double v, int kind, bool whole, double* red) {
    for (int o = 16; o > 0; o >>= 1) {
        const double w = __shfl_xor_sync(0xffffffffu, v, o);
        v = kind == 0 ? v + w : kind == 1 ? fmin(v, w) : fmax(v, w);
    }
    if (!whole) return v;
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double r = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) r = kind == 0 ? r + red[w] : kind == 1 ? fmin(r, red[w]) : fmax(r, red[w]);
    __syncthreads();
    return r;
}
// The sorted keys of a row, read the same way whichever layout holds them: general (hi = group, lo = value, col),
// packed by value (float32 rank: the value's order key above the column) or packed by group (float32 operators that
// need no order of values, all but the ranks: the group's order key, 0 without groups, above the column; values
// are read from the row).
struct fj_keys {
    int mode;  // 0 general, 1 packed by value, 2 packed by group
    fj_u64* hi; fj_u64* lo; int* col;
    const FJ_T* row;
    __device__ __forceinline__ bool same_group(int i, int j) const {
        return mode == 1 || (mode == 2 ? (hi[i] >> 32) == (hi[j] >> 32) : hi[i] == hi[j]);
    }
    __device__ __forceinline__ fj_u64 vkey(int i) const { return mode == 1 ? (hi[i] >> 32) : lo[i]; }
    __device__ __forceinline__ int column(int i) const { return mode ? (int)(hi[i] & 0xffffffffu) : col[i]; }
    __device__ __forceinline__ double value(int i) const {
        return mode == 1 ? (double)fj_from_key32((unsigned)(hi[i] >> 32)) : mode == 2 ? (double)row[column(i)] : fj_from_key(lo[i]);
    }
};
// Packed keys (one 64-bit word: an order key in the upper 32 bits above the column) sorted by the upper 32 bits
// with a stable least-significant-digit radix sort of 6-bit digits in shared memory, from `keys` into `spare` and
// back (returns where the sorted keys are): the column below keeps ties in column order, so the order is the same
// total order as the bitonic sort's. Only digits that hold bits which differ between the row's first n keys get a
// pass (a block-wide OR and AND first): prices vary in about 23 bits, 4 passes. All keys of the launch take part
// (its padding keys are all ones above their column and stay last).
// Warp w ranks its FJ_RADIX_ITEMS x 32 keys (warp-striped: its item k of lane l is key (w * FJ_RADIX_ITEMS + k) *
// 32 + l) in registers, without shared memory or atomics: six ballots give each lane the lanes that share its digit
// (its place among them) and the lanes whose digit has its own lane's low five bits (so lane l counts digits l and
// l + 32 as the items go by, and lends its counts by shuffle). Then a scan over (digit, warp) in digit-major order
// places each warp's keys. (Measured on the H200, rank of 50,000 x 5,000: 1-bit passes 22.9 ms, 8-bit digits ranked
// by __match_any_sync 10.3 ms, its MATCH instructions and spilled keys the largest stalls.)
#define FJ_RADIX_ITEMS 12
__device__ fj_u64* fj_radix_sort(fj_u64* keys, fj_u64* spare, int n, int* hist, int* bucket, int* scan) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, warps = blockDim.x >> 5;
    unsigned any = 0u, all = ~0u;
    for (int i = t; i < n; i += blockDim.x) {
        const unsigned k = (unsigned)(keys[i] >> 32);
        any |= k;
        all &= k;
    }
    for (int o = 16; o > 0; o >>= 1) {
        any |= __shfl_xor_sync(0xffffffffu, any, o);
        all &= __shfl_xor_sync(0xffffffffu, all, o);
    }
    if (lane == 0) { scan[warp] = (int)any; scan[32 + warp] = (int)all; }
    __syncthreads();
    unsigned vary_any = 0u, vary_all = ~0u;
    for (int w = 0; w < warps; ++w) { vary_any |= (unsigned)scan[w]; vary_all &= (unsigned)scan[32 + w]; }
    __syncthreads();
    unsigned vary = vary_any ^ vary_all;
    const unsigned below = (1u << lane) - 1u;
    int at[FJ_RADIX_ITEMS];
    while (vary) {
        const int shift = 32 + __ffs(vary) - 1;
        vary &= ~(0x3fu << (shift - 32));
        const fj_u64* mine = keys + warp * 32 * FJ_RADIX_ITEMS + lane;
        int lo = 0, hi = 0;  // this warp's items so far of digits `lane` and `lane + 32`
        #pragma unroll
        for (int k = 0; k < FJ_RADIX_ITEMS; ++k) {
            const unsigned d = (unsigned)(mine[k * 32] >> shift) & 63u;
            unsigned peers = ~0u, mine5 = ~0u;
            #pragma unroll
            for (int j = 0; j < 5; ++j) {
                const unsigned m = __ballot_sync(0xffffffffu, (d >> j) & 1u);
                peers &= ((d >> j) & 1u) ? m : ~m;
                mine5 &= ((lane >> j) & 1u) ? m : ~m;
            }
            const unsigned m5 = __ballot_sync(0xffffffffu, d >> 5);
            peers &= (d >> 5) ? m5 : ~m5;
            const int before_lo = __shfl_sync(0xffffffffu, lo, (int)(d & 31u));
            const int before_hi = __shfl_sync(0xffffffffu, hi, (int)(d & 31u));
            at[k] = ((d >> 5) ? before_hi : before_lo) + __popc(peers & below);
            lo += __popc(mine5 & ~m5);
            hi += __popc(mine5 & m5);
        }
        hist[warp * 64 + lane] = lo;
        hist[warp * 64 + 32 + lane] = hi;
        __syncthreads();
        for (int d = t; d < 64; d += blockDim.x) {
            int s = 0;
            for (int w = 0; w < warps; ++w) s += hist[w * 64 + d];
            bucket[d] = s;
        }
        __syncthreads();
        if (warp == 0) {  // the digits' bases: an exclusive scan of 64 totals, two a lane
            const int a = bucket[2 * lane], c = bucket[2 * lane + 1];
            int x = a + c;
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, x, o);
                if (lane >= o) x += y;
            }
            x -= a + c;
            bucket[2 * lane] = x;
            bucket[2 * lane + 1] = x + a;
        }
        __syncthreads();
        for (int d = t; d < 64; d += blockDim.x) {
            int run = bucket[d];
            for (int w = 0; w < warps; ++w) {
                const int c = hist[w * 64 + d];
                hist[w * 64 + d] = run;
                run += c;
            }
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < FJ_RADIX_ITEMS; ++k) {
            const fj_u64 key = mine[k * 32];
            spare[hist[warp * 64 + ((unsigned)(key >> shift) & 63u)] + at[k]] = key;
        }
        __syncthreads();
        fj_u64* const sorted = spare;
        spare = keys;
        keys = sorted;
    }
    return keys;
}
extern "C" __global__ void __launch_bounds__(1024) FJ_NAME(const fj_row_params p) {
    extern __shared__ __align__(16) unsigned char fj_smem[];
    __shared__ int fj_nvalid, fj_nseg, fj_seg0;
    __shared__ int fj_scan[64];
    __shared__ int fj_bucket[64];
    __shared__ double fj_red[32];
    const long long P = p.padded;
    const bool grouped = p.g != 0;
    fj_keys K;
    K.mode = !FJ_PACKED ? 0 : p.op != 0 ? 2 : !grouped ? 1 : 0;
    const bool packed = K.mode != 0;
    fj_u64* base = p.scratch ? p.scratch + (long long)blockIdx.x * P * (K.mode == 1 ? 1 : K.mode == 2 ? 2 : 3) : reinterpret_cast<fj_u64*>(fj_smem);
    // The radix sort (row_kernel_launch() sizes such blocks so): keys, their spare buffer, then the warps' digit
    // counters or, after the sort, the groups' first positions.
    const bool radix = packed && !p.scratch && P == FJ_RADIX_ITEMS * (long long)blockDim.x;
    K.hi = base;
    K.lo = base + (radix ? 2 * P : P);
    K.col = reinterpret_cast<int*>(K.lo + P);
    int* seg = K.mode == 1 ? &fj_seg0 : K.mode == 2 ? reinterpret_cast<int*>(K.lo) : K.col + P;
    const double nan = __longlong_as_double(0x7ff8000000000000LL);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (long long t = blockIdx.x; t < p.rows; t += gridDim.x) {
        const FJ_T* xr = p.x + t * p.x_ld;
        const FJ_T* gr = grouped ? p.g + t * p.g_ld : 0;
        FJ_T* orow = p.out + t * p.out_ld;
        K.row = xr;
        K.hi = base;
        if (threadIdx.x == 0) { fj_nvalid = 0; fj_nseg = 0; }
        __syncthreads();
        // Keys; NaN values and NaN group ids are left out (their outputs are NaN) and sort last.
        // (Four loads a thread in flight before any use: one at a time, the row's loads were a tenth of rank's time.)
        int valid = 0;
        for (long long i0 = threadIdx.x; i0 < P; i0 += 4 * (long long)blockDim.x) {
            FJ_T vs[4];
            double gvs[4];
            #pragma unroll
            for (int u = 0; u < 4; ++u) {
                const long long i = i0 + u * (long long)blockDim.x;
                vs[u] = i < p.cols ? xr[i] : (FJ_T)0;
                gvs[u] = grouped && i < p.cols ? (double)gr[i] : 0.0;
            }
            #pragma unroll
            for (int u = 0; u < 4; ++u) {
                const long long i = i0 + u * (long long)blockDim.x;
                if (i >= P) break;
                fj_u64 h = ~0ULL, l = ~0ULL;
                bool ok = false;
                if (i < p.cols) {
                    const FJ_T v = vs[u];
                    const double gv = gvs[u];
                    ok = v == v && gv == gv;
                    if (!ok) orow[i] = (FJ_T)nan;
                    else if (K.mode == 1) h = ((fj_u64)fj_order_key32((float)v) << 32) | (fj_u64)i;
                    else if (K.mode == 2) h = ((fj_u64)(grouped ? fj_order_key32((float)gv) : 0u) << 32) | (fj_u64)i;
                    else { h = grouped ? fj_order_key(gv) : 0ULL; l = fj_order_key((double)v); }
                }
                if (packed) {
                    // (Left out: last. Without groups every valid key is 0 above its column, so a key of 1 above the
                    // column is enough, and the radix sort moves them in one pass.)
                    K.hi[i] = ok ? h : ((K.mode == 2 && !grouped ? 1ULL : 0xffffffffULL) << 32) | (fj_u64)i;
                } else {
                    K.hi[i] = h; K.lo[i] = l; K.col[i] = (int)i;
                }
                valid += ok;
            }
        }
        if (valid) atomicAdd(&fj_nvalid, valid);
        __syncthreads();
        if (radix) {
            K.hi = fj_radix_sort(K.hi, K.hi + P, (int)p.cols, reinterpret_cast<int*>(K.lo), fj_bucket, fj_scan);
        } else {
            // Bitonic sort by (hi, lo, col) (packed: the one word holds all three): a total order. Each thread takes
            // pairs (i, i | j) with bit j of i clear, so that none idles.
            for (long long k = 2; k <= P; k <<= 1) {
                for (long long j = k >> 1; j > 0; j >>= 1) {
                    for (long long q = threadIdx.x; q < (P >> 1); q += blockDim.x) {
                        const long long i = ((q & ~(j - 1)) << 1) | (q & (j - 1)), m = i | j;
                        const bool up = (i & k) == 0;
                        if (packed) {
                            const fj_u64 a = K.hi[i], b = K.hi[m];
                            if ((a > b) == up) { K.hi[i] = b; K.hi[m] = a; }
                            continue;
                        }
                        const bool greater = K.hi[i] != K.hi[m] ? K.hi[i] > K.hi[m] : K.lo[i] != K.lo[m] ? K.lo[i] > K.lo[m] : K.col[i] > K.col[m];
                        if (greater == up) {
                            const fj_u64 a = K.hi[i]; K.hi[i] = K.hi[m]; K.hi[m] = a;
                            const fj_u64 b = K.lo[i]; K.lo[i] = K.lo[m]; K.lo[m] = b;
                            const int c = K.col[i]; K.col[i] = K.col[m]; K.col[m] = c;
                        }
                    }
                    __syncthreads();
                }
            }
        }
        const int n_valid = fj_nvalid;
        if (p.op == 0) {
            // rank: average-tie rank / n within the group, every thread a sorted position: the group's bounds and the
            // run of equal values by binary search.
            for (int i = threadIdx.x; i < n_valid; i += blockDim.x) {
                int s0 = 0, s1 = n_valid;
                if (K.mode == 0 && grouped) {
                    int a = 0, b = i;
                    while (a < b) { const int m = (a + b) >> 1; if (K.same_group(m, i)) b = m; else a = m + 1; }
                    s0 = a;
                    a = i + 1; b = n_valid;
                    while (a < b) { const int m = (a + b) >> 1; if (K.same_group(m, i)) a = m + 1; else b = m; }
                    s1 = a;
                }
                // The tie run around i: its neighbours first (values are mostly distinct, so this usually ends at
                // once), a binary search where the run is longer than a few (a row of equal values stays n log n).
                const fj_u64 key = K.vkey(i);
                int a = i, b;
                while (a > s0 && a > i - 4 && K.vkey(a - 1) == key) --a;
                if (a > s0 && a == i - 4 && K.vkey(a - 1) == key) {
                    b = a;
                    a = s0;
                    while (a < b) { const int m = (a + b) >> 1; if (K.vkey(m) < key) a = m + 1; else b = m; }
                }
                const int first = a;
                a = i + 1;
                while (a < s1 && a < i + 5 && K.vkey(a) == key) ++a;
                if (a < s1 && a == i + 5 && K.vkey(a) == key) {
                    b = s1;
                    while (a < b) { const int m = (a + b) >> 1; if (K.vkey(m) == key) a = m + 1; else b = m; }
                }
                orow[K.column(i)] = (FJ_T)(((double)(first - s0 + 1 + a - s0) / 2.0) / (double)(s1 - s0));
            }
            __syncthreads();
            continue;
        }
        if (K.mode == 1) {
            if (threadIdx.x == 0) { fj_seg0 = 0; fj_nseg = n_valid > 0; }
        } else {
            for (int i = threadIdx.x; i < n_valid; i += blockDim.x)
                if (i == 0 || !K.same_group(i, i - 1)) seg[atomicAdd(&fj_nseg, 1)] = i;
        }
        __syncthreads();
        const int nseg = fj_nseg;
        // A warp per group: [s0, s1) of the sorted keys; one group alone (the plain operators) takes the whole block.
        const bool whole = nseg == 1;
        const int me = whole ? (int)threadIdx.x : lane, lanes = whole ? (int)blockDim.x : 32;
        for (int s = whole ? 0 : warp; s < nseg; s += whole ? 1 : warps) {
            const int s0 = seg[s];
            int a = s0 + 1, b = n_valid;
            while (a < b) { const int m = (a + b) >> 1; if (K.same_group(m, s0)) a = m + 1; else b = m; }
            const int s1 = a, n = s1 - s0;
            double sum = 0, sabs = 0, mn = 1.0 / 0.0, mx = -1.0 / 0.0;
            for (int i = s0 + me; i < s1; i += lanes) {
                const double v = K.value(i);
                sum += v; sabs += fabs(v); mn = fmin(mn, v); mx = fmax(mx, v);
            }
            sum = fj_reduce(sum, 0, whole, fj_red);
            sabs = fj_reduce(sabs, 0, whole, fj_red);
            mn = fj_reduce(mn, 1, whole, fj_red);
            mx = fj_reduce(mx, 2, whole, fj_red);
            if (p.op == 3) {  // scale: x / sum(|x|)
                for (int i = s0 + me; i < s1; i += lanes) orow[K.column(i)] = (FJ_T)(K.value(i) / sabs);
                continue;
            }
            const bool constant = mn == mx;
            // The mean as a rounded value and the mean of the deviations from it (runtime/cpu/row_ops.cpp, Mean).
            const double mhi = sum / (double)n;
            double d = 0;
            if (isfinite(mhi))
                for (int i = s0 + me; i < s1; i += lanes) d += K.value(i) - mhi;
            const double mlo = isfinite(mhi) ? fj_reduce(d, 0, whole, fj_red) / (double)n : 0.0;
            if (p.op == 2) {  // demean; exactly 0 for a constant group
                for (int i = s0 + me; i < s1; i += lanes)
                    orow[K.column(i)] = (FJ_T)(constant ? 0.0 : (K.value(i) - mhi) - mlo);
                continue;
            }
            // zscore, ddof = 1: NaN for fewer than 2 values, a constant group, an overflowing sum of squares
            if (n < 2 || constant) {
                for (int i = s0 + me; i < s1; i += lanes) orow[K.column(i)] = (FJ_T)nan;
                continue;
            }
            double ss = 0;
            for (int i = s0 + me; i < s1; i += lanes) {
                const double dev = (K.value(i) - mhi) - mlo;
                ss += dev * dev;
            }
            ss = fj_reduce(ss, 0, whole, fj_red);
            if (isinf(ss)) ss = nan;
            const double sd = sqrt(ss / (double)(n - 1));
            for (int i = s0 + me; i < s1; i += lanes) orow[K.column(i)] = (FJ_T)(((K.value(i) - mhi) - mlo) / sd);
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
    return fmt::format("#define FJ_T {}\n#define FJ_NAME {}\n#define FJ_PACKED {}\n", dtype == DType::F32 ? "float" : "double",
                       row_kernel_name(dtype), dtype == DType::F32 ? 1 : 0) +
           kSource;
}

// Packed (float32, but for group_rank): one word, and for the operators other than rank a second for the groups'
// first positions (4 bytes used). Otherwise hi, lo (8 bytes each), the column and the group start (4 each).
int row_kernel_key_bytes(DType dtype, Op op) {
    if (dtype != DType::F32 || op == Op::GroupRank) return 24;
    return op == Op::Rank ? 8 : 16;
}

std::int64_t row_kernel_padded(std::int64_t cols) {
    std::int64_t p = 2;
    while (p < cols) p <<= 1;
    return p;
}

std::int64_t row_kernel_smem_columns(DType dtype, Op op, int smem_bytes) {
    std::int64_t p = 2;
    while (2 * p * row_kernel_key_bytes(dtype, op) <= smem_bytes) p *= 2;
    return p;
}

// Keep in step with the kernel's FJ_RADIX_ITEMS.
constexpr std::int64_t kRadixItems = 12;

RowLaunch row_kernel_launch(DType dtype, Op op, std::int64_t cols, int smem_bytes) {
    RowLaunch l;
    const bool packed = dtype == DType::F32 && op != Op::GroupRank;
    const std::int64_t radix_warps = (cols + 32 * kRadixItems - 1) / (32 * kRadixItems);
    const std::int64_t radix_smem = radix_warps * 32 * kRadixItems * 16 +
                                    std::max<std::int64_t>(radix_warps * 64, op == Op::Rank ? 0 : radix_warps * 32 * kRadixItems) * 4;
    // (A kilobyte of the block's shared memory is the kernel's own arrays.)
    if (packed && cols <= kRadixItems * kRowKernelThreads && radix_smem + 1024 <= smem_bytes) {
        // The radix sort: a block of just enough warps for the row (so that small rows leave room for more blocks
        // on an SM), FJ_RADIX_ITEMS keys a thread and as many spare, then the warps' digit counters (64 each) or,
        // for the operators other than rank, the groups' first positions, whichever is larger.
        l.threads = static_cast<int>(radix_warps * 32);
        l.padded = l.threads * kRadixItems;
        l.smem_bytes = radix_smem;
        l.in_smem = true;
        l.radix = true;
        return l;
    }
    l.threads = kRowKernelThreads;
    l.padded = row_kernel_padded(cols);
    l.in_smem = l.padded <= row_kernel_smem_columns(dtype, op, smem_bytes);
    l.smem_bytes = l.in_smem ? l.padded * row_kernel_key_bytes(dtype, op) : 0;
    return l;
}

}  // namespace fj::rt::cuda
