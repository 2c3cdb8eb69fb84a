#include "fsdp/solver/simple_solver.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "checked_int.hpp"
#include "fsdp/core/error.hpp"
#include "pareto_search.hpp"
#include "peak_tracker.hpp"
#include "step_model.hpp"

namespace fsdp::solver {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// How far around a cycle-closing node the refinement re-optimizes. 4 edges finds the optimum on
// every reference and stress graph (docs/solver.md); 6 did no better and cost twice the time.
constexpr int kConditioningRadius = 4;
// The most pairs of strategies one refinement pass over every edge may look at for conditioning
// to keep its full radius (a 2x4 transformer layer has about 20,000, a 1-D one 800).
constexpr std::int64_t kFullRadiusPairs = std::int64_t{1} << 19;
// Blocks of at least this many nodes remember the messages their children send, over edges of
// at least this many pairs of strategies, and conditioning remembers trials that look at that
// many at least: smaller ones (the balls of conditioning, 1-D meshes with about 8 strategies a
// node) cost more to remember than to compute.
constexpr std::size_t kRememberedBlock = 64;
constexpr std::size_t kRememberedPairs = 256;
// Rounds of the budget search, each a refinement under new memory weights: growth until a plan
// fits, bisections of their scale, and finer steps around the fastest plan that fits.
constexpr int kGrowthRounds = 40;
constexpr int kBisections = 6;
constexpr int kFineRounds = 6;
// The most strategy changes the final moves may cost (pairs of a node and an input each count).
constexpr std::int64_t kMostTries = std::int64_t{1} << 24;
// The most ways the recombination may extend in all, and keep at one step.
constexpr std::int64_t kRecombinationWork = std::int64_t{1} << 18;
constexpr std::size_t kRecombinationWays = std::size_t{1} << 12;
// The exact neighbourhoods: every node within this many edges of a centre gets every strategy,
// and one search may extend at most this many ways (it gives up past them).
constexpr int kNeighbourhoodRadius = 3;
constexpr std::int64_t kNeighbourhoodWork = std::int64_t{1} << 16;
// A radius whose searches were given up this many times in a row is not tried again.
constexpr int kNeighbourhoodGiveUps = 2;
// The most ways all the exact neighbourhoods of one solve may extend (about a tenth of a second).
constexpr std::int64_t kNeighbourhoodStageWork = std::int64_t{1} << 21;

// Seconds per byte held at each step of the step's memory profile, as the node and edge terms
// they become: a byte of persistent state is held at every step, a node's activation and
// gradient at the steps of their live ranges, a conversion's buffer at its consumer's forward or
// backward step. All zero: plans are weighed by their seconds alone.
struct MemoryWeights {
  bool any = false;
  double state = 0;
  std::vector<double> activation;  // per node
  std::vector<double> gradient;    // per node
  std::vector<double> forward;     // per node: its forward step
  std::vector<double> backward;    // per node: its backward step
};

// The state the phases share: every node's strategies (the step model's), the current choice,
// and which choices are decided (the others are not yet looked at and cost nothing to their
// neighbours). Costs are seconds plus, under a memory budget, the weighted bytes of the memory
// weights the budget search sets.
class Assignment {
 public:
  explicit Assignment(const detail::StepModel& model)
      : model_(model),
        graph_(model.graph()),
        choice_(graph_.size(), 0),
        decided_(graph_.size(), 0),
        changed_at_(graph_.size(), 0) {}

  const detail::StepModel& model() const { return model_; }
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
  const Strategy& strategy(int v, int s) const { return model_.strategy(v, s); }
  int count(int v) const { return model_.count(v); }

  void set_weights(MemoryWeights weights) { weights_ = std::move(weights); }
  const MemoryWeights& weights() const { return weights_; }

  // The seconds of input edge k of node t (forward conversion, and in training its backward
  // conversions), with the producer at strategy sp and t at st; under memory weights plus the
  // weighted bytes of the buffers its conversions make at t's steps.
  double edge(int t, int k, int sp, int st) const {
    const detail::EdgeTable& table = model_.edge_table(t, k);
    const std::size_t at = table.at(sp, st);
    if (!weights_.any) {
      return table.seconds[at];
    }
    const std::size_t tu = static_cast<std::size_t>(t);
    return table.seconds[at] + weights_.forward[tu] * static_cast<double>(table.forward_bytes[at]) +
           weights_.backward[tu] * static_cast<double>(table.backward_bytes[at]);
  }

  // Node v's seconds under strategy s, plus under memory weights its weighted bytes.
  double compute_cost(int v, int s) const {
    const double seconds = model_.node_seconds(v, s);
    if (!weights_.any) {
      return seconds;
    }
    const std::size_t vu = static_cast<std::size_t>(v);
    return seconds + weights_.state * static_cast<double>(model_.state_bytes(v, s)) +
           weights_.activation[vu] * static_cast<double>(model_.activation_bytes(v, s)) +
           weights_.gradient[vu] * static_cast<double>(model_.gradient_bytes(v, s));
  }

  // Node v's cost under strategy s plus the conversions on its edges to decided neighbours.
  double local_cost(int v, int s, double extra = 0) const {
    double cost = compute_cost(v, s) + extra;
    const Node& node = graph_.node(v);
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      if (decided(p)) {
        cost += edge(v, static_cast<int>(k), choice_[static_cast<std::size_t>(p)], s);
      }
    }
    for (int c : graph_.consumers(v)) {
      if (!decided(c)) {
        continue;
      }
      const Node& user = graph_.node(c);
      for (std::size_t k = 0; k < user.inputs.size(); ++k) {
        if (user.inputs[k] == v) {
          cost += edge(c, static_cast<int>(k), s, choice_[static_cast<std::size_t>(c)]);
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

  // The seconds (and weighted bytes) of the edges between u at su and v at sv.
  double pair_cost(int u, int su, int v, int sv) const {
    const int c = std::max(u, v), p = std::min(u, v);
    const int sc = c == v ? sv : su, sp = c == v ? su : sv;
    const Node& consumer = graph_.node(c);
    double cost = 0;
    for (std::size_t k = 0; k < consumer.inputs.size(); ++k) {
      if (consumer.inputs[k] == p) {
        cost += edge(c, static_cast<int>(k), sp, sc);
      }
    }
    return cost;
  }

  // True when the decided neighbours of v cannot all be served without a conversion.
  bool conflicted(int v, int s) const { return local_cost(v, s) > compute_cost(v, s); }

 private:
  const detail::StepModel& model_;
  const Graph& graph_;
  std::vector<int> choice_;
  std::vector<char> decided_;
  std::vector<std::uint64_t> changed_at_;
  std::uint64_t changes_ = 0;
  MemoryWeights weights_;
};

// Mixes a number's bits, or an address, into a hash key (FNV-1a's prime, then a shift), for the
// refinement's hash maps of answers it has computed.
void mix(std::uint64_t& key, std::uint64_t bits) {
  key = (key ^ bits) * 0x100000001b3ULL;
  key ^= key >> 29;
}
void mix(std::uint64_t& key, double x) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  mix(key, bits);
}
void mix(std::uint64_t& key, const double* address) {
  mix(key, static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(address)));
}

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
    // The edges' costs for every pair of strategies, looked up many times: one block per edge
    // table of the model (shared by the edges of identical layers) and orientation, in the
    // order [this node's strategy][the other's]; an edge of a consumer that takes the same
    // producer twice gets a block of its own, the sum of its inputs' tables.
    const detail::StepModel& model = a_.model();
    std::map<std::pair<const detail::EdgeTable*, bool>, std::size_t> shared;
    const auto block_of = [&](const std::vector<const detail::EdgeTable*>& tables,
                              bool producer_major) {
      if (tables.size() == 1) {
        const auto found = shared.find({tables[0], producer_major});
        if (found != shared.end()) {
          return found->second;
        }
      }
      PairBlock block;
      const detail::EdgeTable& first = *tables[0];
      const std::size_t size = first.seconds.size();
      block.seconds.assign(size, 0);
      block.forward_bytes.assign(size, 0);
      block.backward_bytes.assign(size, 0);
      for (int sp = 0; sp < first.producer_count; ++sp) {
        for (int sc = 0; sc < first.consumer_count; ++sc) {
          const std::size_t to = producer_major
                                     ? first.at(sp, sc)
                                     : static_cast<std::size_t>(sc) * first.producer_count + sp;
          for (const detail::EdgeTable* table : tables) {
            const std::size_t from = table->at(sp, sc);
            block.seconds[to] += table->seconds[from];
            block.forward_bytes[to] += static_cast<double>(table->forward_bytes[from]);
            block.backward_bytes[to] += static_cast<double>(table->backward_bytes[from]);
          }
        }
      }
      blocks_.push_back(std::move(block));
      if (tables.size() == 1) {
        shared.emplace(std::make_pair(tables[0], producer_major), blocks_.size() - 1);
      }
      return blocks_.size() - 1;
    };
    struct Pending {
      std::size_t node, at;  // a link, by its node and place
      std::size_t block;
    };
    std::vector<Pending> pending;
    for (std::size_t v = 0; v < graph.size(); ++v) {
      const int iv = static_cast<int>(v);
      for (int c : graph.consumers(iv)) {
        const std::size_t cu = static_cast<std::size_t>(c);
        std::vector<const detail::EdgeTable*> tables;
        const Node& consumer = graph.node(c);
        for (std::size_t k = 0; k < consumer.inputs.size(); ++k) {
          if (consumer.inputs[k] == iv) {
            tables.push_back(&model.edge_table(c, static_cast<int>(k)));
          }
        }
        pending.push_back({v, links_[v].size(), block_of(tables, true)});
        pending.push_back({cu, links_[cu].size(), block_of(tables, false)});
        links_[v].push_back(Link{c, static_cast<int>(links_[cu].size()), c});
        links_[cu].push_back(Link{iv, static_cast<int>(links_[v].size()) - 1, c});
      }
    }
    // Pointers last: blocks_ no longer moves.
    for (const Pending& p : pending) {
      Link& link = links_[p.node][p.at];
      const PairBlock& block = blocks_[p.block];
      link.seconds = block.seconds.data();
      link.forward_bytes = block.forward_bytes.data();
      link.backward_bytes = block.backward_bytes.data();
    }
    reweigh();
  }

  // The costs again, after the assignment's memory weights changed. Every node counts as
  // changed, so conditioning runs again everywhere.
  void reweigh() {
    for (std::size_t v = 0; v < compute_.size(); ++v) {
      const int iv = static_cast<int>(v);
      compute_[v].resize(static_cast<std::size_t>(a_.count(iv)));
      for (int s = 0; s < a_.count(iv); ++s) {
        compute_[v][static_cast<std::size_t>(s)] = a_.compute_cost(iv, s);
      }
    }
    const MemoryWeights& w = a_.weights();
    for (auto& links : links_) {
      for (Link& link : links) {
        const std::size_t c = static_cast<std::size_t>(link.consumer);
        link.forward_weight = w.any ? w.forward[c] : 0;
        link.backward_weight = w.any ? w.backward[c] : 0;
        link.weighted = link.forward_weight != 0 || link.backward_weight != 0;
      }
    }
    std::fill(conditioned_at_.begin(), conditioned_at_.end(), 0);
  }

  // The pairs of strategies one pass over every edge looks at with every strategy allowed.
  double full_pass_pairs() const {
    double pairs = 0;
    for (std::size_t v = 0; v < links_.size(); ++v) {
      for (const Link& link : links_[v]) {
        pairs += static_cast<double>(a_.count(static_cast<int>(v))) * a_.count(link.other);
      }
    }
    return pairs / 2;
  }

  // One forest over the whole graph in `order`, then conditioning on each node it left out.
  void run(const std::vector<int>& order, int radius) {
    tried_.clear();
    answers_.clear();
    trial_values_.clear();
    trial_link_values_.clear();
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

  // Every block node's outside_cost() for each of its strategies (link by link: the same sums).
  void fill_tables() {
    for (int v : listing_) {
      const std::size_t vu = static_cast<std::size_t>(v);
      auto& t = table_[vu];
      t = compute_[vu];
      for (const Link& link : links_[vu]) {
        const std::size_t other = static_cast<std::size_t>(link.other);
        if (in_block_[other]) {
          continue;
        }
        const std::size_t stride = static_cast<std::size_t>(a_.count(link.other));
        const std::size_t theirs = static_cast<std::size_t>(a_.choice()[other]);
        for (std::size_t s = 0; s < t.size(); ++s) {
          t[s] += link.cost(s * stride + theirs);
        }
      }
    }
  }

  // Min-sum messages from the leaves up (they add into the parents' tables), then, with apply,
  // the choices from the roots down.
  double propagate(bool apply) {
    double total = 0;
    const bool remember = listing_.size() >= kRememberedBlock;
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
      const Link& up = links_[static_cast<std::size_t>(c)]
                             [static_cast<std::size_t>(parent_link_[static_cast<std::size_t>(c)])];
      auto& parent = table_[static_cast<std::size_t>(p)];
      // A child whose table, current strategy and edge to its parent equal an earlier child's
      // sends the same message (the layers of a stack): it is computed once.
      const bool remembered = remember && tc.size() * parent.size() >= kRememberedPairs;
      const std::uint64_t key = remembered ? message_key(tc, current, up) : 0;
      const auto found = remembered ? sent_.find(key) : sent_.end();
      if (found != sent_.end()) {
        const Message& earlier = messages_[found->second];
        if (earlier.current == current && earlier.up->seconds == up.seconds &&
            earlier.up->forward_weight == up.forward_weight &&
            earlier.up->backward_weight == up.backward_weight &&
            table_[static_cast<std::size_t>(earlier.child)] == tc) {
          pick = pick_[static_cast<std::size_t>(earlier.child)];
          for (std::size_t sp = 0; sp < parent.size(); ++sp) {
            parent[sp] += message_values_[earlier.first + sp];
          }
          continue;
        }
      }
      pick.assign(static_cast<std::size_t>(np), current);
      // The child's strategies by their own cost: an edge never costs less than nothing, so the
      // scan stops at the first whose own cost exceeds the best total found. Ties keep the
      // current strategy, else go to the lowest index, as a scan in index order would.
      order_.resize(static_cast<std::size_t>(a_.count(c)));
      for (int sc = 0; sc < a_.count(c); ++sc) {
        order_[static_cast<std::size_t>(sc)] = sc;
      }
      std::sort(order_.begin(), order_.end(), [&](int x, int y) {
        return tc[static_cast<std::size_t>(x)] < tc[static_cast<std::size_t>(y)] ||
               (tc[static_cast<std::size_t>(x)] == tc[static_cast<std::size_t>(y)] && x < y);
      });
      for (int sp = 0; sp < np; ++sp) {
        double lowest = tc[static_cast<std::size_t>(current)] +
                        up.cost(static_cast<std::size_t>(current * np + sp));
        int& chosen = pick[static_cast<std::size_t>(sp)];
        for (const int sc : order_) {
          const double own = tc[static_cast<std::size_t>(sc)];
          if (own > lowest) {
            break;
          }
          const double cost = own + up.cost(static_cast<std::size_t>(sc * np + sp));
          if (cost < lowest || (cost == lowest && chosen != current && sc < chosen)) {
            lowest = cost;
            chosen = sc;
          }
        }
        parent[static_cast<std::size_t>(sp)] += lowest;
        if (remembered) {
          message_values_.push_back(lowest);
        }
      }
      if (!remembered) {
        continue;
      }
      if (found == sent_.end()) {
        sent_.emplace(key, messages_.size());
        messages_.push_back(Message{c, current, &up, message_values_.size() - parent.size()});
      } else {
        message_values_.resize(message_values_.size() - parent.size());  // a different key
      }
    }
    sent_.clear();
    messages_.clear();
    message_values_.clear();
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

  // A hash of the numbers and edge tables the trials of a ball depend on.
  static std::uint64_t trials_key(const std::vector<double>& values,
                                  const std::vector<const double*>& links) {
    std::uint64_t key = 0;
    for (const double x : values) {
      mix(key, x);
    }
    for (const double* link : links) {
      mix(key, link);
    }
    return key;
  }

  // Node v's compute under s plus its edges to nodes outside the block at their current choice.
  double outside_cost(int v, int s) const {
    const std::size_t vu = static_cast<std::size_t>(v);
    double cost = compute_[vu][static_cast<std::size_t>(s)];
    for (const Link& link : links_[vu]) {
      if (!in_block_[static_cast<std::size_t>(link.other)]) {
        cost += link.cost(static_cast<std::size_t>(
            s * a_.count(link.other) + a_.choice()[static_cast<std::size_t>(link.other)]));
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
    candidates_.assign(ball_.begin() + 1, ball_.end());
    grow(candidates_, nullptr);
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
    // When every tree of the block is a single node (the usual ball of radius 1), a trial's cost
    // is each node's cheapest entry, shifted: priced here without copying tables, by the same
    // sums in the same order as propagate() (so the same choices).
    const bool singletons = std::all_of(listing_.begin(), listing_.end(), [&](int v) {
      return tree_parent_[static_cast<std::size_t>(v)] < 0;
    });
    // The same trials (the same tables, links to e and current strategy) in an earlier ball of
    // the pass give the same answer (the layers of a stack): they are priced once.
    std::uint64_t key = 0;
    bool known = false;
    std::size_t entries = 0;
    for (const auto& table : base_) {
      entries += table.size();
    }
    const bool remembered =
        singletons && static_cast<std::size_t>(ne) * entries >= kRememberedPairs;
    if (singletons) {
      backs_.assign(listing_.size(), nullptr);
      for (std::size_t i = 0; i < listing_.size(); ++i) {
        for (const Link& link : links_[static_cast<std::size_t>(listing_[i])]) {
          if (link.other == e) {
            backs_[i] = &link;
          }
        }
      }
      own_.resize(static_cast<std::size_t>(ne));
      for (int s = 0; s < ne; ++s) {
        own_[static_cast<std::size_t>(s)] = outside_cost(e, s);
      }
    }
    if (remembered) {
      trial_.clear();
      trial_.push_back(static_cast<double>(current));
      trial_.push_back(static_cast<double>(ne));
      trial_.insert(trial_.end(), own_.begin(), own_.end());
      for (std::size_t i = 0; i < listing_.size(); ++i) {
        const Link* back = backs_[i];
        trial_.push_back(static_cast<double>(base_[i].size()));
        trial_.insert(trial_.end(), base_[i].begin(), base_[i].end());
        trial_.push_back(back != nullptr ? back->forward_weight : -1);
        trial_.push_back(back != nullptr ? back->backward_weight : -1);
        trial_links_.push_back(back != nullptr ? back->seconds : nullptr);
      }
      key = trials_key(trial_, trial_links_);
      const auto found = tried_.find(key);
      if (found != tried_.end()) {
        const TrialsAnswer& earlier = answers_[found->second];
        known = earlier.size == trial_.size() && earlier.links == trial_links_.size() &&
                std::equal(trial_.begin(), trial_.end(), trial_values_.begin() + earlier.first) &&
                std::equal(trial_links_.begin(), trial_links_.end(),
                           trial_link_values_.begin() + earlier.first_link);
        best = known ? earlier.best : best;
      }
      trial_links_.clear();
    }
    if (singletons && !known) {
      for (int s = 0; s < ne; ++s) {
        double total = 0;
        for (std::size_t i = listing_.size(); i-- > 0;) {
          const std::vector<double>& t = base_[i];
          double cheapest = kInfinity;
          if (s == current || backs_[i] == nullptr) {
            for (const double cost : t) {
              cheapest = std::min(cheapest, cost);
            }
          } else {
            const Link& back = *backs_[i];
            for (std::size_t sv = 0; sv < t.size(); ++sv) {
              cheapest = std::min(cheapest,
                                  t[sv] + (back.cost(sv * ne + s) - back.cost(sv * ne + current)));
            }
          }
          total += cheapest;
        }
        const double cost = total + own_[static_cast<std::size_t>(s)];
        if (cost < lowest * (1 - 1e-12) || (s == current && cost <= lowest)) {
          lowest = cost;
          best = s;
        }
      }
      if (remembered && tried_.find(key) == tried_.end()) {
        tried_.emplace(key, answers_.size());
        answers_.push_back(TrialsAnswer{trial_values_.size(), trial_.size(),
                                        trial_link_values_.size(), backs_.size(), best});
        trial_values_.insert(trial_values_.end(), trial_.begin(), trial_.end());
        for (const Link* back : backs_) {
          trial_link_values_.push_back(back != nullptr ? back->seconds : nullptr);
        }
      }
    }
    for (int s = 0; s < ne && !singletons; ++s) {
      for (std::size_t i = 0; i < listing_.size(); ++i) {
        table_[static_cast<std::size_t>(listing_[i])] = base_[i];
      }
      if (s != current) {
        for (const Link& link : links_[static_cast<std::size_t>(e)]) {
          const int v = link.other;
          if (!in_block_[static_cast<std::size_t>(v)]) {
            continue;
          }
          const Link& back =
              links_[static_cast<std::size_t>(v)][static_cast<std::size_t>(link.reverse)];
          auto& t = table_[static_cast<std::size_t>(v)];
          for (int sv = 0; sv < a_.count(v); ++sv) {
            t[static_cast<std::size_t>(sv)] +=
                back.cost(static_cast<std::size_t>(sv * ne + s)) -
                back.cost(static_cast<std::size_t>(sv * ne + current));
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

  // A neighbour of a node, with the costs of their edges for (this node's strategy, the
  // other's) at [mine * count(other) + theirs]: seconds plus the buffers' bytes at the
  // consumer's forward and backward steps, weighted by the memory weights of those steps.
  // reverse is this node's place in the other's list.
  struct Link {
    int other;
    int reverse;
    int consumer;
    const double* seconds = nullptr;
    const double* forward_bytes = nullptr;
    const double* backward_bytes = nullptr;
    double forward_weight = 0;
    double backward_weight = 0;
    bool weighted = false;  // some weight is not 0 (most steps' multipliers are)
    double cost(std::size_t at) const {
      return weighted ? seconds[at] + forward_weight * forward_bytes[at] +
                            backward_weight * backward_bytes[at]
                      : seconds[at];
    }
  };
  struct PairBlock {
    std::vector<double> seconds, forward_bytes, backward_bytes;
  };

  // A hash of what a child's message depends on: its table, its current strategy (ties), and
  // the edge to its parent (its table and weights).
  static std::uint64_t message_key(const std::vector<double>& table, int current, const Link& up) {
    std::uint64_t key = 0;
    mix(key, up.seconds);
    mix(key, static_cast<double>(current));
    mix(key, up.forward_weight);
    mix(key, up.backward_weight);
    for (const double x : table) {
      mix(key, x);
    }
    return key;
  }

  Assignment& a_;
  std::vector<std::vector<Link>> links_;
  std::vector<PairBlock> blocks_;
  std::vector<std::vector<double>> compute_;
  std::vector<char> in_block_;
  std::vector<char> seen_;
  std::vector<int> union_parent_;
  std::vector<int> tree_parent_;
  std::vector<int> parent_link_;  // the parent's place in the node's links
  std::vector<std::uint64_t> conditioned_at_;
  std::vector<std::vector<double>> table_;
  std::vector<std::vector<double>> base_;  // condition(): tables before e's trials
  std::vector<const Link*> backs_;         // condition(): each one's link to e, if any
  std::vector<std::vector<int>> pick_;
  std::vector<int> block_;
  std::vector<int> listing_;
  std::vector<int> ball_;
  std::vector<int> candidates_;  // condition(): the ball without e
  // condition(): what the trials of a ball of single nodes depend on (e's current strategy, its
  // costs, each node's table and link to e), and the answers of the run so far, by a hash of
  // that (looked up, never iterated).
  struct TrialsAnswer {
    std::size_t first, size;        // in trial_values_
    std::size_t first_link, links;  // in trial_link_values_
    int best;
  };
  std::vector<double> own_, trial_;
  std::vector<const double*> trial_links_;
  std::unordered_map<std::uint64_t, std::size_t> tried_;
  std::vector<TrialsAnswer> answers_;
  std::vector<double> trial_values_;
  std::vector<const double*> trial_link_values_;
  std::vector<int> order_;  // propagate(): a child's strategies by their own cost
  // propagate(): the messages sent so far, by a hash of their key (looked up, never iterated);
  // each message's values from `first` in message_values_.
  struct Message {
    int child;
    int current;
    const Link* up;
    std::size_t first;
  };
  std::unordered_map<std::uint64_t, std::size_t> sent_;
  std::vector<Message> messages_;
  std::vector<double> message_values_;
};

// The layout with the two mesh axes' uses swapped ([S1,R] for [S0,R], +P0 for +P1).
ShardingSpec mirrored(ShardingSpec spec) {
  std::swap(spec.axes[0], spec.axes[1]);
  return spec;
}

// The layout with the one mesh axis it uses spread over both ([R,S01] for [R,S1], +P01 for
// +P1); others as they are.
ShardingSpec widened(ShardingSpec spec) {
  if (spec.uses_axis(0) != spec.uses_axis(1)) {
    const int used = spec.uses_axis(0) ? 0 : 1;
    spec.axes[static_cast<std::size_t>(1 - used)] = spec.axes[static_cast<std::size_t>(used)];
  }
  return spec;
}

// The strategies of node v that run strategy s with every layout changed alike by `change`.
template <class Change>
std::vector<int> changed_strategies(const detail::StepModel& model, int v, int s, Change change) {
  const auto& list = model.strategies(v);
  const Strategy& x = list[static_cast<std::size_t>(s)];
  std::vector<int> found;
  for (std::size_t t = 0; t < list.size(); ++t) {
    const Strategy& y = list[t];
    bool same = change(x.output) == y.output && x.inputs.size() == y.inputs.size();
    for (std::size_t k = 0; k < x.inputs.size() && same; ++k) {
      same = change(x.inputs[k]) == y.inputs[k];
    }
    if (same && static_cast<int>(t) != s) {
      found.push_back(static_cast<int>(t));
    }
  }
  return found;
}

bool is_matmul(const Node& node) {
  return node.kind == OpKind::matmul || node.kind == OpKind::batched_matmul;
}

// The seed phase's order of a matmul's candidates: split batch, then contracting, then output
// features (along axis 0, then along axis 1 on a 2-D mesh); the replicated strategy is no
// candidate.
std::vector<int> seed_order(const std::vector<Strategy>& strategies) {
  const auto rank = [](StrategyRole role) {
    switch (role) {
      case StrategyRole::split_batch:
        return 0;
      case StrategyRole::split_contracting:
        return 1;
      case StrategyRole::split_output_features:
        return 2;
      default:
        return 3;
    }
  };
  std::vector<int> order;
  for (int s = 0; s < static_cast<int>(strategies.size()); ++s) {
    const Strategy& strategy = strategies[static_cast<std::size_t>(s)];
    if (rank(strategy.role) < 3 || rank(strategy.role_axis1) < 3) {
      order.push_back(s);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    const Strategy& a = strategies[static_cast<std::size_t>(x)];
    const Strategy& b = strategies[static_cast<std::size_t>(y)];
    return std::make_pair(rank(a.role), rank(a.role_axis1)) <
           std::make_pair(rank(b.role), rank(b.role_axis1));
  });
  return order;
}

// What a candidate's partial result costs to complete: the all-reduce of the output along the
// axes where it is a partial sum.
double completion_seconds(const Strategy& s, const Node& node, const Machine& machine) {
  return s.output.is_partial()
             ? convert(s.output, s.output.without_partial(), node.bytes(), machine).seconds()
             : 0.0;
}

// Node costs (with the Lagrangian weight) plus every edge's seconds: what the refinement lowers.
double surrogate_total(const Assignment& a) {
  const Graph& graph = a.model().graph();
  double total = 0;
  for (std::size_t v = 0; v < graph.size(); ++v) {
    const int iv = static_cast<int>(v);
    total += a.compute_cost(iv, a.choice()[v]);
    const Node& node = graph.node(iv);
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      total += a.edge(iv, static_cast<int>(k), a.choice()[static_cast<std::size_t>(node.inputs[k])],
                      a.choice()[v]);
    }
  }
  return total;
}

// The budget search of docs/solver.md ("Memory budget"), from the fastest plan the refinement
// found without a budget: multipliers on the steps' budgets (Lagrangian relaxation) and
// refinements under the memory weights they make, the recombination of the plans visited, and
// moves of one or two nodes checked against the budget.
class BudgetSearch {
 public:
  BudgetSearch(const detail::StepModel& model, Assignment& a, ForestRefiner& forest,
               std::function<void()> refine, bool large_graph, SolverStats& stats)
      : model_(model),
        graph_(model.graph()),
        a_(a),
        forest_(forest),
        refine_(std::move(refine)),
        large_graph_(large_graph),
        stats_(stats),
        budget_(model.options().memory_budget_bytes),
        count_(static_cast<int>(graph_.size())),
        visited_(graph_.size()),
        forward_step_(graph_.size(), 0),
        backward_step_(graph_.size(), 0) {
    for (int v = 0; v < count_; ++v) {
      visited_[static_cast<std::size_t>(v)].assign(static_cast<std::size_t>(a_.count(v)), 0);
    }
  }

  // The fastest plan found that fits, else the one with the smallest peak found.
  std::vector<int> run() {
    if (consider()) {
      return a_.choice();
    }
    search_multipliers();
    if (!large_graph_) {
      recombine();
      search_neighbourhoods();
    }
    move_nodes();
    return a_.choice();
  }

 private:
  // Records the current plan: its strategies as visited, and it as the fastest that fits or the
  // smallest so far. True when it fits.
  bool consider() {
    for (int v = 0; v < count_; ++v) {
      visited_[static_cast<std::size_t>(v)]
              [static_cast<std::size_t>(a_.choice()[static_cast<std::size_t>(v)])] = 1;
    }
    const std::int64_t peak = detail::memory_profile(model_, a_.choice()).peak_bytes;
    if (peak < smallest_peak_) {
      smallest_peak_ = peak;
      smallest_ = a_.choice();
    }
    if (peak > budget_) {
      return false;
    }
    const double seconds = detail::step_seconds(model_, a_.choice());
    if (seconds < best_seconds_) {
      best_seconds_ = seconds;
      best_ = a_.choice();
    }
    return true;
  }

  // The node and edge weights the multipliers make: a byte of state is held at every step, an
  // activation or a gradient at the steps of its live range, a buffer at its consumer's step.
  MemoryWeights weights() const {
    const std::size_t n = graph_.size();
    std::vector<double> before_forward(n + 1, 0), before_backward(n + 1, 0);
    for (std::size_t v = 0; v < n; ++v) {
      before_forward[v + 1] = before_forward[v] + forward_step_[v];
      before_backward[v + 1] = before_backward[v] + backward_step_[v];
    }
    const auto sum = [](const std::vector<double>& before, int from, int to) {
      return before[static_cast<std::size_t>(to) + 1] - before[static_cast<std::size_t>(from)];
    };
    MemoryWeights w;
    w.any = true;
    w.state = before_forward[n] + before_backward[n];
    w.activation.assign(n, 0);
    w.gradient.assign(n, 0);
    const int last = count_ - 1;
    for (int v = 0; v < count_; ++v) {
      const detail::NodeFacts& f = model_.facts(v);
      const std::size_t vu = static_cast<std::size_t>(v);
      w.activation[vu] =
          model_.options().training() && f.first_reader >= 0
              ? sum(before_forward, v, last) + sum(before_backward, f.first_reader, last)
              : sum(before_forward, v, std::max(v, f.last_consumer));
      w.gradient[vu] = f.last_consumer >= 0 ? sum(before_backward, v, f.last_consumer) : 0;
    }
    w.forward = forward_step_;
    w.backward = backward_step_;
    return w;
  }

  // Refines the plan under the multipliers times `factor`; true when it fits.
  bool refine_with(double factor) {
    ++stats_.budget_rounds;
    MemoryWeights w = weights();
    if (factor != 1) {
      w.state *= factor;
      for (auto* list : {&w.activation, &w.gradient, &w.forward, &w.backward}) {
        for (double& x : *list) {
          x *= factor;
        }
      }
    }
    a_.set_weights(std::move(w));
    forest_.reweigh();
    refine_();
    return consider();
  }

  // The multipliers of the steps in the upper half of the excess over the budget go up by `up`
  // (at least to `floor`), the others by `down`: raising every step over the budget would
  // favour long-lived tensors (they span many of them) over the ones that make the peak.
  void move_multipliers(double up, double down, double floor) {
    const detail::MemoryProfile profile = detail::memory_profile(model_, a_.choice());
    const std::int64_t peak = profile.peak_bytes;
    const std::int64_t line = peak - (peak - budget_) / 2;
    const auto update = [&](double& multiplier, std::int64_t bytes) {
      multiplier =
          bytes > budget_ && bytes >= line ? std::max(up * multiplier, floor) : down * multiplier;
    };
    for (std::size_t v = 0; v < graph_.size(); ++v) {
      const detail::NodeFacts& f = model_.facts(static_cast<int>(v));
      if (f.computed) {
        update(forward_step_[v], profile.forward_bytes[v]);
      }
      if (f.has_backward) {
        update(backward_step_[v], profile.backward_bytes[v]);
      }
    }
  }

  // Stage 1: the multipliers grow 4x (from the fastest plan's seconds per byte of budget) until
  // a plan fits; then their common scale is bisected (geometrically) between the last plan that
  // did not fit and the first that did; then finer rounds (1.5x over, 0.8x under) search around
  // it. Large graphs get fewer rounds (each refines every node), and the bisection and finer
  // rounds end at the first that changes nothing: on the 2x4 stacks of 992 and 10,001 nodes
  // measured (budgets 0.3-0.8 of the fastest plan's peak) none of them changed the plan.
  void search_multipliers() {
    const double unit = detail::step_seconds(model_, a_.choice()) / static_cast<double>(budget_);
    const bool large_graph = large_graph_;
    auto& forward_step = forward_step_;
    auto& backward_step = backward_step_;
    bool fits = false;
    for (int round = 0; round < kGrowthRounds && !fits; ++round) {
      move_multipliers(4, 1, unit);
      fits = refine_with(1);
    }
    if (fits) {
      bool settled = false;
      const auto changes = [&](const std::function<bool()>& round) {
        const std::vector<int> before = a_.choice();
        const bool result = round();
        settled = large_graph && a_.choice() == before;
        return result;
      };
      double low = 0.25, high = 1;
      for (int round = 0; round < (large_graph ? 2 : kBisections) && !settled; ++round) {
        const double middle = std::sqrt(low * high);
        (changes([&] { return refine_with(middle); }) ? high : low) = middle;
      }
      for (double& x : forward_step) {
        x *= high;
      }
      for (double& x : backward_step) {
        x *= high;
      }
      for (int round = 0; round < (large_graph ? 1 : kFineRounds) && !settled; ++round) {
        move_multipliers(1.5, 0.8, 0);
        changes([&] { return refine_with(1); });
      }
    }
  }

  // Stage 2, recombination: the exact search (pareto_search) restricted, node by node, to the
  // strategies the plans above gave it finds the fastest mix of those plans that fits (one
  // layer's layout from the fastest plan, another's from a leaner one), or the mix with the
  // smallest peak. It gives up (keeping the plans found) past kRecombinationWork ways extended
  // or kRecombinationWays ways at one step: on large graphs.
  void recombine() {
    const Graph& graph = graph_;
    const detail::StepModel& model = model_;
    const auto& visited = visited_;
    auto& a = a_;
    const int count = count_;
    std::vector<std::vector<int>> allowed(graph.size());
    const bool mirrors = model.machine().axis_count() == 2;
    for (std::size_t v = 0; v < graph.size(); ++v) {
      std::vector<char> take = visited[v];
      for (std::size_t s = 0; s < visited[v].size() && mirrors; ++s) {
        if (!visited[v][s]) {
          continue;
        }
        for (const int t :
             changed_strategies(model, static_cast<int>(v), static_cast<int>(s), mirrored)) {
          take[static_cast<std::size_t>(t)] = 1;
        }
      }
      for (std::size_t s = 0; s < take.size(); ++s) {
        if (take[s]) {
          allowed[v].push_back(static_cast<int>(s));
        }
      }
    }
    try {
      std::vector<int> mixed = detail::pareto_search(
          model, detail::Objective::within_budget, kRecombinationWays, allowed, kRecombinationWork);
      if (mixed.empty()) {
        mixed = detail::pareto_search(model, detail::Objective::smallest_peak, kRecombinationWays,
                                      allowed, kRecombinationWork);
      }
      ++stats_.recombinations;
      for (int v = 0; v < count; ++v) {
        a.decide(v, mixed[static_cast<std::size_t>(v)]);
      }
      consider();
    } catch (const Error&) {
      // Too many ways: the plans found so far stand.
    }
  }

  // Stage 3, exact neighbourhoods: around each node in turn, the exact search (pareto_search)
  // with every strategy allowed within kNeighbourhoodRadius edges of it and the rest of the
  // fastest plan that fits held; repeated while it gains. It reaches plans that differ from the
  // stages' plans in many nodes at once (a tensor-parallel chain where every weighting of memory
  // prefers data parallelism), which single moves cannot: each step of the way is slower or over
  // the budget. A search past kNeighbourhoodWork ways is given up.
  void search_neighbourhoods() {
    // Each search walks every node, at about the price of 4 ways extended each, so that one
    // around every node costs 4 count_^2: past the stage's work it is left out (graphs of more
    // than about 720 nodes).
    const std::int64_t pass = std::int64_t{4} * count_ * count_;
    if (best_.empty() || pass > kNeighbourhoodStageWork) {
      return;
    }
    std::vector<std::vector<int>> allowed(graph_.size());
    std::vector<int> distance(graph_.size(), -1), ball;
    std::int64_t stage_work = 0;
    // Balls searched, and given up, since the plan last changed (as node masks).
    std::vector<std::vector<char>> searched, given_up;
    // Per radius: the searches given up since the last one that finished.
    std::vector<int> given_up_in_a_row(kNeighbourhoodRadius + 1, 0);
    for (bool gained = true; gained && stage_work < kNeighbourhoodStageWork;) {
      gained = false;
      for (int centre = 0; centre < count_ && stage_work < kNeighbourhoodStageWork; ++centre) {
        for (int radius = kNeighbourhoodRadius; radius >= 1; --radius) {
          if (given_up_in_a_row[static_cast<std::size_t>(radius)] >= kNeighbourhoodGiveUps) {
            continue;  // balls this wide are too wide here
          }
          ball.assign(1, centre);
          distance[static_cast<std::size_t>(centre)] = 0;
          for (std::size_t head = 0; head < ball.size(); ++head) {
            const int v = ball[head];
            const int next = distance[static_cast<std::size_t>(v)] + 1;
            if (next > radius) {
              continue;
            }
            const auto reach = [&](int u) {
              if (distance[static_cast<std::size_t>(u)] < 0) {
                distance[static_cast<std::size_t>(u)] = next;
                ball.push_back(u);
              }
            };
            for (const int p : graph_.node(v).inputs) {
              reach(p);
            }
            for (const int c : graph_.consumers(v)) {
              reach(c);
            }
          }
          std::vector<char> members(graph_.size(), 0);
          for (const int v : ball) {
            distance[static_cast<std::size_t>(v)] = -1;
            members[static_cast<std::size_t>(v)] = 1;
          }
          // The same plan searched before over this ball and more stands; over this ball, given
          // up before.
          const auto within = [&](const std::vector<char>& wider) {
            return std::all_of(ball.begin(), ball.end(),
                               [&](int v) { return wider[static_cast<std::size_t>(v)] != 0; });
          };
          if (std::any_of(searched.begin(), searched.end(), within)) {
            break;
          }
          if (std::find(given_up.begin(), given_up.end(), members) != given_up.end()) {
            continue;
          }
          for (int v = 0; v < count_; ++v) {
            auto& choices = allowed[static_cast<std::size_t>(v)];
            if (members[static_cast<std::size_t>(v)]) {
              choices.resize(static_cast<std::size_t>(a_.count(v)));
              std::iota(choices.begin(), choices.end(), 0);
            } else {
              choices.assign(1, best_[static_cast<std::size_t>(v)]);
            }
          }
          std::vector<int> found;
          std::int64_t work = 0;
          try {
            found = detail::pareto_search(model_, detail::Objective::within_budget,
                                          kRecombinationWays, allowed, kNeighbourhoodWork, &work);
          } catch (const Error&) {
            stage_work += std::max<std::int64_t>(work, 4 * count_);
            given_up.push_back(std::move(members));
            ++given_up_in_a_row[static_cast<std::size_t>(radius)];
            continue;  // too many ways around this node: a smaller ball
          }
          stage_work += std::max<std::int64_t>(work, 4 * count_);
          given_up_in_a_row[static_cast<std::size_t>(radius)] = 0;
          const double before = best_seconds_;
          for (int v = 0; v < count_; ++v) {
            a_.decide(v, found[static_cast<std::size_t>(v)]);
          }
          consider();
          if (best_seconds_ < before * (1 - 1e-12)) {
            gained = true;
            searched.clear();
            given_up.clear();
          } else {
            searched.push_back(std::move(members));
          }
          break;
        }
      }
    }
  }

  // Stage 4: moves of one node, then of a node and one of its inputs together, each checked
  // against the budget with a PeakTracker (their number bounded so that large graphs stay fast).
  // When nothing fit, moves that lower the peak, from the plan with the smallest; then, within
  // the budget, moves that make the plan faster, or keep its seconds and lower its peak.
  void move_nodes() {
    const Graph& graph = graph_;
    const detail::StepModel& model = model_;
    auto& a = a_;
    const int count = count_;
    const std::int64_t budget = budget_;
    a.set_weights(MemoryWeights());
    const std::vector<int>& start = best_.empty() ? smallest_ : best_;
    for (int v = 0; v < count; ++v) {
      a.decide(v, start[static_cast<std::size_t>(v)]);
    }
    const std::int64_t most_checks =
        std::max<std::int64_t>(4096, (std::int64_t{1} << 26) / (count + 1));
    std::int64_t checks = 0, tries = 0;
    detail::PeakTracker tracker(model, a.choice());
    std::int64_t peak = tracker.peak();
    // Checks a move against the budget: u to su (and v to sv when v >= 0), whose seconds around
    // the moved nodes go from `here` to `there`; keeps it when it is better, else undoes it.
    const auto attempt = [&](bool faster, double here, double there, int u, int su, int v, int sv) {
      const int old_u = a.choice()[static_cast<std::size_t>(u)];
      const int old_v = v >= 0 ? a.choice()[static_cast<std::size_t>(v)] : -1;
      ++checks;
      tracker.move(u, su);
      if (v >= 0) {
        tracker.move(v, sv);
      }
      const std::int64_t moved_peak = tracker.peak();
      const bool better =
          faster ? moved_peak <= budget && (there < here * (1 - 1e-12) || moved_peak < peak)
                 : moved_peak < peak;
      if (better) {
        a.decide(u, su);
        if (v >= 0) {
          a.decide(v, sv);
        }
        peak = moved_peak;
        ++stats_.budget_moves;
      } else {
        tracker.move(u, old_u);
        if (v >= 0) {
          tracker.move(v, old_v);
        }
      }
      return better;
    };
    // A node's seconds with its neighbours as they are, for each of its strategies.
    std::vector<double> own, other;
    std::vector<int> own_order, other_order;
    // Every node's local costs, node v's from first_cost[v], computed when the assignment had
    // made computed_at[v] changes: they hold until v or a neighbour changes.
    std::vector<std::size_t> first_cost(static_cast<std::size_t>(count) + 1, 0);
    for (int v = 0; v < count; ++v) {
      first_cost[static_cast<std::size_t>(v) + 1] =
          first_cost[static_cast<std::size_t>(v)] + static_cast<std::size_t>(a.count(v));
    }
    std::vector<double> node_costs(first_cost.back());
    std::vector<std::uint64_t> computed_at(static_cast<std::size_t>(count), 0);
    std::vector<char> known(static_cast<std::size_t>(count), 0);
    // Brings node v's local costs up to date; returns when they were computed.
    const auto refresh = [&](int v) {
      const std::size_t vu = static_cast<std::size_t>(v);
      std::uint64_t latest = a.changed_at(v);
      for (const int p : graph.node(v).inputs) {
        latest = std::max(latest, a.changed_at(p));
      }
      for (const int c : graph.consumers(v)) {
        latest = std::max(latest, a.changed_at(c));
      }
      if (!known[vu] || latest > computed_at[vu]) {
        for (int s = 0; s < a.count(v); ++s) {
          node_costs[first_cost[vu] + static_cast<std::size_t>(s)] = a.local_cost(v, s);
        }
        tries += a.count(v);
        computed_at[vu] = a.changes();
        known[vu] = 1;
      }
      return computed_at[vu];
    };
    const auto costs_of = [&](int v, std::vector<double>& costs) {
      const auto from =
          node_costs.begin() + static_cast<std::ptrdiff_t>(first_cost[static_cast<std::size_t>(v)]);
      costs.assign(from, from + a.count(v));
    };
    // The strategies in increasing order of cost (the lower index first among equals).
    const auto by_cost = [](const std::vector<double>& costs, std::vector<int>& order) {
      order.resize(costs.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
        return costs[static_cast<std::size_t>(x)] < costs[static_cast<std::size_t>(y)];
      });
    };
    // Each node's input edges, edge (v, k) at first_edge[v] + k.
    std::vector<std::size_t> first_edge(static_cast<std::size_t>(count) + 1, 0);
    for (int v = 0; v < count; ++v) {
      first_edge[static_cast<std::size_t>(v) + 1] =
          first_edge[static_cast<std::size_t>(v)] + graph.node(v).inputs.size();
    }
    // A pass looks again at a node (an edge) only when it had a move to try when last looked at,
    // or when its costs (either end's) have changed since: which moves are tried depends on the
    // costs and the current strategies alone; whether one is kept depends on the peak too, so a
    // node or edge with a move to try is looked at in every pass.
    const auto descend = [&](bool faster) {
      std::vector<std::uint64_t> node_seen(static_cast<std::size_t>(count), 0);
      std::vector<std::uint64_t> edge_seen(first_edge.back(), 0);
      std::vector<char> node_idle(node_seen.size(), 0), edge_idle(edge_seen.size(), 0);
      for (int pass = 0; pass < 8 && checks < most_checks && tries < kMostTries; ++pass) {
        bool moved = false;
        for (int v = 0; v < count && checks < most_checks; ++v) {
          const std::size_t vu = static_cast<std::size_t>(v);
          const std::uint64_t at = refresh(v);
          if (node_idle[vu] && at <= node_seen[vu]) {
            continue;
          }
          costs_of(v, own);
          bool tried = false;
          for (int s = 0; s < a.count(v) && checks < most_checks; ++s) {
            const int now = a.choice()[vu];
            const double here = own[static_cast<std::size_t>(now)];
            const double there = own[static_cast<std::size_t>(s)];
            if (s != now && !(faster && there > here * (1 + 1e-12))) {
              tried = true;
              moved = attempt(faster, here, there, v, s, -1, -1) || moved;
            }
          }
          node_seen[vu] = a.changes();
          node_idle[vu] = !tried;
        }
        // A node and one of its inputs together, from each one's costs with the other as it is:
        // moving u to su and v to sv replaces the edges between them. Seeking a faster plan,
        // each one's cost without their shared edges (which cost nothing or more) bounds a
        // pair's: in increasing order of those, the scans stop at the first pair that cannot be
        // faster, so most pairs are never priced.
        for (int v = 0; v < count && !moved && checks < most_checks && tries < kMostTries; ++v) {
          const auto& inputs = graph.node(v).inputs;
          for (std::size_t k = 0; k < inputs.size() && !moved; ++k) {
            const int u = inputs[k];
            const std::size_t edge = first_edge[static_cast<std::size_t>(v)] + k;
            const std::uint64_t at = std::max(refresh(u), refresh(v));
            if (edge_idle[edge] && at <= edge_seen[edge]) {
              continue;
            }
            const int cu = a.choice()[static_cast<std::size_t>(u)];
            const int cv = a.choice()[static_cast<std::size_t>(v)];
            costs_of(u, own);
            costs_of(v, other);
            const double here = own[static_cast<std::size_t>(cu)] +
                                other[static_cast<std::size_t>(cv)] - a.pair_cost(u, cu, v, cv);
            const double limit = faster ? here * (1 + 1e-12) : kInfinity;
            for (int su = 0; su < a.count(u); ++su) {
              own[static_cast<std::size_t>(su)] -= a.pair_cost(u, su, v, cv);
            }
            for (int sv = 0; sv < a.count(v); ++sv) {
              other[static_cast<std::size_t>(sv)] -= a.pair_cost(u, cu, v, sv);
            }
            // No pair can be faster when the cheapest other strategies of both cannot.
            const auto cheapest_other = [](const std::vector<double>& costs, int now) {
              double cheapest = kInfinity;
              for (std::size_t x = 0; x < costs.size(); ++x) {
                cheapest = static_cast<int>(x) == now ? cheapest : std::min(cheapest, costs[x]);
              }
              return cheapest;
            };
            bool tried = false;
            if (cheapest_other(own, cu) + cheapest_other(other, cv) > limit) {
              edge_seen[edge] = a.changes();
              edge_idle[edge] = 1;
              continue;
            }
            by_cost(own, own_order);
            by_cost(other, other_order);
            const double cheapest_v = other[static_cast<std::size_t>(other_order[0])];
            for (const int su : own_order) {
              const double alone = own[static_cast<std::size_t>(su)];
              if (moved || checks >= most_checks || alone + cheapest_v > limit) {
                break;
              }
              for (const int sv : other_order) {
                const double bound = alone + other[static_cast<std::size_t>(sv)];
                if (moved || checks >= most_checks || bound > limit) {
                  break;
                }
                if (su == cu || sv == cv) {
                  continue;
                }
                ++tries;
                const double there = bound + a.pair_cost(u, su, v, sv);
                if (there <= limit) {
                  tried = true;
                  moved = attempt(faster, here, there, u, su, v, sv);
                }
              }
            }
            edge_seen[edge] = a.changes();
            edge_idle[edge] = !tried;
          }
        }
        if (!moved || (!faster && peak <= budget)) {
          break;
        }
      }
    };
    if (peak > budget) {
      descend(false);
    }
    if (peak <= budget) {
      descend(true);
    }
    if (tracker.peak() != detail::memory_profile(model, a.choice()).peak_bytes) {
      throw std::logic_error("fsdp: the solver's peak tracker disagrees with the memory profile");
    }
  }

  const detail::StepModel& model_;
  const Graph& graph_;
  Assignment& a_;
  ForestRefiner& forest_;
  std::function<void()> refine_;
  bool large_graph_;
  SolverStats& stats_;
  std::int64_t budget_;
  int count_;
  std::vector<int> best_, smallest_;
  double best_seconds_ = kInfinity;
  std::int64_t smallest_peak_ = std::numeric_limits<std::int64_t>::max();
  std::vector<std::vector<char>> visited_;            // per node: the strategies some plan gave it
  std::vector<double> forward_step_, backward_step_;  // the multipliers of the steps
};

}  // namespace

SimpleSolver::SimpleSolver(Machine machine, StepOptions options)
    : machine_(std::move(machine)), options_(options) {
  machine_.validate();
  options_.validate();
}

std::vector<SeedCandidate> SimpleSolver::seed_candidates(const Graph& graph, int index) const {
  const Node& node = graph.node(index);
  require(is_matmul(node), "seed_candidates: node '" + node.id + "' is a " + node.op +
                               ", not a matmul or batched_matmul");
  std::vector<SeedCandidate> candidates;
  const std::vector<Strategy> strategies = strategies_for(graph, index, machine_);
  for (const int s : seed_order(strategies)) {
    SeedCandidate candidate;
    candidate.strategy = strategies[static_cast<std::size_t>(s)];
    candidate.compute_s = candidate.strategy.flops_per_device / machine_.flops_per_s;
    if (candidate.strategy.output.is_partial()) {
      candidate.communication =
          reshard_cost(candidate.strategy.output, candidate.strategy.output.without_partial(),
                       node.bytes(), machine_);
    }
    candidates.push_back(candidate);
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
  const detail::StepModel model(graph, machine_, options_);
  Assignment a(model);
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
    for (const int s : seed_order(model.strategies(v))) {
      const double cost =
          a.local_cost(v, s, completion_seconds(a.strategy(v, s), graph.node(v), machine_));
      if (cost < lowest) {
        lowest = cost;
        chosen = s;
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
  // Conditioning tries every strategy of a node that closes a cycle with the nodes within the
  // radius re-optimized: on a 2-D mesh (about 25 strategies a node, 600 pairs an edge) that is
  // most of a pass. The radius shrinks on graphs whose passes look at many pairs.
  const double pairs = forest.full_pass_pairs();
  const int radius = pairs <= static_cast<double>(kFullRadiusPairs)       ? kConditioningRadius
                     : pairs <= static_cast<double>(4 * kFullRadiusPairs) ? 2
                                                                          : 1;
  // On large graphs refinement stops at the first round without gain (two, alternating the
  // orders of the forest, elsewhere).
  const bool large_graph = pairs > static_cast<double>(kFullRadiusPairs);
  const auto refine = [&] {
    double total = surrogate_total(a);
    int rounds_without_gain = 0;
    for (int round = 0; round < 50 && rounds_without_gain < (large_graph ? 1 : 2); ++round) {
      ++stats_.refinement_sweeps;
      const std::vector<int> before = a.choice();
      forest.run(round % 2 == 0 ? forward : backward, radius);
      const double now = surrogate_total(a);
      for (int v = 0; v < count; ++v) {
        stats_.changed_in_refinement +=
            before[static_cast<std::size_t>(v)] != a.choice()[static_cast<std::size_t>(v)];
      }
      rounds_without_gain = now < total * (1 - 1e-12) ? 0 : rounds_without_gain + 1;
      total = now;
    }
    return total;
  };
  // When collectives are dear next to the compute they save (few tokens, a slow network), the
  // seeds can lead into a plan whose every improvement needs many nodes to move together. A
  // second start from the all-replicated plan, refined the same way, catches these; it is
  // skipped when the refined plan already costs no more than its bound (every node at its
  // cheapest cost, no communication at all), which no plan can beat.
  const auto refine_with_restart = [&] {
    const double refined = refine();
    double bound = 0;
    for (int v = 0; v < count; ++v) {
      double cheapest = kInfinity;
      for (int s = 0; s < a.count(v); ++s) {
        cheapest = std::min(cheapest, a.compute_cost(v, s));
      }
      bound += cheapest;
    }
    if (refined > bound * (1 + 1e-9)) {
      ++stats_.restarts;
      const std::vector<int> kept = a.choice();
      for (int v = 0; v < count; ++v) {
        a.decide(v, a.count(v) - 1);  // replicated (the last strategy), or the pinned one
      }
      if (refine() >= refined) {
        for (int v = 0; v < count; ++v) {
          a.decide(v, kept[static_cast<std::size_t>(v)]);
        }
      }
    }
  };
  refine_with_restart();
  // On a 2-D mesh the refinement can keep a whole chain on one axis where the same layouts over
  // the other axis, or over both, are faster, reached only by changing every node at once (a
  // chain cut along axis 1 where the optimum cuts it along both: half the compute). The exact
  // search over each node's strategy and those with the axes swapped or spread over both finds
  // those mixes (not on large graphs, and given up past kRecombinationWork ways); a plan it
  // improves is refined again.
  if (machine_.axis_count() == 2 && !large_graph) {
    std::vector<std::vector<int>> allowed(graph.size());
    for (int v = 0; v < count; ++v) {
      auto& choices = allowed[static_cast<std::size_t>(v)];
      const int now = a.choice()[static_cast<std::size_t>(v)];
      choices = changed_strategies(model, v, now, mirrored);
      for (const int t : changed_strategies(model, v, now, widened)) {
        choices.push_back(t);
      }
      choices.push_back(now);
      std::sort(choices.begin(), choices.end());
      choices.erase(std::unique(choices.begin(), choices.end()), choices.end());
    }
    try {
      const std::vector<int> relaid = detail::pareto_search(
          model, detail::Objective::seconds, kRecombinationWays, allowed, kRecombinationWork);
      if (detail::step_seconds(model, relaid) <
          detail::step_seconds(model, a.choice()) * (1 - 1e-12)) {
        ++stats_.relaid;
        for (int v = 0; v < count; ++v) {
          a.decide(v, relaid[static_cast<std::size_t>(v)]);
        }
        refine();
      }
    } catch (const Error&) {
      // Too many ways: the refined plan stands.
    }
  }
  if (options_.memory_budget_bytes <= 0) {
    return detail::evaluate(model, a.choice(), "simple");
  }
  BudgetSearch search(model, a, forest, refine, large_graph, stats_);
  return detail::evaluate(model, search.run(), "simple");
}

}  // namespace fsdp::solver
