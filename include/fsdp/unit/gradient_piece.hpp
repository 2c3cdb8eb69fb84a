// GradientPiece: this rank's piece of one parameter's gradient, as the optimizers, clipping and
// the loss scaler read and scale it: T values, kept in T or, under UnitOptions::grad_dtype bf16,
// in bfloat16 (each read widens, each write rounds to nearest even).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <utility>

#include "fsdp/core/half_conversion.hpp"
#include "fsdp/core/memory_space.hpp"

namespace fsdp {

// bfloat16 bits seen as T values by a kernel: grad(i) reads a T and takes = and *=, the way a
// DeviceView<T> does, so one kernel template serves both (GradientPiece::visit).
template <class T>
class Bfloat16Values {
 public:
  class Reference {
   public:
    KOKKOS_INLINE_FUNCTION explicit Reference(std::uint16_t& bits) : bits_(bits) {}
    KOKKOS_INLINE_FUNCTION operator T() const {  // NOLINT: a reference converts implicitly
      return static_cast<T>(half::from_bfloat16_bits(bits_));
    }
    KOKKOS_INLINE_FUNCTION const Reference& operator=(T value) const {
      bits_ = half::bfloat16_bits(static_cast<float>(value));
      return *this;
    }
    KOKKOS_INLINE_FUNCTION const Reference& operator+=(T addend) const {
      return *this = static_cast<T>(*this) + addend;
    }
    KOKKOS_INLINE_FUNCTION const Reference& operator*=(T factor) const {
      return *this = static_cast<T>(*this) * factor;
    }

   private:
    std::uint16_t& bits_;
  };

  explicit Bfloat16Values(DeviceView<std::uint16_t> bits) : bits_(std::move(bits)) {}
  KOKKOS_INLINE_FUNCTION Reference operator()(std::size_t i) const { return Reference(bits_(i)); }
  std::size_t size() const { return bits_.size(); }
  const DeviceView<std::uint16_t>& bits() const { return bits_; }

 private:
  DeviceView<std::uint16_t> bits_;
};

template <class T>
class GradientPiece {
 public:
  GradientPiece() = default;
  explicit GradientPiece(DeviceView<T> values) : values_(std::move(values)) {}
  explicit GradientPiece(Bfloat16Values<T> bfloat16)
      : bfloat16_(std::move(bfloat16)), in_bfloat16_(true) {}

  std::size_t size() const { return in_bfloat16_ ? bfloat16_.size() : values_.size(); }
  // Kept in bfloat16 (UnitOptions::grad_dtype), not in T.
  bool in_bfloat16() const { return in_bfloat16_; }
  // The values kept in T; empty when in_bfloat16().
  const DeviceView<T>& values() const { return values_; }
  // Calls kernel(values) with the piece as a DeviceView<T> or as Bfloat16Values<T>: a kernel
  // written once over either runs without a branch per element on the T path.
  template <class Kernel>
  decltype(auto) visit(Kernel&& kernel) const {
    return in_bfloat16_ ? std::forward<Kernel>(kernel)(bfloat16_)
                        : std::forward<Kernel>(kernel)(values_);
  }

 private:
  DeviceView<T> values_;
  Bfloat16Values<T> bfloat16_{DeviceView<std::uint16_t>()};
  bool in_bfloat16_ = false;
};

}  // namespace fsdp
