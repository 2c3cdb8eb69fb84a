// The auto-sharding solver's umbrella header (docs/solver.md): every header of fsdp/solver/, in
// the library fsdp::solver (CMake: target_link_libraries(app PRIVATE fsdp::solver)), which
// links fsdp::fsdp. fsdp/fsdp.hpp leaves it out: a code that shards with fsdp does not carry it.
#pragma once

#include "fsdp/fsdp.hpp"

#include "fsdp/solver/broadcast_solution.hpp"
#include "fsdp/solver/cost_model.hpp"
#include "fsdp/solver/exact_solver.hpp"
#include "fsdp/solver/fsdp_plan.hpp"
#include "fsdp/solver/generators.hpp"
#include "fsdp/solver/graph.hpp"
#include "fsdp/solver/sharding_spec.hpp"
#include "fsdp/solver/simple_solver.hpp"
#include "fsdp/solver/solution.hpp"
#include "fsdp/solver/step_options.hpp"
#include "fsdp/solver/strategy.hpp"
