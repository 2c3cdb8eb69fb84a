#include "fsdp/solver/simple_solver.hpp"

#include <algorithm>
#include <deque>
#include <limits>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// How far around a cycle-closing node the refinement re-optimizes. 4 edges finds the optimum on
// every reference and stress graph (docs/solver.md); 6 did no better and cost twice the time.
constexpr int kConditioningRadius = 4;

// The state the phases share: every node's strategies, the current choice, and which choices are
// decided (the others are not yet looked at and cost nothing to their neighbours).
class Assignment {
 public:
  Assignment(const Graph& graph, const Machine& machine)
      : graph_(graph),
        machine_(machine),
        strategies_(all_strategies(graph, machine.devices)),
        choice_(graph.size(), 0),
        decided_(graph.size(), 0),
        changed_at_(graph.size(), 0) {}

  const std::vector<std::vector<Strategy>>& strategies() const { return strategies_; }
  const std::vector<int>& choice() const { return choice_; }
  bool decided(int v) const { return decided_[static_cast<std::size_t>(v)] != 0; }
  void decide(int v, int s) {
    const std::size_t vu = static_cast<std::size_t>(v);
    if (choice_[vu] != s) {
      changed_at_[vu] = ++changes_;
    }
    choice_[vu] = s;
    decided_[vu] = 1;
  }
  // A counter of strategy changes, and when node v last changed: lets the refinement skip work
  // whose inputs have not moved.
  std::uint64_t changes() const { return changes_; }
  std::uint64_t changed_at(int v) const { return changed_at_[static_cast<std::size_t>(v)]; }
  const Strategy& strategy(int v, int s) const {
    return strategies_[static_cast<std::size_t>(v)][static_cast<std::size_t>(s)];
  }
  int count(int v) const {
    return static_cast<int>(strategies_[static_cast<std::size_t>(v)].size());
  }

  double edge(int producer, const ShardingSpec& from, const ShardingSpec& to) const {
    return reshard_cost(from, to, graph_.node(producer).bytes(), machine_).seconds;
  }

  // Node v's compute under strategy s plus the conversions on its edges to decided neighbours.
  // `conflict` is set when two decided neighbours cannot both be served for free.
  double local_cost(int v, int s, double extra = 0) const {
    const Strategy& mine = strategy(v, s);
    double cost = mine.flops_per_device / machine_.flops_per_s + extra;
    const Node& node = graph_.node(v);
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      if (decided(p)) {
        cost += edge(p, strategy(p, choice_[static_cast<std::size_t>(p)]).output, mine.inputs[k]);
      }
    }
    for (int c : graph_.consumers(v)) {
      if (!decided(c)) {
        continue;
      }
      const Node& user = graph_.node(c);
      const Strategy& theirs = strategy(c, choice_[static_cast<std::size_t>(c)]);
      for (std::size_t k = 0; k < user.inputs.size(); ++k) {
        if (user.inputs[k] == v) {
          cost += edge(v, mine.output, theirs.inputs[k]);
        }
      }
    }
    return cost;
  }

  // The strategy of v with the lowest local cost (the first of equals, so the result depends on
  // the graph only).
  int best(int v, double* best_cost = nullptr) const {
    int best_s = 0;
    double lowest = kInfinity;
    for (int s = 0; s < count(v); ++s) {
      const double cost = local_cost(v, s);
      if (cost < lowest) {
        lowest = cost;
        best_s = s;
      }
    }
    if (best_cost != nullptr) {
      *best_cost = lowest;
    }
    return best_s;
  }

  // The conversions on the edges between u (strategy su) and v (strategy sv), either direction.
  double pair_cost(int u, int su, int v, int sv) const {
    const Node& node_v = graph_.node(v);
    double cost = 0;
    bool v_uses_u = false;
    for (std::size_t k = 0; k < node_v.inputs.size(); ++k) {
      if (node_v.inputs[k] == u) {
        v_uses_u = true;
        cost += edge(u, strategy(u, su).output, strategy(v, sv).inputs[k]);
      }
    }
    if (v_uses_u) {
      return cost;
    }
    const Node& node_u = graph_.node(u);
    for (std::size_t k = 0; k < node_u.inputs.size(); ++k) {
      if (node_u.inputs[k] == v) {
        cost += edge(v, strategy(v, sv).output, strategy(u, su).inputs[k]);
      }
    }
    return cost;
  }

  double compute_cost(int v, int s) const {
    return strategy(v, s).flops_per_device / machine_.flops_per_s;
  }

  // True when the decided neighbours of v cannot all be served without a conversion.
  bool conflicted(int v, int s) const {
    const Strategy& mine = strategy(v, s);
    return local_cost(v, s) > mine.flops_per_device / machine_.flops_per_s;
  }

 private:
  const Graph& graph_;
  const Machine& machine_;
  std::vector<std::vector<Strategy>> strategies_;
  std::vector<int> choice_;
  std::vector<char> decided_;
  std::vector<std::uint64_t> changed_at_;
  std::uint64_t changes_ = 0;
};

// Exact re-optimization of tree-shaped parts of the graph with the rest held fixed.
//
// A block grows over candidate nodes in a given order while it stays a forest (a node joins only
// if its neighbours already in the block lie in different trees); min-sum dynamic programming
// over each tree then finds the best strategies of all its nodes at once. This moves whole chains
// and stars together, which single-node switches cannot (a chain that is cheaper replicated than
// sharded is dearer while only one of its nodes has switched). A node left out because it closes
// a cycle is then conditioned on: each of its strategies is tried with the forest around it
// (within `radius` edges) re-optimized, so cycles (residuals, Q/K/V branches) can flip too. The
// current choice is always among those considered, so the total never rises.
class ForestRefiner {
 public:
  ForestRefiner(const Graph& graph, Assignment& assignment)
      : a_(assignment),
        links_(graph.size()),
        compute_(graph.size()),
        in_block_(graph.size(), 0),
        seen_(graph.size(), 0),
        union_parent_(graph.size(), 0),
        tree_parent_(graph.size(), -1),
        parent_link_(graph.size(), -1),
        conditioned_at_(graph.size(), 0),
        table_(graph.size()),
        pick_(graph.size()) {
    // The cost of every edge for every pair of strategies, computed once: the refinement looks
    // them up many times.
    for (std::size_t v = 0; v < graph.size(); ++v) {
      const int iv = static_cast<int>(v);
      for (int s = 0; s < a_.count(iv); ++s) {
        compute_[v].push_back(a_.compute_cost(iv, s));
      }
      for (int c : graph.consumers(iv)) {
        const std::size_t cu = static_cast<std::size_t>(c);
        const std::size_t mine = pair_.size();
        const std::size_t theirs = mine + static_cast<std::size_t>(a_.count(iv) * a_.count(c));
        pair_.resize(theirs + static_cast<std::size_t>(a_.count(iv) * a_.count(c)));
        for (int sv = 0; sv < a_.count(iv); ++sv) {
          for (int sc = 0; sc < a_.count(c); ++sc) {
            const double cost = a_.pair_cost(iv, sv, c, sc);
            pair_[mine + static_cast<std::size_t>(sv * a_.count(c) + sc)] = cost;
            pair_[theirs + static_cast<std::size_t>(sc * a_.count(iv) + sv)] = cost;
          }
        }
        links_[v].push_back(Link{c, static_cast<int>(links_[cu].size()), mine});
        links_[cu].push_back(Link{iv, static_cast<int>(links_[v].size()) - 1, theirs});
      }
    }
  }

  // One forest over the whole graph in `order`, then conditioning on each node it left out.
  void run(const std::vector<int>& order, int radius) {
    std::vector<int> excluded;
    grow(order, &excluded);
    solve(true);
    clear();
    for (int e : excluded) {
      condition(e, radius);
    }
  }

 private:
  int find(int v) {
    while (union_parent_[static_cast<std::size_t>(v)] != v) {
      const int up = union_parent_[static_cast<std::size_t>(v)];
      union_parent_[static_cast<std::size_t>(v)] = union_parent_[static_cast<std::size_t>(up)];
      v = up;
    }
    return v;
  }

  void grow(const std::vector<int>& candidates, std::vector<int>* excluded) {
    std::vector<int> roots;
    for (int v : candidates) {
      roots.clear();
      bool joins = true;
      for (const Link& link : links_[static_cast<std::size_t>(v)]) {
        if (!in_block_[static_cast<std::size_t>(link.other)]) {
          continue;
        }
        const int r = find(link.other);
        if (std::find(roots.begin(), roots.end(), r) != roots.end()) {
          joins = false;  // two neighbours in one tree: v would close a cycle
          break;
        }
        roots.push_back(r);
      }
      if (!joins) {
        if (excluded != nullptr) {
          excluded->push_back(v);
        }
        continue;
      }
      in_block_[static_cast<std::size_t>(v)] = 1;
      union_parent_[static_cast<std::size_t>(v)] = v;
      for (int r : roots) {
        union_parent_[static_cast<std::size_t>(r)] = v;
      }
      block_.push_back(v);
    }
    // Root each tree at its first node and list the block parents-first.
    listing_.clear();
    for (int start : block_) {
      if (seen_[static_cast<std::size_t>(start)]) {
        continue;
      }
      seen_[static_cast<std::size_t>(start)] = 1;
      std::size_t head = listing_.size();
      listing_.push_back(start);
      while (head < listing_.size()) {
        const int v = listing_[head++];
        for (const Link& link : links_[static_cast<std::size_t>(v)]) {
          const int u = link.other;
          if (in_block_[static_cast<std::size_t>(u)] && !seen_[static_cast<std::size_t>(u)]) {
            seen_[static_cast<std::size_t>(u)] = 1;
            tree_parent_[static_cast<std::size_t>(u)] = v;
            parent_link_[static_cast<std::size_t>(u)] = link.reverse;
            listing_.push_back(u);
          }
        }
      }
    }
  }

  void clear() {
    for (int v : block_) {
      in_block_[static_cast<std::size_t>(v)] = 0;
      seen_[static_cast<std::size_t>(v)] = 0;
      tree_parent_[static_cast<std::size_t>(v)] = -1;
      parent_link_[static_cast<std::size_t>(v)] = -1;
    }
    block_.clear();
    listing_.clear();
  }

  // The lowest cost of every term touching the block (compute of its nodes, their edges), with
  // the nodes outside at their current strategies; with apply, the block takes those strategies.
  double solve(bool apply) {
    fill_tables();
    return propagate(apply);
  }

  void fill_tables() {
    for (int v : listing_) {
      auto& t = table_[static_cast<std::size_t>(v)];
      t.resize(static_cast<std::size_t>(a_.count(v)));
      for (int s = 0; s < a_.count(v); ++s) {
        t[static_cast<std::size_t>(s)] = outside_cost(v, s);
      }
    }
  }

  // Min-sum messages from the leaves up (they add into the parents' tables), then, with apply,
  // the choices from the roots down.
  double propagate(bool apply) {
    double total = 0;
    for (std::size_t i = listing_.size(); i-- > 0;) {
      const int c = listing_[i];
      const int p = tree_parent_[static_cast<std::size_t>(c)];
      const auto& tc = table_[static_cast<std::size_t>(c)];
      const int current = a_.choice()[static_cast<std::size_t>(c)];
      if (p < 0) {
        double lowest = tc[static_cast<std::size_t>(current)];
        for (double cost : tc) {
          lowest = std::min(lowest, cost);
        }
        total += lowest;
        continue;
      }
      auto& pick = pick_[static_cast<std::size_t>(c)];
      const int np = a_.count(p);
      pick.assign(static_cast<std::size_t>(np), current);
      const double* pair =
          &pair_[links_[static_cast<std::size_t>(c)]
                       [static_cast<std::size_t>(parent_link_[static_cast<std::size_t>(c)])]
                           .offset];
      for (int sp = 0; sp < np; ++sp) {
        double lowest = tc[static_cast<std::size_t>(current)] +
                        pair[static_cast<std::size_t>(current * np + sp)];
        for (int sc = 0; sc < a_.count(c); ++sc) {
          const double cost =
              tc[static_cast<std::size_t>(sc)] + pair[static_cast<std::size_t>(sc * np + sp)];
          if (cost < lowest) {
            lowest = cost;
            pick[static_cast<std::size_t>(sp)] = sc;
          }
        }
        table_[static_cast<std::size_t>(p)][static_cast<std::size_t>(sp)] += lowest;
      }
    }
    if (apply) {
      for (int v : listing_) {
        const int p = tree_parent_[static_cast<std::size_t>(v)];
        if (p >= 0) {
          a_.decide(v, pick_[static_cast<std::size_t>(v)]
                            [static_cast<std::size_t>(a_.choice()[static_cast<std::size_t>(p)])]);
          continue;
        }
        const auto& t = table_[static_cast<std::size_t>(v)];
        int arg = a_.choice()[static_cast<std::size_t>(v)];
        for (int s = 0; s < a_.count(v); ++s) {
          if (t[static_cast<std::size_t>(s)] < t[static_cast<std::size_t>(arg)]) {
            arg = s;
          }
        }
        a_.decide(v, arg);
      }
    }
    return total;
  }

  // Node v's compute under s plus its edges to nodes outside the block at their current choice.
  double outside_cost(int v, int s) const {
    const std::size_t vu = static_cast<std::size_t>(v);
    double cost = compute_[vu][static_cast<std::size_t>(s)];
    for (const Link& link : links_[vu]) {
      if (!in_block_[static_cast<std::size_t>(link.other)]) {
        cost += pair_[link.offset +
                      static_cast<std::size_t>(s * a_.count(link.other) +
                                               a_.choice()[static_cast<std::size_t>(link.other)])];
      }
    }
    return cost;
  }

  // Tries every strategy of e with the forest grown around it re-optimized; keeps the best.
  void condition(int e, int radius) {
    ball_.clear();
    seen_[static_cast<std::size_t>(e)] = 1;
    ball_.push_back(e);
    std::size_t head = 0, level_end = 1;
    for (int level = 0; level < radius && head < ball_.size(); ++level) {
      for (; head < level_end; ++head) {
        for (const Link& link : links_[static_cast<std::size_t>(ball_[head])]) {
          const int u = link.other;
          if (!seen_[static_cast<std::size_t>(u)]) {
            seen_[static_cast<std::size_t>(u)] = 1;
            ball_.push_back(u);
          }
        }
      }
      level_end = ball_.size();
    }
    // Nothing in the ball or on its rim changed since e was last conditioned: the answer stands.
    std::uint64_t latest = 0;
    for (int v : ball_) {
      seen_[static_cast<std::size_t>(v)] = 0;
      latest = std::max(latest, a_.changed_at(v));
      for (const Link& link : links_[static_cast<std::size_t>(v)]) {
        latest = std::max(latest, a_.changed_at(link.other));
      }
    }
    auto& conditioned = conditioned_at_[static_cast<std::size_t>(e)];
    if (conditioned > 0 && latest <= conditioned) {
      return;
    }
    const std::vector<int> candidates(ball_.begin() + 1, ball_.end());
    grow(candidates, nullptr);
    // The tables with e at its current strategy, once; each trial only shifts the entries of
    // e's neighbours by the difference its strategy makes on their edge.
    const int current = a_.choice()[static_cast<std::size_t>(e)];
    const int ne = a_.count(e);
    fill_tables();
    base_.resize(listing_.size());
    for (std::size_t i = 0; i < listing_.size(); ++i) {
      base_[i] = table_[static_cast<std::size_t>(listing_[i])];
    }
    int best = current;
    double lowest = std::numeric_limits<double>::infinity();
    for (int s = 0; s < ne; ++s) {
      for (std::size_t i = 0; i < listing_.size(); ++i) {
        table_[static_cast<std::size_t>(listing_[i])] = base_[i];
      }
      if (s != current) {
        for (const Link& link : links_[static_cast<std::size_t>(e)]) {
          const int v = link.other;
          if (!in_block_[static_cast<std::size_t>(v)]) {
            continue;
          }
          const double* pair =
              &pair_[links_[static_cast<std::size_t>(v)][static_cast<std::size_t>(link.reverse)]
                         .offset];
          auto& t = table_[static_cast<std::size_t>(v)];
          for (int sv = 0; sv < a_.count(v); ++sv) {
            t[static_cast<std::size_t>(sv)] += pair[static_cast<std::size_t>(sv * ne + s)] -
                                               pair[static_cast<std::size_t>(sv * ne + current)];
          }
        }
      }
      const double cost = propagate(false) + outside_cost(e, s);
      if (cost < lowest * (1 - 1e-12) || (s == current && cost <= lowest)) {
        lowest = cost;
        best = s;
      }
    }
    a_.decide(e, best);
    solve(true);
    clear();
    conditioned = a_.changes();  // every change so far is accounted for
  }

  // A neighbour of a node: the edge costs for (this node's strategy, the other's) are
  // pair_[offset + mine * count(other) + theirs]; reverse is this node's place in the other's list.
  struct Link {
    int other;
    int reverse;
    std::size_t offset;
  };

  Assignment& a_;
  std::vector<std::vector<Link>> links_;
  std::vector<double> pair_;
  std::vector<std::vector<double>> compute_;
  std::vector<char> in_block_;
  std::vector<char> seen_;
  std::vector<int> union_parent_;
  std::vector<int> tree_parent_;
  std::vector<int> parent_link_;  // the parent's place in the node's links
  std::vector<std::uint64_t> conditioned_at_;
  std::vector<std::vector<double>> table_;
  std::vector<std::vector<double>> base_;  // condition(): tables before e's trials
  std::vector<std::vector<int>> pick_;
  std::vector<int> block_;
  std::vector<int> listing_;
  std::vector<int> ball_;
};

bool is_matmul(const Node& node) {
  return node.kind == OpKind::matmul || node.kind == OpKind::batched_matmul;
}

}  // namespace

SimpleSolver::SimpleSolver(Machine machine) : machine_(machine) {
  machine_.validate();
}

std::vector<SeedCandidate> SimpleSolver::seed_candidates(const Graph& graph, int index) const {
  const Node& node = graph.node(index);
  require(is_matmul(node), "seed_candidates: node '" + node.id + "' is a " + node.op +
                               ", not a matmul or batched_matmul");
  std::vector<SeedCandidate> candidates;
  const std::vector<Strategy> strategies = strategies_for(graph, index, machine_.devices);
  for (const StrategyRole role : {StrategyRole::split_batch, StrategyRole::split_contracting,
                                  StrategyRole::split_output_features}) {
    for (const Strategy& s : strategies) {
      if (s.role != role) {
        continue;
      }
      SeedCandidate candidate;
      candidate.strategy = s;
      candidate.compute_s = s.flops_per_device / machine_.flops_per_s;
      if (s.output.is_partial()) {
        candidate.communication =
            collective_cost(LayoutCollective::all_reduce, node.bytes(), machine_);
      }
      candidates.push_back(candidate);
    }
  }
  if (candidates.empty()) {
    SeedCandidate candidate;
    candidate.strategy = strategies.back();  // replicated (or the pinned one)
    candidate.compute_s = candidate.strategy.flops_per_device / machine_.flops_per_s;
    candidates.push_back(candidate);
  }
  return candidates;
}

Solution SimpleSolver::solve(const Graph& graph) {
  stats_ = SolverStats{};
  Assignment a(graph, machine_);
  const int count = static_cast<int>(graph.size());
  std::deque<int> queue;
  const auto push_neighbours = [&](int v) {
    for (int p : graph.node(v).inputs) {
      if (!a.decided(p)) {
        queue.push_back(p);
      }
    }
    for (int c : graph.consumers(v)) {
      if (!a.decided(c)) {
        queue.push_back(c);
      }
    }
  };

  // Seed: each matmul, in topological order, takes its cheapest candidate; a contraction split is
  // charged the all-reduce its partial result needs, and every candidate the conversions to
  // neighbours decided before it.
  for (int v = 0; v < count; ++v) {
    if (!is_matmul(graph.node(v))) {
      continue;
    }
    int chosen = -1;
    double lowest = kInfinity;
    const auto& strategies = a.strategies()[static_cast<std::size_t>(v)];
    for (const StrategyRole role : {StrategyRole::split_batch, StrategyRole::split_contracting,
                                    StrategyRole::split_output_features}) {
      for (int s = 0; s < a.count(v); ++s) {
        if (strategies[static_cast<std::size_t>(s)].role != role) {
          continue;
        }
        const double all_reduce =
            strategies[static_cast<std::size_t>(s)].output.is_partial()
                ? collective_cost(LayoutCollective::all_reduce, graph.node(v).bytes(), machine_)
                      .seconds
                : 0.0;
        const double cost = a.local_cost(v, s, all_reduce);
        if (cost < lowest) {
          lowest = cost;
          chosen = s;
        }
      }
    }
    if (chosen < 0) {
      chosen = a.best(v);
    }
    a.decide(v, chosen);
    ++stats_.seeded;
    push_neighbours(v);
  }

  // Propagate both ways: a node next to decided ones takes the strategy cheapest against them.
  const auto drain = [&] {
    while (!queue.empty()) {
      const int v = queue.front();
      queue.pop_front();
      if (a.decided(v)) {
        continue;
      }
      const int s = a.best(v);
      if (a.conflicted(v, s)) {
        ++stats_.conflicts;
      }
      a.decide(v, s);
      ++stats_.propagated;
      push_neighbours(v);
    }
  };
  drain();
  // Parts of the graph no matmul reaches start from their first node.
  for (int v = 0; v < count; ++v) {
    if (!a.decided(v)) {
      queue.push_back(v);
      drain();
    }
  }

  // Refine (conflict resolution on the whole graph): exact re-optimization of tree-shaped
  // blocks, grown in topological then in reverse order so that edges left out of one block are
  // inside the next, until a round lowers the total no more.
  ForestRefiner forest(graph, a);
  std::vector<int> forward(static_cast<std::size_t>(count)), backward;
  for (int v = 0; v < count; ++v) {
    forward[static_cast<std::size_t>(v)] = v;
  }
  backward.assign(forward.rbegin(), forward.rend());
  const auto refine = [&] {
    double total = total_cost(graph, a.strategies(), a.choice(), machine_);
    int rounds_without_gain = 0;
    for (int round = 0; round < 50 && rounds_without_gain < 2; ++round) {
      ++stats_.refinement_sweeps;
      const std::vector<int> before = a.choice();
      forest.run(round % 2 == 0 ? forward : backward, kConditioningRadius);
      const double now = total_cost(graph, a.strategies(), a.choice(), machine_);
      for (int v = 0; v < count; ++v) {
        stats_.changed_in_refinement +=
            before[static_cast<std::size_t>(v)] != a.choice()[static_cast<std::size_t>(v)];
      }
      rounds_without_gain = now < total * (1 - 1e-12) ? 0 : rounds_without_gain + 1;
      total = now;
    }
    return total;
  };
  const double seeded_total = refine();

  // When collectives are dear next to the compute they save (few tokens, a slow network), the
  // seeds can lead into a plan whose every improvement needs many nodes to move together. A
  // second start from the all-replicated plan, refined the same way, catches these; it is
  // skipped when the seeded plan already costs no more than its bound (every node at its
  // cheapest compute, no communication at all), which no plan can beat.
  double bound = 0;
  for (int v = 0; v < count; ++v) {
    double cheapest = kInfinity;
    for (int s = 0; s < a.count(v); ++s) {
      cheapest = std::min(cheapest, a.compute_cost(v, s));
    }
    bound += cheapest;
  }
  if (seeded_total > bound * (1 + 1e-9)) {
    ++stats_.restarts;
    const std::vector<int> seeded = a.choice();
    for (int v = 0; v < count; ++v) {
      a.decide(v, a.count(v) - 1);  // replicated (the last strategy), or the pinned one
    }
    if (refine() >= seeded_total) {
      for (int v = 0; v < count; ++v) {
        a.decide(v, seeded[static_cast<std::size_t>(v)]);
      }
    }
  }
  return evaluate(graph, a.strategies(), a.choice(), machine_, "simple");
}

}  // namespace fsdp::solver
