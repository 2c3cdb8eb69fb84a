// EnumNames: the one table of an enum's names, which both directions read: name_of(value) prints
// a value's name and parse(text) reads a name back, so the two cannot drift apart, and the list
// an error offers ("expected a, b or c") is the table itself.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {

// How a name given by a user compares with the table's names.
enum class Spelling {
  exact,     // names in files (plan placements, dtypes): byte for byte
  any_case,  // names on command lines: any ASCII case, and '-' for '_' ("shard-grad-op")
};

template <class E>
class EnumNames {
 public:
  struct Name {
    E value;
    const char* name;
    // Said after the name in the list an error offers ("ZeRO-3" -> "full_shard (ZeRO-3)").
    const char* gloss = nullptr;
  };
  // Another spelling parse() accepts for a value; name_of() never prints it.
  struct Alias {
    const char* name;
    E value;
  };

  // what: the enum for people ("sharding mode"), as in "unknown sharding mode 'x'". Every value
  // appears once in names, in the order messages list them.
  EnumNames(std::string what, std::vector<Name> names, std::vector<Alias> aliases = {},
            Spelling spelling = Spelling::exact)
      : what_(std::move(what)),
        names_(std::move(names)),
        aliases_(std::move(aliases)),
        spelling_(spelling) {}

  // The value's name; "unknown" for a value outside the table (a cast integer).
  const char* name_of(E value) const {
    for (const Name& entry : names_) {
      if (entry.value == value) {
        return entry.name;
      }
    }
    return "unknown";
  }

  // The value named by text (a name or an alias, compared as spelling_ says). Throws Error (kind
  // usage) "unknown <what> '<text>'; expected <every name, with its gloss>" otherwise.
  E parse(const std::string& text) const {
    const std::string key = normalized(text);
    for (const Name& entry : names_) {
      if (key == normalized(entry.name)) {
        return entry.value;
      }
    }
    for (const Alias& alias : aliases_) {
      if (key == normalized(alias.name)) {
        return alias.value;
      }
    }
    throw Error(ErrorKind::usage,
                "unknown " + what_ + " " + quoted_name(text) + "; expected " + expected());
  }

  // The names, in the table's order (no aliases).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const Name& entry : names_) {
      out.emplace_back(entry.name);
    }
    return out;
  }

  // "a (gloss), b or c": what parse() accepts, for messages and --help.
  std::string expected() const {
    std::vector<std::string> items;
    for (const Name& entry : names_) {
      items.push_back(entry.gloss ? std::string(entry.name) + " (" + entry.gloss + ")"
                                  : std::string(entry.name));
    }
    return join_alternatives(items);
  }

 private:
  std::string normalized(std::string text) const {
    if (spelling_ == Spelling::any_case) {
      text = to_lower(std::move(text));
      for (char& c : text) {
        c = c == '-' ? '_' : c;
      }
    }
    return text;
  }

  std::string what_;
  std::vector<Name> names_;
  std::vector<Alias> aliases_;
  Spelling spelling_;
};

}  // namespace fsdp
