// What fsdp-train's run needs of the model it trains, so that one training loop (sampling,
// optimizer, checkpoints, --check, reports) drives the MLP and the GPT-2 transformer alike.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "fsdp/runtime/runtime.hpp"
#include "fsdp/shard/parameter_info.hpp"
#include "fsdp/unit/sharded_model.hpp"
#include "models/loss.hpp"

namespace fsdp_train {

// The buffers of one batch of up to `capacity` samples, and the passes over them. Everything the
// kernels touch lives in fsdp::MemorySpace; load() copies the batch over from the host.
template <class T>
class Batch {
 public:
  virtual ~Batch() = default;
  virtual void load(const Dataset& data, const std::vector<std::int64_t>& indices) = 0;
  // Forward through every unit's forward scope, the loss, and backward through every backward
  // scope of `samples` loaded samples. The gradient is that of the mean loss over this process's
  // positions, times loss_scale. Returns the loss and correct-prediction sums over the positions.
  virtual fsdp_models::LossSums train(fsdp::Runtime<T>& runtime, std::int64_t samples,
                                      double loss_scale) = 0;
  // Forward only (an evaluation step; the caller finishes the step).
  virtual fsdp_models::LossSums evaluate(fsdp::Runtime<T>& runtime, std::int64_t samples) = 0;
  // Bytes of activations and scratch this batch holds (what stays from forward to backward and
  // the buffers the passes overwrite).
  virtual std::int64_t activation_bytes() const = 0;
};

template <class T>
class TrainedModel {
 public:
  virtual ~TrainedModel() = default;
  virtual std::vector<fsdp::ParameterInfo> parameters(fsdp::DType dtype) const = 0;
  // Every unit once, in forward order.
  virtual std::vector<std::string> order() const = 0;
  // RuntimeOptions::tied_parameters: parameters used by units besides their own.
  virtual std::map<std::string, std::set<std::string>> tied_parameters() const { return {}; }
  // Fills each rank's pieces from a hash of (seed, parameter, element): the same model at every
  // world size and sharding.
  virtual void initialize(fsdp::ShardedModel<T>& model, std::uint64_t seed) const = 0;
  virtual std::int64_t parameter_count() const = 0;
  // Loss terms per sample: 1 for a classifier, the sequence length for a language model.
  virtual std::int64_t positions_per_sample() const = 0;
  // Training FLOPs (forward and backward) per position, for model FLOP utilisation.
  virtual double flops_per_position() const = 0;
  // "MLP 16-64-64-4", "GPT-2 4 layers, hidden 128, 4 heads, seq 64".
  virtual std::string description() const = 0;
  // What a position is called in reports: "sample" or "token".
  virtual std::string position_name() const = 0;
  virtual std::unique_ptr<Batch<T>> make_batch(std::int64_t capacity) const = 0;
};

}  // namespace fsdp_train
