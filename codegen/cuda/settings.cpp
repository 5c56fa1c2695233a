#include "codegen/cuda/settings.hpp"

#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "dsl/error.hpp"

namespace fj::codegen {

namespace {

int env_int(const char* name, int fallback, int lo, int hi) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end == v || *end) throw Error(fmt::format("{}={} is not an integer", name, v));
    if (x < lo || x > hi) throw Error(fmt::format("{}={} is outside [{}, {}]", name, v, lo, hi));
    return static_cast<int>(x);
}

const char* scope_name(SettingScope s) {
    switch (s) {
    case SettingScope::Generic: return "generic";
    case SettingScope::Fixed: return "specialised";
    case SettingScope::All: return "all";
    case SettingScope::Launch: return "launch";
    }
    return "?";
}

}  // namespace

CudaSettings CudaSettings::from_env() {
    CudaSettings s;
    s.unroll_given = std::getenv("FJ_CUDA_UNROLL") != nullptr;
    // FJ_CUDA_UNROLL asks for batches, which one guarded loop has not: generic kernels then take two loops.
    if (s.unroll_given) s.one_loop = 0;
#define FJ_CUDA_SETTING_PARSE(type, field, env, def, lo, hi, scope, doc) s.field = env_int(env, s.field, lo, hi);
    FJ_CUDA_SETTINGS(FJ_CUDA_SETTING_PARSE)
#undef FJ_CUDA_SETTING_PARSE
    if (s.block % 32) throw Error(fmt::format("FJ_CUDA_BLOCK={} is not a multiple of 32", s.block));
    if (const char* v = std::getenv("FJ_NVRTC_OPTIONS")) {
        std::istringstream words(v);
        for (std::string w; words >> w;) s.extra_options.push_back(w);
    }
    return s;
}

std::string cache_key_text(const CudaSettings& settings, bool fixed) {
    std::string out;
    auto keyed = [fixed](SettingScope scope) {
        return scope == SettingScope::All || scope == (fixed ? SettingScope::Fixed : SettingScope::Generic);
    };
#define FJ_CUDA_SETTING_KEY(type, field, env, def, lo, hi, scope, doc) \
    if (keyed(SettingScope::scope)) out += fmt::format(" " #field "={}", settings.field);
    FJ_CUDA_SETTINGS(FJ_CUDA_SETTING_KEY)
#undef FJ_CUDA_SETTING_KEY
    return out;
}

std::string settings_markdown() {
    std::string out =
        "| variable | default | range | kernels | what it does |\n"
        "|---|---|---|---|---|\n";
#define FJ_CUDA_SETTING_DOC(type, field, env, def, lo, hi, scope, doc) \
    out += fmt::format("| `{}` | {} | {} .. {} | {} | {} |\n", env, def, lo, hi, scope_name(SettingScope::scope), doc);
    FJ_CUDA_SETTINGS(FJ_CUDA_SETTING_DOC)
#undef FJ_CUDA_SETTING_DOC
    out += "| `FJ_NVRTC_OPTIONS` | | words | all | diagnosis: extra NVRTC options, space-separated (e.g. `--ptxas-options=-O1`) |\n";
    return out;
}

bool guarded(const CudaSettings& settings, DType dtype) {
    return settings.guard == 1 || (settings.guard == -1 && dtype == DType::F64);
}

}  // namespace fj::codegen
