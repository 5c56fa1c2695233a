// NumPy .npy files for the command line: read float32/float64 panels, write results atomically.
//
// Reading: format versions 1.0, 2.0 and 3.0; little-endian '<f4' and '<f8'; C order or Fortran order
// (pandas' .values is often column-major); 1-D arrays are one column (T x 1). The data is read once,
// with read(), straight into one 64-byte aligned buffer in row-major order: a Fortran-order file is
// transposed chunk by chunk on the way in, so a panel of several GB never exists twice in memory.
//
// Writing: C-order version 1.0 files, through a temporary file in the destination's directory that is
// renamed into place, so a reader never sees a partial file and a failure leaves the old file (or no
// file) behind. PendingFile splits this in two so that a command that writes several outputs can create
// every temporary file first (an unwritable directory fails before any work), write them all, and only
// then rename them all.
//
// Every failure throws fj::InputError whose message starts with the file name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/panel.hpp"

namespace fj::cli {

// Uninitialised 64-byte aligned memory: pages are first touched by whoever fills them.
struct AlignedFree {
    void operator()(std::byte* p) const;
};
using AlignedBuffer = std::unique_ptr<std::byte[], AlignedFree>;
AlignedBuffer aligned_alloc_bytes(std::size_t bytes);  // throws std::bad_alloc

// What a .npy header says, checked: 1-D or 2-D, float32/float64, little-endian, sizes that fit.
struct NpyHeader {
    std::vector<std::int64_t> shape;  // as in the file: {T} or {T, N}
    fj::DType dtype = fj::DType::F32;
    bool fortran_order = false;       // as in the file
    int version_major = 1;
    std::size_t data_offset = 0;      // bytes before the data
    std::size_t data_bytes = 0;

    std::int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
    std::int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
    std::string shape_str() const;  // "(3, 4)", "(5,)": as numpy prints it
};

struct NpyArray {
    NpyHeader header;   // header.fortran_order tells what the file had; data is always row-major
    AlignedBuffer data; // rows() x cols() elements of header.dtype, row-major, ld = cols()

    fj::Panel panel() const;  // a view of data
};

// Reads and checks only the header (and that the file is long enough for the data it announces).
NpyHeader read_npy_header(const std::string& path);

// An input read in chunks of rows, for `eval`'s pipeline (reading, computing and writing overlapped).
// C-order data (and 1-D arrays, and Fortran-order arrays of one row or one column, which lie the same way)
// is memory-mapped and used in place: a chunk is a view of the mapping, nothing is copied, and rows no
// chunk needs any more are handed back to the kernel (madvise), so a panel larger than RAM streams
// through. Fortran-order data is copied: each chunk's rows are transposed out of the mapping into a
// buffer of the caller's. A file that cannot be mapped (not a regular file) is read whole into memory once.
class NpyReader {
public:
    explicit NpyReader(const std::string& path);  // opens, checks the header and the length; throws InputError
    ~NpyReader();
    NpyReader(const NpyReader&) = delete;
    NpyReader& operator=(const NpyReader&) = delete;

    const NpyHeader& header() const { return header_; }
    const std::string& path() const { return path_; }
    // Whether chunks are views of the file (view()) rather than copies (load() into a buffer).
    bool in_place() const { return !transpose_; }
    // Rows [row0, row0 + rows) as a panel (in_place() only); ld = cols.
    fj::Panel view(std::int64_t row0, std::int64_t rows) const;
    // Brings rows [row0, row0 + rows) into memory. In place: faults their pages in now, so that computing
    // does not wait on the disk; dst is unused. Otherwise: copies (transposes) them into dst, row-major,
    // ld = cols. (The length was checked at open; a file shortened while mapped raises SIGBUS, as any
    // mapping does.)
    void load(std::int64_t row0, std::int64_t rows, void* dst);
    // Rows before `row` will not be read again: their pages may go (in place only; no-op otherwise).
    void release_before(std::int64_t row);

private:
    std::string path_;
    NpyHeader header_;
    int fd_ = -1;
    void* map_ = nullptr;       // the whole file, read-only
    std::size_t map_bytes_ = 0;
    AlignedBuffer whole_;       // a file that could not be mapped, read whole (row-major)
    bool transpose_ = false;
    std::int64_t released_ = 0; // rows [0, released_) were released
    const std::byte* data() const;
};

// Reads the whole array.
NpyArray read_npy(const std::string& path);

// "(3, 4)" / "(5,)" for a shape.
std::string shape_str(const std::vector<std::int64_t>& shape);

// A temporary file next to `path` that becomes `path` on commit(). The destructor removes it unless
// it was committed. Not copyable.
class PendingFile {
public:
    explicit PendingFile(std::string path);  // creates the temporary file; throws fj::InputError
    ~PendingFile();
    PendingFile(const PendingFile&) = delete;
    PendingFile& operator=(const PendingFile&) = delete;
    PendingFile(PendingFile&& other) noexcept;
    PendingFile& operator=(PendingFile&&) = delete;

    const std::string& path() const { return path_; }
    const std::string& temp_path() const { return temp_path_; }

    // Writes a C-order v1.0 .npy: shape {T} or {T, N}; data holds T*N elements of dtype, row-major.
    // Closes the temporary file.
    void write_npy(const std::vector<std::int64_t>& shape, fj::DType dtype, const void* data);
    // The same file written in pieces, in any order: begin_npy writes the header and sizes the file for
    // the data; write_data puts bytes at an offset of the data (pwrite: several threads may write disjoint
    // ranges); finish_npy closes the file (reporting a failed close). Then commit().
    void begin_npy(const std::vector<std::int64_t>& shape, fj::DType dtype);
    void write_data(std::size_t offset, const void* data, std::size_t bytes);
    void finish_npy();
    // Renames the written temporary file to path().
    void commit();

private:
    std::string path_, temp_path_;
    int fd_ = -1;
    std::size_t data_offset_ = 0, data_bytes_ = 0;  // begin_npy's
    bool written_ = false, committed_ = false;
};

// Writes `path` through a temporary file and a rename.
void write_npy_atomic(const std::string& path, const std::vector<std::int64_t>& shape, fj::DType dtype,
                      const void* data);

// The header bytes write_npy produces (magic, version 1.0, dict padded so the data is 64-byte aligned).
std::string npy_header_v1(const std::vector<std::int64_t>& shape, fj::DType dtype);

}  // namespace fj::cli
