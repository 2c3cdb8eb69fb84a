#include "fsdp/solver/broadcast_solution.hpp"

#include <cstdint>
#include <cstring>
#include <exception>

#include "fsdp/core/error.hpp"

namespace fsdp::solver {
namespace {

// Sends text from root to every rank: a header (status, length), then the bytes in 8-byte words.
// status 0 carries a solution, 1 the root's error message.
std::pair<std::int64_t, std::string> broadcast_text(ProcessGroup& group, std::int64_t status,
                                                    const std::string& text, int root) {
  std::int64_t header[2] = {status, static_cast<std::int64_t>(text.size())};
  group.broadcast(header, 2, root);
  const std::size_t length = static_cast<std::size_t>(header[1]);
  std::vector<std::int64_t> words((length + 7) / 8, 0);
  if (group.rank() == root && length > 0) {
    std::memcpy(words.data(), text.data(), length);
  }
  group.broadcast(words.data(), words.size(), root);
  std::string received(length, '\0');
  if (length > 0) {
    std::memcpy(&received[0], words.data(), length);
  }
  return {header[0], received};
}

}  // namespace

Solution solve_on_root(ProcessGroup& group, const std::function<Solution()>& solve, int root) {
  require(root >= 0 && root < group.size(), "fsdp: solve_on_root: root " + std::to_string(root) +
                                                " is not a rank of the group of " +
                                                std::to_string(group.size()));
  std::int64_t status = 0;
  std::string text;
  if (group.rank() == root) {
    try {
      text = solve().to_json();
    } catch (const std::exception& error) {
      status = 1;
      text = error.what();
    } catch (...) {
      status = 1;  // still tell the other ranks, so that none waits for a solution
      text = "fsdp: solve_on_root: the solve function threw a non-standard exception";
    }
  }
  auto [received_status, received] = broadcast_text(group, status, text, root);
  if (received_status != 0) {
    throw Error(received + " (solving on rank " + std::to_string(root) + ")");
  }
  return Solution::from_json(received);
}

Solution broadcast_solution(ProcessGroup& group, const Solution& solution, int root) {
  return solve_on_root(
      group, [&] { return solution; }, root);
}

}  // namespace fsdp::solver
