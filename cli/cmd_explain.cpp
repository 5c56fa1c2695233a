// `factorjit explain`: compile expressions as `eval` would and print Program::explain(): the fused
// steps, intermediates, halos, the kernels and the generated IR. Reads no data.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "factorjit.hpp"

namespace {

const char* const kUsage = R"USAGE(usage: factorjit explain -e EXPR [-e EXPR ...] [--backend auto|cpu|cuda] [--round-windows]

Compiles the expressions together, as `factorjit eval` would (the k-th is named out<k-1>), and prints
the plan's steps and intermediates, their halos, the kernels and the generated IR.

  -e, --expr EXPR    a factor expression; repeat for several outputs
  --backend B        auto (default), cpu or cuda
  --threads N        CPU worker threads (as for eval)
  --round-windows    round non-integer window lengths instead of flooring them
  -h, --help         print this help
)USAGE";

}  // namespace

int cmd_explain(const std::vector<std::string>& argv) {
    using namespace fj::cli;
    std::vector<std::string> texts;
    fj::CompileOptions options;
    fj::ParseOptions parse_options;
    ArgCursor c(argv, "explain");
    while (c.next()) {
        if (c.is("-h", "--help")) {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (c.is("-e", "--expr")) {
            texts.push_back(c.value("an expression"));
        } else if (c.is("--backend")) {
            options.backend = parse_backend(c.value("auto, cpu or cuda"), "explain");
        } else if (c.is("--threads")) {
            options.threads = parse_threads(c.value("a number of threads"), "explain");
        } else if (c.is("--round-windows")) {
            c.no_value();
            parse_options.round_windows = true;
        } else {
            c.unknown();
        }
    }
    if (texts.empty()) throw UsageError("explain needs at least one -e EXPR", "explain");

    const std::vector<std::pair<std::string, fj::Expr>> named = numbered_outputs(texts, parse_options);
    const fj::Program program = fj::compile(named, options);
    std::string text = program.explain();
    if (!text.empty() && text.back() != '\n') text.push_back('\n');
    std::fputs(text.c_str(), stdout);
    return 0;
}
