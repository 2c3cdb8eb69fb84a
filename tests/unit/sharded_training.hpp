// The sharded side of the equivalence tests: the three ways to initialize a model from the
// reference's values, and one training step of the tiny MLP with the units driven by hand.
#pragma once

#include <functional>

#include "device_access.hpp"
#include "fsdp/optim/grad_norm.hpp"
#include "fsdp/unit/sharded_model.hpp"
#include "reference_training.hpp"
#include "tiny_mlp.hpp"

namespace fsdp::test {

template <class T>
void init_parameters(ShardedModel<T>& model) {
  // The three ways in, so all of them are checked against the same values.
  int which = 0;
  for (const ParameterInfo& p : model.plan().parameters()) {
    const std::vector<T> values = initial_values<T>(p);
    const DeviceView<T> on_device = to_device(values);  // where the two entry points read
    switch (which++ % 3) {
      case 0:
        model.init_from_root(p.name, model.group().rank() == 0 ? on_device.data() : nullptr);
        break;
      case 1:
        model.init_from_full(p.name, on_device.data());
        break;
      default:
        model.init_with(p.name, [&](std::int64_t first, T* out, std::int64_t count) {
          for (std::int64_t i = 0; i < count; ++i) {
            out[i] = values[static_cast<std::size_t>(first + i)];
          }
        });
    }
  }
}

// data: the ranks that split the global batch (all of them; the model's group is only its shard
// group under hybrid sharding).
template <class T>
void sharded_train_step(ShardedModel<T>& model, const ProcessGroup& data,
                        const OptimizerSetup& setup, const std::function<void()>& step) {
  const int n = data.size();
  const int local = kBatch / n;
  const int first = data.rank() * local;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    model.unit(u).gather();
  }
  // The reference computation runs on the host: on host copies of the gathered parameters and
  // of the full gradients, which go back before the reduce-scatter.
  Arrays<T> in;
  MutableArrays<T> out;
  std::vector<decltype(on_host(std::declval<DeviceView<T>>()))> fulls, grads;
  std::vector<std::vector<T>> discarded;  // what the MLP computes for frozen parameters
  discarded.reserve(model.plan().parameters().size());
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    for (auto& p : model.unit(u).parameters()) {
      fulls.push_back(on_host(p.full()));
      in[p.name()] = fulls.back().data();
      if (p.trainable()) {
        grads.push_back(on_host(p.grad()));
        out[p.name()] = grads.back().data();
      } else {
        discarded.emplace_back(static_cast<std::size_t>(p.numel()), T(0));
        out[p.name()] = discarded.back().data();
      }
    }
  }
  // Micro-batches accumulate into the full gradients; nothing moves until the last one.
  const int per_micro = local / setup.micro_batches;
  for (int k = 0; k < setup.micro_batches; ++k) {
    forward_backward<T>(in, out, first + k * per_micro, per_micro, local);
  }
  std::size_t next = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    for (auto& p : model.unit(u).parameters()) {
      if (p.trainable()) {
        to_view(p.grad(), grads[next++]);
      }
    }
  }
  // Every unit's reduction in flight at once, as a runtime's backward scopes leave them: the
  // clipping or the optimizer's step waits for them (ShardedModel::wait_for_gradients).
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    model.unit(u).release();
    model.reduce_scatter_grads_async(model.unit(u));
    model.progress_reductions();
  }
  if (setup.clip > 0) {
    clip_grad_norm(model, setup.clip);
  }
  step();
  model.zero_grad();
}

}  // namespace fsdp::test
