// Stateful: an object whose state goes into a checkpoint beside the model's tensors, as JSON
// text (PyTorch's Stateful, with the check split from the load so that a checkpoint restores all
// of its objects or none). A learning-rate schedule, a data reader's position, the loss scaler:
// anything a resume needs that is not a sharded tensor. docs/checkpoints.md shows how a
// checkpoint stores them.
#pragma once

#include <map>
#include <string>

namespace fsdp {

class Stateful {
 public:
  virtual ~Stateful() = default;

  // This object's state as JSON text (an object, array, number, string or literal). A save calls
  // it once, when it is called (a save in the background too), and stores rank 0's.
  virtual std::string state_dict() const = 0;

  // Throws fsdp::Error when state (what state_dict gave, read back from a checkpoint) cannot be
  // loaded into this object: the message says what is wrong and what would be right. Changes
  // nothing. A load calls it on every rank before anything changes; when it throws on any rank,
  // the load throws on every rank and changes nothing.
  virtual void check_state_dict(const std::string& state) const = 0;

  // Loads state that check_state_dict accepted. Called once the model and the optimizer are
  // loaded, so it must not fail: everything that can be wrong belongs in check_state_dict.
  virtual void load_state_dict(const std::string& state) = 0;
};

// Named objects a checkpoint saves and restores, by name (the name is their place in the file;
// not empty, at most 1024 bytes, no NUL). The objects are the caller's; a checkpoint only calls
// them.
using StatefulObjects = std::map<std::string, Stateful*>;

}  // namespace fsdp
