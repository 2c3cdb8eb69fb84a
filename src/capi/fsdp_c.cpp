// The C API (include/fsdp/fsdp.h) over ShardedModel, Runtime and the optimizers. Every entry
// point runs its body inside `guarded`, which turns every exception into a return code and a
// message, so that nothing C++ ever unwinds into C or Fortran frames.
#include "fsdp/fsdp.h"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "fsdp/comm/hybrid_groups.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/comm/version.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/json_state.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/io/background_save.hpp"
#include "fsdp/io/checkpoint.hpp"
#include "fsdp/optim/grad_norm.hpp"
#include "fsdp/optim/loss_scaler.hpp"
#include "fsdp/optim/lr_schedule.hpp"
#include "fsdp/optim/optimizer.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/sharded_model.hpp"

namespace {

// A failure about the C arguments themselves (a NULL pointer, an enum value out of range) or the
// user's callback: codes no C++ object raises. Everything else is an fsdp::Error, whose kind
// says the code (code_of).
class ApiError : public std::runtime_error {
 public:
  ApiError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// The one place where an fsdp::ErrorKind becomes a return code.
int code_of(fsdp::ErrorKind kind) {
  switch (kind) {
    case fsdp::ErrorKind::usage:
      return FSDP_ERROR_LIBRARY;
    case fsdp::ErrorKind::unknown_name:
      return FSDP_ERROR_UNKNOWN_NAME;
    case fsdp::ErrorKind::order:
      return FSDP_ERROR_ORDER;
    case fsdp::ErrorKind::state:
      return FSDP_ERROR_STATE;
    case fsdp::ErrorKind::mismatch:
      return FSDP_ERROR_MISMATCH;
    case fsdp::ErrorKind::timeout:
      return FSDP_ERROR_TIMEOUT;
    case fsdp::ErrorKind::communication:
      return FSDP_ERROR_COMMUNICATION;
    case fsdp::ErrorKind::io:
      return FSDP_ERROR_IO;
  }
  return FSDP_ERROR_INTERNAL;
}

thread_local std::string last_error;
// Handles alive: fsdp_finalize must not finalize Kokkos under their Views.
std::atomic<long> live_handles{0};
bool kokkos_initialized_here = false;

int fail(const char* function, int code, const char* message) noexcept {
  try {
    last_error = std::string(function) + ": " + message;
  } catch (...) {
    // No memory for the message: keep the previous one; the code still says what happened.
  }
  return code;
}

template <class Body>
int guarded(const char* function, Body&& body) noexcept {
  try {
    body();
    return FSDP_SUCCESS;
  } catch (const ApiError& error) {
    return fail(function, error.code(), error.what());
  } catch (const fsdp::Error& error) {
    return fail(function, code_of(error.kind()), error.what());
  } catch (const std::bad_alloc&) {
    return fail(function, FSDP_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& error) {
    return fail(function, FSDP_ERROR_INTERNAL, error.what());
  } catch (...) {
    return fail(function, FSDP_ERROR_INTERNAL, "an exception of unknown type");
  }
}

void require_argument(bool condition, const std::string& message) {
  if (!condition) {
    throw ApiError(FSDP_ERROR_INVALID_ARGUMENT, message);
  }
}

template <class Handle>
Handle* require_handle(Handle* handle, const char* what) {
  require_argument(handle != nullptr, std::string("the ") + what + " handle is NULL");
  return handle;
}

std::string require_name(const char* name, const char* what) {
  require_argument(name != nullptr && name[0] != '\0', std::string(what) + " is NULL or empty");
  return name;
}

// The element type of a Typed<T>: element_t<ShardedModel<float>&> is float.
template <class Object>
struct element_of;
template <template <class> class Typed, class T>
struct element_of<Typed<T>> {
  using type = T;
};
template <class Object>
using element_t = typename element_of<std::decay_t<Object>>::type;

// An object of element type float or double behind a handle. visit is the C layer's one
// float/double dispatch: every entry point reaches its typed object through it.
template <template <class> class Typed>
class FloatOrDouble {
 public:
  template <class T>
  void hold(std::shared_ptr<Typed<T>> object) {
    held_ = std::move(object);
  }
  bool empty() const { return std::holds_alternative<std::monostate>(held_); }
  template <class T>
  bool holds() const {
    return std::holds_alternative<std::shared_ptr<Typed<T>>>(held_);
  }
  template <class T>
  const std::shared_ptr<Typed<T>>& shared() const {
    return std::get<std::shared_ptr<Typed<T>>>(held_);
  }
  // body(Typed<float>&) or body(Typed<double>&); nothing when empty.
  template <class Body>
  void visit(Body&& body) const {
    if (const auto* f32 = std::get_if<std::shared_ptr<Typed<float>>>(&held_)) {
      body(**f32);
    } else if (const auto* f64 = std::get_if<std::shared_ptr<Typed<double>>>(&held_)) {
      body(**f64);
    }
  }

 private:
  std::variant<std::monostate, std::shared_ptr<Typed<float>>, std::shared_ptr<Typed<double>>> held_;
};

// A runtime or optimizer keeps its model's storage alive: the C model handle may be destroyed
// first.
template <class T>
struct ModelOptimizer {
  ModelOptimizer(std::shared_ptr<fsdp::ShardedModel<T>> sharded, const std::string& name,
                 const fsdp::OptimizerSettings& settings)
      : model(std::move(sharded)), optimizer(name, settings) {}
  std::shared_ptr<fsdp::ShardedModel<T>> model;
  fsdp::Optimizer<T> optimizer;
};

template <class T>
struct ModelRuntime {
  ModelRuntime(std::shared_ptr<fsdp::ShardedModel<T>> sharded,
               const std::vector<std::string>& order, const fsdp::RuntimeOptions& options)
      : model(std::move(sharded)), runtime(*model, order, options) {}
  std::shared_ptr<fsdp::ShardedModel<T>> model;
  fsdp::Runtime<T> runtime;
  // The optimizer in backward (fsdp_runtime_set_optimizer_in_backward), kept alive while set.
  std::shared_ptr<ModelOptimizer<T>> in_backward;
};

}  // namespace

struct fsdp_model_s {
  fsdp::DType dtype = fsdp::DType::f32;
  std::vector<fsdp::ParameterInfo> parameters;
  fsdp::StrategyOptions patterns;
  fsdp::ShardingMode mode = fsdp::ShardingMode::full_shard;
  int shard_group_size = -1;                   // -1: no hybrid sharding
  fsdp::DType param_dtype = fsdp::DType::f32;  // f32: no cast (for double models too)
  fsdp::DType reduce_dtype = fsdp::DType::f32;
  fsdp::DType grad_dtype = fsdp::DType::f32;
  // Empty until fsdp_model_shard. Shared with the runtimes and optimizers made from the model.
  FloatOrDouble<fsdp::ShardedModel> sharded;
  // The save in the background (fsdp_checkpoint_save_in_background) and its snapshot memory.
  fsdp::BackgroundSave background;
  // The caller's objects in the model's checkpoints (fsdp_checkpoint_set_object), by name.
  std::map<std::string, fsdp::JsonState> objects;

  // Calls body(ShardedModel<T>&) with the model's element type.
  template <class Body>
  void visit(Body&& body) const {
    if (sharded.empty()) {
      throw fsdp::Error(fsdp::ErrorKind::state,
                        "the model is not sharded yet: call fsdp_model_shard after adding its "
                        "parameters");
    }
    sharded.visit(body);
  }

  // Throws unknown_name listing the parameters when the model has none called name.
  void require_parameter(const std::string& name) const {
    for (const fsdp::ParameterInfo& parameter : parameters) {
      if (parameter.name == name) {
        return;
      }
    }
    std::vector<std::string> names;
    for (const fsdp::ParameterInfo& parameter : parameters) {
      names.push_back(parameter.name);
    }
    throw fsdp::Error(
        fsdp::ErrorKind::unknown_name,
        "the model has no parameter '" + name + "'; its parameters are " + fsdp::join(names));
  }
};

// The runtime checks the order of the calls itself: this layer only converts.
struct fsdp_runtime_s {
  FloatOrDouble<ModelRuntime> typed;
};

struct fsdp_optimizer_s {
  FloatOrDouble<ModelOptimizer> typed;
};

struct fsdp_lr_schedule_s {
  explicit fsdp_lr_schedule_s(const fsdp::LrSchedule& made) : schedule(made) {}
  fsdp::LrSchedule schedule;
};

struct fsdp_loss_scaler_s {
  explicit fsdp_loss_scaler_s(const fsdp::LossScalerOptions& options) : scaler(options) {}
  fsdp::LossScaler scaler;
};

// The functions have C linkage from their declarations in fsdp.h.

const char* fsdp_last_error(void) {
  return last_error.c_str();
}

const char* fsdp_version(void) {
  return fsdp::version();
}

const char* fsdp_error_name(int code) {
  switch (code) {
    case FSDP_SUCCESS:
      return "FSDP_SUCCESS";
    case FSDP_ERROR_LIBRARY:
      return "FSDP_ERROR_LIBRARY";
    case FSDP_ERROR_INVALID_ARGUMENT:
      return "FSDP_ERROR_INVALID_ARGUMENT";
    case FSDP_ERROR_UNKNOWN_NAME:
      return "FSDP_ERROR_UNKNOWN_NAME";
    case FSDP_ERROR_ORDER:
      return "FSDP_ERROR_ORDER";
    case FSDP_ERROR_STATE:
      return "FSDP_ERROR_STATE";
    case FSDP_ERROR_CALLBACK:
      return "FSDP_ERROR_CALLBACK";
    case FSDP_ERROR_OUT_OF_MEMORY:
      return "FSDP_ERROR_OUT_OF_MEMORY";
    case FSDP_ERROR_INTERNAL:
      return "FSDP_ERROR_INTERNAL";
    case FSDP_ERROR_MISMATCH:
      return "FSDP_ERROR_MISMATCH";
    case FSDP_ERROR_TIMEOUT:
      return "FSDP_ERROR_TIMEOUT";
    case FSDP_ERROR_COMMUNICATION:
      return "FSDP_ERROR_COMMUNICATION";
    case FSDP_ERROR_IO:
      return "FSDP_ERROR_IO";
    default:
      return "unknown fsdp error code";
  }
}

int fsdp_set_error(int code, const char* message) {
  try {
    last_error = message != nullptr ? message : "(no message)";
  } catch (...) {
    // As in fail(): the code still says what happened.
  }
  return code;
}

// ---- library ----------------------------------------------------------------------------------

int fsdp_initialize(void) {
  return guarded("fsdp_initialize", [] {
    int mpi_initialized = 0;
    MPI_Initialized(&mpi_initialized);
    if (!mpi_initialized) {
      throw fsdp::Error(fsdp::ErrorKind::state, "MPI is not initialized: call MPI_Init first");
    }
    if (!Kokkos::is_initialized()) {
      Kokkos::initialize();
      kokkos_initialized_here = true;
    }
  });
}

int fsdp_finalize(void) {
  return guarded("fsdp_finalize", [] {
    const long alive = live_handles.load();
    if (alive != 0) {
      throw fsdp::Error(fsdp::ErrorKind::state,
                        std::to_string(alive) +
                            " handle(s) are still alive; destroy every model, "
                            "runtime, optimizer and loss scaler before fsdp_finalize");
    }
    if (kokkos_initialized_here && Kokkos::is_initialized()) {
      Kokkos::finalize();
    }
    kokkos_initialized_here = false;
  });
}

// ---- model ------------------------------------------------------------------------------------

int fsdp_model_create(int dtype, fsdp_model_t* model) {
  return guarded("fsdp_model_create", [&] {
    require_argument(model != nullptr, "the output pointer is NULL");
    *model = nullptr;
    require_argument(dtype == FSDP_FLOAT32 || dtype == FSDP_FLOAT64,
                     "dtype " + std::to_string(dtype) +
                         " is not FSDP_FLOAT32 (1) or FSDP_FLOAT64 (2)" +
                         (dtype == FSDP_BFLOAT16 || dtype == FSDP_FLOAT16
                              ? "; 16-bit types are for fsdp_model_set_mixed_precision on an "
                                "FSDP_FLOAT32 model"
                              : ""));
    auto created = std::make_unique<fsdp_model_s>();
    created->dtype = dtype == FSDP_FLOAT32 ? fsdp::DType::f32 : fsdp::DType::f64;
    *model = created.release();
    ++live_handles;
  });
}

int fsdp_model_add_parameter(fsdp_model_t model, const char* name, int ndim, const int64_t* shape,
                             const char* layer, int always_gather) {
  return guarded("fsdp_model_add_parameter", [&] {
    require_handle(model, "model");
    fsdp::ParameterInfo parameter;
    parameter.name = require_name(name, "the parameter name");
    if (!model->sharded.empty()) {
      throw fsdp::Error(fsdp::ErrorKind::state, "parameter '" + parameter.name +
                                                    "' added after fsdp_model_shard; add every "
                                                    "parameter before sharding");
    }
    require_argument(ndim >= 0 && (ndim == 0 || shape != nullptr),
                     "parameter '" + parameter.name + "': ndim " + std::to_string(ndim) +
                         " must be >= 0, with a shape of ndim dimensions");
    for (const fsdp::ParameterInfo& existing : model->parameters) {
      require_argument(existing.name != parameter.name,
                       "parameter '" + parameter.name + "' added twice; names are unique");
    }
    parameter.shape.assign(shape, shape + ndim);
    parameter.dtype = model->dtype;
    parameter.layer = layer != nullptr ? layer : "";
    parameter.always_gather = always_gather != 0;
    try {
      parameter.numel();  // checks every dimension now, where the caller can tell which
    } catch (const fsdp::Error& error) {
      throw ApiError(FSDP_ERROR_INVALID_ARGUMENT, error.what());
    }
    model->parameters.push_back(std::move(parameter));
  });
}

int fsdp_model_set_trainable(fsdp_model_t model, const char* name, int trainable) {
  return guarded("fsdp_model_set_trainable", [&] {
    require_handle(model, "model");
    const std::string parameter = require_name(name, "the parameter name");
    if (!model->sharded.empty()) {
      throw fsdp::Error(fsdp::ErrorKind::state, "fsdp_model_set_trainable of '" + parameter +
                                                    "' after fsdp_model_shard; freeze parameters "
                                                    "before sharding");
    }
    require_argument(trainable == 0 || trainable == 1, "trainable " + std::to_string(trainable) +
                                                           " for parameter '" + parameter +
                                                           "'; give 1 (trained) or 0 (frozen)");
    for (fsdp::ParameterInfo& p : model->parameters) {
      if (p.name == parameter) {
        p.trainable = trainable == 1;
        return;
      }
    }
    throw fsdp::Error(fsdp::ErrorKind::unknown_name,
                      "fsdp_model_set_trainable: the model has no parameter '" + parameter +
                          "'; add it with fsdp_model_add_parameter first");
  });
}

int fsdp_model_add_strategy_pattern(fsdp_model_t model, int kind, const char* pattern) {
  return guarded("fsdp_model_add_strategy_pattern", [&] {
    require_handle(model, "model");
    const std::string text = require_name(pattern, "the pattern");
    if (kind == FSDP_PATTERN_FULL_SHARD) {
      model->patterns.full_shard_patterns.push_back(text);
    } else if (kind == FSDP_PATTERN_LAYER_WISE) {
      model->patterns.layer_wise_patterns.push_back(text);
    } else {
      throw ApiError(FSDP_ERROR_INVALID_ARGUMENT,
                     "pattern kind " + std::to_string(kind) +
                         " is not FSDP_PATTERN_FULL_SHARD (1) or FSDP_PATTERN_LAYER_WISE (2)");
    }
  });
}

namespace {

void require_not_sharded(fsdp_model_t model, const char* what) {
  if (!model->sharded.empty()) {
    throw fsdp::Error(fsdp::ErrorKind::state, std::string(what) +
                                                  " is set before fsdp_model_shard; the model "
                                                  "is already sharded");
  }
}

}  // namespace

int fsdp_model_set_mode(fsdp_model_t model, int mode) {
  return guarded("fsdp_model_set_mode", [&] {
    require_handle(model, "model");
    require_not_sharded(model, "the sharding mode");
    const fsdp::ShardingMode modes[] = {
        fsdp::ShardingMode::full_shard, fsdp::ShardingMode::shard_grad_op,
        fsdp::ShardingMode::shard_optimizer, fsdp::ShardingMode::no_shard};
    require_argument(mode >= FSDP_MODE_FULL_SHARD && mode <= FSDP_MODE_NO_SHARD,
                     "sharding mode " + std::to_string(mode) +
                         " is not FSDP_MODE_FULL_SHARD (1), FSDP_MODE_SHARD_GRAD_OP (2), "
                         "FSDP_MODE_SHARD_OPTIMIZER (3) or FSDP_MODE_NO_SHARD (4)");
    model->mode = modes[mode - FSDP_MODE_FULL_SHARD];
  });
}

int fsdp_model_set_shard_group_size(fsdp_model_t model, int shard_group_size) {
  return guarded("fsdp_model_set_shard_group_size", [&] {
    require_handle(model, "model");
    require_not_sharded(model, "the shard group size");
    require_argument(shard_group_size >= -1,
                     "shard group size " + std::to_string(shard_group_size) +
                         " is below -1; give the ranks per shard group, 0 for the ranks of each "
                         "node, or -1 for one group of every rank");
    model->shard_group_size = shard_group_size;
  });
}

namespace {

// A dtype of the mixed-precision policy (option: "param_dtype" or "reduce_dtype") for a model of
// element type model_dtype: FSDP_FLOAT32 or the model's dtype is no cast, 16-bit types only for
// float models (they keep fp32 masters).
fsdp::DType mixed_precision_dtype(int dtype, const char* option, fsdp::DType model_dtype) {
  const std::string model_name = model_dtype == fsdp::DType::f32 ? "FSDP_FLOAT32" : "FSDP_FLOAT64";
  switch (dtype) {
    case FSDP_FLOAT32:
      return model_dtype;
    case FSDP_FLOAT64:
      require_argument(model_dtype == fsdp::DType::f64,
                       std::string(option) +
                           " FSDP_FLOAT64 for an FSDP_FLOAT32 model; give "
                           "FSDP_BFLOAT16 (3), FSDP_FLOAT16 (4), or "
                           "FSDP_FLOAT32 (1) for no cast");
      return model_dtype;
    case FSDP_BFLOAT16:
    case FSDP_FLOAT16:
      require_argument(model_dtype == fsdp::DType::f32,
                       std::string(option) + " " +
                           (dtype == FSDP_BFLOAT16 ? "FSDP_BFLOAT16" : "FSDP_FLOAT16") +
                           " for an " + model_name +
                           " model: mixed precision keeps fp32 master weights; create the model "
                           "with FSDP_FLOAT32, or give FSDP_FLOAT32 (1) for no cast");
      return dtype == FSDP_BFLOAT16 ? fsdp::DType::bf16 : fsdp::DType::f16;
    default:
      throw ApiError(
          FSDP_ERROR_INVALID_ARGUMENT,
          std::string(option) + " " + std::to_string(dtype) +
              " is not FSDP_FLOAT32 (1: no cast), FSDP_BFLOAT16 (3) or FSDP_FLOAT16 (4)");
  }
}

}  // namespace

int fsdp_model_set_mixed_precision(fsdp_model_t model, int param_dtype, int reduce_dtype) {
  return guarded("fsdp_model_set_mixed_precision", [&] {
    require_handle(model, "model");
    require_not_sharded(model, "the mixed-precision policy");
    const fsdp::DType param = mixed_precision_dtype(param_dtype, "param_dtype", model->dtype);
    const fsdp::DType reduce = mixed_precision_dtype(reduce_dtype, "reduce_dtype", model->dtype);
    model->param_dtype = param;
    model->reduce_dtype = reduce;
  });
}

int fsdp_model_set_grad_dtype(fsdp_model_t model, int grad_dtype) {
  return guarded("fsdp_model_set_grad_dtype", [&] {
    require_handle(model, "model");
    require_not_sharded(model, "the gradients' dtype");
    require_argument(grad_dtype != FSDP_FLOAT16,
                     "grad_dtype FSDP_FLOAT16: unscaling loss-scaled gradients would take them "
                     "below float16's range; give FSDP_BFLOAT16 (3, float's range) or "
                     "FSDP_FLOAT32 (1) for no cast");
    model->grad_dtype = mixed_precision_dtype(grad_dtype, "grad_dtype", model->dtype);
  });
}

namespace {

void shard_model(fsdp_model_t model, MPI_Comm comm, const char* strategy_name) {
  require_handle(model, "model");
  const std::string strategy = require_name(strategy_name, "the strategy name");
  if (!model->sharded.empty()) {
    throw fsdp::Error(fsdp::ErrorKind::state, "the model is already sharded");
  }
  if (!Kokkos::is_initialized()) {
    throw fsdp::Error(fsdp::ErrorKind::state,
                      "fsdp is not initialized: call fsdp_initialize() after "
                      "MPI_Init");
  }
  require_argument(comm != MPI_COMM_NULL, "the communicator is MPI_COMM_NULL");
  require_argument(!model->parameters.empty(), "the model has no parameters");
  try {
    fsdp::make_strategy(strategy, model->patterns);  // the same check on every rank
  } catch (const fsdp::Error& error) {
    throw ApiError(FSDP_ERROR_INVALID_ARGUMENT, error.what());
  }
  fsdp::ProcessGroup world(comm);
  fsdp::ShardedModelOptions options;
  options.unit.mode = model->mode;
  options.unit.param_dtype = model->param_dtype;
  options.unit.reduce_dtype = model->reduce_dtype;
  options.unit.grad_dtype = model->grad_dtype;
  std::optional<fsdp::HybridGroups> hybrid;
  if (model->shard_group_size >= 0) {
    try {
      hybrid = fsdp::make_hybrid_groups(world, model->shard_group_size);
    } catch (const fsdp::Error& error) {
      if (error.kind() != fsdp::ErrorKind::usage) {
        throw;
      }
      throw ApiError(FSDP_ERROR_INVALID_ARGUMENT, error.what());
    }
    options.unit.replicas = hybrid->replicate;
  }
  fsdp::ProcessGroup group = hybrid ? hybrid->shard : world;
  const fsdp::StrategyOptions patterns = model->patterns;
  fsdp::ShardingPlan plan = fsdp::agree_on_plan(
      [&] {
        return fsdp::make_strategy(strategy, patterns)->make_plan(model->parameters, group.size());
      },
      model->parameters, group);
  if (model->dtype == fsdp::DType::f32) {
    model->sharded.hold(
        std::make_shared<fsdp::ShardedModel<float>>(group, std::move(plan), options));
  } else {
    model->sharded.hold(
        std::make_shared<fsdp::ShardedModel<double>>(group, std::move(plan), options));
  }
}

}  // namespace

int fsdp_model_shard(fsdp_model_t model, MPI_Fint comm, const char* strategy) {
  return guarded("fsdp_model_shard", [&] { shard_model(model, MPI_Comm_f2c(comm), strategy); });
}

int fsdp_model_shard_comm(fsdp_model_t model, MPI_Comm comm, const char* strategy) {
  return guarded("fsdp_model_shard_comm", [&] { shard_model(model, comm, strategy); });
}

int fsdp_model_parameter_numel(fsdp_model_t model, const char* name, int64_t* numel) {
  return guarded("fsdp_model_parameter_numel", [&] {
    require_handle(model, "model");
    require_argument(numel != nullptr, "the output pointer is NULL");
    const std::string parameter = require_name(name, "the parameter name");
    model->require_parameter(parameter);
    for (const fsdp::ParameterInfo& info : model->parameters) {
      if (info.name == parameter) {
        *numel = info.numel();
      }
    }
  });
}

int fsdp_model_parameter_piece(fsdp_model_t model, const char* name, int64_t* first,
                               int64_t* count) {
  return guarded("fsdp_model_parameter_piece", [&] {
    require_handle(model, "model");
    require_argument(first != nullptr && count != nullptr, "an output pointer is NULL");
    const std::string parameter = require_name(name, "the parameter name");
    model->require_parameter(parameter);
    model->visit([&](auto& sharded) {
      auto& p = sharded.parameter(parameter);
      *first = p.shard_size() > 0 ? p.shard_offset() : 0;
      *count = p.shard_size();
    });
  });
}

int fsdp_model_dtype(fsdp_model_t model, int* dtype) {
  return guarded("fsdp_model_dtype", [&] {
    require_handle(model, "model");
    require_argument(dtype != nullptr, "the output pointer is NULL");
    *dtype = model->dtype == fsdp::DType::f32 ? FSDP_FLOAT32 : FSDP_FLOAT64;
  });
}

int fsdp_model_rank(fsdp_model_t model, int* rank, int* size) {
  return guarded("fsdp_model_rank", [&] {
    require_handle(model, "model");
    require_argument(rank != nullptr && size != nullptr, "an output pointer is NULL");
    model->visit([&](auto& sharded) {
      *rank = sharded.group().rank();
      *size = sharded.group().size();
    });
  });
}

int fsdp_model_init_from_full(fsdp_model_t model, const char* name, const void* full) {
  return guarded("fsdp_model_init_from_full", [&] {
    require_handle(model, "model");
    const std::string parameter = require_name(name, "the parameter name");
    require_argument(full != nullptr, "the values of '" + parameter + "' are NULL");
    model->require_parameter(parameter);
    model->visit([&](auto& sharded) {
      using T = element_t<decltype(sharded)>;
      sharded.init_from_full(parameter, static_cast<const T*>(full));
    });
  });
}

int fsdp_model_init_from_root(fsdp_model_t model, const char* name, const void* full_on_root) {
  return guarded("fsdp_model_init_from_root", [&] {
    require_handle(model, "model");
    const std::string parameter = require_name(name, "the parameter name");
    model->require_parameter(parameter);
    model->visit([&](auto& sharded) {
      using T = element_t<decltype(sharded)>;
      // Checked after the name (every rank agrees on it), before the collective: rank 0's NULL.
      require_argument(sharded.group().rank() != 0 || full_on_root != nullptr,
                       "the values of '" + parameter + "' are NULL on rank 0");
      sharded.init_from_root(parameter, static_cast<const T*>(full_on_root));
    });
  });
}

int fsdp_model_init_with(fsdp_model_t model, const char* name, fsdp_fill_function fill,
                         void* user_data) {
  return guarded("fsdp_model_init_with", [&] {
    require_handle(model, "model");
    const std::string parameter = require_name(name, "the parameter name");
    require_argument(fill != nullptr, "the fill function for '" + parameter + "' is NULL");
    model->require_parameter(parameter);
    model->visit([&](auto& sharded) {
      using T = element_t<decltype(sharded)>;
      sharded.init_with(parameter, [&](std::int64_t first, T* values, std::int64_t count) {
        const int result = fill(first, values, count, user_data);
        if (result != 0) {
          throw ApiError(FSDP_ERROR_CALLBACK, "the fill function returned " +
                                                  std::to_string(result) + " for parameter '" +
                                                  parameter + "' (elements " +
                                                  std::to_string(first) + " to " +
                                                  std::to_string(first + count - 1) + ")");
        }
      });
    });
  });
}

int fsdp_model_zero_grad(fsdp_model_t model) {
  return guarded("fsdp_model_zero_grad", [&] {
    require_handle(model, "model");
    model->visit([](auto& sharded) { sharded.zero_grad(); });
  });
}

int fsdp_model_copy_parameter(fsdp_model_t model, const char* name, void* out) {
  return guarded("fsdp_model_copy_parameter", [&] {
    require_handle(model, "model");
    const std::string parameter = require_name(name, "the parameter name");
    require_argument(out != nullptr, "the output for '" + parameter + "' is NULL");
    model->require_parameter(parameter);
    model->visit([&](auto& sharded) {
      using T = element_t<decltype(sharded)>;
      auto& p = sharded.parameter(parameter);
      T* whole = static_cast<T*>(out);
      const std::int64_t numel = p.numel();
      const auto piece = p.shard();
      if (p.placement() == fsdp::Placement::replicated) {
        std::copy(piece.data(), piece.data() + numel, whole);
        return;
      }
      // The pieces are disjoint and cover the parameter: a sum over the ranks of "my piece, zero
      // elsewhere" assembles it exactly (x + 0 == x), leaving the units' gather state alone.
      std::fill(whole, whole + numel, T(0));
      if (piece.size() > 0) {
        std::copy(piece.data(), piece.data() + piece.size(), whole + p.shard_offset());
      }
      sharded.group().all_reduce(Kokkos::DefaultHostExecutionSpace(),
                                 fsdp::host_view(whole, static_cast<std::size_t>(numel)),
                                 fsdp::ReduceOp::sum);
    });
  });
}

void fsdp_model_destroy(fsdp_model_t model) {
  if (model != nullptr) {
    delete model;  // members' destructors do not throw (ProcessGroup frees its communicator)
    --live_handles;
  }
}

// ---- runtime ----------------------------------------------------------------------------------

namespace {

// fsdp_runtime_create, fsdp_runtime_create_keep_gathered and fsdp_runtime_create_tied, each
// under its own name.
int create_runtime(const char* function, fsdp_model_t model, int nunits, const char* const* order,
                   int prefetch, int max_gathered_units, int nkeep,
                   const char* const* keep_gathered, int ntied, const char* const* tied_parameters,
                   const char* const* tied_units, fsdp_runtime_t* runtime) {
  return guarded(function, [&] {
    require_argument(runtime != nullptr, "the output pointer is NULL");
    *runtime = nullptr;
    require_handle(model, "model");
    require_argument(nunits >= 1 && order != nullptr,
                     "the order needs at least one unit, got " + std::to_string(nunits));
    require_argument(max_gathered_units >= 1,
                     "max_gathered_units must be >= 1, got " + std::to_string(max_gathered_units));
    require_argument(nkeep >= 0 && (nkeep == 0 || keep_gathered != nullptr),
                     "keep_gathered needs nkeep >= 0 names (NULL only with 0), got " +
                         std::to_string(nkeep) + (keep_gathered == nullptr ? " and NULL" : ""));
    require_argument(
        ntied >= 0 && (ntied == 0 || (tied_parameters != nullptr && tied_units != nullptr)),
        "tied_parameters and tied_units need ntied >= 0 names each (NULL only with "
        "0), got " +
            std::to_string(ntied));
    std::vector<std::string> units;
    for (int i = 0; i < nunits; ++i) {
      units.push_back(require_name(order[i], "a unit name of the order"));
    }
    fsdp::RuntimeOptions options;
    options.prefetch = prefetch != 0;
    options.max_gathered_units = max_gathered_units;
    for (int i = 0; i < nkeep; ++i) {
      options.keep_gathered_until_backward.insert(
          require_name(keep_gathered[i], "a unit name of keep_gathered"));
    }
    for (int i = 0; i < ntied; ++i) {
      options.tied_parameters[require_name(tied_parameters[i], "a name of tied_parameters")].insert(
          require_name(tied_units[i], "a unit name of tied_units"));
    }
    auto created = std::make_unique<fsdp_runtime_s>();
    model->visit([&](auto& sharded) {
      using T = element_t<decltype(sharded)>;
      created->typed.hold(
          std::make_shared<ModelRuntime<T>>(model->sharded.template shared<T>(), units, options));
    });
    *runtime = created.release();
    ++live_handles;
  });
}

}  // namespace

int fsdp_runtime_create(fsdp_model_t model, int nunits, const char* const* order, int prefetch,
                        int max_gathered_units, fsdp_runtime_t* runtime) {
  return create_runtime("fsdp_runtime_create", model, nunits, order, prefetch, max_gathered_units,
                        0, nullptr, 0, nullptr, nullptr, runtime);
}

int fsdp_runtime_create_keep_gathered(fsdp_model_t model, int nunits, const char* const* order,
                                      int prefetch, int max_gathered_units, int nkeep,
                                      const char* const* keep_gathered, fsdp_runtime_t* runtime) {
  return create_runtime("fsdp_runtime_create_keep_gathered", model, nunits, order, prefetch,
                        max_gathered_units, nkeep, keep_gathered, 0, nullptr, nullptr, runtime);
}

int fsdp_runtime_create_tied(fsdp_model_t model, int nunits, const char* const* order, int prefetch,
                             int max_gathered_units, int nkeep, const char* const* keep_gathered,
                             int ntied, const char* const* tied_parameters,
                             const char* const* tied_units, fsdp_runtime_t* runtime) {
  return create_runtime("fsdp_runtime_create_tied", model, nunits, order, prefetch,
                        max_gathered_units, nkeep, keep_gathered, ntied, tied_parameters,
                        tied_units, runtime);
}

namespace {

// Runs body(Runtime<T>&) on the runtime behind the handle.
template <class Body>
void on_runtime(fsdp_runtime_t runtime, Body&& body) {
  require_handle(runtime, "runtime")->typed.visit([&](auto& typed) { body(typed.runtime); });
}

}  // namespace

int fsdp_begin_forward(fsdp_runtime_t runtime, const char* unit) {
  return guarded("fsdp_begin_forward", [&] {
    on_runtime(runtime, [&](auto& r) { r.begin_forward(require_name(unit, "the unit name")); });
  });
}

int fsdp_end_forward(fsdp_runtime_t runtime, const char* unit) {
  return guarded("fsdp_end_forward", [&] {
    on_runtime(runtime, [&](auto& r) { r.end_forward(require_name(unit, "the unit name")); });
  });
}

int fsdp_begin_backward(fsdp_runtime_t runtime, const char* unit) {
  return guarded("fsdp_begin_backward", [&] {
    on_runtime(runtime, [&](auto& r) { r.begin_backward(require_name(unit, "the unit name")); });
  });
}

int fsdp_end_backward(fsdp_runtime_t runtime, const char* unit) {
  return guarded("fsdp_end_backward", [&] {
    on_runtime(runtime, [&](auto& r) { r.end_backward(require_name(unit, "the unit name")); });
  });
}

int fsdp_finish_step(fsdp_runtime_t runtime) {
  return guarded("fsdp_finish_step",
                 [&] { on_runtime(runtime, [](auto& r) { r.finish_step(); }); });
}

int fsdp_runtime_set_requires_gradient_sync(fsdp_runtime_t runtime, int sync) {
  return guarded("fsdp_runtime_set_requires_gradient_sync", [&] {
    on_runtime(runtime, [&](auto& r) { r.set_requires_gradient_sync(sync != 0); });
  });
}

int fsdp_runtime_set_overlap(fsdp_runtime_t runtime, int max_gathered_units_backward,
                             int max_reductions_in_flight) {
  return guarded("fsdp_runtime_set_overlap", [&] {
    on_runtime(runtime, [&](auto& r) {
      r.set_overlap(max_gathered_units_backward, max_reductions_in_flight);
    });
  });
}

int fsdp_runtime_set_optimizer_in_backward(fsdp_runtime_t runtime, fsdp_optimizer_t optimizer) {
  return guarded("fsdp_runtime_set_optimizer_in_backward", [&] {
    require_handle(runtime, "runtime")->typed.visit([&](auto& typed) {
      using T = element_t<decltype(typed)>;
      std::shared_ptr<ModelOptimizer<T>> held;
      if (optimizer != nullptr) {
        require_argument(optimizer->typed.template holds<T>() &&
                             optimizer->typed.template shared<T>()->model == typed.model,
                         "the optimizer is of another model than the runtime; create it with "
                         "the runtime's model");
        held = optimizer->typed.template shared<T>();
      }
      typed.runtime.set_optimizer_in_backward(held ? &held->optimizer : nullptr);
      typed.in_backward = std::move(held);
    });
  });
}

namespace {

// The View read(runtime, name) gives for a parameter of the open scope, as a pointer and a count.
template <class Pointer, class Read>
void scope_values(fsdp_runtime_t runtime, const char* parameter_name, Pointer* values,
                  int64_t* numel, Read read) {
  require_handle(runtime, "runtime");
  require_argument(values != nullptr && numel != nullptr, "an output pointer is NULL");
  *values = nullptr;
  *numel = 0;
  const std::string name = require_name(parameter_name, "the parameter name");
  on_runtime(runtime, [&](auto& r) {
    const auto view = read(r, name);
    *values = view.data();
    *numel = static_cast<int64_t>(view.size());
  });
}

}  // namespace

int fsdp_full(fsdp_runtime_t runtime, const char* parameter, void** values, int64_t* numel) {
  return guarded("fsdp_full", [&] {
    scope_values(runtime, parameter, values, numel,
                 [](auto& r, const std::string& name) { return r.full(name); });
  });
}

int fsdp_grad(fsdp_runtime_t runtime, const char* parameter, void** values, int64_t* numel) {
  return guarded("fsdp_grad", [&] {
    scope_values(runtime, parameter, values, numel,
                 [](auto& r, const std::string& name) { return r.grad(name); });
  });
}

int fsdp_half(fsdp_runtime_t runtime, const char* parameter, const uint16_t** values,
              int64_t* numel) {
  return guarded("fsdp_half", [&] {
    scope_values(runtime, parameter, values, numel,
                 [](auto& r, const std::string& name) { return r.half(name); });
  });
}

int fsdp_progress(fsdp_runtime_t runtime) {
  return guarded("fsdp_progress", [&] { on_runtime(runtime, [](auto& r) { r.progress(); }); });
}

int fsdp_runtime_stats(fsdp_runtime_t runtime, int64_t* scopes, int64_t* gathers,
                       int64_t* prefetched, int64_t* ready_on_entry, double* wait_s) {
  return guarded("fsdp_runtime_stats", [&] {
    on_runtime(runtime, [&](auto& r) {
      const fsdp::RuntimeStats& stats = r.stats();
      const std::pair<int64_t*, std::int64_t> counts[] = {{scopes, stats.scopes},
                                                          {gathers, stats.gathers},
                                                          {prefetched, stats.prefetched},
                                                          {ready_on_entry, stats.ready_on_entry}};
      for (const auto& [out, value] : counts) {
        if (out != nullptr) {
          *out = value;
        }
      }
      if (wait_s != nullptr) {
        *wait_s = stats.wait_s;
      }
    });
  });
}

void fsdp_runtime_destroy(fsdp_runtime_t runtime) {
  if (runtime != nullptr) {
    delete runtime;
    --live_handles;
  }
}

// ---- optimizers -------------------------------------------------------------------------------

namespace {

// Every rule through fsdp::Optimizer, by name.
void create_optimizer(fsdp_model_t model, const char* name, const fsdp::OptimizerSettings& settings,
                      fsdp_optimizer_t* optimizer) {
  require_argument(optimizer != nullptr, "the output pointer is NULL");
  *optimizer = nullptr;
  require_handle(model, "model");
  auto created = std::make_unique<fsdp_optimizer_s>();
  model->visit([&](auto& sharded) {
    using T = element_t<decltype(sharded)>;
    created->typed.hold(
        std::make_shared<ModelOptimizer<T>>(model->sharded.template shared<T>(), name, settings));
  });
  *optimizer = created.release();
  ++live_handles;
}

fsdp::OptimizerSettings adam_settings(double lr, double beta1, double beta2, double eps,
                                      double weight_decay) {
  fsdp::OptimizerSettings settings;
  settings.lr = lr;
  settings.beta1 = beta1;
  settings.beta2 = beta2;
  settings.eps = eps;
  settings.weight_decay = weight_decay;
  return settings;
}

}  // namespace

int fsdp_optimizer_create_sgd(fsdp_model_t model, double lr, double momentum, double dampening,
                              int nesterov, double weight_decay, fsdp_optimizer_t* optimizer) {
  return guarded("fsdp_optimizer_create_sgd", [&] {
    fsdp::OptimizerSettings settings;
    settings.lr = lr;
    settings.momentum = momentum;
    settings.dampening = dampening;
    settings.nesterov = nesterov != 0;
    settings.weight_decay = weight_decay;
    create_optimizer(model, "sgd", settings, optimizer);
  });
}

int fsdp_optimizer_create_adam(fsdp_model_t model, double lr, double beta1, double beta2,
                               double eps, double weight_decay, fsdp_optimizer_t* optimizer) {
  return guarded("fsdp_optimizer_create_adam", [&] {
    create_optimizer(model, "adam", adam_settings(lr, beta1, beta2, eps, weight_decay), optimizer);
  });
}

int fsdp_optimizer_create_adamw(fsdp_model_t model, double lr, double beta1, double beta2,
                                double eps, double weight_decay, fsdp_optimizer_t* optimizer) {
  return guarded("fsdp_optimizer_create_adamw", [&] {
    create_optimizer(model, "adamw", adam_settings(lr, beta1, beta2, eps, weight_decay), optimizer);
  });
}

int fsdp_optimizer_step(fsdp_optimizer_t optimizer) {
  return guarded("fsdp_optimizer_step", [&] {
    require_handle(optimizer, "optimizer")->typed.visit([](auto& typed) {
      typed.optimizer.step(*typed.model);
    });
  });
}

int fsdp_optimizer_set_lr(fsdp_optimizer_t optimizer, double lr) {
  return guarded("fsdp_optimizer_set_lr", [&] {
    require_handle(optimizer, "optimizer")->typed.visit([&](auto& typed) {
      typed.optimizer.set_lr(lr);
    });
  });
}

int fsdp_optimizer_set_weight_decay(fsdp_optimizer_t optimizer, double weight_decay) {
  return guarded("fsdp_optimizer_set_weight_decay", [&] {
    require_handle(optimizer, "optimizer")->typed.visit([&](auto& typed) {
      typed.optimizer.set_weight_decay(weight_decay);
    });
  });
}

int fsdp_optimizer_get_state(fsdp_optimizer_t optimizer, double* lr, int64_t* steps) {
  return guarded("fsdp_optimizer_get_state", [&] {
    require_handle(optimizer, "optimizer")->typed.visit([&](auto& typed) {
      if (lr != nullptr) {
        *lr = typed.optimizer.settings().lr;
      }
      if (steps != nullptr) {
        *steps = typed.optimizer.step_count();
      }
    });
  });
}

void fsdp_optimizer_destroy(fsdp_optimizer_t optimizer) {
  if (optimizer != nullptr) {
    delete optimizer;
    --live_handles;
  }
}

// ---- learning-rate schedules ----------------------------------------------------------------

int fsdp_lr_schedule_create(const char* decay, double lr, int64_t warmup_steps, int64_t total_steps,
                            double min_lr, int64_t step_size, double gamma,
                            fsdp_lr_schedule_t* schedule) {
  return guarded("fsdp_lr_schedule_create", [&] {
    require_argument(schedule != nullptr, "the output pointer is NULL");
    *schedule = nullptr;
    require_argument(decay != nullptr, "the decay is NULL; give constant, linear, cosine or step");
    fsdp::LrScheduleOptions options;
    options.decay = fsdp::parse_lr_decay(decay);
    options.warmup_steps = warmup_steps;
    options.total_steps = total_steps;
    options.min_lr = min_lr;
    options.step_size = step_size;
    options.gamma = gamma;
    *schedule = new fsdp_lr_schedule_s(fsdp::LrSchedule(lr, options));  // checked there
    ++live_handles;
  });
}

int fsdp_lr_schedule_lr_at(fsdp_lr_schedule_t schedule, int64_t step, double* lr) {
  return guarded("fsdp_lr_schedule_lr_at", [&] {
    require_handle(schedule, "schedule");
    require_argument(lr != nullptr, "the output pointer is NULL");
    *lr = schedule->schedule.lr_at(step);
  });
}

int fsdp_lr_schedule_apply(fsdp_lr_schedule_t schedule, fsdp_optimizer_t optimizer) {
  return guarded("fsdp_lr_schedule_apply", [&] {
    require_handle(schedule, "schedule");
    require_handle(optimizer, "optimizer")->typed.visit([&](auto& typed) {
      schedule->schedule.apply(typed.optimizer);
    });
  });
}

void fsdp_lr_schedule_destroy(fsdp_lr_schedule_t schedule) {
  if (schedule != nullptr) {
    delete schedule;
    --live_handles;
  }
}

// ---- loss scaler ------------------------------------------------------------------------------

int fsdp_grad_norm(fsdp_model_t model, double* norm) {
  return guarded("fsdp_grad_norm", [&] {
    require_handle(model, "model");
    require_argument(norm != nullptr, "the output pointer is NULL");
    model->visit([&](auto& sharded) { *norm = fsdp::grad_norm(sharded); });
  });
}

int fsdp_clip_grad_norm(fsdp_model_t model, double max_norm, double* norm) {
  return guarded("fsdp_clip_grad_norm", [&] {
    require_handle(model, "model");
    // Checked here too so that NaN (which compares false both ways) is refused before any rank
    // communicates; every rank is given the same max_norm, so all refuse together.
    require_argument(std::isfinite(max_norm) && max_norm > 0,
                     "max_norm must be a finite number > 0, got " + std::to_string(max_norm));
    model->visit([&](auto& sharded) {
      const double before = fsdp::clip_grad_norm(sharded, max_norm);
      if (norm != nullptr) {
        *norm = before;
      }
    });
  });
}

namespace {

static_assert(FSDP_MEMORY_TOTAL == fsdp::kMemoryCategories,
              "enum fsdp_memory_category follows fsdp::MemoryCategory, then the total");

}  // namespace

int fsdp_memory_bytes(fsdp_model_t model, int category, int64_t* current, int64_t* peak) {
  return guarded("fsdp_memory_bytes", [&] {
    require_handle(model, "model");
    require_argument(category >= 0 && category <= FSDP_MEMORY_TOTAL,
                     "category must be one of FSDP_MEMORY_PARAMETER_SHARDS (0) .. "
                     "FSDP_MEMORY_TOTAL (" +
                         std::to_string(FSDP_MEMORY_TOTAL) + "), got " + std::to_string(category));
    model->visit([&](auto& sharded) {
      const fsdp::MemoryReport& report = sharded.memory();
      const bool total = category == FSDP_MEMORY_TOTAL;
      if (current != nullptr) {
        *current = total ? report.total_current : report.current[category];
      }
      if (peak != nullptr) {
        *peak = total ? report.total_peak : report.peak[category];
      }
    });
  });
}

int fsdp_memory_reset_peaks(fsdp_model_t model) {
  return guarded("fsdp_memory_reset_peaks", [&] {
    require_handle(model, "model");
    model->visit([](auto& sharded) { sharded.reset_memory_peaks(); });
  });
}

const char* fsdp_memory_category_name(int category) {
  if (category == FSDP_MEMORY_TOTAL) {
    return "total";
  }
  if (category < 0 || category > FSDP_MEMORY_TOTAL) {
    return nullptr;
  }
  return fsdp::name_of(static_cast<fsdp::MemoryCategory>(category));
}

int fsdp_loss_scaler_create(double init_scale, double growth_factor, double backoff_factor,
                            int64_t growth_interval, fsdp_loss_scaler_t* scaler) {
  return guarded("fsdp_loss_scaler_create", [&] {
    require_argument(scaler != nullptr, "the output pointer is NULL");
    *scaler = nullptr;
    fsdp::LossScalerOptions options;  // 0: the default
    if (init_scale != 0) {
      options.init_scale = init_scale;
    }
    if (growth_factor != 0) {
      options.growth_factor = growth_factor;
    }
    if (backoff_factor != 0) {
      options.backoff_factor = backoff_factor;
    }
    if (growth_interval != 0) {
      options.growth_interval = growth_interval;
    }
    *scaler = new fsdp_loss_scaler_s(options);  // LossScaler refuses bad settings, naming them
    ++live_handles;
  });
}

int fsdp_loss_scaler_scale(fsdp_loss_scaler_t scaler, double* scale) {
  return guarded("fsdp_loss_scaler_scale", [&] {
    require_handle(scaler, "loss scaler");
    require_argument(scale != nullptr, "the output pointer is NULL");
    *scale = scaler->scaler.scale();
  });
}

int fsdp_loss_scaler_unscale_and_check(fsdp_loss_scaler_t scaler, fsdp_model_t model,
                                       int* found_inf) {
  return guarded("fsdp_loss_scaler_unscale_and_check", [&] {
    require_handle(scaler, "loss scaler");
    require_handle(model, "model");
    require_argument(found_inf != nullptr, "the output pointer is NULL");
    model->visit(
        [&](auto& sharded) { *found_inf = scaler->scaler.unscale_and_check(sharded) ? 1 : 0; });
  });
}

int fsdp_loss_scaler_update(fsdp_loss_scaler_t scaler, int found_inf) {
  return guarded("fsdp_loss_scaler_update",
                 [&] { require_handle(scaler, "loss scaler")->scaler.update(found_inf != 0); });
}

int fsdp_loss_scaler_get_state(fsdp_loss_scaler_t scaler, double* scale, int64_t* clean_steps,
                               int64_t* skipped_steps) {
  return guarded("fsdp_loss_scaler_get_state", [&] {
    const fsdp::LossScalerState& state = require_handle(scaler, "loss scaler")->scaler.state();
    if (scale != nullptr) {
      *scale = state.scale;
    }
    if (clean_steps != nullptr) {
      *clean_steps = state.clean_steps;
    }
    if (skipped_steps != nullptr) {
      *skipped_steps = state.skipped_steps;
    }
  });
}

int fsdp_loss_scaler_set_state(fsdp_loss_scaler_t scaler, double scale, int64_t clean_steps,
                               int64_t skipped_steps) {
  return guarded("fsdp_loss_scaler_set_state", [&] {
    fsdp::LossScalerState state;
    state.scale = scale;
    state.clean_steps = clean_steps;
    state.skipped_steps = skipped_steps;
    require_handle(scaler, "loss scaler")->scaler.set_state(state);
  });
}

void fsdp_loss_scaler_destroy(fsdp_loss_scaler_t scaler) {
  if (scaler != nullptr) {
    delete scaler;
    --live_handles;
  }
}

// ---- checkpoints ------------------------------------------------------------------------------

namespace {

// The optimizer behind the handle, or nullptr for a NULL handle; it must have been made for this
// model (its element type and its storage).
template <class T>
fsdp::Optimizer<T>* optimizer_of(const fsdp_model_s& model, fsdp_optimizer_t optimizer) {
  if (optimizer == nullptr) {
    return nullptr;
  }
  fsdp::Optimizer<T>* found = nullptr;
  optimizer->typed.visit([&](auto& typed) {
    if constexpr (std::is_same_v<element_t<decltype(typed)>, T>) {
      if (typed.model == model.sharded.template shared<T>()) {
        found = &typed.optimizer;
      }
    }
  });
  require_argument(found != nullptr,
                   "the optimizer was made for another model: pass this model's optimizer, or "
                   "NULL for the parameters alone");
  return found;
}

}  // namespace

namespace {

// The checkpoint objects of a C call: the model's own (fsdp_checkpoint_set_object), and the loss
// scaler unless it is NULL.
fsdp::StatefulObjects objects_of(fsdp_model_s& model, fsdp_loss_scaler_t scaler) {
  fsdp::StatefulObjects objects;
  for (auto& [name, object] : model.objects) {
    objects[name] = &object;
  }
  if (scaler != nullptr) {
    require_argument(objects.count("loss_scaler") == 0,
                     "the model has an object named 'loss_scaler' (fsdp_checkpoint_set_object), "
                     "which is the loss scaler's name in a checkpoint: name it otherwise");
    objects["loss_scaler"] = &scaler->scaler;
  }
  return objects;
}

// fsdp_checkpoint_save and fsdp_checkpoint_save_in_background: the checked arguments, then
// save(sharded model, its optimizer or null, state).
template <class Save>
int checkpoint_save(const char* function, fsdp_model_t model, fsdp_optimizer_t optimizer,
                    fsdp_loss_scaler_t scaler, const char* path, int64_t step, int64_t epoch,
                    const Save& save) {
  return guarded(function, [&] {
    require_handle(model, "model");
    const std::string file = require_name(path, "the checkpoint path");
    require_argument(step >= 0 && epoch >= 0, "step " + std::to_string(step) + " and epoch " +
                                                  std::to_string(epoch) + " must be >= 0");
    model->visit([&](auto& sharded) {
      using T = element_t<decltype(sharded)>;
      fsdp::CheckpointState state;
      state.step = step;
      state.epoch = epoch;
      state.objects = objects_of(*model, scaler);
      save(file, sharded, optimizer_of<T>(*model, optimizer), state);
    });
  });
}

}  // namespace

int fsdp_checkpoint_save(fsdp_model_t model, fsdp_optimizer_t optimizer, fsdp_loss_scaler_t scaler,
                         const char* path, int64_t step, int64_t epoch) {
  return checkpoint_save(
      "fsdp_checkpoint_save", model, optimizer, scaler, path, step, epoch,
      [&](const std::string& file, auto& sharded, const auto* saved, const auto& state) {
        model->background.finish();
        fsdp::save_checkpoint(file, sharded, saved, state);
      });
}

int fsdp_checkpoint_save_in_background(fsdp_model_t model, fsdp_optimizer_t optimizer,
                                       fsdp_loss_scaler_t scaler, const char* path, int64_t step,
                                       int64_t epoch) {
  return checkpoint_save(
      "fsdp_checkpoint_save_in_background", model, optimizer, scaler, path, step, epoch,
      [&](const std::string& file, auto& sharded, const auto* saved, const auto& state) {
        fsdp::save_checkpoint_in_background(model->background, file, sharded, saved, state);
      });
}

int fsdp_checkpoint_try_finish(fsdp_model_t model, int* finished) {
  return guarded("fsdp_checkpoint_try_finish", [&] {
    require_handle(model, "model");
    require_argument(finished != nullptr, "finished is NULL");
    *finished = model->background.try_finish() ? 1 : 0;
  });
}

int fsdp_checkpoint_finish(fsdp_model_t model) {
  return guarded("fsdp_checkpoint_finish", [&] {
    require_handle(model, "model");
    model->background.finish();
  });
}

int fsdp_checkpoint_load(fsdp_model_t model, fsdp_optimizer_t optimizer, fsdp_loss_scaler_t scaler,
                         const char* path, int64_t* step, int64_t* epoch) {
  return guarded("fsdp_checkpoint_load", [&] {
    require_handle(model, "model");
    const std::string file = require_name(path, "the checkpoint path");
    model->visit([&](auto& sharded) {
      using T = element_t<decltype(sharded)>;
      fsdp::Optimizer<T>* loaded = optimizer_of<T>(*model, optimizer);
      model->background.finish();  // a load of the file a save is writing reads it whole
      const fsdp::CheckpointHeader header =
          fsdp::load_checkpoint<T>(file, sharded, loaded, objects_of(*model, scaler));
      if (step != nullptr) {
        *step = header.state.step;
      }
      if (epoch != nullptr) {
        *epoch = header.state.epoch;
      }
    });
  });
}

int fsdp_checkpoint_set_object(fsdp_model_t model, const char* name, const char* json) {
  return guarded("fsdp_checkpoint_set_object", [&] {
    require_handle(model, "model");
    const std::string object = require_name(name, "the object name");
    require_argument(json != nullptr, "the JSON text of object '" + object + "' is NULL");
    try {
      const fsdp::JsonState state(json);
      model->objects[object] = state;
    } catch (const fsdp::Error& error) {
      throw ApiError(FSDP_ERROR_INVALID_ARGUMENT, "object '" + object + "': " + error.message());
    }
  });
}

int fsdp_checkpoint_get_object(fsdp_model_t model, const char* name, char* buffer, size_t size,
                               size_t* length) {
  return guarded("fsdp_checkpoint_get_object", [&] {
    require_handle(model, "model");
    const std::string object = require_name(name, "the object name");
    const auto found = model->objects.find(object);
    if (found == model->objects.end()) {
      std::vector<std::string> names;
      for (const auto& entry : model->objects) {
        names.push_back("'" + entry.first + "'");
      }
      throw fsdp::Error(fsdp::ErrorKind::unknown_name,
                        "the model has no object '" + object + "' (fsdp_checkpoint_set_object); " +
                            (names.empty() ? std::string("it has none")
                                           : "its objects are " + fsdp::join(names)));
    }
    const std::string& text = found->second.text();
    if (length != nullptr) {
      *length = text.size();
    }
    if (buffer != nullptr) {
      require_argument(size > text.size(), "the buffer for object '" + object + "' holds " +
                                               std::to_string(size) + " bytes; its text needs " +
                                               std::to_string(text.size() + 1) + " with the NUL");
      std::memcpy(buffer, text.c_str(), text.size() + 1);
    }
  });
}

int fsdp_load_parameters(fsdp_model_t model, const char* path) {
  return guarded("fsdp_load_parameters", [&] {
    require_handle(model, "model");
    const std::string file = require_name(path, "the file path");
    model->visit([&](auto& sharded) {
      model->background.finish();
      fsdp::load_parameters(file, sharded);
    });
  });
}
