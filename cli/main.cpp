// `factorjit`: the command line. Dispatches to a subcommand (cli/cmd_*.cpp) and turns what it throws
// into `factorjit: error: ...` on stderr and exit status 2.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "dsl/error.hpp"

namespace {

const char* const kUsage = R"USAGE(usage: factorjit <command> [options]

commands:
  eval      evaluate factor expressions on .npy panels and write .npy results
  explain   print the steps, intermediates, halos, kernels and generated IR of expressions
  compile   generate and compile the CUDA kernels ahead of time
  alpha101  compute the 101 Formulaic Alphas on a folder of .npy panels, as one program
  bench     time expressions on generated panels, with the GPU's clock, temperature, power and throttling

`factorjit <command> --help` describes a command's options.
example:
  factorjit eval -e "corr(window(close, 20), window(volume, 20))" \
                 -i close=close.npy -i volume=volume.npy -o corr20.npy
)USAGE";

int error(const std::string& message) {
    std::fprintf(stderr, "factorjit: error: %s\n", message.c_str());
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fputs(kUsage, stderr);
        return 2;
    }
    const std::string command = argv[1];
    const std::vector<std::string> args(argv + 2, argv + argc);
    try {
        if (command == "-h" || command == "--help" || command == "help") {
            std::fputs(kUsage, stdout);
            return 0;
        }
        if (command == "eval") return cmd_eval(args);
        if (command == "explain") return cmd_explain(args);
        if (command == "compile") return cmd_compile(args);
        if (command == "alpha101") return cmd_alpha101(args);
        if (command == "bench") return cmd_bench(args);
        return error("unknown command '" + command + "' (eval, explain, compile, alpha101 or bench; see factorjit --help)");
    } catch (const fj::cli::UsageError& e) {
        return error(std::string(e.what()) + "\n(see 'factorjit " + e.command() + " --help')");
    } catch (const std::bad_alloc&) {
        return error("out of memory");
    } catch (const std::exception& e) {
        return error(e.what());
    }
}
