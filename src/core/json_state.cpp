#include "fsdp/core/json_state.hpp"

#include <utility>

#include "fsdp/core/error.hpp"
#include "json_input.hpp"

namespace fsdp {

namespace {

// Error (kind) unless text is JSON.
void require_json(const std::string& text, ErrorKind kind) {
  try {
    parse_json_input(text, "the object's state");
  } catch (const Error& e) {
    throw Error(kind, e.message());
  }
}

}  // namespace

JsonState::JsonState(std::string text) : text_(std::move(text)) {
  require_json(text_, ErrorKind::usage);
}

void JsonState::set_text(std::string text) {
  require_json(text, ErrorKind::usage);
  text_ = std::move(text);
}

void JsonState::check_state_dict(const std::string& state) const {
  require_json(state, ErrorKind::mismatch);
}

}  // namespace fsdp
