#include "runtime/cpu/perf_map.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <llvm/Object/ObjectFile.h>
#include <llvm/Object/SymbolSize.h>
#include <llvm/Support/MemoryBuffer.h>

namespace fj::cpu {

void perf_map_add(std::string_view image, std::string_view anchor, std::uint64_t anchor_address) {
    if (!std::getenv("FJ_PERF_MAP")) return;  // read at each link (cheap next to linking), so tests can set it
    auto buffer = llvm::MemoryBuffer::getMemBuffer(llvm::StringRef(image.data(), image.size()), "", false);
    auto object = llvm::object::ObjectFile::createObjectFile(buffer->getMemBufferRef());
    if (!object) {
        llvm::consumeError(object.takeError());
        return;
    }
    struct Function {
        std::string name;
        std::uint64_t offset = 0, size = 0;
    };
    std::vector<Function> functions;
    std::uint64_t anchor_offset = 0;
    bool found = false;
    for (const auto& [symbol, size] : llvm::object::computeSymbolSizes(**object)) {
        auto type = symbol.getType();
        auto name = symbol.getName();
        auto value = symbol.getValue();  // the offset in its section, in a relocatable file
        if (!type || !name || !value) {
            if (!type) llvm::consumeError(type.takeError());
            if (!name) llvm::consumeError(name.takeError());
            if (!value) llvm::consumeError(value.takeError());
            continue;
        }
        if (*type != llvm::object::SymbolRef::ST_Function) continue;
        functions.push_back({name->str(), *value, size});
        if (*name == llvm::StringRef(anchor.data(), anchor.size())) {
            anchor_offset = *value;
            found = true;
        }
    }
    if (!found) return;
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
    if (std::FILE* f = std::fopen(path.c_str(), "a")) {
        for (const Function& fn : functions)
            std::fprintf(f, "%llx %llx %s\n", static_cast<unsigned long long>(anchor_address - anchor_offset + fn.offset),
                         static_cast<unsigned long long>(fn.size), fn.name.c_str());
        std::fclose(f);
    }
}

}  // namespace fj::cpu
