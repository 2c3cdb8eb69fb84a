#include "peak_tracker.hpp"

#include <algorithm>
#include <string>

#include "checked_int.hpp"

namespace fsdp::solver::detail {

PeakTracker::PeakTracker(const StepModel& model, const std::vector<int>& choice)
    : model_(model), choice_(choice), n_(static_cast<int>(choice.size())) {
  while (size_ < 2 * n_) {
    size_ *= 2;
  }
  high_.assign(2 * static_cast<std::size_t>(size_), kNoStep);
  pending_.assign(2 * static_cast<std::size_t>(size_), 0);
  for (int v = 0; v < n_; ++v) {
    const NodeFacts& f = model.facts(v);
    if (f.computed) {
      high_[static_cast<std::size_t>(size_ + v)] = 0;
    }
    if (f.has_backward) {
      high_[static_cast<std::size_t>(size_ + n_ + v)] = 0;
    }
  }
  for (int i = size_ - 1; i >= 1; --i) {
    high_[static_cast<std::size_t>(i)] = std::max(high_[static_cast<std::size_t>(2 * i)],
                                                  high_[static_cast<std::size_t>(2 * i + 1)]);
  }
  for (int v = 0; v < n_; ++v) {
    add_node(v, +1, false);
  }
}

void PeakTracker::move(int v, int s) {
  add_node(v, -1, true);
  choice_[static_cast<std::size_t>(v)] = s;
  add_node(v, +1, true);
}

void PeakTracker::add_node(int v, int sign, bool edges_out) {
  const NodeFacts& f = model_.facts(v);
  const int s = choice_[static_cast<std::size_t>(v)];
  add_to(state_, sign * model_.state_bytes(v, s),
         [] { return std::string("the persistent memory of a plan"); });
  const std::int64_t activation = sign * model_.activation_bytes(v, s);
  if (activation != 0) {
    if (model_.options().training() && f.first_reader >= 0) {
      add(v, n_ - 1, activation);
      add(n_ + f.first_reader, 2 * n_ - 1, activation);
    } else {
      add(v, std::max(v, f.last_consumer), activation);
    }
  }
  const std::int64_t gradient = sign * model_.gradient_bytes(v, s);
  if (gradient != 0) {
    add(n_ + v, n_ + f.last_consumer, gradient);
  }
  const Node& node = model_.graph().node(v);
  for (std::size_t k = 0; k < node.inputs.size(); ++k) {
    add_edge(v, static_cast<int>(k), sign);
  }
  if (!edges_out) {
    return;
  }
  for (const int c : model_.graph().consumers(v)) {
    const Node& consumer = model_.graph().node(c);
    for (std::size_t k = 0; k < consumer.inputs.size(); ++k) {
      if (consumer.inputs[k] == v) {
        add_edge(c, static_cast<int>(k), sign);
      }
    }
  }
}

void PeakTracker::add_edge(int t, int k, int sign) {
  const int p = model_.graph().node(t).inputs[static_cast<std::size_t>(k)];
  const int sp = choice_[static_cast<std::size_t>(p)];
  const int st = choice_[static_cast<std::size_t>(t)];
  const std::int64_t forward = model_.forward_buffer_bytes(t, k, sp, st);
  if (forward != 0) {
    add(t, t, sign * forward);
  }
  const std::int64_t backward =
      model_.facts(t).has_backward ? model_.backward_buffer_bytes(t, k, sp, st) : 0;
  if (backward != 0) {
    add(n_ + t, n_ + t, sign * backward);
  }
}

void PeakTracker::add(int from, int to, std::int64_t bytes) {
  // Bottom up over the tree nodes that cover [from, to] exactly, then their ancestors again
  // from both ends (the iterative form of a segment tree with range additions).
  const auto what = [] { return std::string("the memory of a step"); };
  const auto apply = [&](int at) {
    const std::size_t a = static_cast<std::size_t>(at);
    add_to(high_[a], bytes, what);
    add_to(pending_[a], bytes, what);
  };
  int low = from + size_, high = to + size_ + 1;
  const int first = low, last = high - 1;
  for (; low < high; low /= 2, high /= 2) {
    if (low % 2 == 1) {
      apply(low++);
    }
    if (high % 2 == 1) {
      apply(--high);
    }
  }
  for (const int leaf : {first, last}) {
    for (int at = leaf / 2; at >= 1; at /= 2) {
      const std::size_t a = static_cast<std::size_t>(at);
      high_[a] = pending_[a] + std::max(high_[2 * a], high_[2 * a + 1]);
    }
  }
}

}  // namespace fsdp::solver::detail
