// The C API (include/fsdp/fsdp.h) over ShardedModel, Runtime and the optimizers. Every entry
// point runs its body inside `guarded`, which turns every exception into a return code and a
// message, so that nothing C++ ever unwinds into C or Fortran frames.
#include "fsdp/fsdp.h"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/optim/sgd.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/plan_agreement.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/sharded_model.hpp"

namespace {

// A failure the C layer itself detects, with the code it maps to.
class ApiError : public std::runtime_error {
 public:
  ApiError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

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
    return fail(function, FSDP_ERROR_LIBRARY, error.what());
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

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) {
    text += (text.empty() ? "" : ", ") + name;
  }
  return text;
}

template <class Model>
struct element_of;
template <class T>
struct element_of<fsdp::ShardedModel<T>> {
  using type = T;
};

}  // namespace

struct fsdp_model_s {
  fsdp::DType dtype = fsdp::DType::f32;
  std::vector<fsdp::ParameterInfo> parameters;
  fsdp::StrategyOptions patterns;
  // One of the two, once sharded. Shared with the runtimes and optimizers made from the model.
  std::shared_ptr<fsdp::ShardedModel<float>> f32;
  std::shared_ptr<fsdp::ShardedModel<double>> f64;

  bool sharded() const { return f32 || f64; }

  // Calls body(ShardedModel<T>&) with the model's element type.
  template <class Body>
  void visit(Body&& body) {
    if (f32) {
      body(*f32);
    } else if (f64) {
      body(*f64);
    } else {
      throw ApiError(FSDP_ERROR_STATE,
                     "the model is not sharded yet: call fsdp_model_shard after adding its "
                     "parameters");
    }
  }

  // Throws UNKNOWN_NAME listing the parameters when the model has none called name.
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
    throw ApiError(FSDP_ERROR_UNKNOWN_NAME, "the model has no parameter '" + name +
                                                "'; its parameters are " + joined(names));
  }
};

struct fsdp_runtime_s {
  std::shared_ptr<fsdp::ShardedModel<float>> model32;
  std::unique_ptr<fsdp::Runtime<float>> runtime32;
  std::shared_ptr<fsdp::ShardedModel<double>> model64;
  std::unique_ptr<fsdp::Runtime<double>> runtime64;
  std::vector<std::string> order;
  std::map<std::string, std::size_t> index;

  // The step as the calls so far made it, checked before anything reaches the Runtime, so that a
  // call out of order is refused with FSDP_ERROR_ORDER and leaves the runtime usable.
  bool backward = false;  // phase: false forward, true backward
  std::size_t done = 0;   // scopes of the phase closed
  int open = -1;          // the open scope's unit, -1 when none
  // Set when the Runtime itself failed (communication, ...): the step is lost.
  std::string failure;

  template <class Body>
  void visit(Body&& body) {
    if (runtime32) {
      body(*runtime32, *model32);
    } else {
      body(*runtime64, *model64);
    }
  }

  std::size_t unit_index(const std::string& unit) const {
    auto it = index.find(unit);
    if (it == index.end()) {
      throw ApiError(FSDP_ERROR_UNKNOWN_NAME,
                     "unknown unit '" + unit + "'; the registered order is " + joined(order));
    }
    return it->second;
  }

  void require_usable() const {
    if (!failure.empty()) {
      throw ApiError(FSDP_ERROR_STATE, "an earlier call failed (" + failure +
                                           "); this step is lost: destroy the runtime and "
                                           "create a new one");
    }
  }

  void require_closed(const std::string& what) const {
    if (open >= 0) {
      throw ApiError(FSDP_ERROR_ORDER, what + " while the " + (backward ? "backward" : "forward") +
                                           " scope of '" + order[static_cast<std::size_t>(open)] +
                                           "' is open; end it first");
    }
  }

  // Runs a call on the Runtime; a failure there (the checks above passed) loses the step.
  template <class Body>
  void run(Body&& body) {
    try {
      visit(body);
    } catch (const std::exception& error) {
      failure = error.what();
      throw;
    }
  }
};

struct fsdp_optimizer_s {
  std::function<void()> step;
};

// The functions have C linkage from their declarations in fsdp.h.

const char* fsdp_last_error(void) {
  return last_error.c_str();
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
      throw ApiError(FSDP_ERROR_STATE, "MPI is not initialized: call MPI_Init first");
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
      throw ApiError(FSDP_ERROR_STATE, std::to_string(alive) +
                                           " handle(s) are still alive; destroy every model, "
                                           "runtime and optimizer before fsdp_finalize");
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
    require_argument(
        dtype == FSDP_FLOAT32 || dtype == FSDP_FLOAT64,
        "dtype " + std::to_string(dtype) + " is not FSDP_FLOAT32 (1) or FSDP_FLOAT64 (2)");
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
    if (model->sharded()) {
      throw ApiError(FSDP_ERROR_STATE, "parameter '" + parameter.name +
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

void shard_model(fsdp_model_t model, MPI_Comm comm, const char* strategy_name) {
  require_handle(model, "model");
  const std::string strategy = require_name(strategy_name, "the strategy name");
  if (model->sharded()) {
    throw ApiError(FSDP_ERROR_STATE, "the model is already sharded");
  }
  if (!Kokkos::is_initialized()) {
    throw ApiError(FSDP_ERROR_STATE,
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
  fsdp::ProcessGroup group(comm);
  const fsdp::StrategyOptions patterns = model->patterns;
  fsdp::ShardingPlan plan = fsdp::agree_on_plan(
      [&] {
        return fsdp::make_strategy(strategy, patterns)->make_plan(model->parameters, group.size());
      },
      model->parameters, group);
  if (model->dtype == fsdp::DType::f32) {
    model->f32 = std::make_shared<fsdp::ShardedModel<float>>(group, std::move(plan));
  } else {
    model->f64 = std::make_shared<fsdp::ShardedModel<double>>(group, std::move(plan));
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
      using T = typename element_of<std::decay_t<decltype(sharded)>>::type;
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
      using T = typename element_of<std::decay_t<decltype(sharded)>>::type;
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
      using T = typename element_of<std::decay_t<decltype(sharded)>>::type;
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
      using T = typename element_of<std::decay_t<decltype(sharded)>>::type;
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
      sharded.group().all_reduce(whole, static_cast<std::size_t>(numel), fsdp::ReduceOp::sum);
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

int fsdp_runtime_create(fsdp_model_t model, int nunits, const char* const* order, int prefetch,
                        int max_gathered_units, fsdp_runtime_t* runtime) {
  return guarded("fsdp_runtime_create", [&] {
    require_argument(runtime != nullptr, "the output pointer is NULL");
    *runtime = nullptr;
    require_handle(model, "model");
    require_argument(nunits >= 1 && order != nullptr,
                     "the order needs at least one unit, got " + std::to_string(nunits));
    require_argument(max_gathered_units >= 1,
                     "max_gathered_units must be >= 1, got " + std::to_string(max_gathered_units));
    auto created = std::make_unique<fsdp_runtime_s>();
    for (int i = 0; i < nunits; ++i) {
      created->order.push_back(require_name(order[i], "a unit name of the order"));
      created->index.emplace(created->order.back(), created->index.size());
    }
    fsdp::RuntimeOptions options;
    options.prefetch = prefetch != 0;
    options.max_gathered_units = max_gathered_units;
    model->visit([&](auto& sharded) {
      const auto& names = sharded.unit_names();
      for (const std::string& unit : created->order) {
        if (std::find(names.begin(), names.end(), unit) == names.end()) {
          throw ApiError(FSDP_ERROR_UNKNOWN_NAME, "the order names unit '" + unit +
                                                      "', which the model does not have; "
                                                      "its units are " +
                                                      joined(names));
        }
      }
    });
    if (model->f32) {
      created->model32 = model->f32;
      created->runtime32 =
          std::make_unique<fsdp::Runtime<float>>(*model->f32, created->order, options);
    } else {
      created->model64 = model->f64;
      created->runtime64 =
          std::make_unique<fsdp::Runtime<double>>(*model->f64, created->order, options);
    }
    *runtime = created.release();
    ++live_handles;
  });
}

int fsdp_begin_forward(fsdp_runtime_t runtime, const char* unit) {
  return guarded("fsdp_begin_forward", [&] {
    fsdp_runtime_s& r = *require_handle(runtime, "runtime");
    const std::string name = require_name(unit, "the unit name");
    const std::size_t index = r.unit_index(name);
    r.require_usable();
    r.require_closed("forward scope of '" + name + "' opened");
    if (r.backward) {
      throw ApiError(FSDP_ERROR_ORDER, "forward scope of '" + name +
                                           "' opened during backward; call fsdp_finish_step "
                                           "after the last backward scope");
    }
    if (index != r.done) {
      throw ApiError(FSDP_ERROR_ORDER, "forward scope of '" + name + "' opened out of order: " +
                                           (r.done < r.order.size()
                                                ? "expected '" + r.order[r.done] + "'"
                                                : std::string("every forward scope already ran")) +
                                           "; the registered forward order is " + joined(r.order));
    }
    r.run([&](auto& rt, auto&) { rt.begin_forward(name); });
    r.open = static_cast<int>(index);
  });
}

int fsdp_end_forward(fsdp_runtime_t runtime, const char* unit) {
  return guarded("fsdp_end_forward", [&] {
    fsdp_runtime_s& r = *require_handle(runtime, "runtime");
    const std::string name = require_name(unit, "the unit name");
    const std::size_t index = r.unit_index(name);
    r.require_usable();
    if (r.backward || r.open != static_cast<int>(index)) {
      throw ApiError(FSDP_ERROR_ORDER,
                     "end of the forward scope of '" + name + "', which is not open" +
                         (r.open >= 0 ? " (the open scope is '" +
                                            r.order[static_cast<std::size_t>(r.open)] + "')"
                                      : std::string(" (no scope is open)")));
    }
    r.run([&](auto& rt, auto&) { rt.end_forward(name); });
    r.open = -1;
    ++r.done;
  });
}

int fsdp_begin_backward(fsdp_runtime_t runtime, const char* unit) {
  return guarded("fsdp_begin_backward", [&] {
    fsdp_runtime_s& r = *require_handle(runtime, "runtime");
    const std::string name = require_name(unit, "the unit name");
    const std::size_t index = r.unit_index(name);
    r.require_usable();
    r.require_closed("backward scope of '" + name + "' opened");
    const std::size_t n = r.order.size();
    if (!r.backward && r.done != n) {
      throw ApiError(FSDP_ERROR_ORDER, "backward scope of '" + name + "' opened after " +
                                           std::to_string(r.done) + " of " + std::to_string(n) +
                                           " forward scopes; run the whole forward first");
    }
    const std::size_t done = r.backward ? r.done : 0;
    const std::size_t expected = done < n ? n - 1 - done : n;
    if (index != expected) {
      throw ApiError(FSDP_ERROR_ORDER,
                     "backward scope of '" + name + "' opened out of order: " +
                         (expected < n ? "expected '" + r.order[expected] + "'"
                                       : std::string("every backward scope already ran")) +
                         "; backward runs the forward order (" + joined(r.order) + ") in reverse");
    }
    r.run([&](auto& rt, auto&) { rt.begin_backward(name); });
    r.backward = true;
    r.done = done;
    r.open = static_cast<int>(index);
  });
}

int fsdp_end_backward(fsdp_runtime_t runtime, const char* unit) {
  return guarded("fsdp_end_backward", [&] {
    fsdp_runtime_s& r = *require_handle(runtime, "runtime");
    const std::string name = require_name(unit, "the unit name");
    const std::size_t index = r.unit_index(name);
    r.require_usable();
    if (!r.backward || r.open != static_cast<int>(index)) {
      throw ApiError(FSDP_ERROR_ORDER,
                     "end of the backward scope of '" + name + "', which is not open" +
                         (r.open >= 0 ? " (the open scope is '" +
                                            r.order[static_cast<std::size_t>(r.open)] + "')"
                                      : std::string(" (no scope is open)")));
    }
    r.run([&](auto& rt, auto&) { rt.end_backward(name); });
    r.open = -1;
    ++r.done;
  });
}

int fsdp_finish_step(fsdp_runtime_t runtime) {
  return guarded("fsdp_finish_step", [&] {
    fsdp_runtime_s& r = *require_handle(runtime, "runtime");
    r.require_usable();
    r.require_closed("fsdp_finish_step called");
    if (r.done != r.order.size()) {
      throw ApiError(FSDP_ERROR_ORDER,
                     "step finished after " + std::to_string(r.done) + " of " +
                         std::to_string(r.order.size()) + (r.backward ? " backward" : " forward") +
                         " scopes; a step runs every forward scope, then every backward scope "
                         "or none");
    }
    r.run([](auto& rt, auto&) { rt.finish_step(); });
    r.backward = false;
    r.done = 0;
  });
}

namespace {

// The whole parameter, or its whole gradient, of the open scope's unit.
void scope_values(fsdp_runtime_t runtime, const char* parameter_name, bool gradient, void** values,
                  int64_t* numel) {
  fsdp_runtime_s& r = *require_handle(runtime, "runtime");
  require_argument(values != nullptr && numel != nullptr, "an output pointer is NULL");
  *values = nullptr;
  *numel = 0;
  const std::string name = require_name(parameter_name, "the parameter name");
  r.require_usable();
  const char* what = gradient ? "gradient" : "parameter";
  if (r.open < 0) {
    throw ApiError(FSDP_ERROR_STATE, std::string(what) + " of '" + name +
                                         "' requested with no scope open; open the scope of "
                                         "its unit first");
  }
  const std::string& unit = r.order[static_cast<std::size_t>(r.open)];
  if (gradient && !r.backward) {
    throw ApiError(FSDP_ERROR_STATE, "gradient of '" + name +
                                         "' requested in the forward scope "
                                         "of '" +
                                         unit + "'; gradients are written in backward scopes");
  }
  r.visit([&](auto&, auto& model) {
    if (!model.plan().contains(name)) {
      throw ApiError(FSDP_ERROR_UNKNOWN_NAME, "unit '" + unit + "' has no parameter '" + name +
                                                  "' (the model has no parameter of that name)");
    }
    auto& owner = model.unit_of(name);
    if (owner.name() != unit) {
      throw ApiError(FSDP_ERROR_STATE, std::string(what) + " of '" + name + "' (unit '" +
                                           owner.name() + "') requested in the scope of '" + unit +
                                           "'; open its own unit's scope");
    }
    auto& parameter = owner.parameter(name);
    auto view = gradient ? parameter.grad() : parameter.full();
    *values = view.data();
    *numel = parameter.numel();
  });
}

}  // namespace

int fsdp_full(fsdp_runtime_t runtime, const char* parameter, void** values, int64_t* numel) {
  return guarded("fsdp_full", [&] { scope_values(runtime, parameter, false, values, numel); });
}

int fsdp_grad(fsdp_runtime_t runtime, const char* parameter, void** values, int64_t* numel) {
  return guarded("fsdp_grad", [&] { scope_values(runtime, parameter, true, values, numel); });
}

int fsdp_progress(fsdp_runtime_t runtime) {
  return guarded("fsdp_progress", [&] {
    fsdp_runtime_s& r = *require_handle(runtime, "runtime");
    r.require_usable();
    r.run([](auto& rt, auto&) { rt.progress(); });
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

template <template <class> class Optimizer, class Options>
void create_optimizer(fsdp_model_t model, const Options& options, fsdp_optimizer_t* optimizer) {
  require_argument(optimizer != nullptr, "the output pointer is NULL");
  *optimizer = nullptr;
  require_handle(model, "model");
  auto created = std::make_unique<fsdp_optimizer_s>();
  if (model->f32) {
    auto rule = std::make_shared<Optimizer<float>>(options);
    created->step = [rule, sharded = model->f32] { rule->step(*sharded); };
  } else if (model->f64) {
    auto rule = std::make_shared<Optimizer<double>>(options);
    created->step = [rule, sharded = model->f64] { rule->step(*sharded); };
  } else {
    model->visit([](auto&) {});  // the "not sharded yet" error
  }
  *optimizer = created.release();
  ++live_handles;
}

fsdp::AdamOptions adam_options(double lr, double beta1, double beta2, double eps,
                               double weight_decay, bool decoupled) {
  fsdp::AdamOptions options;
  options.lr = lr;
  options.beta1 = beta1;
  options.beta2 = beta2;
  options.eps = eps;
  options.weight_decay = weight_decay;
  options.decoupled_weight_decay = decoupled;
  return options;
}

}  // namespace

int fsdp_optimizer_create_sgd(fsdp_model_t model, double lr, double momentum, double dampening,
                              int nesterov, double weight_decay, fsdp_optimizer_t* optimizer) {
  return guarded("fsdp_optimizer_create_sgd", [&] {
    fsdp::SgdOptions options;
    options.lr = lr;
    options.momentum = momentum;
    options.dampening = dampening;
    options.nesterov = nesterov != 0;
    options.weight_decay = weight_decay;
    create_optimizer<fsdp::Sgd>(model, options, optimizer);
  });
}

int fsdp_optimizer_create_adam(fsdp_model_t model, double lr, double beta1, double beta2,
                               double eps, double weight_decay, fsdp_optimizer_t* optimizer) {
  return guarded("fsdp_optimizer_create_adam", [&] {
    create_optimizer<fsdp::Adam>(model, adam_options(lr, beta1, beta2, eps, weight_decay, false),
                                 optimizer);
  });
}

int fsdp_optimizer_create_adamw(fsdp_model_t model, double lr, double beta1, double beta2,
                                double eps, double weight_decay, fsdp_optimizer_t* optimizer) {
  return guarded("fsdp_optimizer_create_adamw", [&] {
    create_optimizer<fsdp::Adam>(model, adam_options(lr, beta1, beta2, eps, weight_decay, true),
                                 optimizer);
  });
}

int fsdp_optimizer_step(fsdp_optimizer_t optimizer) {
  return guarded("fsdp_optimizer_step", [&] { require_handle(optimizer, "optimizer")->step(); });
}

void fsdp_optimizer_destroy(fsdp_optimizer_t optimizer) {
  if (optimizer != nullptr) {
    delete optimizer;
    --live_handles;
  }
}
