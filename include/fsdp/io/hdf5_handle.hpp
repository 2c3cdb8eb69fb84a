// RAII for the HDF5 C API: identifiers closed on scope exit, and HDF5's own error printing
// switched off while fsdp reports errors itself. Used by plan files, checkpoints and fsdp-train.
#pragma once

#include <hdf5.h>

#include <cstdio>

namespace fsdp::hdf5 {

// An hid_t closed by its own H5*close on scope exit (destructors never throw).
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Handle& operator=(Handle&&) = delete;
  ~Handle() {
    if (id_ >= 0) {
      close_(id_);
    }
  }
  hid_t get() const { return id_; }
  // Closes now, reporting failure (a file's close flushes it: its failure must not be ignored).
  herr_t close() {
    const herr_t rc = id_ >= 0 ? close_(id_) : 0;
    id_ = -1;
    return rc;
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 prints its error stack to stderr by default; fsdp reports errors itself, so the automatic
// printing is off while this object lives, and restored afterwards.
class QuietErrorStack {
 public:
  QuietErrorStack() {
    // Both return codes are checked: without the saved handler there is nothing to restore, and
    // if switching printing off fails the stack is merely printed, which loses nothing.
    saved_ = H5Eget_auto2(H5E_DEFAULT, &function_, &data_) >= 0 &&
             H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  }
  QuietErrorStack(const QuietErrorStack&) = delete;
  QuietErrorStack& operator=(const QuietErrorStack&) = delete;
  ~QuietErrorStack() {
    if (saved_ && H5Eset_auto2(H5E_DEFAULT, function_, data_) < 0) {
      std::fprintf(stderr, "fsdp: could not restore HDF5's error printing (H5Eset_auto2)\n");
    }
  }

 private:
  bool saved_ = false;
  H5E_auto2_t function_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace fsdp::hdf5
