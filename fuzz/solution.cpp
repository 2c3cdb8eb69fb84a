// Solver solutions (Solution::from_json, what rank 0 broadcasts and fsdp-solve --json writes):
// any bytes give a solution or fsdp::Error, and a solution read is written back as text that
// reads back to the same solution.
#include <cstdint>
#include <string>

#include "fsdp/solver/solution.hpp"
#include "reader_contract.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using fsdp::solver::Solution;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto solution =
      fsdp_fuzz::value_or_error("Solution::from_json", [&] { return Solution::from_json(text); });
  if (!solution) {
    return 0;
  }
  fsdp_fuzz::must_succeed("writing the solution back and reading that", [&] {
    const std::string written = solution->to_json();
    if (Solution::from_json(written).to_json() != written) {
      fsdp_fuzz::finding("the solution written back reads as another solution");
    }
  });
  return 0;
}
