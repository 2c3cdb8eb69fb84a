// Configuration agreement: every rank that builds a model, a runtime, an optimizer or a sampler
// must give it the same settings. Ranks that do not would train different models that fsdp
// averages into a wrong one, or issue collectives that do not match. The constructors check it
// in one small collective (a hash of the settings) and fail on every rank, naming the first
// setting that differs, when ranks disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.hpp"

namespace fsdp {

// The settings of one object, by name, as text, in a fixed order. Numbers are written so that
// two of them have the same text exactly when they are equal (the shortest text that reads back
// as the same double), so "0.1" on one rank and 0.1 + 1e-17 on another differ.
class Configuration {
 public:
  struct Setting {
    std::string name;
    std::string value;
  };

  // subject names what is configured, in messages: "ranks disagree on the <subject>".
  explicit Configuration(std::string subject) : subject_(std::move(subject)) {}

  Configuration& text(const std::string& name, const std::string& value);
  Configuration& integer(const std::string& name, std::int64_t value);
  Configuration& number(const std::string& name, double value);
  Configuration& flag(const std::string& name, bool value);

  const std::string& subject() const { return subject_; }
  const std::vector<Setting>& settings() const { return settings_; }
  // The same on every rank and platform for the same settings.
  std::uint64_t hash() const;

  // Length-prefixed text of the settings (names and values may hold any byte), and back.
  std::string serialize() const;
  static Configuration deserialize(std::string subject, const std::string& text);

 private:
  std::string subject_;
  std::vector<Setting> settings_;
};

// Collective over group. Returns when every rank passed the same settings; otherwise every rank
// throws fsdp::Error (ErrorKind::mismatch) naming the first setting that differs and two ranks
// that hold different values:
//   "ranks disagree on the optimizer settings: lr is 0.001 on rank 0 but 0.01 on rank 2; every
//    rank must pass the same optimizer settings"
// One all-reduce of 16 bytes when the ranks agree. replicas (hybrid sharding: the ranks that hold
// the same pieces in the other shard groups) extends the check to every rank of the model, with
// one more all-reduce; "replica r" then names the r-th rank of the replica group.
void require_same_configuration(const Configuration& configuration, ProcessGroup& group,
                                ProcessGroup* replicas = nullptr);

}  // namespace fsdp
