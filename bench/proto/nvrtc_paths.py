#!/usr/bin/env python3
# Experiment (not part of the library): where a cold compile's time goes, and whether another path from
# CUDA C++ to a cubin is faster, for J1 of TARGETS.md (cold compile of one kernel <= 150 ms).
#
# Why: on the H200 machine a cold NVRTC compile of J1's kernels took 100-320 ms (bench/RESULTS.md, seventh
# session of 2026-12-01), while a repeat of a source already compiled there took 11-21 ms (the driver's
# JIT cache; CUDA_CACHE_DISABLE=1 takes that away). On the development machine (no driver) the same
# sources take 62-112 ms: NVRTC's front end to PTX 32-46 ms and PTX to cubin 30-59 ms, in process. So on
# the device it is the code generation that is slow (100-180 ms), which suggests that NVRTC hands it to the
# driver there. This script times, for every source given, each compile on a new source (a unique
# variable appended, so no cache can answer):
#   cubin     NVRTC straight to a cubin (what the library does: codegen/cuda/emit.cpp's options)
#   ptx       NVRTC to PTX (compute_XX) only: the front end
#   jitlink   nvJitLink (libnvJitLink, loaded at run time like NVRTC) from that PTX to a cubin, in process
#   driver    cuModuleLoadDataEx from that PTX (the driver's JIT), where libcuda loads
#
#   FJ_DUMP_DIR=/tmp/jd build/factorjit compile -e 'corr(window(A, 20), window(B, 20))' --arch sm_90   # (each J1 kernel)
#   python3 bench/proto/nvrtc_paths.py /tmp/jd [rounds] [sm_90] ['-Ofc=mid;--ptxas-options=-O1']
#
# The fourth argument lists further option sets (';' between sets, ' ' within one): the cubin path is timed
# with each added, to see what the code generation's options cost. A trivial kernel's times come first: the
# fixed cost of each path.
#
# Measured on the development machine (2 cores, no GPU, 2026-12-01), J1's five generic kernels, ms:
#   A*B - delay(A,1)  cubin 62-80   ptx 32-33 + jitlink 30-57
#   corr w=20         cubin 94-100  ptx 45    + jitlink 35-37
#   max(A, w=30)      cubin 81-86   ptx 43-44 + jitlink 43-45
#   mean(std(w5),w10) cubin 102-112 ptx 45-46 + jitlink 57-59
#   std w=250         cubin 68-86   ptx 33-36 + jitlink 39-42
# (no gain here: the question is the device, where cubin took 100-320.)
# On the H200 machine (2026-12-01, eighth session; bench/RESULTS.md): trivial kernel cubin 36 ms, PTX 23;
# corr w=20 cubin 87-91 against PTX 55-63 + nvJitLink 33-36 or + driver 32-33; -Ofc=mid/min and ptxas -O1
# no faster; CUDA_CACHE_DISABLE=1 the same. NVRTC's own cubin path stays.
import ctypes
import glob
import os
import sys
import time

CUDA_LIB = os.environ.get("CUDA_LIB", "/usr/local/cuda/lib64")
OPTIONS = ["-minimal", "-default-device", "--std=c++17", "--fmad=false", "--diag-suppress=177"]
NVJITLINK_INPUT_PTX = 2


def load(name):
    try:
        return ctypes.CDLL(os.path.join(CUDA_LIB, name))
    except OSError:
        try:
            return ctypes.CDLL(name)
        except OSError:
            return None


nvrtc = load("libnvrtc.so.13") or load("libnvrtc.so")
jitlink = load("libnvJitLink.so.13") or load("libnvJitLink.so")
cuda = load("libcuda.so.1")
if nvrtc is None:
    sys.exit("no libnvrtc")


def cstrings(items):
    return (ctypes.c_char_p * len(items))(*[s.encode() for s in items])


def nvrtc_compile(src, arch, what):
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None) != 0:
        raise RuntimeError("nvrtcCreateProgram")
    opts = ["--gpu-architecture=" + arch] + OPTIONS
    r = nvrtc.nvrtcCompileProgram(prog, len(opts), cstrings(opts))
    if r != 0:
        raise RuntimeError("nvrtcCompileProgram: %d" % r)
    size = ctypes.c_size_t()
    getattr(nvrtc, "nvrtcGet%sSize" % what)(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    getattr(nvrtc, "nvrtcGet%s" % what)(prog, buf)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return buf.raw


def jitlink_cubin(ptx, arch):
    h = ctypes.c_void_p()
    opts = ["-arch=" + arch]
    if jitlink.nvJitLinkCreate(ctypes.byref(h), len(opts), cstrings(opts)) != 0:
        raise RuntimeError("nvJitLinkCreate")
    if jitlink.nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx, len(ptx), b"k.ptx") != 0:
        raise RuntimeError("nvJitLinkAddData")
    if jitlink.nvJitLinkComplete(h) != 0:
        raise RuntimeError("nvJitLinkComplete")
    size = ctypes.c_size_t()
    jitlink.nvJitLinkGetLinkedCubinSize(h, ctypes.byref(size))
    jitlink.nvJitLinkDestroy(ctypes.byref(h))
    return size.value


driver_ready = False
if cuda is not None and cuda.cuInit(0) == 0:
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0:
        driver_ready = cuda.cuCtxSetCurrent(ctx) == 0


def driver_load(ptx):
    mod = ctypes.c_void_p()
    r = cuda.cuModuleLoadDataEx(ctypes.byref(mod), ptx, 0, None, None)
    if r != 0:
        raise RuntimeError("cuModuleLoadDataEx: %d" % r)
    cuda.cuModuleUnload(mod)


counter = [int(time.time() * 1e6) % 1000000007]


def fresh(src):  # a source no cache has seen
    counter[0] += 1
    return src + "\n__device__ int fj_fresh_%d;\n" % counter[0]


def ms(f):
    t = time.perf_counter()
    out = f()
    return (time.perf_counter() - t) * 1e3, out


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "/tmp/jd"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    arch = sys.argv[3] if len(sys.argv) > 3 else "sm_90"
    virt = "compute_" + arch.split("_")[1]
    files = sorted(glob.glob(os.path.join(folder, "*.cu")))
    if not files:
        sys.exit("no .cu files in " + folder)
    nvrtc_compile(fresh('extern "C" __global__ void k() {}'), arch, "CUBIN")  # (first-call costs)
    print("paths: cubin, ptx%s%s; CUDA_CACHE_DISABLE=%s" % (" + jitlink" if jitlink else "", " + driver" if driver_ready else "",
                                                          os.environ.get("CUDA_CACHE_DISABLE", "")))
    variants = [v.split() for v in sys.argv[4].split(";")] if len(sys.argv) > 4 and sys.argv[4] else []
    trivial = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] += 1.0f; }'
    for what, target in (("CUBIN", arch), ("PTX", virt)):
        ts = sorted(ms(lambda: nvrtc_compile(fresh(trivial), target, what))[0] for _ in range(5))
        print("trivial kernel, %-5s %s" % (what.lower(), " ".join("%.0f" % t for t in ts)))
    for v in variants:
        saved = list(OPTIONS)
        OPTIONS.extend(v)
        try:
            for f in files:
                src = open(f).read()
                ts = [ms(lambda: nvrtc_compile(fresh(src), arch, "CUBIN"))[0] for _ in range(rounds)]
                print("%-24s %-40s cubin %s" % (" ".join(v), os.path.basename(f)[:40], " ".join("%4.0f" % t for t in ts)))
        except RuntimeError as e:
            print("%-24s not accepted: %s" % (" ".join(v), e))
        OPTIONS[:] = saved
    for f in files:
        src = open(f).read()
        rows = []
        for _ in range(rounds):
            t_cubin, _ = ms(lambda: nvrtc_compile(fresh(src), arch, "CUBIN"))
            t_ptx, ptx = ms(lambda: nvrtc_compile(fresh(src), virt, "PTX"))
            row = "cubin %4.0f  ptx %4.0f" % (t_cubin, t_ptx)
            if jitlink:
                row += " + jitlink %4.0f" % ms(lambda: jitlink_cubin(ptx, arch))[0]
            if driver_ready:
                row += " | driver %4.0f" % ms(lambda: driver_load(ptx))[0]
            rows.append(row)
        print("%-40s %s" % (os.path.basename(f)[:40], " ; ".join(rows)))


if __name__ == "__main__":
    main()
