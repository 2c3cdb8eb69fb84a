// JsonState: a Stateful that is nothing but its JSON text, for state a caller keeps as text: the C
// and Fortran checkpoint objects (fsdp_checkpoint_set_object), or a C++ caller's few numbers that
// need no class of their own.
#pragma once

#include <string>

#include "fsdp/core/stateful.hpp"

namespace fsdp {

class JsonState : public Stateful {
 public:
  // text must be JSON (Error, kind usage, naming what is wrong otherwise).
  explicit JsonState(std::string text = "null");

  const std::string& text() const { return text_; }
  // Replaces the text; Error (kind usage) and no change unless text is JSON.
  void set_text(std::string text);

  std::string state_dict() const override { return text_; }
  // Error (kind mismatch) unless state is JSON: any JSON value is a JsonState's state.
  void check_state_dict(const std::string& state) const override;
  void load_state_dict(const std::string& state) override { text_ = state; }

 private:
  std::string text_;
};

}  // namespace fsdp
