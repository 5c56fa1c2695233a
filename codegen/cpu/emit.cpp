#include "codegen/cpu/emit.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "codegen/guard_form.hpp"
#include "dsl/error.hpp"

namespace fj::cpu {

using ir::Prim;

std::string emit_settings_text() {
    const char* unroll = std::getenv("FJ_CPU_UNROLL");
    return fmt::format("unroll={} row_guards={}", unroll ? unroll : "", std::getenv("FJ_CPU_ROW_GUARDS") ? 1 : 0);
}

std::int64_t scratch_doubles(const ir::Kernel& kernel, int lanes, std::int64_t columns) {
    std::int64_t per_group = static_cast<std::int64_t>(kernel.states.size());
    for (const ir::Ring& r : kernel.rings) per_group += r.size;
    const std::int64_t groups = (columns + lanes - 1) / lanes;
    return per_group * lanes * groups;
}

namespace {

// Loop order: rows outside, lane groups inside. Every row of a task is then one contiguous read per
// input (the hardware prefetcher streams it), and the states of all groups, kept in scratch, stay in
// L1/L2. Per group of `lanes` columns the scratch holds [states][ring 0 entries][ring 1 entries]...,
// each entry one vector.
constexpr int kUnroll = 4;

struct Row {
    int u = 0;                      // the row's place in its visit (group_rows())
    llvm::Value* t;                 // the row index
    llvm::Value* t_f64;             // splat of t as double
    llvm::Value* write;             // splat of t >= out_begin
    std::vector<llvm::Value*> pos;  // ring positions at this row
};

class Emitter {
public:
    Emitter(const ir::Kernel& k, DType dtype, int lanes, bool avx512, llvm::LLVMContext& ctx)
        : k_(k), dtype_(dtype), W_(lanes), avx512_(avx512), ctx_(ctx), b_(ctx) {
        if (const char* u = std::getenv("FJ_CPU_UNROLL")) unroll_ = std::max(1, std::atoi(u));  // for tuning
        mod_ = std::make_unique<llvm::Module>(k.name, ctx);
        f64_ = b_.getDoubleTy();
        i64_ = b_.getInt64Ty();
        ptr_ = b_.getPtrTy();
        elem_ = dtype == DType::F32 ? b_.getFloatTy() : f64_;
        vf_ = llvm::FixedVectorType::get(f64_, W_);
        ve_ = llvm::FixedVectorType::get(elem_, W_);
        vi_ = llvm::FixedVectorType::get(i64_, W_);
        // Two alias scopes: scratch (states, rings) and panels (inputs, outputs). Without them LLVM must
        // assume an output store may change a state, and could not keep states in registers.
        llvm::MDBuilder md(ctx);
        llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("fj");
        llvm::MDNode* scratch_scope = md.createAnonymousAliasScope(domain, "scratch");
        llvm::MDNode* panel_scope = md.createAnonymousAliasScope(domain, "panels");
        scratch_md_ = llvm::MDNode::get(ctx, {scratch_scope});
        panel_md_ = llvm::MDNode::get(ctx, {panel_scope});
        std::int64_t off = static_cast<std::int64_t>(k.states.size());
        for (const ir::Ring& r : k.rings) { ring_offset_.push_back(off); off += r.size; }
        per_group_ = off * W_;
        guard_forms_.resize(k.refolds.size());
        for (const ir::Inst& in : k.body)
            if (in.op == Prim::Refold && !std::getenv("FJ_CPU_ROW_GUARDS"))  // (=1: every row's test, for measuring)
                guard_forms_[static_cast<std::size_t>(in.slot)] = codegen::guard_form(k.body, in.a);
    }

    std::unique_ptr<llvm::Module> run() {
        emit_masked_rows();
        auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr_}, false);
        fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, k_.name, mod_.get());
        vector_attributes(fn_);
        b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
        load_args();
        init_scratch();
        row_loop();
        b_.CreateRetVoid();
        std::string err;
        llvm::raw_string_ostream os(err);
        if (llvm::verifyModule(*mod_, &os))
            throw BackendError(fmt::format("cpu codegen: invalid LLVM IR for kernel {}: {}", k_.name, os.str()));
        return std::move(mod_);
    }

private:
    void vector_attributes(llvm::Function* f) {
        f->addFnAttr(llvm::Attribute::NoUnwind);
        // Keep whole vectors in registers: without these x86 splits 512-bit vectors in two.
        f->addFnAttr("min-legal-vector-width", std::to_string(W_ * 64));
        f->addFnAttr("prefer-vector-width", std::to_string(W_ * 64));
    }

    // masked_rows(args, group, first row, end row): rows of one lane group one at a time, masked (lanes past the
    // last column, rows before the panel, warm-up rows that write nothing), refolding where a guard fires. A
    // function of its own, called where the kernel's loop needs it: for the warm-up rows, the last partial lane
    // group, the rows past the last whole visit, and a visit whose guards fired (group_rows()). So the kernel's
    // body is emitted twice, once here and once for the unrolled visits of whole lane groups, instead of once per
    // path (unrolled and masked, unrolled and not, single rows, refolding: 16 copies), which made LLVM's machine
    // code most of a kernel's compile time (bench/RESULTS.md, "A1 on the CPU"). A refold inside the unrolled
    // rows instead of a call would cost corr w=20 15 % (a branch per row keeps LLVM from forwarding states).
    void emit_masked_rows() {
        auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr_, i64_, i64_, i64_}, false);
        fn_ = llvm::Function::Create(fty, llvm::Function::InternalLinkage, k_.name + ".masked_rows", mod_.get());
        vector_attributes(fn_);
        fn_->addFnAttr(llvm::Attribute::NoInline);
        masked_rows_ = fn_;
        b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
        load_args();
        llvm::Value* g = fn_->getArg(1);
        group_base_ = b_.CreateInBoundsGEP(f64_, scratch_, b_.CreateMul(g, i64c(per_group_)));
        col_ = b_.CreateAdd(col_begin_, b_.CreateMul(g, i64c(W_)));
        lane_mask_ = b_.CreateICmpSLT(iota(), b_.CreateVectorSplat(W_, b_.CreateSub(col_end_, col_)));
        Loop t = begin_loop(fn_->getArg(2), fn_->getArg(3), "masked.row");
        Row row;
        row.t = t.iv;
        row.t_f64 = b_.CreateVectorSplat(W_, b_.CreateSIToFP(row.t, f64_));
        row.write = b_.CreateVectorSplat(W_, b_.CreateICmpSGE(row.t, out_begin_));
        for (std::size_t r = 0; r < k_.rings.size(); ++r)  // (rings start at row_begin, position 0)
            row.pos.push_back(b_.CreateURem(b_.CreateSub(row.t, row_begin_), i64c(k_.rings[r].size)));
        begin_states();
        row_body(row, true);
        store_states();
        end_loop(t);
        b_.CreateRetVoid();
    }

    // ---- helpers --------------------------------------------------------------------------------------
    llvm::Value* field(int index) {  // KernelArgs is a sequence of 8-byte fields
        llvm::Value* p = b_.CreateConstInBoundsGEP1_64(i64_, args_, index);
        return b_.CreateLoad(i64_, p);
    }
    llvm::Value* field_ptr(int index) {
        llvm::Value* p = b_.CreateConstInBoundsGEP1_64(i64_, args_, index);
        return b_.CreateLoad(ptr_, p);
    }
    llvm::Constant* splat(double v) { return llvm::ConstantFP::get(vf_, v); }
    llvm::Value* nan() { return splat(std::numeric_limits<double>::quiet_NaN()); }
    llvm::Value* vec_at(llvm::Value* index_doubles) {  // address of the vector at scratch[group base + i]
        return b_.CreateInBoundsGEP(f64_, group_base_, index_doubles);
    }
    template <class I> I* scratch_access(I* i) {
        i->setMetadata(llvm::LLVMContext::MD_alias_scope, scratch_md_);
        i->setMetadata(llvm::LLVMContext::MD_noalias, panel_md_);
        return i;
    }
    template <class I> I* panel_access(I* i) {
        i->setMetadata(llvm::LLVMContext::MD_alias_scope, panel_md_);
        i->setMetadata(llvm::LLVMContext::MD_noalias, scratch_md_);
        return i;
    }
    llvm::Value* scratch_load(llvm::Value* index_doubles) {
        return scratch_access(b_.CreateAlignedLoad(vf_, vec_at(index_doubles), llvm::Align(8)));
    }
    void scratch_store(llvm::Value* v, llvm::Value* index_doubles) {
        scratch_access(b_.CreateAlignedStore(v, vec_at(index_doubles), llvm::Align(8)));
    }
    llvm::Value* i64c(std::int64_t v) { return b_.getInt64(static_cast<std::uint64_t>(v)); }

    struct Loop {
        llvm::BasicBlock *header, *body, *exit;
        llvm::PHINode* iv;
    };
    Loop begin_loop(llvm::Value* start, llvm::Value* end, const char* name) {
        Loop l;
        llvm::BasicBlock* pre = b_.GetInsertBlock();
        l.header = llvm::BasicBlock::Create(ctx_, std::string(name) + ".head", fn_);
        l.body = llvm::BasicBlock::Create(ctx_, std::string(name) + ".body", fn_);
        l.exit = llvm::BasicBlock::Create(ctx_, std::string(name) + ".exit", fn_);
        b_.CreateBr(l.header);
        b_.SetInsertPoint(l.header);
        l.iv = b_.CreatePHI(i64_, 2, name);
        l.iv->addIncoming(start, pre);
        b_.CreateCondBr(b_.CreateICmpSLT(l.iv, end), l.body, l.exit);
        b_.SetInsertPoint(l.body);
        return l;
    }
    void end_loop(Loop& l, std::int64_t step = 1) {
        llvm::Value* next = b_.CreateAdd(l.iv, i64c(step));
        l.iv->addIncoming(next, b_.GetInsertBlock());
        b_.CreateBr(l.header);
        b_.SetInsertPoint(l.exit);
    }

    // ---- structure ------------------------------------------------------------------------------------
    void load_args() {
        args_ = fn_->getArg(0);
        inputs_ = field_ptr(0);
        in_ld_ = field_ptr(1);
        outputs_ = field_ptr(2);
        out_ld_ = field_ptr(3);
        col_begin_ = field(4);
        col_end_ = field(5);
        row_begin_ = field(6);
        out_begin_ = field(7);
        row_end_ = field(8);
        scratch_ = field_ptr(9);
        in_ptr_.clear();
        in_ld_v_.clear();
        out_ptr_.clear();
        out_ld_v_.clear();
        for (std::size_t i = 0; i < k_.inputs.size(); ++i) {
            in_ptr_.push_back(b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, inputs_, i)));
            in_ld_v_.push_back(b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, in_ld_, i)));
        }
        for (std::size_t o = 0; o < k_.outputs.size(); ++o) {
            out_ptr_.push_back(b_.CreateLoad(ptr_, b_.CreateConstInBoundsGEP1_64(ptr_, outputs_, o)));
            out_ld_v_.push_back(b_.CreateLoad(i64_, b_.CreateConstInBoundsGEP1_64(i64_, out_ld_, o)));
        }
        ngroups_ = b_.CreateSDiv(b_.CreateAdd(b_.CreateSub(col_end_, col_begin_), i64c(W_ - 1)), i64c(W_));
    }

    void init_scratch() {
        Loop g = begin_loop(i64c(0), ngroups_, "init");
        group_base_ = b_.CreateInBoundsGEP(f64_, scratch_, b_.CreateMul(g.iv, i64c(per_group_)));
        for (std::size_t s = 0; s < k_.states.size(); ++s)
            scratch_store(splat(k_.states[s].init), i64c(static_cast<std::int64_t>(s) * W_));
        if (!k_.rings.empty()) {
            Loop e = begin_loop(i64c(static_cast<std::int64_t>(k_.states.size()) * W_), i64c(per_group_), "init.ring");
            scratch_store(nan(), e.iv);
            end_loop(e, W_);
        }
        end_loop(g);
    }

    // Rows whose inputs all lie inside the panel and that write their outputs are processed `unroll` at a time per
    // visit of a whole lane group, without masks: the states stay in registers across those rows (alias scopes let
    // LLVM forward them), so the scratch traffic per row shrinks by that factor; plain loads (folded into the
    // conversions) and stores, no mask registers kept per input and lag (the kernels run short of registers).
    // Everything else calls masked_rows: the warm-up rows (and rows that read before the panel), group by group
    // first; the last, partial, lane group of each visit; the rows after the last whole visit.
    void row_loop() {
        llvm::Value* clean = b_.CreateSelect(b_.CreateICmpSGT(out_begin_, i64c(k_.max_input_lag)), out_begin_, i64c(k_.max_input_lag));
        clean = b_.CreateSelect(b_.CreateICmpSLT(clean, row_begin_), row_begin_, clean);
        clean = b_.CreateSelect(b_.CreateICmpSGT(clean, row_end_), row_end_, clean);
        masked_groups(i64c(0), row_begin_, clean);
        llvm::Value* n = b_.CreateSub(row_end_, clean);
        llvm::Value* main_end = b_.CreateAdd(clean, b_.CreateMul(b_.CreateSDiv(n, i64c(unroll_)), i64c(unroll_)));
        std::vector<llvm::Value*> pos;
        for (std::size_t r = 0; r < k_.rings.size(); ++r)
            pos.push_back(b_.CreateURem(b_.CreateSub(clean, row_begin_), i64c(k_.rings[r].size)));
        rows(clean, main_end, unroll_, pos);
        masked_groups(i64c(0), main_end, row_end_);
    }

    // masked_rows(group, from, to) for the groups from `first` on.
    void masked_groups(llvm::Value* first, llvm::Value* from, llvm::Value* to) {
        Loop g = begin_loop(first, ngroups_, "masked.group");
        b_.CreateCall(masked_rows_, {args_, g.iv, from, to});
        end_loop(g);
    }

    // Runs rows [begin, end) in steps of `step` rows, all of them clean (row_loop()); `start`: the ring positions
    // at `begin`.
    void rows(llvm::Value* begin, llvm::Value* end, int step, std::vector<llvm::Value*> start) {
        llvm::BasicBlock* pre = b_.GetInsertBlock();
        Loop t = begin_loop(begin, end, "rows");
        llvm::BasicBlock* body = b_.GetInsertBlock();
        // Ring positions, (t - row_begin) mod size, carried from step to step.
        b_.SetInsertPoint(t.header, t.header->getFirstInsertionPt());
        std::vector<llvm::PHINode*> phis;
        std::vector<llvm::Value*> pos;
        for (std::size_t r = 0; r < k_.rings.size(); ++r) {
            llvm::PHINode* p = b_.CreatePHI(i64_, 2, fmt::format("pos{}", r));
            p->addIncoming(start[r], pre);
            phis.push_back(p);
            pos.push_back(p);
        }
        b_.SetInsertPoint(body);
        std::vector<Row> rs;
        for (int u = 0; u < step; ++u) {
            Row row;
            row.u = u;
            row.t = b_.CreateAdd(t.iv, i64c(u));
            row.t_f64 = b_.CreateVectorSplat(W_, b_.CreateSIToFP(row.t, f64_));
            row.write = b_.CreateVectorSplat(W_, b_.getTrue());
            for (std::size_t r = 0; r < k_.rings.size(); ++r)
                row.pos.push_back(u == 0 ? pos[r] : b_.CreateURem(b_.CreateAdd(pos[r], i64c(u)), i64c(k_.rings[r].size)));
            rs.push_back(row);
        }
        llvm::Value* full = b_.CreateSDiv(b_.CreateSub(col_end_, col_begin_), i64c(W_));  // whole groups
        {
            Loop g = begin_loop(i64c(0), full, "group.unmasked");
            group_ = g.iv;
            group_base_ = b_.CreateInBoundsGEP(f64_, scratch_, b_.CreateMul(g.iv, i64c(per_group_)));
            col_ = b_.CreateAdd(col_begin_, b_.CreateMul(g.iv, i64c(W_)));
            lane_mask_ = llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(static_cast<unsigned>(W_)), b_.getTrue());
            unmasked_ = true;
            group_rows(rs);
            unmasked_ = false;
            end_loop(g);
        }
        masked_groups(full, t.iv, b_.CreateAdd(t.iv, i64c(step)));
        for (std::size_t r = 0; r < k_.rings.size(); ++r)
            phis[r]->addIncoming(b_.CreateURem(b_.CreateAdd(pos[r], i64c(step)), i64c(k_.rings[r].size)),
                                 b_.GetInsertBlock());
        end_loop(t, step);
    }

    // One visit of a lane group: its rows, first as if no refold ran, collecting the lanes whose guards fire
    // (tested once a visit where they can be: "the first run's guard tests" below); where none did (almost
    // always), the states those rows computed are stored; where one did, the rows run again from the states as
    // they were, refolding where needed (emit_masked_rows()). States are values
    // while the rows run and stored once at the end, so the rows that run again start from what is still in
    // scratch; they rewrite the outputs and ring entries the first run wrote. A refold inside the first run
    // instead (a branch per row) kept LLVM from forwarding states across the rows: corr w=20 took 15 % longer.
    void group_rows(const std::vector<Row>& rs) {
        const bool refolds = !k_.refolds.empty();
        begin_states();
        need_ = refolds ? llvm::ConstantInt::getFalse(llvm::FixedVectorType::get(b_.getInt1Ty(), static_cast<unsigned>(W_))) : nullptr;
        // Ring pushes wait for the end too: rows that run again read entries from before the visit, which a
        // ring of just its longest lag would have lost to the first run's later rows.
        defer_pushes_ = true;
        pushed_.assign(k_.rings.size(), std::vector<llvm::Value*>(rs.size(), nullptr));
        begin_tests();
        for (const Row& row : rs) row_body(row, false);
        defer_pushes_ = false;
        if (refolds) end_tests();
        if (!refolds) {
            store_states();
            store_pushes(rs);
            return;
        }
        auto* again = llvm::BasicBlock::Create(ctx_, "refold.rows", fn_);
        auto* keep = llvm::BasicBlock::Create(ctx_, "keep.rows", fn_);
        auto* next = llvm::BasicBlock::Create(ctx_, "rows.done", fn_);
        llvm::MDBuilder md(ctx_);
        b_.CreateCondBr(any_lane(b_.CreateAnd(need_, lane_mask_)), again, keep, md.createBranchWeights(1, 1000));
        b_.SetInsertPoint(keep);
        store_states();
        store_pushes(rs);
        b_.CreateBr(next);
        b_.SetInsertPoint(again);
        b_.CreateCall(masked_rows_, {args_, group_, rs.front().t, b_.CreateAdd(rs.back().t, i64c(1))});
        b_.CreateBr(next);
        b_.SetInsertPoint(next);
    }

    void begin_states() {
        state_vals_.assign(k_.states.size(), nullptr);
        state_stored_.assign(k_.states.size(), false);
    }
    void store_pushes(const std::vector<Row>& rs) {  // in row order: a short ring keeps the latest
        for (const Row& row : rs)
            for (std::size_t r = 0; r < k_.rings.size(); ++r)
                scratch_store(pushed_[r][static_cast<std::size_t>(row.u)], ring_slot(static_cast<int>(r), row.pos[r]));
    }
    void store_states() {
        for (std::size_t s = 0; s < k_.states.size(); ++s)
            if (state_stored_[s]) scratch_store(state_vals_[s], i64c(static_cast<std::int64_t>(s) * W_));
    }
    // ---- the first run's guard tests -------------------------------------------------------------------
    // The first run only needs to know whether a guard fired on some row of the visit: the refolding rows test
    // each row again. So where a refold's condition has the form codegen/guard_form.hpp describes, the visit tests
    // each bound once (a masked min a row and limit, a masked max a row for bounds of no other form), against its
    // upper bound over the visit's rows; conditions of other forms are tested on every row.
    using Upper = codegen::GuardUpper;
    using GuardForm = codegen::GuardForm;

    void begin_tests() {
        const double inf = std::numeric_limits<double>::infinity();
        uppers_.assign(guard_forms_.size(), {});
        limits_.assign(guard_forms_.size(), {});
        for (std::size_t r = 0; r < guard_forms_.size(); ++r) {
            if (!guard_forms_[r]) continue;
            for (const Upper& u : guard_forms_[r]->uppers) uppers_[r].push_back(u.kind == Upper::Largest ? splat(-inf) : nullptr);
            limits_[r].assign(guard_forms_[r]->leaves.size(), splat(inf));
        }
    }
    void test(const ir::Inst& at) {  // a Refold in the first run
        const auto r = static_cast<std::size_t>(at.slot);
        if (!guard_forms_[r]) {
            need_ = b_.CreateOr(need_, vals_[static_cast<std::size_t>(at.a)]);  // (lanes masked once, at the end)
            return;
        }
        const GuardForm& g = *guard_forms_[r];
        llvm::Value* valid = g.valid >= 0 ? vals_[static_cast<std::size_t>(g.valid)] : nullptr;
        auto where_valid = [&](llvm::Value* v, llvm::Value* old) { return valid ? b_.CreateSelect(valid, v, old) : v; };
        for (std::size_t u = 0; u < g.uppers.size(); ++u) {
            llvm::Value* v = g.uppers[u].value >= 0 ? vals_[static_cast<std::size_t>(g.uppers[u].value)] : nullptr;
            if (g.uppers[u].kind == Upper::Last) uppers_[r][u] = v;
            if (g.uppers[u].kind == Upper::Largest) uppers_[r][u] = where_valid(x86_min_max(false, v, uppers_[r][u]), uppers_[r][u]);
        }
        for (std::size_t j = 0; j < g.leaves.size(); ++j) {
            llvm::Value*& m = limits_[r][j];
            m = where_valid(x86_min_max(true, vals_[static_cast<std::size_t>(g.leaves[j].second)], m), m);
        }
    }
    // The smaller (larger) of a and b, b where either is NaN: x86's vminpd (vmaxpd), through its intrinsic so that
    // a select around it stays one masked instruction (a compare and a select would become a masked compare
    // and a blend).
    llvm::Value* x86_min_max(bool min, llvm::Value* a, llvm::Value* b) {
        llvm::Intrinsic::ID id = llvm::Intrinsic::not_intrinsic;
        if (W_ == 8 && avx512_) id = min ? llvm::Intrinsic::x86_avx512_min_pd_512 : llvm::Intrinsic::x86_avx512_max_pd_512;
        else if (W_ == 4) id = min ? llvm::Intrinsic::x86_avx_min_pd_256 : llvm::Intrinsic::x86_avx_max_pd_256;
        else if (W_ == 2) id = min ? llvm::Intrinsic::x86_sse2_min_pd : llvm::Intrinsic::x86_sse2_max_pd;
        if (id == llvm::Intrinsic::not_intrinsic)
            return b_.CreateSelect(min ? b_.CreateFCmpOLT(a, b) : b_.CreateFCmpOGT(a, b), a, b);
        if (W_ == 8) return b_.CreateIntrinsic(id, {}, {a, b, b_.getInt32(4)});  // (4: the current rounding)
        return b_.CreateIntrinsic(id, {}, {a, b});
    }
    void end_tests() {
        for (std::size_t r = 0; r < guard_forms_.size(); ++r) {
            if (!guard_forms_[r]) continue;
            const GuardForm& g = *guard_forms_[r];
            std::vector<llvm::Value*>& u = uppers_[r];
            for (std::size_t i = 0; i < g.uppers.size(); ++i) {  // (parts before the sums and products of them)
                auto arg = [&](int k) { return u[static_cast<std::size_t>(g.uppers[i].args[static_cast<std::size_t>(k)])]; };
                switch (g.uppers[i].kind) {
                case Upper::Add: u[i] = b_.CreateFAdd(arg(0), arg(1)); break;
                case Upper::Mul: u[i] = b_.CreateFMul(arg(0), arg(1)); break;
                case Upper::Fma: u[i] = intrinsic(llvm::Intrinsic::fma, {arg(0), arg(1), arg(2)}); break;
                default: break;
                }
            }
            for (std::size_t j = 0; j < g.leaves.size(); ++j)
                need_ = b_.CreateOr(need_, b_.CreateFCmpOGT(u[static_cast<std::size_t>(g.leaves[j].first)], limits_[r][j]));
        }
    }

    llvm::Value* any_lane(llvm::Value* mask) {
        const auto bits = static_cast<unsigned>(W_);
        return b_.CreateICmpNE(b_.CreateBitCast(mask, b_.getIntNTy(bits)), b_.getIntN(bits, 0));
    }

    // One row; `refolding`: refolds run where their guards fire, else the guards only mark their lanes.
    void row_body(const Row& row, bool refolding) {
        row_ = &row;
        vals_.assign(k_.body.size(), nullptr);
        for (std::size_t i = 0; i < k_.body.size(); ++i) {
            const ir::Inst& in = k_.body[i];
            if (in.op == Prim::Refold) {
                if (refolding) refold(in, i);
                else test(in);
            } else if (in.op == Prim::RefoldValue) {
                vals_[i] = refolding ? refolded_.at(static_cast<std::int32_t>(i)) : vals_[static_cast<std::size_t>(in.a)];
            } else {
                vals_[i] = inst(in, k_.body);
            }
        }
    }

    // A refold (kernel_ir.hpp): where any lane's condition holds, a loop over the window's lags with
    // compensated (Neumaier) sums, masked to those lanes, then the epilogue; each of its RefoldValues is the
    // export on those lanes and its fallback elsewhere, merged by a phi: rows where no lane refolds pay the
    // test and a branch.
    void refold(const ir::Inst& at, std::size_t index) {
        const ir::Refold& f = k_.refolds[static_cast<std::size_t>(at.slot)];
        std::vector<std::size_t> values;  // this refold's RefoldValues, after it
        for (std::size_t i = index + 1; i < k_.body.size(); ++i)
            if (k_.body[i].op == Prim::RefoldValue && k_.body[i].slot == at.slot) values.push_back(i);
        llvm::Value* mask = b_.CreateAnd(vals_[static_cast<std::size_t>(at.a)], lane_mask_);
        llvm::Value* any = any_lane(mask);
        llvm::BasicBlock* pre = b_.GetInsertBlock();
        auto* run = llvm::BasicBlock::Create(ctx_, "refold", fn_);
        auto* head = llvm::BasicBlock::Create(ctx_, "refold.lag", fn_);
        auto* body = llvm::BasicBlock::Create(ctx_, "refold.body", fn_);
        auto* done = llvm::BasicBlock::Create(ctx_, "refold.done", fn_);
        auto* join = llvm::BasicBlock::Create(ctx_, "refold.join", fn_);
        llvm::MDBuilder md(ctx_);
        b_.CreateCondBr(any, run, join, md.createBranchWeights(1, 1000));
        b_.SetInsertPoint(run);
        b_.CreateBr(head);
        // Lag loop: k and each sum's (s, c) as phis.
        b_.SetInsertPoint(head);
        llvm::PHINode* k = b_.CreatePHI(i64_, 2, "k");
        k->addIncoming(i64c(0), run);
        std::vector<llvm::PHINode*> sum, comp;
        for (std::size_t i = 0; i < f.sums.size(); ++i) {
            sum.push_back(b_.CreatePHI(vf_, 2, "fold"));
            comp.push_back(b_.CreatePHI(vf_, 2, "fold.c"));
            sum.back()->addIncoming(splat(0), run);
            comp.back()->addIncoming(splat(0), run);
        }
        b_.CreateCondBr(b_.CreateICmpSLT(k, i64c(f.rows)), body, done);
        b_.SetInsertPoint(body);
        std::vector<llvm::Value*> main_vals = std::move(vals_);
        std::vector<llvm::Value*> rvals(f.body.size(), nullptr);
        vals_.assign(f.body.size(), nullptr);
        main_vals_ = &main_vals;
        lag_extra_ = k;
        for (std::size_t i = 0; i < static_cast<std::size_t>(f.per_lag); ++i) vals_[i] = inst(f.body[i], f.body);
        lag_extra_ = nullptr;
        for (std::size_t i = 0; i < f.sums.size(); ++i) {
            llvm::Value* x = b_.CreateSelect(mask, vals_[static_cast<std::size_t>(f.sums[i])], splat(0));
            llvm::Value* s = sum[i];
            llvm::Value* t = b_.CreateFAdd(s, x);
            llvm::Value* big = b_.CreateFCmpOGE(intrinsic(llvm::Intrinsic::fabs, {s}), intrinsic(llvm::Intrinsic::fabs, {x}));
            llvm::Value* lost = b_.CreateSelect(big, b_.CreateFAdd(b_.CreateFSub(s, t), x), b_.CreateFAdd(b_.CreateFSub(x, t), s));
            sum[i]->addIncoming(t, b_.GetInsertBlock());
            comp[i]->addIncoming(b_.CreateFAdd(comp[i], lost), b_.GetInsertBlock());
        }
        k->addIncoming(b_.CreateAdd(k, i64c(1)), b_.GetInsertBlock());
        b_.CreateBr(head);
        b_.SetInsertPoint(done);
        folds_.clear();
        for (std::size_t i = 0; i < f.sums.size(); ++i) folds_.push_back({sum[i], comp[i]});
        for (std::size_t i = static_cast<std::size_t>(f.per_lag); i < f.body.size(); ++i) vals_[i] = inst(f.body[i], f.body);
        std::vector<llvm::Value*> blended;
        for (std::size_t i : values) {
            const ir::Inst& v = k_.body[i];
            blended.push_back(b_.CreateSelect(mask, vals_[static_cast<std::size_t>(f.exports[static_cast<std::size_t>(v.lag)])],
                                              main_vals[static_cast<std::size_t>(v.a)]));
        }
        llvm::BasicBlock* last = b_.GetInsertBlock();
        b_.CreateBr(join);
        b_.SetInsertPoint(join);
        vals_ = std::move(main_vals);
        main_vals_ = nullptr;
        for (std::size_t j = 0; j < values.size(); ++j) {
            llvm::PHINode* phi = b_.CreatePHI(vf_, 2, "refolded");
            phi->addIncoming(vals_[static_cast<std::size_t>(k_.body[values[j]].a)], pre);
            phi->addIncoming(blended[j], last);
            refolded_[static_cast<std::int32_t>(values[j])] = phi;
        }
    }

    llvm::Value* iota() {
        std::vector<llvm::Constant*> c;
        for (int i = 0; i < W_; ++i) c.push_back(b_.getInt64(i));
        return llvm::ConstantVector::get(c);
    }

    llvm::Value* ring_slot(int ring, llvm::Value* pos) {  // doubles from group base to the entry at pos
        return b_.CreateMul(b_.CreateAdd(i64c(ring_offset_[ring]), pos), i64c(W_));
    }
    llvm::Value* wrap(llvm::Value* p, int size) {  // p in (-size, size) -> [0, size)
        return b_.CreateSelect(b_.CreateICmpSLT(p, i64c(0)), b_.CreateAdd(p, i64c(size)), p);
    }
    // An instruction's lag, plus the lag k of a refold's per-lag part while one is emitted.
    llvm::Value* lag_of(const ir::Inst& in) { return lag_extra_ ? b_.CreateAdd(i64c(in.lag), lag_extra_) : i64c(in.lag); }

    llvm::Value* intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Value*> args) {
        return b_.CreateIntrinsic(id, {vf_}, args);
    }

    // ---- one primitive --------------------------------------------------------------------------------
    llvm::Value* inst(const ir::Inst& in, const std::vector<ir::Inst>& body) {
        auto A = [&] { return vals_[in.a]; };
        auto B = [&] { return vals_[in.b]; };
        switch (in.op) {
        case Prim::Const: return splat(in.imm);
        case Prim::Input: {
            // Rows before the panel read as NaN: their lanes are masked off (and the row clamped, so no
            // address before the panel is ever formed). No branch, no select.
            llvm::Value* row = b_.CreateSub(row_->t, lag_of(in));
            if (unmasked_) {  // (rows past every input's lag: none before the panel; whole groups)
                llvm::Value* p = b_.CreateInBoundsGEP(elem_, in_ptr_[in.slot], b_.CreateAdd(b_.CreateMul(row, in_ld_v_[in.slot]), col_));
                llvm::Value* v = panel_access(b_.CreateAlignedLoad(ve_, p, llvm::Align(dtype_size(dtype_))));
                return dtype_ == DType::F32 ? b_.CreateFPExt(v, vf_) : v;
            }
            llvm::Value* ok = b_.CreateICmpSGE(row, i64c(0));
            llvm::Value* safe = b_.CreateSelect(ok, row, i64c(0));
            llvm::Value* idx = b_.CreateAdd(b_.CreateMul(safe, in_ld_v_[in.slot]), col_);
            llvm::Value* p = b_.CreateInBoundsGEP(elem_, in_ptr_[in.slot], idx);
            llvm::Value* pass = llvm::ConstantFP::get(ve_, std::numeric_limits<double>::quiet_NaN());
            llvm::Value* mask = b_.CreateAnd(lane_mask_, b_.CreateVectorSplat(W_, ok));
            llvm::Value* v = panel_access(b_.CreateMaskedLoad(ve_, p, llvm::Align(dtype_size(dtype_)), mask, pass));
            return dtype_ == DType::F32 ? b_.CreateFPExt(v, vf_) : v;
        }
        case Prim::RowIndex: return row_->t_f64;
        case Prim::RowInPass:
            return b_.CreateVectorSplat(W_, b_.CreateICmpSGE(b_.CreateSub(row_->t, lag_of(in)), row_begin_));
        case Prim::LoadState: {  // loaded once a visit; StoreState replaces the value, store_states() stores it
            llvm::Value*& v = state_vals_[static_cast<std::size_t>(in.slot)];
            if (!v) v = scratch_load(i64c(static_cast<std::int64_t>(in.slot) * W_));
            return v;
        }
        case Prim::StoreState:
            state_vals_[static_cast<std::size_t>(in.slot)] = A();
            state_stored_[static_cast<std::size_t>(in.slot)] = true;
            return nullptr;
        case Prim::RingPush:
            if (defer_pushes_) pushed_[static_cast<std::size_t>(in.slot)][static_cast<std::size_t>(row_->u)] = A();
            else scratch_store(A(), ring_slot(in.slot, row_->pos[in.slot]));
            return nullptr;
        case Prim::RingRead:
            // A row pushed earlier in this visit, while pushes wait for the visit's end: its value.
            if (defer_pushes_ && !lag_extra_ && in.lag <= row_->u)
                return pushed_[static_cast<std::size_t>(in.slot)][static_cast<std::size_t>(row_->u - in.lag)];
            // Entries start as NaN and rows since row_begin are all pushed, so an entry for a row before
            // the pass reads NaN without a test (lag < ring size).
            return scratch_load(ring_slot(in.slot, wrap(b_.CreateSub(row_->pos[in.slot], lag_of(in)), k_.rings[in.slot].size)));
        case Prim::Output: {  // masked off on warm-up rows and past the last column
            llvm::Value* idx = b_.CreateAdd(b_.CreateMul(row_->t, out_ld_v_[in.slot]), col_);
            llvm::Value* p = b_.CreateInBoundsGEP(elem_, out_ptr_[in.slot], idx);
            llvm::Value* x = dtype_ == DType::F32 ? b_.CreateFPTrunc(A(), ve_) : A();
            if (unmasked_) panel_access(b_.CreateAlignedStore(x, p, llvm::Align(dtype_size(dtype_))));  // (rows past the warm-up)
            else panel_access(b_.CreateMaskedStore(x, p, llvm::Align(dtype_size(dtype_)), b_.CreateAnd(lane_mask_, row_->write)));
            return nullptr;
        }
        case Prim::Outer: return (*main_vals_)[static_cast<std::size_t>(in.a)];
        case Prim::Fold: return in.imm != 0 ? folds_[static_cast<std::size_t>(in.slot)].second : folds_[static_cast<std::size_t>(in.slot)].first;
        case Prim::Refold:
        case Prim::RefoldValue: break;  // row_body()
        case Prim::Flag: break;        // (kernels from ir::flag_refolds, for CUDA's repair pass: not emitted here)
        case Prim::Add: return b_.CreateFAdd(A(), B());
        case Prim::Sub: return b_.CreateFSub(A(), B());
        case Prim::Mul: return b_.CreateFMul(A(), B());
        case Prim::Div: return b_.CreateFDiv(A(), B());
        case Prim::Neg: return b_.CreateFNeg(A());
        case Prim::Abs: return intrinsic(llvm::Intrinsic::fabs, {A()});
        case Prim::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, {A()});
        case Prim::Exp: return intrinsic(llvm::Intrinsic::exp, {A()});
        case Prim::Log: return intrinsic(llvm::Intrinsic::log, {A()});
        case Prim::Pow: return power(A(), B(), body[static_cast<std::size_t>(in.b)]);
        case Prim::Floor: return intrinsic(llvm::Intrinsic::floor, {A()});
        case Prim::Fma: return intrinsic(llvm::Intrinsic::fma, {A(), B(), vals_[in.c]});
        case Prim::Min: return b_.CreateSelect(b_.CreateFCmpOLT(A(), B()), A(), B());  // one vminpd
        case Prim::Max: return b_.CreateSelect(b_.CreateFCmpOGT(A(), B()), A(), B());
        case Prim::Recip: return reciprocal(A(), false);
        case Prim::RSqrt: return reciprocal(A(), true);
        case Prim::CmpLT:
            if (const ir::Inst& x = body[static_cast<std::size_t>(in.a)]; x.op == Prim::Abs && is_inf(body[static_cast<std::size_t>(in.b)]))
                return is_finite(vals_[static_cast<std::size_t>(x.a)]);
            return b_.CreateFCmpOLT(A(), B());
        case Prim::CmpLE: return b_.CreateFCmpOLE(A(), B());
        case Prim::CmpGT: return b_.CreateFCmpOGT(A(), B());
        case Prim::CmpGE: return b_.CreateFCmpOGE(A(), B());
        case Prim::CmpEQ: return b_.CreateFCmpOEQ(A(), B());
        case Prim::CmpONE: return b_.CreateFCmpONE(A(), B());
        case Prim::CmpUNE: return b_.CreateFCmpUNE(A(), B());
        case Prim::IsNaN: return b_.CreateFCmpUNO(A(), A());
        case Prim::And: return b_.CreateAnd(A(), B());
        case Prim::Or: return b_.CreateOr(A(), B());
        case Prim::Not: return b_.CreateNot(A());
        case Prim::Select: return b_.CreateSelect(A(), B(), vals_[in.c]);
        case Prim::BoolToF64: return b_.CreateUIToFP(A(), vf_);
        }
        throw BackendError(fmt::format("cpu codegen: primitive {} not handled", ir::prim_name(in.op)));
    }

    // x^y. LLVM scalarises a vector pow into a libm call per lane (tens of ns each); where y is a constant the
    // alphas use, vector arithmetic instead: a whole y of 1..16 by multiplications (square and multiply: within
    // (y - 1) / 2 ulp, 2 for x^5; pow's signs and infinities: (-0)^5 = -0, (-inf)^2 = inf, NaN stays NaN; no
    // overflow pow would not have, as every partial power is at most x^y in size), y = 0.5 as sqrt(x + 0)
    // (correctly rounded; + 0 makes -0 +0 as pow(-0, 0.5) = +0) with pow(-inf, 0.5) = +inf. #95's ts_rank of
    // x^5 over 11 rows took 5.9 of the 101 alphas' 60 s of kernels at 4,000 x 5,000 (bench/RESULTS.md).
    llvm::Value* power(llvm::Value* x, llvm::Value* y, const ir::Inst& exponent) {
        if (exponent.op == Prim::Const) {
            const double e = exponent.imm;
            if (e >= 1 && e <= 16 && e == static_cast<double>(static_cast<int>(e))) {
                llvm::Value* result = nullptr;
                llvm::Value* square = x;
                for (int k = static_cast<int>(e);;) {
                    if (k & 1) result = result ? b_.CreateFMul(result, square) : square;
                    k >>= 1;
                    if (!k) break;
                    square = b_.CreateFMul(square, square);
                }
                return result;
            }
            if (e == 0.5) {
                const double inf = std::numeric_limits<double>::infinity();
                return b_.CreateSelect(b_.CreateFCmpOEQ(x, splat(-inf)), splat(inf),
                                       intrinsic(llvm::Intrinsic::sqrt, {b_.CreateFAdd(x, splat(0.0))}));
            }
        }
        return intrinsic(llvm::Intrinsic::pow, {x, y});
    }

    static bool is_inf(const ir::Inst& c) { return c.op == Prim::Const && c.imm == std::numeric_limits<double>::infinity(); }
    // |x| < inf, the lowering's test for finite values: x - x is ordered (0) exactly where x is finite. A
    // subtraction (an adder's work) and a compare that LLVM shares between the values tested together (`ord (x -
    // x), (y - y)`), where |x| < inf takes an and and a compare of its own on the units that multiply and
    // compare, which the window kernels keep busiest: corr w=20 took 5 to 10 % less time (bench/RESULTS.md; a
    // vfpclasspd a value was slower still).
    llvm::Value* is_finite(llvm::Value* x) { return b_.CreateFCmpORD(b_.CreateFSub(x, x), splat(0)); }

    // 1/x or 1/sqrt(x): with AVX-512, the 14-bit hardware estimate and two Newton steps (about 1 ulp,
    // a few cycles) instead of a division or square root (tens of cycles each per vector).
    llvm::Value* reciprocal(llvm::Value* x, bool sqrt) {
        if (!avx512_ || (W_ != 8 && W_ != 4)) {
            llvm::Value* d = sqrt ? intrinsic(llvm::Intrinsic::sqrt, {x}) : x;
            return b_.CreateFDiv(splat(1.0), d);
        }
        const bool wide = W_ == 8;
        const auto id = sqrt ? (wide ? llvm::Intrinsic::x86_avx512_rsqrt14_pd_512 : llvm::Intrinsic::x86_avx512_rsqrt14_pd_256)
                             : (wide ? llvm::Intrinsic::x86_avx512_rcp14_pd_512 : llvm::Intrinsic::x86_avx512_rcp14_pd_256);
        llvm::Value* r = b_.CreateIntrinsic(id, {}, {x, splat(0), b_.getInt8(0xff)});
        for (int step = 0; step < 2; ++step) {
            if (sqrt)  // r * (1.5 - 0.5 x r^2)
                r = b_.CreateFMul(r, b_.CreateFSub(splat(1.5), b_.CreateFMul(b_.CreateFMul(splat(0.5), x), b_.CreateFMul(r, r))));
            else  // r * (2 - x r)
                r = b_.CreateFMul(r, b_.CreateFSub(splat(2.0), b_.CreateFMul(x, r)));
        }
        return r;
    }

    const ir::Kernel& k_;
    DType dtype_;
    int W_;
    bool avx512_;
    int unroll_ = kUnroll;
    llvm::LLVMContext& ctx_;
    llvm::IRBuilder<> b_;
    std::unique_ptr<llvm::Module> mod_;
    llvm::Function* fn_ = nullptr;
    llvm::Type *f64_, *i64_, *ptr_, *elem_;
    llvm::FixedVectorType *vf_, *ve_, *vi_;
    std::vector<std::int64_t> ring_offset_;
    std::int64_t per_group_ = 0;

    llvm::Value *args_ = nullptr, *inputs_ = nullptr, *in_ld_ = nullptr, *outputs_ = nullptr, *out_ld_ = nullptr;
    llvm::Value *col_begin_ = nullptr, *col_end_ = nullptr, *row_begin_ = nullptr, *out_begin_ = nullptr,
                *row_end_ = nullptr, *scratch_ = nullptr, *ngroups_ = nullptr;
    std::vector<llvm::Value*> in_ptr_, in_ld_v_, out_ptr_, out_ld_v_;
    llvm::Value *group_base_ = nullptr, *col_ = nullptr, *lane_mask_ = nullptr;
    const Row* row_ = nullptr;
    std::vector<llvm::Value*> vals_;
    // While a refold is emitted: the main body's values (Outer), the lag k of its per-lag part, its sums.
    const std::vector<llvm::Value*>* main_vals_ = nullptr;
    llvm::Value* lag_extra_ = nullptr;
    std::vector<std::pair<llvm::Value*, llvm::Value*>> folds_;
    std::map<std::int32_t, llvm::Value*> refolded_;  // each RefoldValue's merged value, this row
    // The states' values during a lane group's visit (group_rows()), and which of them its rows stored.
    std::vector<llvm::Value*> state_vals_;
    std::vector<bool> state_stored_;
    llvm::Value* need_ = nullptr;  // lanes whose guards fired in the visit's first run
    bool unmasked_ = false;        // rows(): a whole lane group on rows past the warm-up, inputs inside the panel
    std::vector<std::optional<GuardForm>> guard_forms_;  // per refold: its condition's form, where it has one
    // During a visit's first run, per refold: each Upper's value (Last: this row's; Largest: the largest so far),
    // and each bound's smallest limit so far.
    std::vector<std::vector<llvm::Value*>> uppers_, limits_;
    bool defer_pushes_ = false;    // the first run: pushes kept in pushed_[ring][row] until the visit's end
    llvm::Function* masked_rows_ = nullptr;
    llvm::Value* group_ = nullptr;  // the lane group loop's index
    std::vector<std::vector<llvm::Value*>> pushed_;
    llvm::MDNode *scratch_md_ = nullptr, *panel_md_ = nullptr;
};

}  // namespace

std::unique_ptr<llvm::Module> emit_llvm(const ir::Kernel& kernel, DType dtype, int lanes, bool avx512,
                                        llvm::LLVMContext& ctx) {
    return Emitter(kernel, dtype, lanes, avx512, ctx).run();
}

}  // namespace fj::cpu
