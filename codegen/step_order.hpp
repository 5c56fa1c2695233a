// The order of a plan's steps, chosen for memory: of the orders that respect the steps' dependencies (a step
// after the steps whose intermediates it reads), one that keeps few intermediates alive at once.
//
// make_plan builds steps level by level (every step of level 0, then of level 1, ...), which computes every
// argument of every cross-sectional operator before the first of them runs: the 101 alphas had 137
// intermediates alive at once, 11 GB of panels at 4,000 x 5,000 float32 on top of the 9 GB of inputs and
// outputs. This pass reorders them greedily: of the steps whose inputs are ready, the one that frees the most
// intermediates (it is their last reader) less those it creates, the earlier step on a tie. The steps
// themselves (kernels, names, halos) do not change; producers, last readers and frees are renumbered.
#pragma once

#include "codegen/plan.hpp"

namespace fj::codegen {

void order_steps_for_memory(Plan& plan);

}  // namespace fj::codegen
