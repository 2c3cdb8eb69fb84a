// The unsharded reference: the tiny MLP trained on one rank with plain arrays, and the optimizer
// rules written out again (independently of fsdp's optimizers).
#pragma once

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "../device_access.hpp"
#include "fsdp/optim/adam.hpp"
#include "fsdp/optim/sgd.hpp"
#include "fsdp/shard/sharding_strategy.hpp"
#include "fsdp/unit/sharded_model.hpp"
#include "tiny_mlp.hpp"

namespace fsdp::test {

struct OptimizerSetup {
  std::string kind;  // "sgd", "adam", "adamw"
  SgdOptions sgd;
  AdamOptions adam;
  double clip = 0.0;  // 0: no clipping
  int micro_batches = 1;
  // Parameters marked not trainable (ParameterInfo::trainable): the reference leaves them out of
  // clipping and of the step, as PyTorch does with requires_grad=False.
  std::set<std::string> frozen;
};

// The tiny MLP's parameters with setup.frozen marked not trainable.
template <class T>
std::vector<ParameterInfo> tiny_mlp_parameters(const OptimizerSetup& setup) {
  std::vector<ParameterInfo> parameters = tiny_mlp_parameters<T>();
  for (ParameterInfo& p : parameters) {
    p.trainable = setup.frozen.count(p.name) == 0;
  }
  return parameters;
}

template <class T>
struct Reference {
  std::map<std::string, std::vector<T>> params, grads, m, v;
  int steps = 0;

  Reference() {
    for (const auto& p : tiny_mlp_parameters<T>()) {
      params[p.name] = initial_values<T>(p);
    }
  }

  void train_step(const OptimizerSetup& setup) {
    Arrays<T> in;
    MutableArrays<T> out;
    for (auto& [name, values] : params) {
      grads[name].assign(values.size(), T(0));
      in[name] = values.data();
      out[name] = grads[name].data();
    }
    forward_backward<T>(in, out, 0, kBatch, kBatch);
    for (const std::string& name : setup.frozen) {
      grads.erase(name);
    }
    if (setup.clip > 0) {
      double sum = 0;
      for (auto& [name, g] : grads) {
        for (T x : g) {
          sum += static_cast<double>(x) * static_cast<double>(x);
        }
      }
      const double coefficient = setup.clip / (std::sqrt(sum) + 1e-6);
      if (coefficient < 1) {
        for (auto& [name, g] : grads) {
          for (T& x : g) {
            x *= static_cast<T>(coefficient);
          }
        }
      }
    }
    ++steps;
    for (auto& [name, p] : params) {
      if (setup.frozen.count(name) != 0) {
        continue;
      }
      std::vector<T>& g = grads[name];
      std::vector<T>& m1 = m[name];
      std::vector<T>& m2 = v[name];
      m1.resize(p.size(), T(0));
      m2.resize(p.size(), T(0));
      for (std::size_t i = 0; i < p.size(); ++i) {
        if (setup.kind == "sgd") {
          const SgdOptions& o = setup.sgd;
          T d = g[i] + static_cast<T>(o.weight_decay) * p[i];
          if (o.momentum != 0) {
            m1[i] = steps == 1
                        ? d
                        : static_cast<T>(o.momentum) * m1[i] + static_cast<T>(1 - o.dampening) * d;
            d = o.nesterov ? d + static_cast<T>(o.momentum) * m1[i] : m1[i];
          }
          p[i] -= static_cast<T>(o.lr) * d;
        } else {
          const AdamOptions& o = setup.adam;
          const bool decoupled = setup.kind == "adamw";
          const T d = g[i] + (decoupled ? T(0) : static_cast<T>(o.weight_decay)) * p[i];
          if (decoupled) {
            p[i] *= static_cast<T>(1 - o.lr * o.weight_decay);
          }
          m1[i] = static_cast<T>(o.beta1) * m1[i] + static_cast<T>(1 - o.beta1) * d;
          m2[i] = static_cast<T>(o.beta2) * m2[i] + static_cast<T>(1 - o.beta2) * d * d;
          const T mhat = m1[i] / static_cast<T>(1 - std::pow(o.beta1, steps));
          const T vhat = m2[i] / static_cast<T>(1 - std::pow(o.beta2, steps));
          p[i] -= static_cast<T>(o.lr) * mhat / (std::sqrt(vhat) + static_cast<T>(o.eps));
        }
      }
    }
  }
};

// exact_gather: also check that gathering returns exactly the pieces (not so under mixed
// precision, where the gathered parameters are the pieces rounded to 16 bits).
template <class T>
double largest_relative_difference(ShardedModel<T>& model, const Reference<T>& reference,
                                   bool exact_gather = true) {
  double worst = 0;
  for (std::size_t u = 0; u < model.unit_count(); ++u) {
    ShardedUnit<T>& unit = model.unit(u);
    unit.gather();
    for (auto& p : unit.parameters()) {
      const auto full = on_host(p.full());
      const std::vector<T>& expected = reference.params.at(p.name());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        const double scale = std::max(1.0, std::abs(static_cast<double>(expected[i])));
        worst = std::max(worst, std::abs(static_cast<double>(full(i) - expected[i])) / scale);
      }
      // Gathering returns exactly the pieces the ranks hold: compare with an independent
      // all_gather_v of the pieces.
      if (exact_gather && p.placement() == Placement::sharded) {
        std::vector<std::size_t> counts;
        for (const auto& a : model.plan().assignments(p.name())) {
          counts.push_back(static_cast<std::size_t>(a.size));
        }
        std::vector<T> pieces(expected.size());
        const auto shard = on_host(p.shard());
        model.group().all_gather_v(
            Kokkos::DefaultHostExecutionSpace(),
            host_view(shard.data(), static_cast<std::size_t>(p.shard_size())),
            host_view(pieces.data(), pieces.size()), counts);
        for (std::size_t i = 0; i < pieces.size(); ++i) {
          BOOST_TEST(pieces[i] == full(i), p.name() << "[" << i << "] gathered inexactly");
        }
      }
    }
    unit.release();
  }
  return worst;
}

struct Strategy {
  const char* name;
  StrategyOptions options;
};

inline std::vector<Strategy> strategies() {
  StrategyOptions hybrid;
  hybrid.full_shard_patterns = {"l0"};
  hybrid.layer_wise_patterns = {"l1", "l2"};
  return {{"full", {}}, {"layerwise", {}}, {"hybrid", hybrid}};
}

}  // namespace fsdp::test
