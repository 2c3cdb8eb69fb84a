// Computation graphs (fsdp-solve --graph, Graph::from_json): any bytes give a graph or
// fsdp::Error, and a graph read is written back (Graph::to_json, fsdp-solve --write-graph) as
// text that reads back to the same graph.
#include <cstdint>
#include <string>

#include "fsdp/solver/graph.hpp"
#include "reader_contract.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using fsdp::solver::Graph;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto graph =
      fsdp_fuzz::value_or_error("Graph::from_json", [&] { return Graph::from_json(text); });
  if (!graph) {
    return 0;
  }
  fsdp_fuzz::must_succeed("writing the graph back and reading that", [&] {
    const std::string written = graph->to_json();
    if (Graph::from_json(written).to_json() != written) {
      fsdp_fuzz::finding("the graph written back reads as another graph");
    }
  });
  return 0;
}
