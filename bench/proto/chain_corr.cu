// Prototype (experiment, not part of the library): rolling correlation of long windows by a block whose
// warps each run whole batches of R rows of the block's 32 columns, one after the other, chained by their
// running window sums instead of scanned by the whole block (bench/proto/scan_corr.cu, the library's
// window scan). Hand-written for corr(window(A,w), window(B,w)) on float32, w a multiple of R.
//
// Why: the library's window scan (8 warps x 4-row segments of a 32-row batch) stops its block twice per
// batch (the segments' totals; their prefix): ncu on the H200 puts 14 % of the warps' samples at those two
// barriers, and its warps move in lockstep. Here warp q runs batches q, q + W, q + 2W, ... of the pass:
//   A  the batch's entering rows' sums (5 float64 sums of shifted values) and latest resets (non-finite,
//      change of x, change of y), stored by batch in shared memory (E ring);
//   K  wait for the window sums through the previous batch (warp q - 1's, by an mbarrier), add the batch's
//      entering sums and subtract those of the batch w / R before (its leaving rows: R divides w), publish;
//   C  run the batch's rows from the previous batch's sums, row by row (entering + leaving), and store.
// No block barrier: a warp waits only for its predecessor's sums, which it needs after its own A. Rows
// arrive by tensor copies into a ring of NB = w / R + W + AH batches; a slot is refilled by the warp that
// last reads it (the one whose leaving rows it holds), AH batches before it is needed.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o chain_corr bench/proto/chain_corr.cu && ./chain_corr [rows cols [config]]
// (-DCHAIN_DEBUG: waits that give up after about 2 s, printing what they waited for.) Prints, per
// configuration, the median of 7 runs, the copy floor of the same run and the error against a float64
// two-pass reference on 7 columns (NaN holes, and columns 5 and 6 constant for 1,000 rows).
//
// Measured on the H200 (2026-12-01, 50,000 x 50,000, bench/RESULTS.md "Sixth session"): results right
// (rel. Frobenius error 2.5e-8, NaN placement exact), and
//   v1  one carry flag per lane polled with ld.acquire (spinning warps take issue slots)       16.4 ms
//   v2  the hand-over on W mbarriers (try_wait suspends the waiting warp)                        13.05 ms
//   v3  (this file) the results' rows in a function specialised on interior batches and on the
//       leaving rows, a fixed leading dimension (constant store offsets), run counters as row
//       thresholds relative to the batch                                                         10.75 ms
// with W = 16, R = 25, AH = 2 (one block of 512 threads per SM, 218 KB of shared memory). In one visit
// with the library (run 9 of bench/RESULTS.md's sixth session): G1 8.554 ms, the library's window scan
// 12.047 ms (1.41 x), this kernel 10.70-10.79 ms (1.25-1.26 x, inside G4's 1.3); w = 128 (R = 32) 11.13
// against 12.01, w = 100 (R = 25) 11.18 against 12.01. W = 12: 11.18-11.25 ms; AH = 4: 10.70-11.07 ms;
// 4 time tiles: 11.0-11.2 ms. ncu of v2 (20,000 x 8,448): 121.7 warp instructions per row (A 23, the
// results' rows 82), issue active 68 %, stalls wait 30 %.
//
// For the library (not done yet): the sums' split is proved from the IR by codegen/window_terms.cpp; the
// batch rows R must divide w (250: 25; 128: 32; 100: 25; 20: 20), else the window scan stays.
#include <cuda.h>

#include "proto_common.cuh"

constexpr int C = 32;  // columns per block (lanes)

__device__ __forceinline__ unsigned saddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_done(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}
#ifdef CHAIN_DEBUG
// A wait that gives up (printing what it waited for) instead of hanging.
__device__ void mbar_wait_dbg(unsigned bar, unsigned parity, int tag, int b) {
    const long long start = clock64();
    while (!mbar_done(bar, parity))
        if (clock64() - start > 4000000000LL) {
            printf("stuck: block %d warp %d lane %d batch %d wait %d parity %u\n", blockIdx.x, threadIdx.x >> 5,
                   threadIdx.x & 31, b, tag, parity);
            __trap();
        }
}
#define mbar_wait(bar, parity) mbar_wait_dbg(bar, parity, __LINE__, b)
#else
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    while (!mbar_done(bar, parity)) {}
}
#endif
// The window sums' hand-over: a lane's flag holds the batch whose sums its slot holds (a parity wait on an
// mbarrier cannot: a warp may wait for a batch several phases ahead of the barrier's).
__device__ __forceinline__ void flag_release(int* f, int v) {
    asm volatile("st.release.cta.shared::cta.b32 [%0], %1;" ::"r"(saddr(f)), "r"(v) : "memory");
}
__device__ __forceinline__ int flag_acquire(const int* f) {
    int v;
    asm volatile("ld.acquire.cta.shared::cta.b32 %0, [%1];" : "=r"(v) : "r"(saddr(f)) : "memory");
    return v;
}
__device__ __forceinline__ void tma2d(unsigned dst, const CUtensorMap* map, int x, int y, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}
__device__ __forceinline__ double rsqrt64(double a) {
    double y;
    asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(a));
    const double e = fma(-a, y * y, 1.0);
    return fma(0.5 * e, y, y);
}
__device__ __forceinline__ bool fin32(float v) { return fabsf(v) < __int_as_float(0x7f800000); }

struct Layout {
    int NB, NE, wr;
    size_t ring_a, ring_b, ering, carry_s, carry_c, bars, bytes;
};
template <int R>
Layout layout(int w, int W, int AH) {  // (W: warps per block)
    Layout L{};
    L.wr = w / R;
    L.NB = L.wr + W + AH;
    L.NE = L.wr + W + 1;
    size_t at = 0;
    L.ring_a = at, at += static_cast<size_t>(L.NB) * R * C * 4;
    L.ring_b = at, at += static_cast<size_t>(L.NB) * R * C * 4;
    L.ering = at, at += static_cast<size_t>(L.NE) * 5 * C * 8;
    L.carry_s = at, at += 2 * 5 * C * 8;
    L.carry_c = at, at += 2 * 3 * C * 4;
    L.bars = at, at += (2 * static_cast<size_t>(L.NB) + W) * 8;
    L.bytes = at;
    return L;
}

struct CState {
    double S0, S1, S2, S3, S4;  // window sums (shifted x, y, xx, yy, xy) through the row before
    int a0, c1, c2;  // relative to the batch: rows i >= a0 have w finite pairs; i < c1 (c2): x (y) changed in the window
};
struct Shift {
    double sx, sy;
    float sxf, syf;
    double n;
};
// The batch's rows one after the other from the window sums through the batch before: all R rows unrolled,
// stores at constant offsets when LD (the leading dimension) is fixed. kInterior: every row is a result
// row; kLeaving: the rows w back are in the pass. Otherwise rows [lo, hi) of the batch are stored.
template <int R, int WIN, long long LD, bool kInterior, bool kLeaving>
__device__ __forceinline__ void c_pass(const float* xa, const float* ya, const float* xl, const float* yl, float* op,
                                       float px, float py, const Shift& sh, CState st, long long ld_rt, int lo, int hi) {
    const long long ld = LD > 0 ? LD : ld_rt;
#pragma unroll 5
    for (int i = 0; i < R; ++i) {
        const float x = xa[i * C], y = ya[i * C];
        const bool f = fin32(x) && fin32(y);
        const double dx = static_cast<double>(f ? x : sh.sxf) - sh.sx, dy = static_cast<double>(f ? y : sh.syf) - sh.sy;
        if (kLeaving) {
            const float x2 = xl[i * C], y2 = yl[i * C];
            const bool g = fin32(x2) && fin32(y2);
            const double lx = static_cast<double>(g ? x2 : sh.sxf) - sh.sx, ly = static_cast<double>(g ? y2 : sh.syf) - sh.sy;
            st.S0 = (st.S0 + dx) - lx, st.S1 = (st.S1 + dy) - ly;
            st.S2 = fma(-lx, lx, fma(dx, dx, st.S2));
            st.S3 = fma(-ly, ly, fma(dy, dy, st.S3));
            st.S4 = fma(-lx, ly, fma(dx, dy, st.S4));
        } else {
            st.S0 += dx, st.S1 += dy;
            st.S2 = fma(dx, dx, st.S2), st.S3 = fma(dy, dy, st.S3), st.S4 = fma(dx, dy, st.S4);
        }
        if (!f) st.a0 = i + WIN;
        if (!(x == px)) st.c1 = i + WIN - 1;
        if (!(y == py)) st.c2 = i + WIN - 1;
        px = x, py = y;
        if (kInterior || (i >= lo && i < hi)) {
            constexpr double n = WIN;
            const double cxy = fma(n, st.S4, -st.S0 * st.S1), vx = fma(n, st.S2, -st.S0 * st.S0),
                         vy = fma(n, st.S3, -st.S1 * st.S1);
            float r = static_cast<float>(cxy * rsqrt64(vx * vy));
            r = fminf(fmaxf(r, -1.0f), 1.0f);
            const bool ok = i >= st.a0 && i < st.c1 && i < st.c2 && vx > 0 && vy > 0;
            op[i * ld] = ok ? r : __int_as_float(0x7fc00000);
        }
    }
}

// One block: 32 columns, W warps, one time tile (blockIdx.y) of `tile` rows with w - 1 rows of halo before.
template <int W, int R, int WIN, long long LD>
__global__ void __launch_bounds__(C* W, 1)
chain_corr(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb, const float* __restrict__ A,
           const float* __restrict__ B, float* __restrict__ O, long long rows, long long cols, long long ld, int,
           long long tile, Layout L) {
    constexpr int w = WIN;
    extern __shared__ __align__(128) unsigned char smem[];
    float* const ra = reinterpret_cast<float*>(smem + L.ring_a);
    float* const rb = reinterpret_cast<float*>(smem + L.ring_b);
    double* const er = reinterpret_cast<double*>(smem + L.ering);
    double* const cs = reinterpret_cast<double*>(smem + L.carry_s);
    int* const cc = reinterpret_cast<int*>(smem + L.carry_c);
    const unsigned full0 = saddr(smem + L.bars), empty0 = full0 + 8u * L.NB, cbar0 = empty0 + 8u * L.NB;
    const unsigned ra_addr = saddr(ra), rb_addr = saddr(rb);
    const int lane = threadIdx.x & 31, q = threadIdx.x >> 5;
    const long long col0 = static_cast<long long>(blockIdx.x) * C, col = col0 + lane;
    const bool active = col < cols;
    const long long t0 = static_cast<long long>(blockIdx.y) * tile, t1 = min(rows, t0 + tile);
    const long long p0 = max(0LL, t0 - (w - 1));
    const int n_pass = static_cast<int>(t1 - p0), first_out = static_cast<int>(t0 - p0);
    const int nb = (n_pass + R - 1) / R, NB = L.NB, NE = L.NE, wr = L.wr;
    constexpr unsigned kSlotBytes = R * C * 4;
    auto issue = [&](int batch) {  // (one lane)
        const int s = batch % NB;
        const unsigned bar = full0 + 8u * s;
        mbar_expect(bar, 2 * kSlotBytes);
        tma2d(ra_addr + s * kSlotBytes, &ta, static_cast<int>(col0), static_cast<int>(p0 + static_cast<long long>(batch) * R), bar);
        tma2d(rb_addr + s * kSlotBytes, &tb, static_cast<int>(col0), static_cast<int>(p0 + static_cast<long long>(batch) * R), bar);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < NB; ++s) mbar_init(full0 + 8u * s, 1), mbar_init(empty0 + 8u * s, 2);
        for (int k = 0; k < W; ++k) mbar_init(cbar0 + 8u * k, C);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int b = 0; b < NB && b < nb; ++b) issue(b);
    // The shift: the pass's first row where both are finite would be the library's; the first row's
    // values (or 0) are enough here.
    float sxf = 0.0f, syf = 0.0f;
    if (active) {
        const float x = A[p0 * ld + col], y = B[p0 * ld + col];
        if (fin32(x) && fin32(y)) sxf = x, syf = y;
    }
    const double sx = sxf, sy = syf, n = w;
    constexpr int kNone = -1;  // latest reset: "row -1" (rows before the pass count as non-finite and as changes)

    for (int b = q; b < nb; b += W) {
        const int s = b % NB;
        mbar_wait(full0 + 8u * s, (b / NB) & 1);
        const float* const xa = ra + s * R * C + lane;
        const float* const ya = rb + s * R * C + lane;
        float px0 = __int_as_float(0x7fc00000), py0 = px0;
        if (b > 0) {  // (batch b - 1's slot is not refilled before this warp's K: its leaving reader comes later)
            const int sp = (b - 1) % NB;
            mbar_wait(full0 + 8u * sp, ((b - 1) / NB) & 1);
            px0 = ra[(sp * R + R - 1) * C + lane];
            py0 = rb[(sp * R + R - 1) * C + lane];
        }
        // A: the batch's entering sums and latest resets.
        double e0 = 0, e1 = 0, e2 = 0, e3 = 0, e4 = 0;
        int m0 = -1, m1 = -1, m2 = -1;  // (rows of the batch, then of the pass)
        {
            float px = px0, py = py0;
#pragma unroll 5
            for (int i = 0; i < R; ++i) {
                const float x = xa[i * C], y = ya[i * C];
                const bool f = fin32(x) && fin32(y);
                const double dx = static_cast<double>(f ? x : sxf) - sx, dy = static_cast<double>(f ? y : syf) - sy;
                e0 += dx, e1 += dy;
                e2 = fma(dx, dx, e2), e3 = fma(dy, dy, e3), e4 = fma(dx, dy, e4);
                if (!f) m0 = i;
                if (!(x == px)) m1 = i;
                if (!(y == py)) m2 = i;
                px = x, py = y;
            }
            m0 = m0 < 0 ? kNone : m0 + b * R, m1 = m1 < 0 ? kNone : m1 + b * R, m2 = m2 < 0 ? kNone : m2 + b * R;
        }
        {
            double* const my = er + (b % NE) * 5 * C + lane;
            my[0] = e0, my[C] = e1, my[2 * C] = e2, my[3 * C] = e3, my[4 * C] = e4;
        }
        // K: the sums through the previous batch, and through this one for the next warp.
        double S0 = 0, S1 = 0, S2 = 0, S3 = 0, S4 = 0;
        int M0 = kNone, M1 = kNone, M2 = kNone;
        if (b > 0) {
            const int k = (b - 1) & 1;
            // (W mbarriers, batch b's on b % W: a warp waits at most one phase ahead of its barrier,
            // as the sums through batch b - 1 - W were needed for its previous batch)
            mbar_wait(cbar0 + 8u * ((b - 1) % W), ((b - 1) / W) & 1);
            const double* const c = cs + k * 5 * C + lane;
            S0 = c[0], S1 = c[C], S2 = c[2 * C], S3 = c[3 * C], S4 = c[4 * C];
            const int* const ci = cc + k * 3 * C + lane;
            M0 = ci[0], M1 = ci[C], M2 = ci[2 * C];
        }
        {
            double n0 = S0 + e0, n1 = S1 + e1, n2 = S2 + e2, n3 = S3 + e3, n4 = S4 + e4;
            if (b >= wr) {
                const double* const o = er + ((b - wr) % NE) * 5 * C + lane;
                n0 -= o[0], n1 -= o[C], n2 -= o[2 * C], n3 -= o[3 * C], n4 -= o[4 * C];
            }
            const int k = b & 1;
            double* const c = cs + k * 5 * C + lane;
            c[0] = n0, c[C] = n1, c[2 * C] = n2, c[3 * C] = n3, c[4 * C] = n4;
            int* const ci = cc + k * 3 * C + lane;
            ci[0] = max(M0, m0), ci[C] = max(M1, m1), ci[2 * C] = max(M2, m2);
            mbar_arrive(cbar0 + 8u * (b % W));
        }
        // C: the batch's rows, entering and leaving, and the results.
        {
            const int so = b >= wr ? (b - wr) % NB : s;
            const float* const xl = ra + so * R * C + lane;
            const float* const yl = rb + so * R * C + lane;
            float* const op = O + (p0 + static_cast<long long>(b) * R) * ld + col;
            CState st{S0, S1, S2, S3, S4, M0 + w - b * R, M1 + w - 1 - b * R, M2 + w - 1 - b * R};
            const Shift sh{sx, sy, sxf, syf, n};
            if (b * R >= first_out && b * R + R <= n_pass && active && b >= wr)
                c_pass<R, WIN, LD, true, true>(xa, ya, xl, yl, op, px0, py0, sh, st, ld, 0, R);
            else if (b >= wr)
                c_pass<R, WIN, LD, false, true>(xa, ya, xl, yl, op, px0, py0, sh, st, ld, active ? first_out - b * R : R, n_pass - b * R);
            else
                c_pass<R, WIN, LD, false, false>(xa, ya, xl, yl, op, px0, py0, sh, st, ld, active ? first_out - b * R : R, n_pass - b * R);
        }
        // Release the slots read: this batch's (entering) and the leaving rows'; refill the latter.
        __syncwarp();
        if (lane == 0) {
            mbar_arrive(empty0 + 8u * s);
            if (b >= wr) {
                const int old = b - wr, so = old % NB;
                mbar_arrive(empty0 + 8u * so);
                const int next = old + NB;
                if (next < nb) {
                    mbar_wait(empty0 + 8u * so, (old / NB) & 1);
                    issue(next);
                }
            }
        }
    }
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

int main(int argc, char** argv) {
    const int only = argc > 3 ? std::atoi(argv[3]) : -1;  // run only the configuration of this number
    const long long rows = argc > 1 ? std::atoll(argv[1]) : 50000, cols = argc > 2 ? std::atoll(argv[2]) : 50000;
    const Panels pn = make_panels(rows, cols);
    float *const a = pn.a, *const b = pn.b, *const o = pn.o;
    const size_t bytes = pn.bytes;
    const double bw = pn.bw, floor_ms = pn.floor_ms;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult qr;
    CK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &qr));
    const auto encode = reinterpret_cast<EncodeTiled>(fn);
    std::printf("proto chain_corr: %lld x %lld f32, copy %.3f TB/s, floor %.3f ms\n", rows, cols, bw / 1e12, floor_ms);
    const long long check_cols[] = {0, 1, 5, 6, 4097, cols / 2 + 3, cols - 1};

    int config = -1;
    auto run = [&](auto kernel, int W, int R, int AH, int w, long long tile, Layout L) {
        if (++config != only && only >= 0) return;
        CUtensorMap ma, mb;
        const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
        const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 4};
        const cuuint32_t box[2] = {C, static_cast<cuuint32_t>(R)}, es[2] = {1, 1};
        for (auto [m, p] : {std::pair{&ma, a}, std::pair{&mb, b}})
            if (encode(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                       CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
                std::printf("tensor map failed\n");
                std::exit(1);
            }
        if (L.bytes > 227 * 1024) {
            std::printf("  W=%d R=%d AH=%d w=%d: %zu B of shared memory: too much\n", W, R, AH, w, L.bytes);
            return;
        }
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L.bytes));
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, kernel));
        const long long ntiles = (rows + tile - 1) / tile;
        const dim3 grid(static_cast<unsigned>((cols + C - 1) / C), static_cast<unsigned>(ntiles));
        CK(cudaMemset(o, 0xff, bytes));
        std::printf("  config %d ...\n", config);
        std::fflush(stdout);
        const float ms = median_ms([&] { kernel<<<grid, C * W, L.bytes>>>(ma, mb, a, b, o, rows, cols, cols, w, tile, L); }, 7);
        double num = 0, den = 0;
        long long nan_mis = 0;
        for (long long j : check_cols) {
            if (j >= cols) continue;
            const auto x = host_column(a, rows, cols, j), y = host_column(b, rows, cols, j), g = host_column(o, rows, cols, j);
            for (long long t = 0; t < rows; ++t) {
                const double r = ref_corr(x, y, t, w);
                if (std::isnan(r) != std::isnan(g[t])) ++nan_mis;
                else if (!std::isnan(r)) num += (r - g[t]) * (r - g[t]), den += r * r;
            }
        }
        std::printf("  W=%d R=%d AH=%d w=%d tile=%lld: %.3f ms = %.2f x floor; %d regs, %d B local, smem %zu B; rel frob %.1e, NaN mismatches %lld\n",
                    W, R, AH, w, tile, ms, ms / floor_ms, fa.numRegs, (int)fa.localSizeBytes, L.bytes, std::sqrt(num / den), nan_mis);
    };
    run(chain_corr<16, 25, 250, 0>, 16, 25, 2, 250, rows, layout<25>(250, 16, 2));
    if (cols == 50000) {
        run(chain_corr<16, 25, 250, 50000>, 16, 25, 2, 250, rows, layout<25>(250, 16, 2));
        run(chain_corr<16, 25, 250, 50000>, 16, 25, 4, 250, rows, layout<25>(250, 16, 4));
        run(chain_corr<12, 25, 250, 50000>, 12, 25, 3, 250, rows, layout<25>(250, 12, 3));
        run(chain_corr<16, 20, 20, 50000>, 16, 20, 4, 20, rows, layout<20>(20, 16, 4));
        run(chain_corr<16, 25, 250, 50000>, 16, 25, 2, 250, rows / 4, layout<25>(250, 16, 2));
        run(chain_corr<16, 32, 128, 50000>, 16, 32, 2, 128, rows, layout<32>(128, 16, 2));
        run(chain_corr<16, 25, 100, 50000>, 16, 25, 2, 100, rows, layout<25>(100, 16, 2));
        run(chain_corr<16, 25, 250, 50000>, 16, 25, 2, 250, rows, layout<25>(250, 16, 2));
    } else {
        run(chain_corr<16, 20, 20, 0>, 16, 20, 4, 20, rows, layout<20>(20, 16, 4));
    }
    return 0;
}
