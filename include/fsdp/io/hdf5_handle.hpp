// RAII for the HDF5 C API: identifiers closed on scope exit, and HDF5's own error printing
// switched off while fsdp reports errors itself. Used by plan files, checkpoints and fsdp-train.
#pragma once

#include <hdf5.h>

#include <cstdio>
#include <string>

#include "fsdp/core/error.hpp"

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

// For a program that reports every HDF5 failure itself, as fsdp's tools do: HDF5's automatic
// error printing off for the rest of the process, its exit included. libhdf5 1.10.8 leaks memory
// when it reads a damaged object header (one whose checksum fails, such as a checkpoint's root
// group: H5Gopen2 fails, and no identifier is left open, fsdp's or the caller's), and at exit,
// with printing on, it then prints "HDF5: infinite loop closing library" after fsdp's own clean
// error (QuietErrorStack restores printing after each read). A 12-line C program shows the same;
// fuzz/findings/README.md lists such inputs.
inline void stop_error_printing_for_the_process() {
  // Checked: if it fails, HDF5 merely prints what fsdp reports too, which loses nothing.
  if (H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) < 0) {
    std::fprintf(stderr, "fsdp: could not switch HDF5's error printing off (H5Eset_auto2)\n");
  }
}

// The HDF5 return-code checks of one file: a failed call throws fsdp::Error (kind io) naming the
// call, the object and the file, e.g. "HDF5 H5Dopen2 failed for dataset 'x' in plan file 'p.h5'".
class Checker {
 public:
  // file: how messages name the file, e.g. "plan file 'p.h5'"; path: the file itself.
  Checker(std::string path, std::string file) : path_(std::move(path)), file_(std::move(file)) {}
  const std::string& path() const { return path_; }
  // How messages name the file.
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(const std::string& call, const std::string& object) const {
    throw Error(ErrorKind::io, "HDF5 " + call + " failed for " + object + " in " + file_);
  }
  hid_t check(hid_t id, const std::string& call, const std::string& object) const {
    if (id < 0) {
      fail(call, object);
    }
    return id;
  }
  void check_status(herr_t rc, const std::string& call, const std::string& object) const {
    if (rc < 0) {
      fail(call, object);
    }
  }

 private:
  std::string path_;
  std::string file_;
};

}  // namespace fsdp::hdf5
