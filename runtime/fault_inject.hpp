// Injected failures, for testing that a run which fails part-way frees what it took, leaves the caller's
// inputs untouched (and the command line no partial output file), and that the next run works.
//
// Code that can fail for real calls fault_point() just before: allocating a chunk's buffers or a run's
// intermediates (Alloc), starting a chunk (Chunk), reading or writing a chunk of a file (Read, Write).
// Disarmed (the normal case) a fault point is one relaxed atomic load. Armed with fail_at(kind, n), the
// n-th fault point of that kind from then on throws what the real failure would: std::bad_alloc for
// Alloc, fj::RunError for the others; it then disarms itself. The command line arms it from the
// environment: FJ_FAIL_AT=alloc:N, chunk:N, read:N or write:N (read once, at the first fault point).
// Internal: not part of the public headers (factorjit.hpp).
#pragma once

#include <cstdint>

namespace fj::rt {

enum class FaultKind : std::uint8_t { Alloc, Chunk, Read, Write };

// Throws when armed for `kind` and this is the n-th call since; `where` names the place for the message.
void fault_point(FaultKind kind, const char* where);

namespace testing {
// Makes the n-th fault point of `kind` from now on fail (n >= 1); n = 0 disarms. One kind at a time.
void fail_at(FaultKind kind, std::int64_t n);
// How many fault points of `kind` were passed since fail_at was last called (to aim n at mid-run).
std::int64_t fault_points_seen(FaultKind kind);
}  // namespace testing

}  // namespace fj::rt
