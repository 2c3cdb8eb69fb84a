// A small MLP written by hand on plain arrays: the same arithmetic serves the unsharded reference
// and the sharded run, so any difference between them comes from sharding alone.
// Layers 5 -> 7 -> 3 -> 2 (tanh between), the last scaled by an always-gathered gain:
//   out = gain * (W2 tanh(W1 tanh(W0 x + b0) + b1) + b2),  loss = mean_b 0.5 |out_b - y_b|^2.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/shard/parameter_info.hpp"

namespace fsdp::test {

struct LayerShape {
  int in, out;
};
inline const std::vector<LayerShape>& tiny_mlp_layers() {
  static const std::vector<LayerShape> layers = {{5, 7}, {7, 3}, {3, 2}};
  return layers;
}
constexpr int kBatch = 12;  // divisible by 1, 2, 3 and 4 ranks

template <class T>
std::vector<ParameterInfo> tiny_mlp_parameters() {
  std::vector<ParameterInfo> parameters;
  const auto& layers = tiny_mlp_layers();
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const std::string layer = "l" + std::to_string(k);
    parameters.push_back(
        {layer + ".w", {layers[k].out, layers[k].in}, dtype_of<T>(), layer, false});
    parameters.push_back({layer + ".b", {layers[k].out}, dtype_of<T>(), layer, false});
  }
  parameters.push_back({"l2.gain", {2}, dtype_of<T>(), "l2", true});
  return parameters;
}

// Deterministic initial values, different per parameter and element.
template <class T>
std::vector<T> initial_values(const ParameterInfo& p) {
  std::vector<T> values(static_cast<std::size_t>(p.numel()));
  const double salt = static_cast<double>(p.name.size() * 7 + p.name.back());
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<T>(p.name == "l2.gain" ? 1.0 + 0.1 * static_cast<double>(i)
                                                   : 0.5 * std::sin(0.37 * i + salt));
  }
  return values;
}

// Sample b of the synthetic data set: inputs and targets.
inline double input(int b, int i) {
  return std::cos(0.3 * b + 0.7 * i);
}
inline double target(int b, int j) {
  return 0.3 * std::sin(0.5 * b - j);
}

// Parameters and their gradients by name, as plain arrays.
template <class T>
using Arrays = std::map<std::string, const T*>;
template <class T>
using MutableArrays = std::map<std::string, T*>;

// Forward and backward over samples [first, first + count), accumulating into grads the gradient
// of (sum over those samples of 0.5 |out - y|^2) / divisor. Returns that partial loss.
template <class T>
double forward_backward(const Arrays<T>& params, const MutableArrays<T>& grads, int first,
                        int count, double divisor) {
  const auto& layers = tiny_mlp_layers();
  const int depth = static_cast<int>(layers.size());
  double loss = 0.0;
  for (int b = first; b < first + count; ++b) {
    std::vector<std::vector<T>> h(depth + 1);  // h[k]: input of layer k
    std::vector<std::vector<T>> z(depth);
    for (int i = 0; i < layers[0].in; ++i) {
      h[0].push_back(static_cast<T>(input(b, i)));
    }
    for (int k = 0; k < depth; ++k) {
      const std::string l = "l" + std::to_string(k);
      const T* w = params.at(l + ".w");
      const T* bias = params.at(l + ".b");
      z[k].assign(layers[k].out, T(0));
      for (int o = 0; o < layers[k].out; ++o) {
        T acc = bias[o];
        for (int i = 0; i < layers[k].in; ++i) {
          acc += w[o * layers[k].in + i] * h[k][i];
        }
        z[k][o] = acc;
        h[k + 1].push_back(k + 1 < depth ? std::tanh(acc) : acc * params.at("l2.gain")[o]);
      }
    }
    // d loss / d out
    std::vector<T> delta(layers[depth - 1].out);
    for (int j = 0; j < layers[depth - 1].out; ++j) {
      const T diff = h[depth][j] - static_cast<T>(target(b, j));
      loss += 0.5 * static_cast<double>(diff * diff);
      grads.at("l2.gain")[j] += static_cast<T>(diff * z[depth - 1][j] / divisor);
      delta[j] = diff * params.at("l2.gain")[j];  // d loss / d z of the last layer
    }
    for (int k = depth - 1; k >= 0; --k) {
      const std::string l = "l" + std::to_string(k);
      const T* w = params.at(l + ".w");
      T* gw = grads.at(l + ".w");
      T* gb = grads.at(l + ".b");
      std::vector<T> below(layers[k].in, T(0));
      for (int o = 0; o < layers[k].out; ++o) {
        gb[o] += static_cast<T>(delta[o] / divisor);
        for (int i = 0; i < layers[k].in; ++i) {
          gw[o * layers[k].in + i] += static_cast<T>(delta[o] * h[k][i] / divisor);
          below[i] += w[o * layers[k].in + i] * delta[o];
        }
      }
      if (k > 0) {
        for (int i = 0; i < layers[k].in; ++i) {
          below[i] *= T(1) - h[k][i] * h[k][i];  // tanh'
        }
      }
      delta = below;
    }
  }
  return loss / divisor;
}

// The same network one layer at a time, for code that holds only one layer's parameters at once
// (scopes): activations are kept here between the forward and the backward pass.
template <class T>
class LayeredMlp {
 public:
  // Samples [first, first + count); gradients are of the summed loss divided by divisor.
  LayeredMlp(int first, int count, double divisor)
      : first_(first), count_(count), divisor_(divisor), h_(tiny_mlp_layers().size() + 1) {
    for (int b = 0; b < count_; ++b) {
      for (int i = 0; i < tiny_mlp_layers()[0].in; ++i) {
        h_[0].push_back(static_cast<T>(input(first_ + b, i)));
      }
    }
    z_.resize(tiny_mlp_layers().size());
  }

  // gain: the last layer's gain (nullptr for the others).
  void forward(int k, const T* w, const T* bias, const T* gain) {
    const LayerShape s = tiny_mlp_layers()[k];
    const bool last = k + 1 == static_cast<int>(tiny_mlp_layers().size());
    z_[k].assign(static_cast<std::size_t>(count_ * s.out), T(0));
    h_[k + 1].assign(static_cast<std::size_t>(count_ * s.out), T(0));
    for (int b = 0; b < count_; ++b) {
      for (int o = 0; o < s.out; ++o) {
        T acc = bias[o];
        for (int i = 0; i < s.in; ++i) {
          acc += w[o * s.in + i] * h_[k][b * s.in + i];
        }
        z_[k][b * s.out + o] = acc;
        h_[k + 1][b * s.out + o] = last ? acc * gain[o] : std::tanh(acc);
      }
    }
  }

  // Accumulates the layer's gradients; the last layer's call (k = depth - 1) starts from the
  // loss. Returns the partial loss on that call, 0 otherwise.
  double backward(int k, const T* w, const T* gain, T* grad_w, T* grad_bias, T* grad_gain) {
    const LayerShape s = tiny_mlp_layers()[k];
    const int depth = static_cast<int>(tiny_mlp_layers().size());
    double loss = 0.0;
    if (k == depth - 1) {
      delta_.assign(static_cast<std::size_t>(count_ * s.out), T(0));
      for (int b = 0; b < count_; ++b) {
        for (int j = 0; j < s.out; ++j) {
          const T diff = h_[depth][b * s.out + j] - static_cast<T>(target(first_ + b, j));
          loss += 0.5 * static_cast<double>(diff * diff);
          grad_gain[j] += static_cast<T>(diff * z_[k][b * s.out + j] / divisor_);
          delta_[b * s.out + j] = diff * gain[j];
        }
      }
    }
    std::vector<T> below(static_cast<std::size_t>(count_ * s.in), T(0));
    for (int b = 0; b < count_; ++b) {
      for (int o = 0; o < s.out; ++o) {
        const T d = delta_[b * s.out + o];
        grad_bias[o] += static_cast<T>(d / divisor_);
        for (int i = 0; i < s.in; ++i) {
          grad_w[o * s.in + i] += static_cast<T>(d * h_[k][b * s.in + i] / divisor_);
          below[b * s.in + i] += w[o * s.in + i] * d;
        }
      }
    }
    if (k > 0) {
      for (std::size_t i = 0; i < below.size(); ++i) {
        below[i] *= T(1) - h_[k][i] * h_[k][i];
      }
    }
    delta_ = below;
    return loss / divisor_;
  }

 private:
  int first_, count_;
  double divisor_;
  std::vector<std::vector<T>> h_, z_;
  std::vector<T> delta_;
};

}  // namespace fsdp::test
