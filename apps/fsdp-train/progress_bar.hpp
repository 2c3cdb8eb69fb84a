// fsdp-train's progress within an epoch, on rank 0's terminal: a bar with steps/s and the time
// left in the epoch, redrawn at most kRedrawsPerSecond times a second, erased before the next
// line of the table. Off when stdout is not a terminal (redirected to a file, or under srun
// without --pty), and when the terminal has no size: Open MPI's mpiexec gives every rank a
// pseudo-terminal of 0 columns whether its own output is a terminal or a file (open-mpi/ompi
// issue 7868), so a bar there would fill log files with redraws.
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace fsdp_train {

class ProgressBar {
 public:
  static constexpr int kRedrawsPerSecond = 5;
  static constexpr int kWidth = 30;

  // enabled: the caller's decision (rank 0, not --json); the bar also needs a terminal.
  explicit ProgressBar(bool enabled) : on_(enabled && sized_terminal()) {}

  void start_epoch(std::int64_t epoch, std::int64_t epochs, std::int64_t steps) {
    epoch_ = epoch;
    epochs_ = epochs;
    steps_ = steps;
    started_ = Clock::now();
    drawn_ = started_;
  }

  // After step `done` (1-based) of the epoch.
  void step(std::int64_t done) {
    if (!on_) {
      return;
    }
    const auto now = Clock::now();
    if (now - drawn_ < std::chrono::milliseconds(1000 / kRedrawsPerSecond) || done >= steps_) {
      return;
    }
    drawn_ = now;
    const double seconds = std::chrono::duration<double>(now - started_).count();
    const double rate = static_cast<double>(done) / seconds;
    const auto filled = static_cast<int>(kWidth * done / steps_);
    const std::string bar = std::string(static_cast<std::size_t>(filled), '#') +
                            std::string(static_cast<std::size_t>(kWidth - filled), '.');
    std::printf("\r\033[Kepoch %lld/%lld [%s] %lld/%lld steps, %.0f steps/s, %.1f s left",
                static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_), bar.c_str(),
                static_cast<long long>(done), static_cast<long long>(steps_), rate,
                static_cast<double>(steps_ - done) / rate);
    std::fflush(stdout);
    visible_ = true;
  }

  // Erases the bar before a line is printed in its place.
  void clear() {
    if (visible_) {
      std::printf("\r\033[K");
      std::fflush(stdout);
      visible_ = false;
    }
  }

 private:
  static bool sized_terminal() {
    struct winsize size {};
    return ::isatty(STDOUT_FILENO) != 0 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 &&
           size.ws_col > 0;
  }
  using Clock = std::chrono::steady_clock;
  bool on_;
  bool visible_ = false;
  std::int64_t epoch_ = 0, epochs_ = 0, steps_ = 1;
  Clock::time_point started_, drawn_;
};

}  // namespace fsdp_train
