#include "cli/eval_stream.hpp"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <thread>

#include <fmt/format.h>

#include "runtime/fault_inject.hpp"

namespace fj::cli {

namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

// The three stages' progress and the first failure, under one mutex: each stage waits for the chunk it
// needs from the stage before it (or for its slot to be free), or for a failure anywhere.
class Stages {
public:
    // Blocks until pred() holds or a stage failed; returns false on failure.
    template <class Pred>
    bool wait(Pred pred) {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return failed_ || pred(); });
        return !failed_;
    }
    void advance(std::int64_t& counter) {
        {
            std::lock_guard<std::mutex> lock(m_);
            ++counter;
        }
        cv_.notify_all();
    }
    void fail(std::exception_ptr e) {
        {
            std::lock_guard<std::mutex> lock(m_);
            if (!failed_) error_ = e;
            failed_ = true;
        }
        cv_.notify_all();
    }
    void rethrow() const {
        if (error_) std::rethrow_exception(error_);
    }
    std::int64_t read = 0, computed = 0, written = 0;  // chunks finished by each stage

private:
    std::mutex m_;
    std::condition_variable cv_;
    bool failed_ = false;
    std::exception_ptr error_;
};

// The chunk's rows in a failure's message, whatever failed (std::bad_alloc included).
std::exception_ptr with_context(const std::string& stage, const fj::rt::ChunkPlan& plan, const fj::rt::Chunk& c) {
    const std::string where = plan.count == 1
                                  ? fmt::format("{} of rows 0-{}", stage, plan.rows)
                                  : fmt::format("{} of chunk {} of {} (rows {}-{})", stage, c.index + 1, plan.count,
                                                c.row_begin, c.row_end);
    try {
        throw;
    } catch (const std::bad_alloc&) {
        return std::make_exception_ptr(fj::RunError(fmt::format("{}: out of memory", where)));
    } catch (const fj::InputError& e) {
        return std::make_exception_ptr(fj::InputError(fmt::format("{}: {}", where, e.what())));
    } catch (const fj::BackendError& e) {
        return std::make_exception_ptr(fj::BackendError(fmt::format("{}: {}", where, e.what())));
    } catch (const fj::Error& e) {
        return std::make_exception_ptr(fj::RunError(fmt::format("{}: {}", where, e.what())));
    } catch (...) {
        return std::current_exception();
    }
}

// Joins a thread on every way out of run_stream.
struct Joiner {
    std::thread& t;
    ~Joiner() {
        if (t.joinable()) t.join();
    }
};

}  // namespace

StreamStats run_stream(const fj::Program& program, const std::vector<StreamInput>& inputs,
                       const std::vector<StreamOutput>& outputs, std::int64_t rows, std::int64_t cols, fj::DType dtype,
                       const fj::rt::ChunkPlan& chunks, int chunks_in_flight, const fj::RunOptions& run_options,
                       const std::function<void(const fj::RunProgress&)>& progress) {
    const auto t0 = clock::now();
    StreamStats stats;
    const std::int64_t n = chunks.count;
    const std::int64_t depth = std::max<std::int64_t>(1, std::min<std::int64_t>(chunks_in_flight, n));
    const std::size_t elem = dtype_size(dtype);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * elem;
    // The most rows a chunk runs (its halo included): every slot's buffers hold that many.
    std::int64_t max_run = 0;
    for (std::int64_t k = 0; k < n; ++k) max_run = std::max(max_run, chunks.chunk(k).rows_run());

    // Buffers per slot: outputs always; inputs only where they are copies (Fortran order).
    struct Slot {
        std::vector<AlignedBuffer> in, out;
    };
    std::vector<Slot> slots(static_cast<std::size_t>(depth));
    try {
        for (Slot& s : slots) {
            for (const StreamInput& in : inputs) {
                if (in.reader->in_place()) {
                    s.in.emplace_back();
                    continue;
                }
                fj::rt::fault_point(fj::rt::FaultKind::Alloc, "eval input buffer");
                s.in.push_back(aligned_alloc_bytes(static_cast<std::size_t>(max_run) * row_bytes));
            }
            for (std::size_t o = 0; o < outputs.size(); ++o) {
                fj::rt::fault_point(fj::rt::FaultKind::Alloc, "eval output buffer");
                s.out.push_back(aligned_alloc_bytes(static_cast<std::size_t>(max_run) * row_bytes));
            }
        }
    } catch (const std::bad_alloc&) {
        throw fj::RunError(fmt::format("eval: out of memory allocating the buffers of {} chunk(s) in flight of {} rows "
                                       "({}); --max-memory asks for smaller chunks",
                                       depth, max_run, chunks.describe()));
    }
    auto panel_of = [&](AlignedBuffer& b, std::int64_t r) {
        fj::Panel p;
        p.data = b.get();
        p.rows = r;
        p.cols = cols;
        p.ld = cols;
        p.dtype = dtype;
        p.memory = fj::Memory::Host;
        return p;
    };

    Stages st;
    double read_s = 0, write_s = 0;
    std::int64_t bytes_read = 0, bytes_written = 0;

    // Reader: chunk k into slot k % depth once chunk k - depth has left it (been written).
    std::thread reader([&] {
        for (std::int64_t k = 0; k < n; ++k) {
            if (!st.wait([&] { return st.written > k - depth; })) return;
            const fj::rt::Chunk c = chunks.chunk(k);
            try {
                const auto t = clock::now();
                Slot& s = slots[static_cast<std::size_t>(k % depth)];
                for (std::size_t i = 0; i < inputs.size(); ++i) {
                    inputs[i].reader->load(c.read_begin, c.rows_run(), s.in[i].get());
                    bytes_read += c.rows_run() * static_cast<std::int64_t>(row_bytes);
                }
                read_s += seconds_since(t);
            } catch (...) {
                st.fail(with_context("reading", chunks, c));
                return;
            }
            st.advance(st.read);
        }
    });
    Joiner join_reader{reader};

    // Writer: chunk k's owned rows (after its halo) into each output file.
    std::thread writer([&] {
        for (std::int64_t k = 0; k < n; ++k) {
            if (!st.wait([&] { return st.computed > k; })) return;
            const fj::rt::Chunk c = chunks.chunk(k);
            try {
                const auto t = clock::now();
                Slot& s = slots[static_cast<std::size_t>(k % depth)];
                for (std::size_t o = 0; o < outputs.size(); ++o) {
                    const std::size_t bytes = static_cast<std::size_t>(c.rows()) * row_bytes;
                    outputs[o].file->write_data(static_cast<std::size_t>(c.row_begin) * row_bytes,
                                                s.out[o].get() + static_cast<std::size_t>(c.halo_rows()) * row_bytes, bytes);
                    bytes_written += static_cast<std::int64_t>(bytes);
                }
                write_s += seconds_since(t);
            } catch (...) {
                st.fail(with_context("writing", chunks, c));
                return;
            }
            st.advance(st.written);
        }
    });
    Joiner join_writer{writer};

    // Compute, here: chunk k once it is read, into its slot's output buffers.
    fj::RunProgress pr;
    pr.rows_total = rows;
    pr.chunks_total = n;
    std::map<std::string, fj::Panel> in_panels, out_panels;
    for (std::int64_t k = 0; k < n; ++k) {
        if (!st.wait([&] { return st.read > k; })) break;
        const fj::rt::Chunk c = chunks.chunk(k);
        try {
            const auto t = clock::now();
            Slot& s = slots[static_cast<std::size_t>(k % depth)];
            for (std::size_t i = 0; i < inputs.size(); ++i)
                in_panels[inputs[i].name] = inputs[i].reader->in_place() ? inputs[i].reader->view(c.read_begin, c.rows_run())
                                                                         : panel_of(s.in[i], c.rows_run());
            for (std::size_t o = 0; o < outputs.size(); ++o) out_panels[outputs[o].name] = panel_of(s.out[o], c.rows_run());
            program.run(in_panels, out_panels, run_options);
            stats.compute_s += seconds_since(t);
            // Rows before the next chunk's halo are read by no later chunk.
            if (k + 1 < n)
                for (const StreamInput& in : inputs) in.reader->release_before(chunks.chunk(k + 1).read_begin);
        } catch (...) {
            st.fail(with_context("computing", chunks, c));
            break;
        }
        st.advance(st.computed);
        if (progress) {
            pr.rows_done = c.row_end;
            pr.chunks_done = k + 1;
            // Bytes of the rows computed so far (the writer may be a chunk behind).
            pr.bytes_in = static_cast<std::int64_t>(inputs.size()) * c.row_end * static_cast<std::int64_t>(row_bytes);
            pr.bytes_out = static_cast<std::int64_t>(outputs.size()) * c.row_end * static_cast<std::int64_t>(row_bytes);
            pr.elapsed_s = seconds_since(t0);
            try {
                progress(pr);
            } catch (...) {
                st.fail(std::current_exception());
                break;
            }
        }
    }
    writer.join();
    reader.join();
    st.rethrow();
    stats.read_s = read_s;
    stats.write_s = write_s;
    stats.bytes_read = bytes_read;
    stats.bytes_written = bytes_written;
    stats.wall_s = seconds_since(t0);
    return stats;
}

}  // namespace fj::cli
