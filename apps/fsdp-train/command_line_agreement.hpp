// Every rank of an fsdp-train job must run with the same options: ranks started with different
// --seed, --lr or --batch-size would otherwise train to a wrong model (rank 0's plan silently
// wins) or fail deep inside MPI. Before anything collective happens, rank 0's options (as parsed:
// "--epochs 3" and "--epochs=3" agree) go to every rank, and a rank whose options differ names the
// first that does; every rank then fails with that message.
#pragma once

#include <sstream>
#include <string>

#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/process_group.hpp"
#include "fsdp/core/error.hpp"
#include "train.hpp"

namespace fsdp_train {

// The end of every disagreement's message (main exits with the usage code on it).
constexpr const char* kSameCommandLine = "every rank must be given the same command line";
// What a rank that could not parse its command line takes part in the agreement with.
constexpr const char* kUnparsable = "(does not parse) ";

// options: one "name=value" line per option, in a fixed order (CLI11's config_to_str), or
// kUnparsable + the parse error on a rank that could not parse its command line. Collective;
// throws AgreedError on every rank when any rank's options differ from rank 0's.
inline void require_same_command_line(fsdp::ProcessGroup& group, const std::string& options) {
  std::string first = options;
  fsdp::broadcast_string(group, first, 0);
  on_every_rank(group, "agree on the command line", [&] {
    if (options == first) {
      return;
    }
    const auto unparsable = [](const std::string& text) { return text.rfind(kUnparsable, 0) == 0; };
    if (unparsable(options) || unparsable(first)) {
      const bool mine = unparsable(options);
      throw fsdp::Error((mine ? "its" : "rank 0's") +
                        std::string(" command line does not parse (") +
                        (mine ? options : first).substr(std::string(kUnparsable).size()) +
                        ") but " + (mine ? "rank 0's" : "its") + " does; " + kSameCommandLine);
    }
    std::istringstream mine(options), theirs(first);
    std::string a, b;
    while (std::getline(mine, a) && std::getline(theirs, b) && a == b) {
    }
    const auto value = [](const std::string& line) { return line.substr(line.find('=') + 1); };
    throw fsdp::Error("--" + a.substr(0, a.find('=')) + " is " + value(a) + " here but " +
                      value(b) + " on rank 0; " + kSameCommandLine);
  });
}

}  // namespace fsdp_train
