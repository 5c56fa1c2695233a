// The 101 Formulaic Alphas of Kakushadze, "101 Formulaic Alphas", Wilmott 2016 (arXiv:1601.00991),
// appendix A, as formula text in the paper's own spelling, for fj::parse.
//
// The table is compiled into the library (alphas/alpha101.cpp), so `factorjit alpha101` and the tests
// need no file at run time. docs/alpha101.md says how the paper's spellings read (adv{d}, IndClass.*,
// fractional windows, ^) and where we had to choose.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace fj::alpha101 {

struct Alpha {
    std::string_view name;     // "alpha001" ... "alpha101": also the CLI's output file names
    std::string_view formula;  // the paper's text, verbatim but for the corrections in docs/alpha101.md
};

// The 101 alphas, alpha001 first.
std::span<const Alpha> all();

// The panels the formulas read: prices, volume, returns, market cap, then the group ids of
// IndClass.sector / IndClass.industry / IndClass.subindustry.
std::span<const std::string_view> input_names();

}  // namespace fj::alpha101
