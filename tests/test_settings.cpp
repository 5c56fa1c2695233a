// The CUDA code generator's settings list (codegen/cuda/settings.hpp): its documentation in
// bench/TUNING.md is the generated table, and parsing follows the list's ranges. No GPU, no NVRTC.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "codegen/cuda/settings.hpp"
#include "dsl/error.hpp"

TEST_SUITE("settings") {

TEST_CASE("bench/TUNING.md holds the table generated from the settings list") {
    // (This file's path as the build gave it, absolute under CMake: the repository is two folders up.)
    const std::filesystem::path root = std::filesystem::path(__FILE__).parent_path().parent_path();
    std::ifstream f(root / "bench" / "TUNING.md");
    REQUIRE(f);
    std::stringstream text;
    text << f.rdbuf();
    const std::string table = fj::codegen::settings_markdown();
    INFO("regenerate the table in bench/TUNING.md from fj::codegen::settings_markdown():\n" << table);
    CHECK(text.str().find(table) != std::string::npos);
}

TEST_CASE("every setting parses within its range and names its variable otherwise") {
#define FJ_CHECK_SETTING(type, field, env, def, lo, hi, scope, doc)                                     \
    {                                                                                                  \
        INFO(env);                                                                                     \
        ::setenv(env, std::to_string(hi).c_str(), 1);                                                  \
        CHECK(fj::codegen::CudaSettings::from_env().field == (hi));                                    \
        ::setenv(env, std::to_string((hi) + 1).c_str(), 1);                                            \
        try {                                                                                          \
            (void)fj::codegen::CudaSettings::from_env();                                               \
            FAIL_CHECK("no error for a value above the range");                                        \
        } catch (const fj::Error& e) {                                                                 \
            CHECK(std::string(e.what()).find(env) != std::string::npos);                               \
        }                                                                                              \
        ::unsetenv(env);                                                                               \
        CHECK(fj::codegen::CudaSettings::from_env().field == fj::codegen::CudaSettings{}.field);       \
    }
    FJ_CUDA_SETTINGS(FJ_CHECK_SETTING)
#undef FJ_CHECK_SETTING
}

}  // TEST_SUITE
