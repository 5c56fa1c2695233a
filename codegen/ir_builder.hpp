// A small builder for kernel IR: appends instructions and names their results.
#pragma once

#include <cstring>
#include <limits>
#include <unordered_map>

#include "codegen/kernel_ir.hpp"

namespace fj::codegen {

using V = std::int32_t;  // an SSA value: an index into Kernel::body

class IrBuilder {
public:
    explicit IrBuilder(ir::Kernel& k) : k_(k) {}
    ir::Kernel& kernel() { return k_; }

    V emit(ir::Inst i) {
        k_.body.push_back(i);
        return static_cast<V>(k_.body.size() - 1);
    }
    V f(ir::Prim p, V a = -1, V b = -1, V c = -1) { return emit({p, ir::Type::F64, a, b, c}); }
    V b(ir::Prim p, V a = -1, V b = -1) { return emit({p, ir::Type::Bool, a, b}); }

    V constant(double v) {  // one instruction per distinct constant (by bits: NaN and -0 included)
        std::uint64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        auto it = constants_.find(bits);
        if (it != constants_.end()) return it->second;
        return constants_[bits] = emit({ir::Prim::Const, ir::Type::F64, -1, -1, -1, -1, 0, v});
    }
    V nan() { return constant(std::numeric_limits<double>::quiet_NaN()); }
    V input(int slot, int lag) {
        if (lag > k_.max_input_lag) k_.max_input_lag = lag;
        return emit({ir::Prim::Input, ir::Type::F64, -1, -1, -1, slot, lag});
    }
    V row() { return f(ir::Prim::RowIndex); }
    V row_in_pass(int lag) { return emit({ir::Prim::RowInPass, ir::Type::Bool, -1, -1, -1, -1, lag}); }

    int new_state(double init, std::string what) {
        k_.states.push_back({init, std::move(what)});
        return static_cast<int>(k_.states.size() - 1);
    }
    V load(int slot) { return emit({ir::Prim::LoadState, ir::Type::F64, -1, -1, -1, slot}); }
    void store(int slot, V v) { emit({ir::Prim::StoreState, ir::Type::Void, v, -1, -1, slot}); }

    int new_ring(int size, std::string what) {
        k_.rings.push_back({size, std::move(what)});
        return static_cast<int>(k_.rings.size() - 1);
    }
    void push(int ring, V v) { emit({ir::Prim::RingPush, ir::Type::Void, v, -1, -1, ring}); }
    V ring_read(int ring, int lag) { return emit({ir::Prim::RingRead, ir::Type::F64, -1, -1, -1, ring, lag}); }
    void output(int slot, V v) { emit({ir::Prim::Output, ir::Type::Void, v, -1, -1, slot}); }

    // Arithmetic and logic.
    V add(V x, V y) { return f(ir::Prim::Add, x, y); }
    V sub(V x, V y) { return f(ir::Prim::Sub, x, y); }
    V mul(V x, V y) { return f(ir::Prim::Mul, x, y); }
    V div(V x, V y) { return f(ir::Prim::Div, x, y); }
    V isnan(V x) { return b(ir::Prim::IsNaN, x); }
    V notnan(V x) { return b(ir::Prim::Not, isnan(x)); }
    V lt(V x, V y) { return b(ir::Prim::CmpLT, x, y); }
    V le(V x, V y) { return b(ir::Prim::CmpLE, x, y); }
    V land(V x, V y) { return b(ir::Prim::And, x, y); }
    V lor(V x, V y) { return b(ir::Prim::Or, x, y); }
    V lnot(V x) { return b(ir::Prim::Not, x); }
    V select(V c, V x, V y) { return emit({ir::Prim::Select, k_.body[x].type, c, x, y}); }
    V to_f64(V c) { return f(ir::Prim::BoolToF64, c); }

private:
    ir::Kernel& k_;
    std::unordered_map<std::uint64_t, V> constants_;
};

}  // namespace fj::codegen
