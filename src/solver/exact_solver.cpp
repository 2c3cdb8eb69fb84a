#include "fsdp/solver/exact_solver.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

// One way to reach a frontier state: its cost, the state it came from at the previous step, and
// the strategy the step's node took.
struct Entry {
  double cost;
  int previous;
  int choice;
};

// A topological order that places every node without inputs just before its first consumer, so
// that parameters do not widen the frontier from the start.
std::vector<int> elimination_order(const Graph& graph) {
  const int count = static_cast<int>(graph.size());
  std::vector<char> placed(graph.size(), 0);
  std::vector<int> order;
  for (int v = 0; v < count; ++v) {
    const Node& node = graph.node(v);
    if (node.inputs.empty()) {
      continue;
    }
    for (int p : node.inputs) {
      if (graph.node(p).inputs.empty() && !placed[static_cast<std::size_t>(p)]) {
        placed[static_cast<std::size_t>(p)] = 1;
        order.push_back(p);
      }
    }
    placed[static_cast<std::size_t>(v)] = 1;
    order.push_back(v);
  }
  for (int v = 0; v < count; ++v) {
    if (!placed[static_cast<std::size_t>(v)]) {
      order.push_back(v);
    }
  }
  return order;
}

}  // namespace

ExactSolver::ExactSolver(Machine machine, std::size_t max_states)
    : machine_(machine), max_states_(max_states) {
  machine_.validate();
}

Solution ExactSolver::solve(const Graph& graph) const {
  const auto strategies = all_strategies(graph, machine_.devices);
  for (std::size_t v = 0; v < graph.size(); ++v) {
    // A state keeps one byte per frontier node.
    require(strategies[v].size() <= 255, "exact solver: node '" +
                                             graph.node(static_cast<int>(v)).id +
                                             "' has more than 255 strategies");
  }
  const std::vector<int> order = elimination_order(graph);
  std::vector<int> remaining(graph.size());
  for (std::size_t v = 0; v < graph.size(); ++v) {
    remaining[v] = static_cast<int>(graph.consumers(static_cast<int>(v)).size());
  }

  std::vector<int> live;  // frontier nodes, in the order their strategies appear in a key
  std::vector<std::string> keys(1);
  std::vector<std::vector<Entry>> steps;
  std::vector<Entry> current = {Entry{0.0, -1, -1}};
  for (const int v : order) {
    const Node& node = graph.node(v);
    const auto& mine = strategies[static_cast<std::size_t>(v)];
    // Edge costs from each input's strategies to each of mine.
    std::vector<int> slot(node.inputs.size());
    std::vector<std::vector<double>> edge(node.inputs.size());
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      slot[k] = static_cast<int>(std::find(live.begin(), live.end(), p) - live.begin());
      const auto& theirs = strategies[static_cast<std::size_t>(p)];
      edge[k].resize(theirs.size() * mine.size());
      for (std::size_t a = 0; a < theirs.size(); ++a) {
        for (std::size_t b = 0; b < mine.size(); ++b) {
          edge[k][a * mine.size() + b] =
              reshard_cost(theirs[a].output, mine[b].inputs[k], graph.node(p).bytes(), machine_)
                  .seconds;
        }
      }
    }
    // The frontier after this node: inputs whose last consumer this is leave, v joins if used.
    std::vector<int> next_live;
    std::vector<int> keep_from;  // position in the old key, or -1 for v
    for (std::size_t i = 0; i < live.size(); ++i) {
      const int u = live[i];
      const bool feeds_v =
          std::find(node.inputs.begin(), node.inputs.end(), u) != node.inputs.end();
      if (!(feeds_v && remaining[static_cast<std::size_t>(u)] == 1)) {
        next_live.push_back(u);
        keep_from.push_back(static_cast<int>(i));
      }
    }
    const bool v_stays = !graph.consumers(v).empty();
    if (v_stays) {
      next_live.push_back(v);
      keep_from.push_back(-1);
    }
    std::vector<Entry> next;
    std::vector<std::string> next_keys;
    std::unordered_map<std::string, int> where;  // looked up only, never iterated
    for (std::size_t i = 0; i < current.size(); ++i) {
      const std::string& key = keys[i];
      for (std::size_t s = 0; s < mine.size(); ++s) {
        double cost = current[i].cost + mine[s].flops_per_device / machine_.flops_per_s;
        for (std::size_t k = 0; k < node.inputs.size(); ++k) {
          const auto a = static_cast<unsigned char>(key[static_cast<std::size_t>(slot[k])]);
          cost += edge[k][a * mine.size() + s];
        }
        std::string next_key(next_live.size(), '\0');
        for (std::size_t j = 0; j < next_live.size(); ++j) {
          next_key[j] =
              keep_from[j] < 0 ? static_cast<char>(s) : key[static_cast<std::size_t>(keep_from[j])];
        }
        const auto found = where.find(next_key);
        if (found == where.end()) {
          if (next.size() >= max_states_) {
            throw Error("exact solver: more than " + std::to_string(max_states_) +
                        " frontier states at node '" + node.id + "' (" +
                        std::to_string(next_live.size()) +
                        " nodes wide); the graph is too wide for exact search, use SimpleSolver");
          }
          where.emplace(next_key, static_cast<int>(next.size()));
          next.push_back(Entry{cost, static_cast<int>(i), static_cast<int>(s)});
          next_keys.push_back(std::move(next_key));
        } else if (cost < next[static_cast<std::size_t>(found->second)].cost) {
          next[static_cast<std::size_t>(found->second)] =
              Entry{cost, static_cast<int>(i), static_cast<int>(s)};
        }
      }
    }
    // Consumers are unique per user, so each distinct input loses one remaining consumer.
    std::vector<int> distinct = node.inputs;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (int p : distinct) {
      --remaining[static_cast<std::size_t>(p)];
    }
    steps.push_back(current);
    current = std::move(next);
    keys = std::move(next_keys);
    live = std::move(next_live);
  }
  // Every node has been decided and the frontier is empty: one state is left.
  std::size_t best = 0;
  for (std::size_t i = 1; i < current.size(); ++i) {
    if (current[i].cost < current[best].cost) {
      best = i;
    }
  }
  std::vector<int> choice(graph.size(), 0);
  int at = static_cast<int>(best);
  for (std::size_t t = order.size(); t-- > 0;) {
    const Entry& entry =
        (t + 1 == order.size() ? current : steps[t + 1])[static_cast<std::size_t>(at)];
    choice[static_cast<std::size_t>(order[t])] = entry.choice;
    at = entry.previous;
  }
  return evaluate(graph, strategies, choice, machine_, "exact");
}

}  // namespace fsdp::solver
