#include "fsdp/comm/work.hpp"

#include <cstdio>
#include <exception>
#include <utility>

namespace fsdp {

Work::Work(std::unique_ptr<PendingOperation> operation) : operation_(std::move(operation)) {}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    wait_noexcept();
    operation_ = std::move(other.operation_);
    resources_ = std::move(other.resources_);
  }
  return *this;
}

Work::~Work() {
  wait_noexcept();
}

void Work::wait() {
  if (operation_) {
    try {
      operation_->wait();
    } catch (...) {
      finish();
      throw;
    }
    finish();
  }
}

bool Work::test() {
  if (operation_) {
    bool done = false;
    try {
      done = operation_->test();
    } catch (...) {
      finish();
      throw;
    }
    if (done) {
      finish();
    }
  }
  return completed();
}

void Work::keep_alive(std::shared_ptr<const void> resource) {
  resources_.push_back(std::move(resource));
}

void Work::finish() {
  operation_.reset();
  resources_.clear();
}

void Work::wait_noexcept() noexcept {
  try {
    wait();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fsdp: a Work destroyed before completion failed while waiting: %s\n",
                 error.what());
  }
}

void wait_all(std::vector<Work>& works) {
  std::exception_ptr first;
  for (Work& work : works) {
    try {
      work.wait();
    } catch (...) {
      if (!first) {
        first = std::current_exception();
      }
    }
  }
  if (first) {
    std::rethrow_exception(first);
  }
}

}  // namespace fsdp
