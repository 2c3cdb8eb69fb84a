#include "pareto_search.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

#include "checked_int.hpp"
#include "fsdp/core/error.hpp"

namespace fsdp::solver::detail {
namespace {

// One way to reach a frontier state. Memory (tracked unless the objective is seconds), without
// the persistent bytes of nodes not yet decided: `state` the persistent bytes so far, `alive` the
// activations held after the last step, `worst` the highest of the steps so far (each without
// the persistent bytes: the peak is state + worst once every node is decided).
struct Entry {
  double cost;
  std::int64_t state;
  std::int64_t alive;
  std::int64_t worst;
  int previous;  // the way into the previous step's state it came from
  int choice;    // the strategy the step's node took
};

// The bytes that bound a way's future: the peak so far and the bytes held, each with the
// persistent bytes so far (docs/solver.md, "Memory budget").
std::int64_t peak_of(const Entry& e) {
  return checked_add(e.state, e.worst, [] { return std::string("the peak of a plan"); });
}
std::int64_t held_of(const Entry& e) {
  return checked_add(e.state, e.alive, [] { return std::string("the memory of a plan"); });
}

// True when a is at least as good as b for every continuation.
bool covers(const Entry& a, const Entry& b, Objective objective) {
  if (objective == Objective::seconds) {
    return a.cost <= b.cost;
  }
  const bool memory = peak_of(a) <= peak_of(b) && held_of(a) <= held_of(b);
  if (objective == Objective::smallest_peak) {
    return memory;
  }
  return memory && a.cost <= b.cost;
}

// A topological order that places every node without inputs just before its first consumer, so
// that parameters do not widen the frontier from the start. Computed nodes keep the graph's
// order, which is the order their steps run in.
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

std::vector<int> pareto_search(const StepModel& model, Objective objective, std::size_t max_states,
                               const std::vector<std::vector<int>>& allowed, std::int64_t max_work,
                               std::int64_t* work_done) {
  std::int64_t local_work = 0;
  std::int64_t& work = work_done != nullptr ? *work_done : local_work;
  work = 0;
  const Graph& graph = model.graph();
  const bool track_memory = objective != Objective::seconds;
  const std::int64_t budget = model.options().memory_budget_bytes;
  const auto what = [] { return std::string("the memory of a plan on one device"); };
  const std::vector<int> order = elimination_order(graph);
  std::vector<int> remaining(graph.size());
  for (std::size_t v = 0; v < graph.size(); ++v) {
    remaining[v] = static_cast<int>(graph.consumers(static_cast<int>(v)).size());
  }

  std::vector<int> live;  // frontier nodes, in the order their strategies appear in a key
  std::vector<std::string> keys(1);
  std::vector<std::vector<Entry>> steps;
  std::vector<std::vector<int>> ways = {{0}};  // per state: its entries
  std::vector<Entry> current = {Entry{0.0, 0, 0, 0, -1, -1}};
  for (const int v : order) {
    const Node& node = graph.node(v);
    const NodeFacts& facts = model.facts(v);
    const int mine = model.count(v);
    std::vector<int> choices;
    if (allowed.empty()) {
      choices.resize(static_cast<std::size_t>(mine));
      std::iota(choices.begin(), choices.end(), 0);
    } else {
      choices = allowed[static_cast<std::size_t>(v)];
    }
    // Per input: its place in a key and its table (seconds and buffers for every pair).
    std::vector<int> slot(node.inputs.size());
    std::vector<const EdgeTable*> edge(node.inputs.size());
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = node.inputs[k];
      slot[k] = static_cast<int>(std::find(live.begin(), live.end(), p) - live.begin());
      edge[k] = &model.edge_table(v, static_cast<int>(k));
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
    // Memory rules (docs/solver.md, "Memory"), for live nodes u of the old key:
    //  - freed after this forward step: activations of inputs whose last consumer this is and
    //    that no backward reads (training) / every such input (forward only);
    //  - not held at this node's backward step: activations no backward reads, and those whose
    //    first reader comes after this node;
    //  - gradients held at this node's backward step: every live computed node's (each has a
    //    consumer at or after this node).
    const bool training = model.options().training();
    const bool v_kept =
        facts.holds_activation && (v_stays || (training && facts.first_reader >= 0));
    std::vector<char> freed(live.size(), 0), not_read_yet(live.size(), 0);
    for (std::size_t i = 0; i < live.size() && track_memory; ++i) {
      const int u = live[i];
      const NodeFacts& fu = model.facts(u);
      const bool read = training && fu.first_reader >= 0;
      freed[i] = !read && fu.last_consumer == v;
      not_read_yet[i] = !read || fu.first_reader > v;
    }
    std::vector<Entry> next;
    std::vector<std::string> next_keys;
    std::vector<std::vector<int>> next_ways;
    std::unordered_map<std::string, int> where;  // looked up only, never iterated
    where.reserve(std::min(max_states, keys.size() * choices.size()));
    std::size_t held = 0;  // ways kept in this step
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const std::string& key = keys[i];
      const auto strategy_of = [&](std::size_t position) {
        return static_cast<int>(static_cast<unsigned char>(key[position]));
      };
      // The parts of this step's memory that depend on the key only.
      std::int64_t freed_bytes = 0, unread_bytes = 0, gradient_bytes = 0;
      for (std::size_t j = 0; j < live.size() && track_memory; ++j) {
        const int u = live[j];
        const std::int64_t activation = model.activation_bytes(u, strategy_of(j));
        add_to(freed_bytes, freed[j] ? activation : 0, what);
        add_to(unread_bytes, not_read_yet[j] ? activation : 0, what);
        add_to(gradient_bytes, model.gradient_bytes(u, strategy_of(j)), what);
      }
      // Without memory a state has one way, the entry of the same index.
      const std::size_t way_count = track_memory ? ways[i].size() : 1;
      for (std::size_t wi = 0; wi < way_count; ++wi) {
        const int w = track_memory ? ways[i][wi] : static_cast<int>(i);
        const Entry& from = current[static_cast<std::size_t>(w)];
        if (from.previous == -2) {
          continue;  // covered by a later way
        }
        work += static_cast<std::int64_t>(choices.size());
        if (max_work > 0 && work > max_work) {
          throw Error("exact search: more than " + std::to_string(max_work) +
                      " ways extended, at node '" + node.id + "'");
        }
        for (const int s : choices) {
          Entry e{from.cost + model.node_seconds(v, s), from.state, from.alive, from.worst, w, s};
          std::int64_t forward = 0, backward = 0;
          for (std::size_t k = 0; k < node.inputs.size(); ++k) {
            const EdgeTable& table = *edge[k];
            const std::size_t at = table.at(strategy_of(static_cast<std::size_t>(slot[k])), s);
            e.cost += table.seconds[at];
            if (track_memory) {
              add_to(forward, table.forward_bytes[at], what);
              add_to(backward, facts.has_backward ? table.backward_bytes[at] : 0, what);
            }
          }
          if (track_memory) {
            add_to(e.state, model.state_bytes(v, s), what);
            if (facts.computed) {
              const std::int64_t activation = model.activation_bytes(v, s);
              std::int64_t step = checked_add(from.alive, activation, what);
              e.worst = std::max(e.worst, checked_add(step, forward, what));
              e.alive = checked_add(from.alive - freed_bytes, v_kept ? activation : 0, what);
              if (facts.has_backward) {
                std::int64_t at_backward = from.alive - unread_bytes;
                add_to(at_backward, gradient_bytes, what);
                add_to(at_backward, model.gradient_bytes(v, s), what);
                add_to(at_backward, backward, what);
                e.worst = std::max(e.worst, at_backward);
              }
            }
            if (objective == Objective::within_budget && peak_of(e) > budget) {
              continue;  // the peak only grows from here
            }
          }
          std::string next_key(next_live.size(), '\0');
          for (std::size_t j = 0; j < next_live.size(); ++j) {
            next_key[j] = keep_from[j] < 0 ? static_cast<char>(s)
                                           : key[static_cast<std::size_t>(keep_from[j])];
          }
          auto found = where.find(next_key);
          const bool new_state = found == where.end();
          if (new_state) {
            found = where.emplace(std::move(next_key), static_cast<int>(next_keys.size())).first;
            next_keys.push_back(found->first);
            if (track_memory) {
              next_ways.emplace_back();
            }
          }
          if (!track_memory) {
            // The cheapest way into each state (the first of equals).
            if (new_state) {
              if (next.size() >= max_states) {
                throw Error("exact solver: more than " + std::to_string(max_states) +
                            " frontier states at node '" + node.id + "' (" +
                            std::to_string(next_live.size()) +
                            " nodes wide); the graph is too wide for exact search, use "
                            "SimpleSolver");
              }
              next.push_back(e);
            } else if (e.cost < next[static_cast<std::size_t>(found->second)].cost) {
              next[static_cast<std::size_t>(found->second)] = e;
            }
            continue;
          }
          auto& list = next_ways[static_cast<std::size_t>(found->second)];
          bool covered = false;
          for (const int other : list) {
            covered = covered || covers(next[static_cast<std::size_t>(other)], e, objective);
          }
          if (covered) {
            continue;
          }
          // Drop the ways the new one covers (marked, so that indices stay valid).
          std::size_t kept = 0;
          for (const int other : list) {
            Entry& old = next[static_cast<std::size_t>(other)];
            if (covers(e, old, objective)) {
              old.previous = -2;
              --held;
            } else {
              list[kept++] = other;
            }
          }
          list.resize(kept);
          if (held >= max_states) {
            throw Error("exact solver: more than " + std::to_string(max_states) +
                        " ways to reach the frontier states at node '" + node.id + "' (" +
                        std::to_string(next_live.size()) +
                        " nodes wide); the graph is too wide for exact search, use SimpleSolver");
          }
          list.push_back(static_cast<int>(next.size()));
          next.push_back(e);
          ++held;
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
    steps.push_back(std::move(current));
    current = std::move(next);
    keys = std::move(next_keys);
    ways = std::move(next_ways);
    live = std::move(next_live);
    if (keys.empty()) {
      return {};  // nothing fits the budget
    }
  }
  // Every node has been decided and the frontier is empty: one state is left.
  int best = -1;
  for (std::size_t i = 0; i < current.size(); ++i) {
    const Entry& e = current[i];
    if (e.previous == -2) {
      continue;
    }
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const Entry& b = current[static_cast<std::size_t>(best)];
    const bool better =
        objective == Objective::smallest_peak
            ? peak_of(e) < peak_of(b) || (peak_of(e) == peak_of(b) && e.cost < b.cost)
            : e.cost < b.cost;
    if (better) {
      best = static_cast<int>(i);
    }
  }
  std::vector<int> choice(graph.size(), 0);
  int at = best;
  for (std::size_t t = order.size(); t-- > 0;) {
    const Entry& entry =
        (t + 1 == order.size() ? current : steps[t + 1])[static_cast<std::size_t>(at)];
    choice[static_cast<std::size_t>(order[t])] = entry.choice;
    at = entry.previous;
  }
  return choice;
}

}  // namespace fsdp::solver::detail
