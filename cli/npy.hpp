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
    // Renames the written temporary file to path().
    void commit();

private:
    std::string path_, temp_path_;
    int fd_ = -1;
    bool written_ = false, committed_ = false;
};

// Writes `path` through a temporary file and a rename.
void write_npy_atomic(const std::string& path, const std::vector<std::int64_t>& shape, fj::DType dtype,
                      const void* data);

// The header bytes write_npy produces (magic, version 1.0, dict padded so the data is 64-byte aligned).
std::string npy_header_v1(const std::vector<std::int64_t>& shape, fj::DType dtype);

}  // namespace fj::cli
