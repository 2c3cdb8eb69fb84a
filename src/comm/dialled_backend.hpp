// DialledBackend: a Backend that forwards every collective to another one (MPI) and reports it
// complete no earlier than its dialled network would deliver it (fsdp/comm/dialled_network.hpp).
#pragma once

#include <memory>

#include "fsdp/comm/backend.hpp"
#include "fsdp/comm/dialled_network.hpp"

namespace fsdp::detail {

// network must be on. Its splits share this backend's link: one rank has one network interface.
std::shared_ptr<Backend> dialled_backend(std::shared_ptr<Backend> inner, DialledNetwork network);

}  // namespace fsdp::detail
