// The solver's machine and budget options as text ("2x4", "450e9,50e9", "80GiB"), for fsdp-solve
// and fsdp-bench solver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/solver/cost_model.hpp"

namespace fsdp_apps {

// "8" (a 1-D mesh) or "2x4" (2 x 4 devices): the devices of each axis, each >= 1. Throws
// fsdp::Error saying what is accepted.
std::vector<int> parse_mesh(const std::string& text);

// "450e9" (every axis) or "450e9,50e9" (one value per axis, in axis order): `axes` values, each
// a finite number > 0 (>= 0 when zero_allowed). `what` names the option in errors.
std::vector<double> parse_per_axis(const std::string& text, int axes, const std::string& what,
                                   bool zero_allowed);

// The machine `base` with the mesh `mesh` ("" for a 1-D mesh of base.devices) and the per-axis
// links `bandwidth` and `latency` (parse_per_axis). Throws fsdp::Error on values out of range.
fsdp::solver::Machine machine_with_mesh(fsdp::solver::Machine base, const std::string& mesh,
                                        const std::string& bandwidth, const std::string& latency);

// "80000000000", "80e9", "80GB" (10^9), "3.5GiB" (2^30), also kB/KiB, MB/MiB, TB/TiB: bytes from
// 0 to 2^63 - 1, rounded down to whole bytes. Throws fsdp::Error otherwise.
std::int64_t parse_bytes(const std::string& text);

}  // namespace fsdp_apps
