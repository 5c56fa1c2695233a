// Prototype (experiment, not part of the library; the library generates this design from the kernel IR
// since 2026-12-01: codegen/cuda/window_scan.cpp, "window-scan kernels"): a rolling-correlation kernel that keeps a column strip's
// whole window in shared memory, to test whether long windows (G4: w = 250 within 1.3 x w = 20) can run
// near the bandwidth floor. Hand-written for corr(window(A,w), window(B,w)) on float32, full windows.
//
// Why: the library's column-scan kernels read the row leaving a window from global memory, w rows after
// they read it entering. With 512 threads per SM in flight that is 132 x 512 x w x 8 bytes of rows to keep
// in L2: 135 MB at w = 250, 2.7 x the L2, so the re-reads go to DRAM. Keeping the window on chip allows
// only about 64 columns per SM (64 x 8 B x (w + lookahead) in shared memory); so that 512 threads still
// work, 8 threads share a column: each batch of 32 rows is cut into 8 segments of 4 rows (one per warp;
// lanes are the strip's 32 columns), each segment sums its rows' entering-minus-leaving deltas, and the
// segments' totals are combined through shared memory (an exclusive scan over warps). The float32 sums are
// exact in float64 (shifted values, as the library's lowering keeps them), so the order of the additions
// changes nothing.
//
// Loads: cp.async of 16 bytes straight into the ring (row-major, 32 floats per row: conflict-free reads
// by lanes = columns), P batches ahead. Three barriers per batch: the batch has landed; the segments'
// totals are written; their exclusive prefix (one quantity per warp) is written.
//
//   nvcc -O3 -arch=sm_90 -o scan_corr bench/proto/scan_corr.cu && ./scan_corr [rows cols]
// (Data, reference and timing: proto_common.cuh, shared with chain_corr.cu since 2026-12-01; its data
// now holds constant stretches in columns 5 and 6, which this file's checks do not read.)
// prints, for w = 20 and w = 250 and several tile lengths, the median time of 5 runs, the copy floor of
// the same run, and the error against a float64 two-pass reference on a few columns.
//
// Measured on the H200 (2026-12-01, 50,000 x 50,000, bench/RESULTS.md): results right (rel. Frobenius error
// 5e-8, NaN placement exact), and the same time for w = 20 and w = 250: the window does stay on chip.
//   v1  three barriers, each warp summing the earlier segments' totals, 64-bit ring arithmetic   41.0 ms
//   v2  the running totals double-buffered (two barriers), batches inside the pass unguarded     18.8 ms
//   v3  pointer offsets, the ring's first rows mirrored after it (no wrap tests), float32 masks    17.3 ms
//   v4  pointer-stepped loads, the earlier segments' sum unrolled, products in two exact FMAs     15.1 ms
//   v5  the segments' prefix scanned one quantity per warp (5 sums, 3 reset rows: 8 warps, balanced;
//       three barriers again, but 7 % of stall samples on them instead of 25 %)                   12.95 ms
//   v6  (this file) shared addresses stepped, interior batches chosen by index, shift set outside  12.63 ms
// = 1.81 x the copy floor, against the library's 8.5-8.7 ms at w = 20 and 14.8-15.4 ms at w = 250: at w = 250
// it is 15 % faster than the library's kernel, and w = 250 would cost 1.47 x the library's w = 20 (G4 asks
// 1.3). ncu (v5, 10,000 x 10,000): 116 warp instructions per row (the library's kernel: 73), of which about
// 16 loop and copy overhead, 48 the segment's rows, 7 the scan, 43 the results; 0.65 issued per scheduler
// and cycle. What is left to try: fewer instructions per row in the two row phases (the runs' max, the
// masks of leaving values), longer segments without registers for their prefix, a float32 final step.
#include "proto_common.cuh"

constexpr int C = 32;          // columns per block (the lanes of a warp)
constexpr int S = 8;           // segments per batch (the warps of a block)
constexpr int R = 4;           // rows per segment
constexpr int BATCH = S * R;   // rows per batch
constexpr int P = 2;           // batches loaded ahead (3 would leave one block per SM at w = 250)

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_wait_ahead() { asm volatile("cp.async.wait_group %0;\n" ::"n"(P - 1)); }

__device__ __forceinline__ bool is_finite32(float v) { return fabsf(v) <= 3.402823466e38f; }

// Shared memory after the two rings: the segments' totals, then their exclusive prefix in place (structure
// of arrays, lanes contiguous: no bank conflicts).
struct Shared {
    double* tsum;  // [S][5][C]
    int* tcnt;     // [S][3][C]
};

// The per-thread state of a pass.
struct PassState {
    double shx, shy;
    float shx32, shy32;  // the same as float32: a masked value becomes the shift, so that it adds 0
    // The running total through the last batch of the quantity this warp scans (see run_batch): a sum for
    // warps 0-4, a latest reset row for warps 5-7 (latest non-finite row, change of x, of y; -1: none).
    double base_sum;
    int base_cnt;
};

// One batch of one segment. kInterior: every row of the batch has a leaving row inside the pass and is an
// output row (no guards).
template <bool kInterior>
__device__ __forceinline__ void run_batch(const float* ra, const float* rb, float* out_col, const Shared& sh,
                                          PassState& st, int lane, int seg, int ring_rows, int w, int u_batch,
                                          int slot_batch, long long n_pass, long long first_out_u,
                                          long long ld, bool active) {
    if (!kInterior && u_batch == 0) {  // the pass's shift: its first row (batch 0 is never interior)
        const float x0 = ra[lane], y0 = rb[lane];
        st.shx32 = is_finite32(x0) ? x0 : 0.0f;
        st.shy32 = is_finite32(y0) ? y0 : 0.0f;
        st.shx = st.shx32, st.shy = st.shy32;
    }
    double L[R][5];
    int lc[R][3];
    double acc[5] = {0, 0, 0, 0, 0};
    int m[3] = {-1, -1, -1};
    const int u_seg = u_batch + seg * R;
    const int s = slot_batch + seg * R;  // ring_rows is a multiple of BATCH: a segment never wraps
    int so = s - w;
    if (so < 0) so += ring_rows;  // its leaving rows may: the ring's first R - 1 rows are mirrored after it
    const float *xa = ra + s * C + lane, *ya = rb + s * C + lane;
    const float *xl = ra + so * C + lane, *yl = rb + so * C + lane;
    float px, py;  // the row before the segment (NaN before the pass: a change)
    {
        const int sp = s == 0 ? ring_rows - 1 : s - 1;
        px = kInterior || u_seg > 0 ? ra[sp * C + lane] : __int_as_float(0x7fc00000);
        py = kInterior || u_seg > 0 ? rb[sp * C + lane] : __int_as_float(0x7fc00000);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int u = u_seg + i;
        const float x = xa[i * C], y = ya[i * C];
        const bool fin = is_finite32(x) && is_finite32(y);
        const double xi = static_cast<double>(fin ? x : st.shx32) - st.shx;
        const double yi = static_cast<double>(fin ? y : st.shy32) - st.shy;
        double xo = 0, yo = 0;
        if (kInterior || u >= w) {
            const float x2 = xl[i * C], y2 = yl[i * C];
            const bool fo = is_finite32(x2) && is_finite32(y2);
            xo = static_cast<double>(fo ? x2 : st.shx32) - st.shx;
            yo = static_cast<double>(fo ? y2 : st.shy32) - st.shy;
        }
        // Two steps each, every one exact (shifted float32 values: see the header), so any order agrees.
        acc[0] = (acc[0] + xi) - xo;
        acc[1] = (acc[1] + yi) - yo;
        acc[2] = fma(-xo, xo, fma(xi, xi, acc[2]));
        acc[3] = fma(-yo, yo, fma(yi, yi, acc[3]));
        acc[4] = fma(-xo, yo, fma(xi, yi, acc[4]));
#pragma unroll
        for (int k = 0; k < 5; ++k) L[i][k] = acc[k];
        if (!fin) m[0] = u;
        if (!(x == px)) m[1] = u;  // NaN on either side is a change
        if (!(y == py)) m[2] = u;
#pragma unroll
        for (int k = 0; k < 3; ++k) lc[i][k] = m[k];
        px = x, py = y;
    }
    double* const my_sum = sh.tsum + seg * 5 * C + lane;
    int* const my_cnt = sh.tcnt + seg * 3 * C + lane;
#pragma unroll
    for (int k = 0; k < 5; ++k) my_sum[k * C] = acc[k];
#pragma unroll
    for (int k = 0; k < 3; ++k) my_cnt[k * C] = m[k];
    __syncthreads();
    // The exclusive prefix over the segments, one quantity per warp (5 sums and 3 latest resets: 8 warps),
    // in place; the running total through the batch stays in that warp's registers. Balanced: every warp
    // reads and writes 8 values.
    static_assert(S == 5 + 3, "one warp per scanned quantity");
    if (seg < 5) {
        double run = st.base_sum;
        double* t = sh.tsum + seg * C + lane;
#pragma unroll
        for (int j = 0; j < S; ++j) {
            const double v = t[j * 5 * C];
            t[j * 5 * C] = run;
            run += v;
        }
        st.base_sum = run;
    } else {
        int run = st.base_cnt;
        int* t = sh.tcnt + (seg - 5) * C + lane;
#pragma unroll
        for (int j = 0; j < S; ++j) {
            const int v = t[j * 3 * C];
            t[j * 3 * C] = run;
            run = max(run, v);
        }
        st.base_cnt = run;
    }
    __syncthreads();
    double E[5];
    int e[3];
#pragma unroll
    for (int k = 0; k < 5; ++k) E[k] = my_sum[k * C];
#pragma unroll
    for (int k = 0; k < 3; ++k) e[k] = my_cnt[k * C];
    const double n = w;
    float* op = out_col + static_cast<long long>(u_seg) * ld;
#pragma unroll
    for (int i = 0; i < R; ++i, op += ld) {
        const int u = u_seg + i;
        if (!kInterior && (!active || u >= n_pass || u < first_out_u)) continue;
        const double sx = E[0] + L[i][0], sy = E[1] + L[i][1], sxx = E[2] + L[i][2], syy = E[3] + L[i][3],
                     sxy = E[4] + L[i][4];
        const int run_f = u - max(e[0], lc[i][0]);
        const int run_cx = u - max(e[1], lc[i][1]), run_cy = u - max(e[2], lc[i][2]);
        const double cxy = fma(n, sxy, -sx * sy), vx = fma(n, sxx, -sx * sx), vy = fma(n, syy, -sy * sy);
        float rr = static_cast<float>(cxy) * rsqrtf(static_cast<float>(vx * vy));
        rr = fminf(fmaxf(rr, -1.0f), 1.0f);
        const bool ok = run_f >= w && run_cx < w - 1 && run_cy < w - 1 && vx > 0 && vy > 0;
        if (kInterior && !active) continue;
        *op = ok ? rr : __int_as_float(0x7fc00000);
    }
}

// ring_rows >= w + (P + 1) * BATCH and a multiple of BATCH. Columns: cols % 4 == 0 and ld % 4 == 0 (16-byte loads).
extern "C" __global__ void __launch_bounds__(C * S, 2)
scan_corr(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ O, long long rows,
          long long cols, long long ld, int w, long long tile, int ring_rows) {
    extern __shared__ __align__(16) unsigned char smem[];
    float* ra = reinterpret_cast<float*>(smem);
    float* rb = ra + (ring_rows + R) * C;  // each ring: ring_rows rows and a mirror of its first R - 1 (one spare)
    Shared sh;
    sh.tsum = reinterpret_cast<double*>(rb + (ring_rows + R) * C);
    sh.tcnt = reinterpret_cast<int*>(sh.tsum + S * 5 * C);

    const int lane = threadIdx.x & 31, seg = threadIdx.x >> 5, tid = threadIdx.x;
    const long long col = static_cast<long long>(blockIdx.x) * C + lane;
    const bool active = col < cols;
    const int lrow = tid >> 3, lc4 = (tid & 7) * 4;  // the loader's row of a batch and first column
    const long long gcol = static_cast<long long>(blockIdx.x) * C + lc4;

    for (long long ti = blockIdx.y; ti * tile < rows; ti += gridDim.y) {
        const long long t0 = ti * tile, t1 = min(rows, t0 + tile);
        const long long p0 = max(0LL, t0 - (w - 1));
        const long long n_pass = t1 - p0;
        const int nb = static_cast<int>((n_pass + BATCH - 1) / BATCH);
        const long long first_out_u = t0 - p0;
        // The loader's next batch: its ring slot and its source rows, advanced by one batch per issue.
        int load_slot = lrow;
        int load_u = lrow;
        const bool load_col = gcol < cols;
        const float* ga = A + (p0 + lrow) * ld + gcol;
        const float* gb = B + (p0 + lrow) * ld + gcol;
        const long long gstep = BATCH * ld;
        unsigned da = smem_addr(ra + lrow * C + lc4), db = smem_addr(rb + lrow * C + lc4);  // shared addresses
        const unsigned dstep = BATCH * C * 4, dring = static_cast<unsigned>(ring_rows) * C * 4;
        auto issue = [&]() {
            const bool ok = load_col && load_u < n_pass;
            const int bytes = ok ? 16 : 0;
            const float* sa = ok ? ga : A;
            const float* sb = ok ? gb : B;
            cp_async16(da, sa, bytes);
            cp_async16(db, sb, bytes);
            if (load_slot < R - 1) {  // the mirror after the ring
                cp_async16(da + dring, sa, bytes);
                cp_async16(db + dring, sb, bytes);
            }
            ga += gstep, gb += gstep;
            load_u += BATCH;
            load_slot += BATCH, da += dstep, db += dstep;
            if (load_slot >= ring_rows) load_slot -= ring_rows, da -= dring, db -= dring;
        };
        // Batches whose rows all have a leaving row in the pass and are output rows.
        const int b_lo = static_cast<int>((max(static_cast<long long>(w), first_out_u) + BATCH - 1) / BATCH);
        const int b_hi = static_cast<int>(n_pass / BATCH);
        __syncthreads();  // the previous pass's reads of the ring are done
        for (int b = 0; b < P; ++b) {
            if (b < nb) issue();
            cp_commit();
        }
        PassState st{};
        st.base_cnt = -1;
        float* out_col = O + p0 * ld + col;
        int slot_b = 0;
        for (int b = 0; b < nb; ++b) {
            cp_wait_ahead();
            // Batch b has landed for every thread, and every thread is done with batch b - 1: its ring rows
            // may be overwritten and its segments' totals rewritten.
            __syncthreads();
            if (b + P < nb) issue();
            cp_commit();
            const int u_batch = b * BATCH;
            const bool interior = b >= b_lo && b < b_hi;
            if (interior)
                run_batch<true>(ra, rb, out_col, sh, st, lane, seg, ring_rows, w, u_batch, slot_b, n_pass,
                                first_out_u, ld, active);
            else
                run_batch<false>(ra, rb, out_col, sh, st, lane, seg, ring_rows, w, u_batch, slot_b, n_pass,
                                 first_out_u, ld, active);
            slot_b += BATCH;
            if (slot_b >= ring_rows) slot_b -= ring_rows;
        }
        asm volatile("cp.async.wait_all;\n" ::);
    }
}

int main(int argc, char** argv) {
    const long long rows = argc > 1 ? std::atoll(argv[1]) : 50000, cols = argc > 2 ? std::atoll(argv[2]) : 50000;
    const Panels pn = make_panels(rows, cols);
    float *const a = pn.a, *const b = pn.b, *const o = pn.o;
    const double bw = pn.bw, floor_ms = pn.floor_ms;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    std::printf("proto scan_corr: %lld x %lld f32, copy %.3f TB/s, floor %.3f ms, %d SMs\n", rows, cols, bw / 1e12,
                floor_ms, sms);
    const long long check_cols[] = {0, 1, 4097, cols / 2 + 3, cols - 1};
    for (int w : {20, 250}) {
        const int ring = (w + (P + 1) * BATCH + BATCH - 1) / BATCH * BATCH;
        const size_t smem = static_cast<size_t>(ring + R) * C * 8 + S * C * (5 * 8 + 3 * 4);
        CK(cudaFuncSetAttribute(scan_corr, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        int per_sm = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, scan_corr, C * S, smem));
        cudaFuncAttributes fa;
        CK(cudaFuncGetAttributes(&fa, scan_corr));
        const long long grid_x = (cols + C - 1) / C;
        for (long long tile : {rows, 12500LL, 5000LL}) {
            if (tile > rows) continue;
            const long long ntiles = (rows + tile - 1) / tile;
            const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(std::min(ntiles, 65535LL)));
            const float ms = median_ms([&] {
                scan_corr<<<grid, C * S, smem>>>(a, b, o, rows, cols, cols, w, tile, ring);
            }, 5);
            // check
            double num = 0, den = 0;
            long long nan_mis = 0;
            for (long long j : check_cols) {
                const auto x = host_column(a, rows, cols, j), y = host_column(b, rows, cols, j),
                           g = host_column(o, rows, cols, j);
                for (long long t = 0; t < rows; ++t) {
                    const double r = ref_corr(x, y, t, w);
                    if (std::isnan(r) != std::isnan(g[t])) ++nan_mis;
                    else if (!std::isnan(r)) num += (r - g[t]) * (r - g[t]), den += r * r;
                }
            }
            std::printf("  w=%d tile=%lld: %.3f ms = %.2f x floor; %d regs, %d blocks/SM, smem %zu B; rel frob %.1e, NaN mismatches %lld\n",
                        w, tile, ms, ms / floor_ms, fa.numRegs, per_sm, smem, std::sqrt(num / den), nan_mis);
        }
    }
    return 0;
}
