// What of the runs over several GPUs can be checked without one: the device list the command line and
// RunOptions::devices take, the chunk hand-out over N workers (runtime/chunk_queue.hpp: every chunk taken
// once, a slow worker takes fewer, a failure stops the hand-out and nothing taken is lost or taken twice),
// the progress summed over workers, and fj::register_host's errors where there is no GPU. The GPU side is in
// test_cuda_pipeline.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/wait.h>
#include <tuple>
#include <utility>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "factorjit.hpp"
#include "codegen/plan.hpp"
#include "runtime/backend.hpp"
#include "runtime/chunk_plan.hpp"
#include "runtime/chunk_queue.hpp"

TEST_SUITE("devices") {

TEST_CASE("parse_devices: 'all', ordinal lists, repeats; bad lists refused with the entry and the devices there are") {
    using fj::parse_devices;
    CHECK(parse_devices("all", 2) == std::vector<int>{0, 1});
    CHECK(parse_devices("all", 1) == std::vector<int>{0});
    CHECK(parse_devices("0", 1) == std::vector<int>{0});
    CHECK(parse_devices("1,0,3", 4) == std::vector<int>{1, 0, 3});
    CHECK(parse_devices("0,0", 1) == std::vector<int>{0, 0});
    CHECK_THROWS_WITH_AS(parse_devices("7", 1), doctest::Contains("no device 7"), fj::InputError);
    CHECK_THROWS_WITH_AS(parse_devices("7", 1), doctest::Contains("1 GPU is there"), fj::InputError);
    CHECK_THROWS_WITH_AS(parse_devices("x", 2), doctest::Contains("'x' is not a device ordinal"), fj::InputError);
    CHECK_THROWS_WITH_AS(parse_devices("0,x1", 2), doctest::Contains("'x1'"), fj::InputError);
    CHECK_THROWS_AS(parse_devices("-1", 2), fj::InputError);
    CHECK_THROWS_AS(parse_devices("", 2), fj::InputError);
    CHECK_THROWS_AS(parse_devices("0,,1", 2), fj::InputError);
    CHECK_THROWS_AS(parse_devices("0,", 2), fj::InputError);
    CHECK_THROWS_AS(parse_devices("99999999999999999999", 2), fj::InputError);
    CHECK_THROWS_WITH_AS(parse_devices("all", 0), doctest::Contains("no GPU"), fj::InputError);
    CHECK_THROWS_WITH_AS(parse_devices("0", 0), doctest::Contains("no GPU"), fj::InputError);
    // all_cuda_devices() is every ordinal of this machine, in order (none without a GPU).
    const std::vector<int> all = fj::all_cuda_devices();
    for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i] == static_cast<int>(i));
    if (all.empty()) CHECK_THROWS_AS(parse_devices("all", static_cast<int>(all.size())), fj::InputError);
}

TEST_CASE("the chunk hand-out over N workers: every chunk taken exactly once, whatever the worker count") {
    for (int workers : {1, 2, 3, 8}) {
        for (std::int64_t count : {0, 1, 5, 97}) {
            CAPTURE(workers);
            CAPTURE(count);
            fj::rt::ChunkQueue queue(count);
            std::mutex mutex;
            std::vector<int> taken_by(static_cast<std::size_t>(count), -1);
            std::vector<int> times(static_cast<std::size_t>(count), 0);
            fj::rt::run_workers(workers, queue, [&](int w) {
                for (std::int64_t c; (c = queue.next()) >= 0;) {
                    std::lock_guard<std::mutex> lock(mutex);
                    taken_by[static_cast<std::size_t>(c)] = w;
                    ++times[static_cast<std::size_t>(c)];
                }
            });
            for (std::int64_t c = 0; c < count; ++c) {
                CAPTURE(c);
                CHECK(times[static_cast<std::size_t>(c)] == 1);
                CHECK(taken_by[static_cast<std::size_t>(c)] >= 0);
                CHECK(taken_by[static_cast<std::size_t>(c)] < workers);
            }
            CHECK(queue.next() == -1);  // exhausted stays exhausted
        }
    }
}

TEST_CASE("the chunk hand-out is dynamic: a worker that is slow takes fewer chunks") {
    // Worker 0 takes the first chunk (the others wait for that) and holds it until the others have taken all the
    // rest (or 20 s pass: then the hand-out is not dynamic and the counts below fail).
    const std::int64_t count = 40;
    fj::rt::ChunkQueue queue(count);
    std::atomic<bool> slow_has_one{false};
    std::atomic<std::int64_t> taken_by_others{0};
    std::vector<std::int64_t> per_worker(3, 0);
    auto wait_for = [](const auto& ready) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!ready() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    fj::rt::run_workers(3, queue, [&](int w) {
        if (w != 0) wait_for([&] { return slow_has_one.load(); });
        for (std::int64_t c; (c = queue.next()) >= 0;) {
            ++per_worker[static_cast<std::size_t>(w)];
            if (w != 0) {
                ++taken_by_others;
                continue;
            }
            slow_has_one = true;
            wait_for([&] { return taken_by_others.load() >= count - 1; });
        }
    });
    CHECK(per_worker[0] == 1);
    CHECK(per_worker[1] + per_worker[2] == count - 1);
}

TEST_CASE("a failure on one worker stops the hand-out: the others finish what they hold, nothing is lost, the error comes out") {
    for (int workers : {1, 2, 4}) {
        CAPTURE(workers);
        const std::int64_t count = 200;
        fj::rt::ChunkQueue queue(count);
        std::mutex mutex;
        std::vector<int> state(static_cast<std::size_t>(count), 0);  // 0 not taken, 1 taken, 2 done, 3 failed
        std::atomic<int> finished_workers{0};
        int taken_twice = 0;
        auto work = [&](int w) {
            int mine = 0;
            for (std::int64_t c; (c = queue.next()) >= 0;) {
                {
                    std::lock_guard<std::mutex> lock(mutex);
                    if (state[static_cast<std::size_t>(c)] != 0) ++taken_twice;
                    state[static_cast<std::size_t>(c)] = 1;
                }
                if (w == workers - 1 && ++mine == 3) {  // the last worker fails at its third chunk
                    std::lock_guard<std::mutex> lock(mutex);
                    state[static_cast<std::size_t>(c)] = 3;
                    throw fj::RunError("device 9, chunk " + std::to_string(c) + ": injected");
                }
                std::this_thread::sleep_for(std::chrono::microseconds(200));
                std::lock_guard<std::mutex> lock(mutex);
                state[static_cast<std::size_t>(c)] = 2;
            }
            ++finished_workers;
        };
        CHECK_THROWS_WITH_AS(fj::rt::run_workers(workers, queue, work), doctest::Contains("device 9, chunk"), fj::RunError);
        CHECK(queue.stopped());
        CHECK(queue.next() == -1);
        CHECK(finished_workers.load() == workers - 1);  // every other worker returned (joined) before the error came out
        int failed = 0, taken_not_done = 0, done = 0;
        bool untaken_after_taken = false;  // chunks are taken in order: none taken after the first one left
        for (std::int64_t c = 0; c < count; ++c) {
            const int s = state[static_cast<std::size_t>(c)];
            failed += s == 3;
            taken_not_done += s == 1;
            done += s == 2;
            if (c > 0 && s != 0 && state[static_cast<std::size_t>(c - 1)] == 0) untaken_after_taken = true;
        }
        CHECK(taken_twice == 0);
        CHECK(failed == 1);
        CHECK(taken_not_done == 0);  // every chunk a worker took was finished or is the failed one
        CHECK_FALSE(untaken_after_taken);
        CHECK(done < count - 1);  // stopped early (200 chunks of 0.2 ms against a failure at the third)
    }
}

TEST_CASE("worker_budget: each device's budget split between its workers, the smallest share; the chunks in flight fit it") {
    const std::int64_t G = std::int64_t{1} << 30;
    auto budgets = [&](int ordinal) { return ordinal == 1 ? 4 * G : 10 * G; };
    CHECK(fj::rt::worker_budget({}, budgets) == 0);
    CHECK(fj::rt::worker_budget({0}, budgets) == 10 * G);
    CHECK(fj::rt::worker_budget({0, 0}, budgets) == 5 * G);
    CHECK(fj::rt::worker_budget({0, 1}, budgets) == 4 * G);
    CHECK(fj::rt::worker_budget({0, 0, 0, 1}, budgets) == 10 * G / 3);
    CHECK(fj::rt::worker_budget({1, 0, 1, 0}, budgets) == 2 * G);
    // The plan made with a worker's share keeps each worker's chunks in flight within it, and so the device's
    // workers together within the device's budget.
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"c", fj::corr(fj::window(A, 20), fj::window(B, 20))},
                                                           {"r", fj::mean(fj::window(fj::rank(A), 5))}});
    for (const std::vector<int>& workers : {std::vector<int>{0}, std::vector<int>{0, 0}, std::vector<int>{0, 0, 0, 1}}) {
        CAPTURE(workers.size());
        fj::rt::ChunkRequest r;
        r.rows = 50000;
        r.cols = 5000;
        r.in_flight = 3;
        r.min_chunks = static_cast<int>(workers.size()) * 3;
        r.budget_bytes = fj::rt::worker_budget(workers, [&](int ordinal) { return ordinal == 1 ? 256 << 20 : std::int64_t{600} << 20; });
        const fj::rt::ChunkPlan chunks = fj::rt::plan_chunks(plan, r);
        CHECK(chunks.total_bytes <= r.budget_bytes);
        CHECK(chunks.count >= static_cast<std::int64_t>(workers.size()) * 3);
        std::map<int, int> on;
        for (int d : workers) ++on[d];
        for (const auto& [d, n] : on) CHECK(n * chunks.total_bytes <= (d == 1 ? 256 << 20 : std::int64_t{600} << 20));
    }
}

TEST_CASE("progress summed over workers: one callback at a time, every chunk counted; a callback that throws stops the run") {
    fj::rt::ChunkPlan chunks;
    chunks.axis = fj::rt::ChunkAxis::Time;
    chunks.rows = 1000;
    chunks.cols = 10;
    chunks.chunk_rows = 30;
    chunks.chunk_cols = 10;
    chunks.count = (1000 + 29) / 30;
    std::atomic<int> inside{0};
    int overlaps = 0;
    std::vector<fj::RunProgress> seen;
    fj::RunOptions ro;
    ro.progress = [&](const fj::RunProgress& p) {
        if (++inside > 1) ++overlaps;
        seen.push_back(p);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        --inside;
    };
    fj::rt::ChunkQueue queue(chunks.count);
    fj::rt::SharedProgress progress(chunks, ro, queue);
    fj::rt::run_workers(4, queue, [&](int) {
        for (std::int64_t c; (c = queue.next()) >= 0;) progress.chunk_done(chunks.chunk(c), 7, 3);
    });
    CHECK(overlaps == 0);
    REQUIRE(static_cast<std::int64_t>(seen.size()) == chunks.count);
    for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i].chunks_done == static_cast<std::int64_t>(i) + 1);
    CHECK(seen.back().rows_done == 1000);
    CHECK(seen.back().rows_total == 1000);
    CHECK(seen.back().bytes_in == 7 * chunks.count);
    CHECK(seen.back().bytes_out == 3 * chunks.count);

    int calls = 0;
    ro.progress = [&](const fj::RunProgress&) {
        if (++calls == 3) throw std::runtime_error("stop here");
    };
    fj::rt::ChunkQueue queue2(chunks.count);
    fj::rt::SharedProgress progress2(chunks, ro, queue2);
    CHECK_THROWS_WITH_AS(fj::rt::run_workers(3, queue2, [&](int) {
                             for (std::int64_t c; (c = queue2.next()) >= 0;) progress2.chunk_done(chunks.chunk(c), 1, 1);
                         }),
                         "stop here", std::runtime_error);
    CHECK(queue2.stopped());
    CHECK(calls == 3);  // none after the stop
}

TEST_CASE("register_host: bad arguments are InputError; without a GPU, BackendError naming the range") {
    std::vector<float> a(1024);
    CHECK_THROWS_AS(fj::register_host(nullptr, 64), fj::InputError);
    CHECK_THROWS_AS(fj::register_host(a.data(), 0), fj::InputError);
    std::string why;
    if (fj::rt::cuda_backend(&why)) {
        MESSAGE("a GPU is here: test_cuda_pipeline.cpp checks register_host on it");
        return;
    }
    CHECK_THROWS_WITH_AS(fj::register_host(a.data(), a.size() * sizeof(float)), doctest::Contains("4096 bytes"), fj::BackendError);
    fj::HostRegistration empty;  // an empty handle: nothing to unregister
    CHECK_FALSE(empty);
    empty.reset();
}

TEST_CASE("RunOptions::devices: a negative ordinal is refused before the run; the CPU backend ignores the list") {
    fj::CompileOptions o;
    o.backend = fj::Backend::Cpu;
    if (!fj::rt::cpu_backend()) {
        MESSAGE("skipped: no CPU backend in this build");
        return;
    }
    const fj::Program p = fj::compile({{"m", fj::mean(fj::window(fj::input("A"), 3))}}, o);
    const std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<float> plain(8, -1), listed(8, -1);
    p.run({{"A", fj::Panel::host(a.data(), 4, 2)}}, {{"m", fj::Panel::host(plain.data(), 4, 2)}});
    fj::RunOptions ro;
    ro.devices = {-1};
    CHECK_THROWS_WITH_AS(p.run({{"A", fj::Panel::host(a.data(), 4, 2)}}, {{"m", fj::Panel::host(listed.data(), 4, 2)}}, ro),
                         doctest::Contains("RunOptions::devices"), fj::InputError);
    CHECK(std::all_of(listed.begin(), listed.end(), [](float v) { return v == -1; }));  // nothing written
    ro.devices = {0, 0};
    p.run({{"A", fj::Panel::host(a.data(), 4, 2)}}, {{"m", fj::Panel::host(listed.data(), 4, 2)}}, ro);
    CHECK(std::memcmp(listed.data(), plain.data(), plain.size() * sizeof(float)) == 0);
}

TEST_CASE("the command line's --devices: bad lists are usage errors naming the entry (eval, bench, alpha101)") {
    const std::filesystem::path dir = std::filesystem::path(FJ_TEST_TMP) / "devices_cli";
    std::filesystem::create_directories(dir);
    auto run = [&](const std::string& args) {
        const std::string err = (dir / "stderr.txt").string();
        const int status = std::system(("cd '" + dir.string() + "' && '" + FJ_CLI_PATH + "' " + args + " >/dev/null 2>'" + err + "'").c_str());
        std::ifstream f(err);
        const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        return std::pair<int, std::string>{WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
    };
    const int gpus = static_cast<int>(fj::all_cuda_devices().size());
    for (const std::string command : {"eval -e A+1 -i A=a.npy -o o.npy", "bench -e A+1 --rows 10 --cols 10", "alpha101 --data ."}) {
        CAPTURE(command);
        auto [rc, err] = run(command + " --devices x");
        CHECK(rc == 2);
        CHECK(err.find("--devices 'x': 'x' is not a device ordinal") != std::string::npos);
        CHECK(err.find("--help") != std::string::npos);
        std::tie(rc, err) = run(command + " --devices 0,,1");
        CHECK(rc == 2);
        CHECK(err.find("an empty entry") != std::string::npos);
        std::tie(rc, err) = run(command + " --devices " + std::to_string(gpus));
        CHECK(rc == 2);
        CHECK(err.find("there is no device " + std::to_string(gpus)) != std::string::npos);
    }
}

}  // TEST_SUITE("devices")
