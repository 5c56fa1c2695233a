#include "cli/npy.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dsl/error.hpp"
#include "runtime/fault_inject.hpp"

namespace fj::cli {

static_assert(std::endian::native == std::endian::little,
              "the .npy reader and writer assume a little-endian host");

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw fj::InputError(fmt::format("{}: {}", path, what));
}

[[noreturn]] void fail_errno(const std::string& path, const std::string& what, int err) {
    fail(path, fmt::format("{}: {}", what, std::strerror(err)));
}

// A file descriptor closed on scope exit.
struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
};

// read() until `n` bytes or end of file; returns the bytes read. read() moves at most ~2 GB per call.
std::size_t read_full(int fd, void* buf, std::size_t n, const std::string& path) {
    auto* p = static_cast<char*>(buf);
    std::size_t done = 0;
    while (done < n) {
        const std::size_t want = std::min<std::size_t>(n - done, std::size_t{1} << 30);
        const ssize_t r = ::read(fd, p + done, want);
        if (r < 0) {
            if (errno == EINTR) continue;
            fail_errno(path, "cannot read", errno);
        }
        if (r == 0) break;
        done += static_cast<std::size_t>(r);
    }
    return done;
}

void write_full(int fd, const void* buf, std::size_t n, const std::string& path) {
    const auto* p = static_cast<const char*>(buf);
    std::size_t done = 0;
    while (done < n) {
        const std::size_t want = std::min<std::size_t>(n - done, std::size_t{1} << 30);
        const ssize_t w = ::write(fd, p + done, want);
        if (w < 0) {
            if (errno == EINTR) continue;
            fail_errno(path, "cannot write", errno);
        }
        done += static_cast<std::size_t>(w);
    }
}

// ---------------------------------------------------------------------------------------------------
// The header is a Python literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
// This parses the small subset numpy writes (strings, True/False/None, integers, tuples, lists, dicts),
// enough to read any header and to say exactly what is unsupported about one.

struct PyValue {
    enum Kind { Str, Bool, None, Int, Tuple, List, Dict } kind = None;
    std::string str;                                     // Str
    bool flag = false;                                   // Bool
    std::int64_t integer = 0;                            // Int
    std::vector<PyValue> items;                          // Tuple, List
    std::vector<std::pair<std::string, PyValue>> fields; // Dict (keys are strings)
};

class HeaderParser {
public:
    HeaderParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

    PyValue parse_all() {
        PyValue v = value(0);
        skip_ws();
        if (i_ != s_.size()) bad("unexpected text after the header dictionary");
        return v;
    }

private:
    std::string_view s_;
    std::size_t i_ = 0;
    const std::string& path_;

    [[noreturn]] void bad(const std::string& what) {
        fail(path_, fmt::format("not a valid .npy header ({} at offset {} of the header text '{}')", what,
                                i_, std::string(s_.substr(0, 200))));
    }
    void skip_ws() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
            ++i_;
    }
    bool eat(char c) {
        skip_ws();
        if (i_ < s_.size() && s_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) bad(fmt::format("expected '{}'", c));
    }

    PyValue value(int depth) {
        if (depth > 16) bad("nesting too deep");
        skip_ws();
        if (i_ >= s_.size()) bad("unexpected end");
        const char c = s_[i_];
        PyValue v;
        if (c == '\'' || c == '"') {
            v.kind = PyValue::Str;
            v.str = string_literal();
        } else if (c == '(' || c == '[') {
            const char close = c == '(' ? ')' : ']';
            v.kind = c == '(' ? PyValue::Tuple : PyValue::List;
            ++i_;
            while (!eat(close)) {
                v.items.push_back(value(depth + 1));
                if (!eat(',')) {
                    expect(close);
                    break;
                }
            }
        } else if (c == '{') {
            v.kind = PyValue::Dict;
            ++i_;
            while (!eat('}')) {
                skip_ws();
                if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad("expected a string key");
                std::string key = string_literal();
                expect(':');
                v.fields.emplace_back(std::move(key), value(depth + 1));
                if (!eat(',')) {
                    expect('}');
                    break;
                }
            }
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            v.kind = PyValue::Int;
            bool neg = false;
            if (c == '-') {
                neg = true;
                ++i_;
            }
            if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') bad("expected a digit");
            std::int64_t x = 0;
            while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
                if (x > (INT64_MAX - 9) / 10) bad("integer too large");
                x = x * 10 + (s_[i_++] - '0');
            }
            if (i_ < s_.size() && (s_[i_] == 'L' || s_[i_] == 'l')) ++i_;  // Python 2 longs: (3L, 4L)
            v.integer = neg ? -x : x;
        } else if (word("True")) {
            v.kind = PyValue::Bool;
            v.flag = true;
        } else if (word("False")) {
            v.kind = PyValue::Bool;
            v.flag = false;
        } else if (word("None")) {
            v.kind = PyValue::None;
        } else {
            bad(fmt::format("unexpected character '{}'", c));
        }
        return v;
    }

    bool word(std::string_view w) {
        if (s_.substr(i_, w.size()) != w) return false;
        const std::size_t end = i_ + w.size();
        if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_'))
            return false;
        i_ = end;
        return true;
    }

    std::string string_literal() {
        const char q = s_[i_++];
        std::string out;
        while (true) {
            if (i_ >= s_.size()) bad("unterminated string");
            const char c = s_[i_++];
            if (c == q) break;
            if (c == '\\') {
                if (i_ >= s_.size()) bad("unterminated string");
                out.push_back(s_[i_++]);
                continue;
            }
            out.push_back(c);
        }
        return out;
    }
};

// A readable name for the dtypes people actually have in .npy files, for the error message.
std::string describe_descr(const std::string& d) {
    if (d.size() < 2) return "'" + d + "'";
    const char order = d[0];
    const std::string code = d.substr(1);
    std::string what;
    if (code == "f2") what = "float16";
    else if (code == "f4") what = "float32";
    else if (code == "f8") what = "float64";
    else if (code == "f16" || code == "f12") what = "long double";
    else if (code == "i1" || code == "i2" || code == "i4" || code == "i8")
        what = "int" + std::to_string(8 * (code[1] - '0'));
    else if (code == "u1" || code == "u2" || code == "u4" || code == "u8")
        what = "uint" + std::to_string(8 * (code[1] - '0'));
    else if (code == "b1") what = "bool";
    else if (code == "O") what = "object";
    else if (code[0] == 'c') what = "complex";
    else if (code[0] == 'U' || code[0] == 'S') what = "string";
    else if (code[0] == 'M' || code[0] == 'm') what = "datetime";
    std::string s = "'" + d + "'";
    if (!what.empty()) s += " (" + what + (order == '>' ? ", big-endian" : "") + ")";
    else if (order == '>') s += " (big-endian)";
    return s;
}

const PyValue* field(const PyValue& dict, std::string_view key) {
    for (const auto& [k, v] : dict.fields)
        if (k == key) return &v;
    return nullptr;
}

// Parses the header of an open file and checks it; leaves the file position at the data.
NpyHeader parse_header(int fd, const std::string& path) {
    unsigned char pre[12];
    const std::size_t got = read_full(fd, pre, 10, path);
    static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (got < 8 || std::memcmp(pre, magic, 6) != 0)
        fail(path, got == 0 ? "empty file, not a .npy file"
                            : "not a .npy file (no \\x93NUMPY magic at the start)");
    if (got < 10) fail(path, "truncated .npy header");
    NpyHeader h;
    h.version_major = pre[6];
    std::size_t header_len = 0, prefix = 0;
    if (pre[6] == 1) {
        header_len = pre[8] | (std::size_t{pre[9]} << 8);
        prefix = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (read_full(fd, pre + 10, 2, path) < 2) fail(path, "truncated .npy header");
        header_len = pre[8] | (std::size_t{pre[9]} << 8) | (std::size_t{pre[10]} << 16) |
                     (std::size_t{pre[11]} << 24);
        prefix = 12;
    } else {
        fail(path, fmt::format(".npy format version {}.{} is not supported (1.0, 2.0 and 3.0 are)", pre[6],
                               pre[7]));
    }
    if (header_len > (std::size_t{1} << 20))
        fail(path, fmt::format("implausible .npy header length {} bytes", header_len));
    std::string text(header_len, '\0');
    if (read_full(fd, text.data(), header_len, path) < header_len) fail(path, "truncated .npy header");
    h.data_offset = prefix + header_len;

    const PyValue dict = HeaderParser(text, path).parse_all();
    if (dict.kind != PyValue::Dict) fail(path, "not a valid .npy header (not a dictionary)");
    const PyValue* descr = field(dict, "descr");
    const PyValue* fortran = field(dict, "fortran_order");
    const PyValue* shape = field(dict, "shape");
    if (!descr || !fortran || !shape)
        fail(path, "not a valid .npy header (needs 'descr', 'fortran_order' and 'shape')");

    if (descr->kind != PyValue::Str)
        fail(path, "unsupported dtype: a structured or record array; factorjit reads float32 ('<f4') or "
                   "float64 ('<f8') arrays");
    const std::string& d = descr->str;
    if (d == "<f4") h.dtype = fj::DType::F32;
    else if (d == "<f8") h.dtype = fj::DType::F64;
    else {
        std::string hint = "convert with arr.astype('<f4') or arr.astype('<f8')";
        fail(path, fmt::format("unsupported dtype {}; factorjit reads little-endian float32 ('<f4') or "
                               "float64 ('<f8'): {}",
                               describe_descr(d), hint));
    }

    if (fortran->kind != PyValue::Bool) fail(path, "not a valid .npy header ('fortran_order' is not True/False)");
    h.fortran_order = fortran->flag;

    if (shape->kind != PyValue::Tuple) fail(path, "not a valid .npy header ('shape' is not a tuple)");
    for (const PyValue& dim : shape->items) {
        if (dim.kind != PyValue::Int || dim.integer < 0)
            fail(path, "not a valid .npy header ('shape' holds something other than sizes)");
        h.shape.push_back(dim.integer);
    }
    if (h.shape.size() != 1 && h.shape.size() != 2)
        fail(path, fmt::format("{}-D array of shape {}{}; factorjit reads 2-D panels (T x N) or 1-D series "
                               "(one column)",
                               h.shape.size(), h.shape_str(), h.shape.empty() ? " (a scalar)" : ""));

    std::size_t n = dtype_size(h.dtype);
    for (std::int64_t dim : h.shape) {
        if (dim != 0 && n > SIZE_MAX / 2 / static_cast<std::size_t>(dim))
            fail(path, fmt::format("array of shape {} is too large", h.shape_str()));
        n *= static_cast<std::size_t>(dim);
    }
    h.data_bytes = n;
    return h;
}

// Checks the file is long enough for what the header announces (regular files only: a pipe's length
// is only known by reading it).
void check_length(int fd, const NpyHeader& h, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail_errno(path, "cannot stat", errno);
    if (!S_ISREG(st.st_mode)) return;
    const auto size = static_cast<std::size_t>(st.st_size);
    if (size < h.data_offset + h.data_bytes)
        fail(path, fmt::format("truncated: the header announces {} of shape {} ({} bytes of data), but the "
                               "file holds only {} bytes of data",
                               dtype_name(h.dtype), h.shape_str(), h.data_bytes,
                               size > h.data_offset ? size - h.data_offset : 0));
}

int open_for_reading(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_errno(path, "cannot open", errno);
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        ::close(fd);
        fail(path, "is a directory, not a .npy file");
    }
    return fd;
}

// Fortran order to row-major, one chunk of whole columns at a time: the file is read exactly once and
// the only extra memory is the chunk. Within a chunk, a blocked transpose keeps both sides in cache.
template <class T>
void read_fortran(int fd, const NpyHeader& h, T* dst, const std::string& path) {
    const std::size_t rows = static_cast<std::size_t>(h.rows()), cols = static_cast<std::size_t>(h.cols());
    constexpr std::size_t chunk_bytes = std::size_t{8} << 20;
    const std::size_t col_bytes = rows * sizeof(T);
    const auto truncated = [&] {
        fail(path, fmt::format("truncated: the file ends before the {} bytes of data its header announces",
                               h.data_bytes));
    };
    if (col_bytes <= chunk_bytes) {
        const std::size_t per_chunk = std::max<std::size_t>(1, chunk_bytes / col_bytes);
        std::vector<T> buf(per_chunk * rows);
        constexpr std::size_t B = 32;
        for (std::size_t j0 = 0; j0 < cols; j0 += per_chunk) {
            const std::size_t k = std::min(per_chunk, cols - j0);
            if (read_full(fd, buf.data(), k * col_bytes, path) < k * col_bytes) truncated();
            for (std::size_t tb = 0; tb < rows; tb += B)
                for (std::size_t jb = 0; jb < k; jb += B) {
                    const std::size_t te = std::min(rows, tb + B), je = std::min(k, jb + B);
                    for (std::size_t t = tb; t < te; ++t)
                        for (std::size_t j = jb; j < je; ++j) dst[t * cols + j0 + j] = buf[j * rows + t];
                }
        }
    } else {
        // Columns longer than a chunk (very long series, few columns): pieces of one column at a time.
        const std::size_t piece = chunk_bytes / sizeof(T);
        std::vector<T> buf(piece);
        for (std::size_t j = 0; j < cols; ++j)
            for (std::size_t t0 = 0; t0 < rows; t0 += piece) {
                const std::size_t n = std::min(piece, rows - t0);
                if (read_full(fd, buf.data(), n * sizeof(T), path) < n * sizeof(T)) truncated();
                for (std::size_t t = 0; t < n; ++t) dst[(t0 + t) * cols + j] = buf[t];
            }
    }
}

// ---------------------------------------------------------------------------------------------------
// Temporary files and signals: an interrupted run (Ctrl-C, kill) removes its temporary files too, so no
// hidden half-written file stays next to the outputs. The handler only calls unlink(), which is
// async-signal-safe, on paths registered in a fixed table.

constexpr std::size_t kMaxTracked = 4096;
std::array<std::atomic<char*>, kMaxTracked> g_tracked{};

extern "C" void fj_cli_cleanup_on_signal(int sig) {
    for (auto& slot : g_tracked)
        if (char* p = slot.load()) ::unlink(p);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

void install_signal_cleanup() {
    static const bool installed = [] {
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
            struct sigaction old {};
            if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup
            std::signal(sig, fj_cli_cleanup_on_signal);
        }
        return true;
    }();
    (void)installed;
}

void track(const std::string& path) {
    char* copy = ::strdup(path.c_str());
    if (!copy) return;
    for (auto& slot : g_tracked) {
        char* expected = nullptr;
        if (slot.compare_exchange_strong(expected, copy)) return;
    }
    std::free(copy);  // table full: this one is only cleaned up by the destructor
}

void untrack(const std::string& path) {
    for (auto& slot : g_tracked) {
        char* p = slot.load();
        if (p && path == p && slot.compare_exchange_strong(p, nullptr)) {
            std::free(p);
            return;
        }
    }
}

mode_t default_file_mode() {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    return 0666 & ~mask;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

void AlignedFree::operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }

AlignedBuffer aligned_alloc_bytes(std::size_t bytes) {
    return AlignedBuffer(static_cast<std::byte*>(::operator new[](std::max<std::size_t>(bytes, 64),
                                                                  std::align_val_t{64})));
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
    if (shape.size() == 1) return fmt::format("({},)", shape[0]);
    return fmt::format("({})", fmt::join(shape, ", "));
}

std::string NpyHeader::shape_str() const { return cli::shape_str(shape); }

fj::Panel NpyArray::panel() const {
    fj::Panel p;
    p.data = data.get();
    p.rows = header.rows();
    p.cols = header.cols();
    p.ld = p.cols;
    p.dtype = header.dtype;
    p.memory = fj::Memory::Host;
    return p;
}

NpyHeader read_npy_header(const std::string& path) {
    Fd fd(open_for_reading(path));
    NpyHeader h = parse_header(fd.fd, path);
    check_length(fd.fd, h, path);
    return h;
}

NpyArray read_npy(const std::string& path) {
    Fd fd(open_for_reading(path));
    NpyArray a;
    a.header = parse_header(fd.fd, path);
    const NpyHeader& h = a.header;
    check_length(fd.fd, h, path);
    a.data = aligned_alloc_bytes(h.data_bytes);
    const bool transpose = h.fortran_order && h.rows() > 1 && h.cols() > 1;
    if (!transpose) {
        if (read_full(fd.fd, a.data.get(), h.data_bytes, path) < h.data_bytes)
            fail(path, fmt::format("truncated: the file ends before the {} bytes of data its header announces",
                                   h.data_bytes));
    } else if (h.dtype == fj::DType::F32) {
        read_fortran(fd.fd, h, reinterpret_cast<float*>(a.data.get()), path);
    } else {
        read_fortran(fd.fd, h, reinterpret_cast<double*>(a.data.get()), path);
    }
    return a;
}

// ---------------------------------------------------------------------------------------------------
// NpyReader

namespace {

constexpr std::size_t kPage = 4096;

std::size_t page_floor(std::size_t x) { return x / kPage * kPage; }

// Rows [row0, row0 + rows) of a Fortran-order (column-major) array at src into dst, row-major: blocks of
// 32 x 32 keep both sides in cache.
template <class T>
void transpose_rows(const T* src, std::int64_t total_rows, std::int64_t cols, std::int64_t row0, std::int64_t rows,
                    T* dst) {
    constexpr std::int64_t B = 32;
    for (std::int64_t tb = 0; tb < rows; tb += B)
        for (std::int64_t jb = 0; jb < cols; jb += B) {
            const std::int64_t te = std::min(rows, tb + B), je = std::min(cols, jb + B);
            for (std::int64_t j = jb; j < je; ++j) {
                const T* col = src + j * total_rows + row0;
                for (std::int64_t t = tb; t < te; ++t) dst[t * cols + j] = col[t];
            }
        }
}

}  // namespace

NpyReader::NpyReader(const std::string& path) : path_(path) {
    fd_ = open_for_reading(path);
    try {
        header_ = parse_header(fd_, path);
        check_length(fd_, header_, path);
    } catch (...) {
        ::close(fd_);
        throw;
    }
    const NpyHeader& h = header_;
    transpose_ = h.fortran_order && h.rows() > 1 && h.cols() > 1;
    struct stat st {};
    const bool regular = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
    if (h.data_bytes > 0 && regular) {
        map_bytes_ = h.data_offset + h.data_bytes;
        void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd_, 0);
        if (m != MAP_FAILED) {
            map_ = m;
            // Chunks are read in order: the kernel's read-ahead may be generous.
            ::madvise(map_, map_bytes_, MADV_SEQUENTIAL);
            return;
        }
        map_bytes_ = 0;
    }
    if (h.data_bytes == 0) return;
    // Not mappable (a pipe, a device): read it whole, as before the pipeline; a transposed copy is then
    // made once here, so chunks are views.
    ::close(fd_);
    fd_ = -1;
    NpyArray a = read_npy(path);
    whole_ = std::move(a.data);
    transpose_ = false;
}

NpyReader::~NpyReader() {
    if (map_) ::munmap(map_, map_bytes_);
    if (fd_ >= 0) ::close(fd_);
}

const std::byte* NpyReader::data() const {
    if (map_) return static_cast<const std::byte*>(map_) + header_.data_offset;
    return whole_.get();
}

fj::Panel NpyReader::view(std::int64_t row0, std::int64_t rows) const {
    if (transpose_) fail(path_, "internal: a Fortran-order input has no in-place view");
    fj::Panel p;
    p.rows = rows;
    p.cols = header_.cols();
    p.ld = p.cols;
    p.dtype = header_.dtype;
    p.memory = fj::Memory::Host;
    const std::size_t offset = static_cast<std::size_t>(row0 * p.cols) * dtype_size(p.dtype);
    p.data = const_cast<std::byte*>(data() + offset);
    return p;
}

void NpyReader::load(std::int64_t row0, std::int64_t rows, void* dst) {
    fj::rt::fault_point(fj::rt::FaultKind::Read, path_.c_str());
    if (rows <= 0 || header_.cols() == 0) return;
    const std::size_t elem = dtype_size(header_.dtype);
    if (transpose_) {
        if (header_.dtype == fj::DType::F32)
            transpose_rows(reinterpret_cast<const float*>(data()), header_.rows(), header_.cols(), row0, rows,
                           static_cast<float*>(dst));
        else
            transpose_rows(reinterpret_cast<const double*>(data()), header_.rows(), header_.cols(), row0, rows,
                           static_cast<double*>(dst));
        return;
    }
    if (!map_) return;  // read whole at open
    // Fault the rows' pages in now (on the reader's thread), not when the kernels first touch them.
    const std::size_t begin = header_.data_offset + static_cast<std::size_t>(row0 * header_.cols()) * elem;
    const std::size_t end = begin + static_cast<std::size_t>(rows * header_.cols()) * elem;
    auto* base = static_cast<std::byte*>(map_);
    const std::size_t p0 = page_floor(begin);
#ifdef MADV_POPULATE_READ
    if (::madvise(base + p0, end - p0, MADV_POPULATE_READ) == 0) return;
    if (errno == EIO || errno == EFAULT)
        fail_errno(path_, fmt::format("cannot read rows {}-{}", row0, row0 + rows), errno);
#endif
    volatile unsigned char sink = 0;
    for (std::size_t off = p0; off < end; off += kPage) sink = sink + static_cast<unsigned char>(base[off]);
    (void)sink;
}

void NpyReader::release_before(std::int64_t row) {
    if (!map_ || transpose_ || row <= released_) return;
    const std::size_t elem = dtype_size(header_.dtype);
    const std::size_t from = page_floor(header_.data_offset + static_cast<std::size_t>(released_ * header_.cols()) * elem);
    // Only whole pages below the first byte still needed.
    const std::size_t to = page_floor(header_.data_offset + static_cast<std::size_t>(row * header_.cols()) * elem);
    if (to > from) ::madvise(static_cast<std::byte*>(map_) + from, to - from, MADV_DONTNEED);
    released_ = row;
}

std::string npy_header_v1(const std::vector<std::int64_t>& shape, fj::DType dtype) {
    std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   dtype == fj::DType::F32 ? "<f4" : "<f8", shape_str(shape));
    // numpy pads with spaces and ends with '\n' so that the data starts at a multiple of 64 bytes.
    const std::size_t unpadded = 10 + dict.size() + 1;
    dict.append((64 - unpadded % 64) % 64, ' ');
    dict.push_back('\n');
    std::string out = "\x93NUMPY";
    out.push_back('\x01');
    out.push_back('\x00');
    out.push_back(static_cast<char>(dict.size() & 0xff));
    out.push_back(static_cast<char>((dict.size() >> 8) & 0xff));
    return out + dict;
}

PendingFile::PendingFile(std::string path) : path_(std::move(path)) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path p(path_);
    if (p.filename().empty()) fail(path_, "not a file name");
    const auto st = fs::status(p, ec);
    mode_t mode = default_file_mode();
    if (!ec && fs::exists(st)) {
        if (fs::is_directory(st)) fail(path_, "is a directory; give an output file name");
        struct stat s {};
        if (::stat(path_.c_str(), &s) == 0 && S_ISREG(s.st_mode)) mode = s.st_mode & 07777;
    }
    const fs::path dir = p.parent_path();
    std::string tmpl = (dir / ("." + p.filename().string() + ".factorjit-XXXXXX")).string();
    install_signal_cleanup();
    const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0)
        fail_errno(path_,
                   fmt::format("cannot create a temporary file in '{}'", dir.empty() ? "." : dir.string()),
                   errno);
    fd_ = fd;
    temp_path_ = tmpl;
    track(temp_path_);
    ::fchmod(fd_, mode);  // mkstemp makes 0600; give the file the mode a plain open() would
}

PendingFile::PendingFile(PendingFile&& o) noexcept
    : path_(std::move(o.path_)), temp_path_(std::move(o.temp_path_)), fd_(o.fd_), written_(o.written_),
      committed_(o.committed_) {
    o.fd_ = -1;
    o.temp_path_.clear();
    o.committed_ = true;
}

PendingFile::~PendingFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !temp_path_.empty()) {
        ::unlink(temp_path_.c_str());
        untrack(temp_path_);
    }
}

void PendingFile::write_npy(const std::vector<std::int64_t>& shape, fj::DType dtype, const void* data) {
    if (fd_ < 0) fail(path_, "internal: the temporary file is already closed");
    std::size_t n = dtype_size(dtype);
    for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
    const std::string header = npy_header_v1(shape, dtype);
    write_full(fd_, header.data(), header.size(), path_);
    write_full(fd_, data, n, path_);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_errno(path_, "cannot write", errno);  // NFS reports errors on close
    written_ = true;
}

void PendingFile::begin_npy(const std::vector<std::int64_t>& shape, fj::DType dtype) {
    if (fd_ < 0) fail(path_, "internal: the temporary file is already closed");
    std::size_t n = dtype_size(dtype);
    for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
    const std::string header = npy_header_v1(shape, dtype);
    write_full(fd_, header.data(), header.size(), path_);
    data_offset_ = header.size();
    data_bytes_ = n;
    // The file's full length now: a disk too small for it fails here where the filesystem allocates
    // eagerly, and the data can then be written in any order.
    if (::ftruncate(fd_, static_cast<off_t>(data_offset_ + n)) != 0) fail_errno(path_, "cannot size the output", errno);
}

void PendingFile::write_data(std::size_t offset, const void* data, std::size_t bytes) {
    fj::rt::fault_point(fj::rt::FaultKind::Write, path_.c_str());
    if (fd_ < 0) fail(path_, "internal: the temporary file is not open");
    if (offset + bytes > data_bytes_) fail(path_, "internal: a write beyond the array's data");
    const auto* p = static_cast<const char*>(data);
    std::size_t done = 0;
    while (done < bytes) {
        const std::size_t want = std::min<std::size_t>(bytes - done, std::size_t{1} << 30);
        const ssize_t w = ::pwrite(fd_, p + done, want, static_cast<off_t>(data_offset_ + offset + done));
        if (w < 0) {
            if (errno == EINTR) continue;
            fail_errno(path_, "cannot write", errno);
        }
        done += static_cast<std::size_t>(w);
    }
}

void PendingFile::finish_npy() {
    if (fd_ < 0) fail(path_, "internal: the temporary file is already closed");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_errno(path_, "cannot write", errno);  // NFS reports errors on close
    written_ = true;
}

void PendingFile::commit() {
    if (!written_) fail(path_, "internal: nothing was written");
    if (committed_) return;
    if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
        fail_errno(path_, fmt::format("cannot rename '{}' into place", temp_path_), errno);
    committed_ = true;
    untrack(temp_path_);
}

void write_npy_atomic(const std::string& path, const std::vector<std::int64_t>& shape, fj::DType dtype,
                      const void* data) {
    PendingFile f(path);
    f.write_npy(shape, dtype, data);
    f.commit();
}

}  // namespace fj::cli
