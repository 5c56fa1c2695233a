#!/usr/bin/env python3
# Experiment tool (not part of the library): the size of generated kernels without a GPU or a disassembler,
# for work on instructions per row (bench/RESULTS.md, eighth session of 2026-12-01: G1 and G5 are bound
# by instruction issue as much as by memory, and under the H200's power cap by the float64 work).
#
# For every source given (dumped with FJ_DUMP_DIR), NVRTC compiles a cubin for the arch and PTX for its
# virtual arch, and this prints:
#   - the instructions of the kernel's machine code (the .text section's bytes / 16 on sm_70 and later):
#     exact, and what two variants of a change should be compared on (identical cubins mean ptxas made
#     the same code of both: cmp them);
#   - the PTX opcode mix of the loop with the most stores (the batched loop of a column scan), per row:
#     an approximation of the machine code's (ptxas folds some additions into addresses, negations into
#     operands, and may if-convert branches).
#
#   FJ_DUMP_DIR=/tmp/k build/factorjit compile -e 'corr(window(A,20), window(B,20))' --ld 50000
#   python3 bench/proto/code_size.py /tmp/k/*.cu [--arch sm_90]
import collections
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvrtc_paths  # noqa: E402  (NVRTC through ctypes, the library's options)


def text_bytes(cubin):
    """Sizes of the ELF's .text.* sections (64-bit little-endian ELF)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_off = sections[shstrndx][4]
    out = {}
    for name, _type, _flags, _addr, off, size, *_ in sections:
        end = cubin.index(b"\0", names_off + name)
        label = cubin[names_off + name:end].decode()
        if label.startswith(".text."):
            out[label[len(".text."):]] = size
    return out


def busiest_loop(ptx):
    """PTX lines of the innermost loop (a label up to the branch back to it, with no other loop inside)
    with the most global stores."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"^(\$L__BB\d+_\d+):", l))}
    loops = []
    for i, l in enumerate(lines):
        m = re.search(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", l)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append((labels[m.group(1)], i))
    inner = [(a, b) for a, b in loops if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in loops)]
    best = []
    for a, b in inner:
        body = lines[a:b + 1]
        if sum("st.global" in x for x in body) > sum("st.global" in x for x in best):
            best = body
    return best


def opcode(line):
    s = line.strip()
    if not s or s.startswith(("//", "$", "{", "}", ".")):
        return None
    s = re.sub(r"^@!?%p\d+\s+", "", s)
    return s.split()[0].rstrip(";")


def main():
    args = sys.argv[1:]
    arch = "sm_90"
    if "--arch" in args:
        arch = args[args.index("--arch") + 1]
        args = [a for a in args if a not in ("--arch", arch)]
    if not args:
        sys.exit("usage: code_size.py KERNEL.cu ... [--arch sm_90]")
    virt = "compute_" + arch.split("_")[1]
    for path in args:
        src = open(path).read()
        sizes = text_bytes(nvrtc_paths.nvrtc_compile(src, arch, "CUBIN"))
        loop = busiest_loop(nvrtc_paths.nvrtc_compile(src, virt, "PTX").decode(errors="replace"))
        rows = max(1, sum("st.global" in l for l in loop))
        mix = collections.Counter(op for op in map(opcode, loop) if op)
        print(os.path.basename(path))
        for fn, size in sizes.items():
            print("  %s: %d instructions (%d bytes of %s machine code)" % (fn, size // 16, size, arch))
        print("  busiest loop: %d PTX instructions for %d stored rows, %.1f per row:" % (sum(mix.values()), rows,
                                                                                        sum(mix.values()) / rows))
        print("   ", ", ".join("%s %.1f" % (op, n / rows) for op, n in mix.most_common()))


if __name__ == "__main__":
    main()
