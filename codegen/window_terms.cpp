// Window sums split into entering and leaving terms (see window_terms.hpp).
#include "codegen/window_terms.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <map>
#include <utility>

namespace fj::codegen {

using ir::Inst;
using ir::Prim;

namespace {

// The rows an instruction reads, as lags: the least and the largest (lo > hi: none); `moves` when it
// reads what a shift in time does not carry along (a state, a ring, the row index).
struct Lags {
    int lo = INT_MAX, hi = -1;
    bool moves = false;
    bool none() const { return lo > hi; }
};

class Splitter {
public:
    Splitter(const ir::Kernel& k, const std::set<std::int32_t>& constants) : k_(k), constants_(constants) {}

    Lags lags(std::int32_t i) {
        if (auto it = lags_.find(i); it != lags_.end()) return it->second;
        Lags r;
        const Inst& x = at(i);
        if (constants_.count(i)) {
        } else if (x.op == Prim::Input || x.op == Prim::RowInPass) {
            r.lo = r.hi = x.lag;
        } else if (x.op == Prim::LoadState || x.op == Prim::RingRead || x.op == Prim::RowIndex) {
            r.moves = true;
        } else {
            for (std::int32_t o : {x.a, x.b, x.c}) {
                if (o < 0) continue;
                const Lags s = lags(o);
                r.lo = std::min(r.lo, s.lo);
                r.hi = std::max(r.hi, s.hi);
                r.moves = r.moves || s.moves;
            }
        }
        return lags_[i] = r;
    }

    bool reaches(std::int32_t i, int state) {
        if (auto it = reaches_.find({i, state}); it != reaches_.end()) return it->second;
        const Inst& x = at(i);
        bool r = x.op == Prim::LoadState && x.slot == state;
        for (std::int32_t o : {x.a, x.b, x.c})
            if (!r && o >= 0) r = reaches(o, state);
        return reaches_[{i, state}] = r;
    }

    // The terms of s := s + terms, walking from the store's root down the chain to the state's load.
    bool terms(const WindowSum& s, std::vector<SumTerm>* out, std::string* why) {
        std::function<void(std::int32_t, int)> expand = [&](std::int32_t i, int sign) {
            const Inst& x = at(i);
            if (x.op == Prim::Add) expand(x.a, sign), expand(x.b, sign);
            else if (x.op == Prim::Sub) expand(x.a, sign), expand(x.b, -sign);
            else if (x.op == Prim::Neg) expand(x.a, -sign);
            else out->push_back({sign, i, -1});
        };
        auto strip = [&](std::int32_t* i, int* sign) {
            while (at(*i).op == Prim::Neg) *i = at(*i).a, *sign = -*sign;
        };
        for (std::int32_t i = s.root; !(at(i).op == Prim::LoadState && at(i).slot == s.state);) {
            const Inst& x = at(i);
            const bool ra = x.a >= 0 && reaches(x.a, s.state), rb = x.b >= 0 && reaches(x.b, s.state),
                       rc = x.c >= 0 && reaches(x.c, s.state);
            if (x.op == Prim::Add && ra != rb) {
                expand(ra ? x.b : x.a, 1);
                i = ra ? x.a : x.b;
            } else if (x.op == Prim::Sub && ra && !rb) {
                expand(x.b, -1);
                i = x.a;
            } else if (x.op == Prim::Fma && rc && !ra && !rb) {
                SumTerm t{1, x.a, x.b};
                strip(&t.a, &t.sign);
                strip(&t.b, &t.sign);
                out->push_back(t);
                i = x.c;
            } else {
                *why = fmt::format("state s{}'s update is not its load plus terms (instruction {})", s.state, i);
                return false;
            }
        }
        return true;
    }

    Lags term_lags(const SumTerm& t) {
        Lags r = lags(t.a);
        if (t.b >= 0) {
            const Lags b = lags(t.b);
            r.lo = std::min(r.lo, b.lo), r.hi = std::max(r.hi, b.hi), r.moves = r.moves || b.moves;
        }
        return r;
    }

    // Whether `l` is `e` read w rows further back.
    bool shifted(std::int32_t e, std::int32_t l, int w) {
        if (auto it = shifted_.find({e, l}); it != shifted_.end()) return it->second;
        bool r = false;
        const Lags le = lags(e);
        if (e == l) {
            r = le.none() && !le.moves;  // the same value on every row
        } else if (!constants_.count(e) && !constants_.count(l)) {
            r = same_shape(e, l, w);
            // The leaving side masked by RowInPass(t - w): the entering side's RowInPass(t) is always true.
            const Inst& y = at(l);
            if (!r && y.op == Prim::And)
                for (auto [mask, rest] : {std::pair{y.a, y.b}, std::pair{y.b, y.a}})
                    if (!r && at(mask).op == Prim::RowInPass && at(mask).lag == w) r = shifted(e, rest, w);
        }
        return shifted_[{e, l}] = r;
    }

private:
    const Inst& at(std::int32_t i) const { return k_.body[static_cast<std::size_t>(i)]; }

    bool same_shape(std::int32_t e, std::int32_t l, int w) {
        const Inst& x = at(e);
        const Inst& y = at(l);
        if (x.op != y.op || x.type != y.type) return false;
        switch (x.op) {
            case Prim::Input: return x.slot == y.slot && y.lag == x.lag + w;
            case Prim::RowInPass: return y.lag == x.lag + w;
            case Prim::Const: return std::memcmp(&x.imm, &y.imm, sizeof x.imm) == 0;
            case Prim::LoadState:
            case Prim::RingRead:
            case Prim::RowIndex:
            case Prim::StoreState:
            case Prim::RingPush:
            case Prim::Output:
            case Prim::Flag: return false;
            default: break;
        }
        auto operand = [&](std::int32_t p, std::int32_t q) { return (p < 0 && q < 0) || (p >= 0 && q >= 0 && shifted(p, q, w)); };
        if (operand(x.a, y.a) && operand(x.b, y.b) && operand(x.c, y.c)) return true;
        const bool commutes = x.op == Prim::Add || x.op == Prim::Mul || x.op == Prim::And || x.op == Prim::Or ||
                              x.op == Prim::Min || x.op == Prim::Max || x.op == Prim::CmpEQ || x.op == Prim::CmpONE ||
                              x.op == Prim::CmpUNE;
        return commutes && operand(x.a, y.b) && operand(x.b, y.a);
    }

    const ir::Kernel& k_;
    const std::set<std::int32_t>& constants_;
    std::map<std::int32_t, Lags> lags_;
    std::map<std::pair<std::int32_t, int>, bool> reaches_;
    std::map<std::pair<std::int32_t, std::int32_t>, bool> shifted_;
};

}  // namespace

class ShiftedValues::Impl {
public:
    Impl(const ir::Kernel& k, const std::set<std::int32_t>& constants) : constants(constants), splitter(k, this->constants) {}
    const std::set<std::int32_t> constants;
    Splitter splitter;
};

ShiftedValues::ShiftedValues(const ir::Kernel& kernel, const std::set<std::int32_t>& row_constants)
    : impl_(std::make_unique<Impl>(kernel, row_constants)) {}
ShiftedValues::~ShiftedValues() = default;

bool ShiftedValues::shifted(std::int32_t earlier, std::int32_t later, int w) { return impl_->splitter.shifted(earlier, later, w); }

WindowSplit split_window_sums(const ir::Kernel& kernel, const std::vector<WindowSum>& sums,
                              const std::set<std::int32_t>& row_constants) {
    WindowSplit split;
    Splitter sp(kernel, row_constants);
    auto fail = [&](std::string why) {
        split.why_not = std::move(why);
        split.entering.clear();
        return split;
    };
    if (sums.empty()) return fail("no window sums");
    for (const WindowSum& s : sums) {
        std::vector<SumTerm> all;
        std::string why;
        if (!sp.terms(s, &all, &why)) return fail(why);
        // The window: the largest of the terms' nearest rows (an entering term's is 0 in practice).
        int w = 0;
        for (const SumTerm& t : all) {
            const Lags g = sp.term_lags(t);
            if (g.moves) return fail(fmt::format("a term of state s{} reads a state, a ring or the row index", s.state));
            if (g.none()) return fail(fmt::format("a term of state s{} reads no row", s.state));
            w = std::max(w, g.lo);
        }
        if (w == 0) return fail(fmt::format("state s{} has no leaving rows", s.state));
        if (split.window != 0 && split.window != w)
            return fail(fmt::format("sums over windows of {} and {} rows", split.window, w));
        split.window = w;
        std::vector<SumTerm> in, out;
        for (const SumTerm& t : all) {
            const Lags g = sp.term_lags(t);
            if (g.hi < w) in.push_back(t);
            else if (g.lo >= w) out.push_back(t);
            else return fail(fmt::format("a term of state s{} reads rows inside and outside the window", s.state));
        }
        std::vector<bool> used(in.size(), false);
        for (const SumTerm& l : out) {
            bool found = false;
            for (std::size_t i = 0; i < in.size() && !found; ++i) {
                const SumTerm& e = in[i];
                if (used[i] || e.sign != -l.sign || (e.b < 0) != (l.b < 0)) continue;
                found = e.b < 0 ? sp.shifted(e.a, l.a, w)
                                : (sp.shifted(e.a, l.a, w) && sp.shifted(e.b, l.b, w)) ||
                                      (sp.shifted(e.a, l.b, w) && sp.shifted(e.b, l.a, w));
                if (found) used[i] = true;
            }
            if (!found) return fail(fmt::format("a leaving term of state s{} (instruction {}) is no entering term {} rows back",
                                                s.state, l.a, w));
        }
        if (std::find(used.begin(), used.end(), false) != used.end())
            return fail(fmt::format("an entering term of state s{} never leaves", s.state));
        split.entering.push_back(std::move(in));
    }
    split.ok = true;
    return split;
}

}  // namespace fj::codegen
