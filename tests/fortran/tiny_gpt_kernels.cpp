// The transformer's kernels for the Fortran test (test_fortran_gpt.F90), as a Fortran code calls a
// C++ kernel library: C functions on plain pointers. The Fortran program registers the model,
// opens and closes every scope and takes every parameter and gradient from the fsdp module
// (fsdp_full, fsdp_grad); these functions only compute, on the pointers it hands them. The
// passes are fsdp-train's (fsdp_models::GptPasses), one unit at a time.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/tiny_gpt_training.hpp"

namespace {

using UnmanagedView =
    Kokkos::View<double*, fsdp::MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

struct TinyGpt {
  fsdp_models::GptShape shape = fsdp::test::tiny_gpt_shape();
  std::vector<fsdp::ParameterInfo> parameters = shape.parameters(fsdp::DType::f64);
  fsdp::test::TinyGptPasses passes{shape, true, fsdp::test::kTinyGptBatch};

  // The parameters each unit's scopes read: its own, and the tied wte.weight for the head.
  std::vector<std::string> unit_parameters(std::int64_t unit) const {
    const std::string name = passes.unit_name(unit);
    std::vector<std::string> names;
    for (const fsdp::ParameterInfo& p : parameters) {
      if (p.layer == name) {
        names.push_back(p.name);
      }
    }
    if (name == fsdp_models::GptShape::head_unit()) {
      names.push_back("wte.weight");
    }
    return names;
  }
  std::int64_t numel(const std::string& name) const {
    for (const fsdp::ParameterInfo& p : parameters) {
      if (p.name == name) {
        return p.numel();
      }
    }
    throw std::invalid_argument("tiny_gpt: no parameter " + name);
  }
};

// A scope as GptPasses reads it: the unit's parameters (and gradients) at the pointers the
// Fortran program took from fsdp_full and fsdp_grad, in the order of unit_parameters.
class PointerScope {
 public:
  PointerScope(const TinyGpt& model, std::int64_t unit, double* const* full, double* const* grad)
      : model_(model), names_(model.unit_parameters(unit)), full_(full), grad_(grad) {}
  UnmanagedView full(const std::string& name) const { return view(full_, name); }
  UnmanagedView grad(const std::string& name) const { return view(grad_, name); }
  bool trainable(const std::string&) const { return true; }

 private:
  UnmanagedView view(double* const* pointers, const std::string& name) const {
    const auto at = std::find(names_.begin(), names_.end(), name);
    if (pointers == nullptr || at == names_.end()) {
      throw std::invalid_argument("tiny_gpt: the scope was given no pointer for " + name);
    }
    return UnmanagedView(pointers[at - names_.begin()],
                         static_cast<std::size_t>(model_.numel(name)));
  }
  const TinyGpt& model_;
  std::vector<std::string> names_;
  double* const* full_;
  double* const* grad_;
};

void copy_name(const std::string& name, char* out, std::int64_t capacity) {
  const std::size_t n = std::min(name.size(), static_cast<std::size_t>(capacity - 1));
  std::memcpy(out, name.data(), n);
  out[n] = '\0';
}

// Each function returns 0, or 1 after printing what went wrong (the Fortran side stops).
template <class Body>
int guarded(const char* what, Body body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << what << ": " << e.what() << std::endl;
    return 1;
  }
}

TinyGpt& model_of(void* handle) {
  return *static_cast<TinyGpt*>(handle);
}

}  // namespace

extern "C" {

void* tiny_gpt_create() {
  return new TinyGpt();
}
void tiny_gpt_destroy(void* handle) {
  delete static_cast<TinyGpt*>(handle);
}

std::int64_t tiny_gpt_parameter_count(void* handle) {
  return static_cast<std::int64_t>(model_of(handle).parameters.size());
}

// Parameter i (from 0): its name and unit (null-terminated, at most capacity bytes with the
// terminator), its number of dimensions and its shape in C order (shape holds two).
int tiny_gpt_parameter(void* handle, std::int64_t i, char* name, char* unit, std::int64_t capacity,
                       int* ndim, std::int64_t* shape) {
  return guarded("tiny_gpt_parameter", [&] {
    const fsdp::ParameterInfo& p = model_of(handle).parameters.at(static_cast<std::size_t>(i));
    copy_name(p.name, name, capacity);
    copy_name(p.layer, unit, capacity);
    *ndim = static_cast<int>(p.shape.size());
    std::copy(p.shape.begin(), p.shape.end(), shape);
  });
}

// The whole of parameter i as the C++ reference initialises it.
int tiny_gpt_initial_values(void* handle, std::int64_t i, double* values) {
  return guarded("tiny_gpt_initial_values", [&] {
    const fsdp::ParameterInfo& p = model_of(handle).parameters.at(static_cast<std::size_t>(i));
    for (std::int64_t e = 0; e < p.numel(); ++e) {
      values[e] = fsdp::test::tiny_gpt_initial_value(p.name, static_cast<std::size_t>(i), e);
    }
  });
}

std::int64_t tiny_gpt_unit_count(void* handle) {
  return model_of(handle).passes.unit_count();
}

int tiny_gpt_unit_name(void* handle, std::int64_t unit, char* name, std::int64_t capacity) {
  return guarded("tiny_gpt_unit_name",
                 [&] { copy_name(model_of(handle).passes.unit_name(unit), name, capacity); });
}

std::int64_t tiny_gpt_unit_parameter_count(void* handle, std::int64_t unit) {
  return static_cast<std::int64_t>(model_of(handle).unit_parameters(unit).size());
}

int tiny_gpt_unit_parameter_name(void* handle, std::int64_t unit, std::int64_t k, char* name,
                                 std::int64_t capacity) {
  return guarded("tiny_gpt_unit_parameter_name", [&] {
    copy_name(model_of(handle).unit_parameters(unit).at(static_cast<std::size_t>(k)), name,
              capacity);
  });
}

int tiny_gpt_steps() {
  return fsdp::test::kTinyGptSteps;
}
double tiny_gpt_lr() {
  return fsdp::test::kTinyGptLr;
}
double tiny_gpt_weight_decay() {
  return fsdp::test::kTinyGptWeightDecay;
}

int tiny_gpt_load(void* handle, int rank, int step) {
  return guarded("tiny_gpt_load",
                 [&] { fsdp::test::load_tiny_gpt_batch(model_of(handle).passes, rank, step); });
}

int tiny_gpt_forward(void* handle, std::int64_t unit, double* const* full) {
  return guarded("tiny_gpt_forward", [&] {
    TinyGpt& model = model_of(handle);
    PointerScope scope(model, unit, full, nullptr);
    model.passes.forward_unit(scope, unit, fsdp::test::kTinyGptBatch);
  });
}

// The loss summed over this rank's positions.
int tiny_gpt_loss(void* handle, double* loss) {
  return guarded("tiny_gpt_loss", [&] {
    *loss = model_of(handle).passes.loss(fsdp::test::kTinyGptBatch, 1.0).loss;
  });
}

int tiny_gpt_backward(void* handle, std::int64_t unit, double* const* full, double* const* grad) {
  return guarded("tiny_gpt_backward", [&] {
    TinyGpt& model = model_of(handle);
    PointerScope scope(model, unit, full, grad);
    model.passes.backward_unit(scope, unit, fsdp::test::kTinyGptBatch);
  });
}

// Every parameter after the reference training through the C++ Runtime (collective), one after
// the other in parameter order.
int tiny_gpt_train_reference(void* handle, int rank, double* values) {
  return guarded("tiny_gpt_train_reference", [&] {
    const auto whole = fsdp::test::train_tiny_gpt_through_the_runtime(model_of(handle).shape, rank);
    for (const std::vector<double>& parameter : whole) {
      values = std::copy(parameter.begin(), parameter.end(), values);
    }
  });
}

}  // extern "C"
