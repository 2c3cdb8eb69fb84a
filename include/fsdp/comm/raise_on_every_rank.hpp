// raise_on_every_rank: each rank did its part of a task; when any rank failed, every rank throws
// the failure, so no rank goes on alone into the next collective. The one way fsdp carries an
// exception between ranks: on_every_rank and on_root are built on it.
#pragma once

#include <exception>
#include <string>

#include "fsdp/comm/process_group.hpp"

namespace fsdp {

// Collective over group. failure is this rank's exception (null when it succeeded). When any
// rank failed, every rank throws fsdp::Error with the kind of the lowest failing rank's
// fsdp::Error (usage for another exception) and the message
//   "rank <r> could not <task>: <its message>"   (or "could not <task>: ..." in a group of one).
void raise_on_every_rank(ProcessGroup& group, const std::string& task,
                         const std::exception_ptr& failure);

// Collective over group. Runs work() on every rank; when it throws on any rank, every rank throws
// as raise_on_every_rank says, so a file that only one rank cannot read never leaves the others
// waiting in a collective.
template <class Work>
void on_every_rank(ProcessGroup& group, const std::string& task, Work&& work) {
  std::exception_ptr failure;
  try {
    work();
  } catch (...) {
    failure = std::current_exception();
  }
  raise_on_every_rank(group, task, failure);
}

}  // namespace fsdp
