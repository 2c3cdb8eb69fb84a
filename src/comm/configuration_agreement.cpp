#include "fsdp/comm/configuration_agreement.hpp"

#include <cstdlib>
#include <optional>

#include "fsdp/comm/broadcast_string.hpp"
#include "fsdp/comm/control_words.hpp"
#include "fsdp/comm/first_disagreement.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"
#include "hash.hpp"

namespace fsdp {
namespace {

// Values can be long (a parameter's description, a list of units): a message quotes the start.
constexpr std::size_t kExcerptBytes = 120;

std::string excerpt(const std::string& value) {
  std::string shown = value.substr(0, kExcerptBytes);
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = '?';
    }
  }
  if (value.size() > kExcerptBytes) {
    shown += "... (" + std::to_string(value.size()) + " bytes)";
  }
  return shown;
}

std::string quoted(const Configuration::Setting& setting) {
  return setting.name + " = " + excerpt(setting.value);
}

// Where mine first differs from reference (rank 0's), in words that name both.
std::optional<Disagreement> compare(const Configuration& reference, const Configuration& mine,
                                    const std::string& reference_label,
                                    const std::string& my_label) {
  const auto& theirs = reference.settings();
  const auto& ours = mine.settings();
  for (std::size_t i = 0; i < std::max(theirs.size(), ours.size()); ++i) {
    if (i >= theirs.size()) {
      return Disagreement{i, my_label + " has " + quoted(ours[i]) + ", which " + reference_label +
                                 " does not have"};
    }
    if (i >= ours.size()) {
      return Disagreement{i, reference_label + " has " + quoted(theirs[i]) + ", which " + my_label +
                                 " does not have"};
    }
    if (theirs[i].name != ours[i].name) {
      return Disagreement{i, reference_label + " has " + quoted(theirs[i]) + " where " + my_label +
                                 " has " + quoted(ours[i])};
    }
    if (theirs[i].value != ours[i].value) {
      return Disagreement{i, theirs[i].name + " is " + excerpt(theirs[i].value) + " on " +
                                 reference_label + " but " + excerpt(ours[i].value) + " on " +
                                 my_label};
    }
  }
  return std::nullopt;
}

// Collective over group: rank 0's settings go to every rank, each compares its own, and every rank
// returns the first difference found (by setting index, then rank), if any. label names a rank of
// the group in the message: "rank", "replica".
std::optional<Disagreement> difference_in(ProcessGroup& group, const Configuration& mine,
                                          const std::string& label) {
  std::string text = group.rank() == 0 ? mine.serialize() : std::string();
  broadcast_string(group, text, 0);
  std::optional<Disagreement> found;
  try {
    found = compare(Configuration::deserialize(mine.subject(), text), mine, label + " 0",
                    label + " " + std::to_string(group.rank()));
  } catch (const std::exception& error) {
    found = Disagreement{0, message_of(error)};
  }
  return first_disagreement(group, found);
}

std::int64_t as_word(std::uint64_t value) {
  return static_cast<std::int64_t>(value);  // two's complement: the bits are kept
}

}  // namespace

Configuration& Configuration::text(const std::string& name, const std::string& value) {
  settings_.push_back(Setting{name, value});
  return *this;
}

Configuration& Configuration::integer(const std::string& name, std::int64_t value) {
  return text(name, std::to_string(value));
}

Configuration& Configuration::number(const std::string& name, double value) {
  return text(name, number_text(value));
}

Configuration& Configuration::flag(const std::string& name, bool value) {
  return text(name, value ? "true" : "false");
}

std::string Configuration::serialize() const {
  std::string text;
  for (const Setting& setting : settings_) {
    text += std::to_string(setting.name.size()) + ":" + std::to_string(setting.value.size()) + ":" +
            setting.name + setting.value;
  }
  return text;
}

Configuration Configuration::deserialize(std::string subject, const std::string& text) {
  Configuration configuration(std::move(subject));
  std::size_t at = 0;
  const auto read_size = [&]() -> std::size_t {
    const std::size_t colon = text.find(':', at);
    require(colon != std::string::npos && colon > at && colon - at <= 19,
            "the " + configuration.subject() + " from rank 0 is malformed at byte " +
                std::to_string(at));
    const std::size_t size = std::strtoull(text.substr(at, colon - at).c_str(), nullptr, 10);
    at = colon + 1;
    return size;
  };
  while (at < text.size()) {
    const std::size_t name_size = read_size();
    const std::size_t value_size = read_size();
    require(name_size <= text.size() - at && value_size <= text.size() - at - name_size,
            "the " + configuration.subject() + " from rank 0 is cut short");
    configuration.text(text.substr(at, name_size), text.substr(at + name_size, value_size));
    at += name_size + value_size;
  }
  return configuration;
}

std::uint64_t Configuration::hash() const {
  const std::string text = serialize();
  return detail::fnv1a(text.data(), text.size(), detail::fnv1a(subject_.data(), subject_.size()));
}

void require_same_configuration(const Configuration& configuration, ProcessGroup& group,
                                ProcessGroup* replicas) {
  // The least and the greatest hash over the ranks in one all-reduce: min of (h, ~h) is
  // (least h, ~greatest h). Over the shard group, then over the replicas, it covers the model.
  const std::int64_t hash = as_word(configuration.hash());
  std::int64_t range[2] = {hash, ~hash};
  all_reduce_words(group, range, 2, ReduceOp::min);
  if (replicas != nullptr) {
    all_reduce_words(*replicas, range, 2, ReduceOp::min);
  }
  if (range[0] == ~range[1]) {
    return;
  }
  // Some rank differs, and every rank knows it: find the first difference for the message. With
  // replicas, a rank reports what its shard group found, else what its replica group found (at
  // the same setting, a shard group's finding comes first); the lowest finding over the shard
  // group and then over the replicas is the same on every rank, since every replica group has
  // one rank of each shard group.
  std::optional<Disagreement> found = difference_in(group, configuration, "rank");
  if (replicas != nullptr) {
    std::optional<Disagreement> across = difference_in(*replicas, configuration, "replica");
    if (found) {
      found->index = 2 * found->index;
    } else if (across) {
      found = Disagreement{2 * across->index + 1, across->message};
    }
    found = first_disagreement(*replicas, first_disagreement(group, found));
  }
  const std::string& subject = configuration.subject();
  throw Error(ErrorKind::mismatch,
              "ranks disagree on the " + subject + ": " +
                  (found ? found->message : "their settings hash differently") +
                  "; every rank must pass the same " + subject);
}

}  // namespace fsdp
