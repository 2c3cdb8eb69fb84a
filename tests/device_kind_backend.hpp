// A test backend: the MPI backend under one that says it moves device memory (as NCCL does),
// so that a host build can check what groups and models on a device backend decide.
#pragma once

#include <memory>

#include "fsdp/comm/forwarding_backend.hpp"

namespace fsdp::test {

class DeviceKindBackend final : public ForwardingBackend {
 public:
  explicit DeviceKindBackend(std::shared_ptr<Backend> inner)
      : ForwardingBackend(std::move(inner)) {}
  const char* name() const override { return "device-kind"; }
  MemoryKind memory_kind() const override { return MemoryKind::cuda_device; }

 protected:
  std::shared_ptr<Backend> wrap(std::shared_ptr<Backend> inner) const override {
    return std::make_shared<DeviceKindBackend>(std::move(inner));
  }
};

}  // namespace fsdp::test
