// fsdp-train's progress within an epoch, on rank 0's terminal: a bar with steps/s and the time
// left in the epoch, redrawn at most kRedrawsPerSecond times a second, erased before the next
// line of the table. Off when stdout is not a terminal (redirected to a file, or under srun
// without --pty), and when the terminal has no size (terminal_width.hpp: Open MPI's mpiexec
// writing to a file), so that redraws do not fill log files. The line is fitted to the terminal's
// width at each redraw: a longer one would wrap, and erasing erases only the line the cursor is
// on, so every redraw would leave a line of bar behind.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "../common/terminal_width.hpp"

namespace fsdp_train {

class ProgressBar {
 public:
  static constexpr int kRedrawsPerSecond = 5;
  static constexpr int kWidth = 30;  // the bar's, where the terminal has room

  // enabled: the caller's decision (rank 0, not --json); the bar also needs a terminal.
  explicit ProgressBar(bool enabled)
      : on_(enabled && fsdp_apps::terminal_columns(STDOUT_FILENO) > 0) {}

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
    char numbers[128];
    std::snprintf(numbers, sizeof numbers, "] %lld/%lld steps, %.0f steps/s, %.1f s left",
                  static_cast<long long>(done), static_cast<long long>(steps_), rate,
                  static_cast<double>(steps_ - done) / rate);
    const std::string head =
        "epoch " + std::to_string(epoch_ + 1) + "/" + std::to_string(epochs_) + " [";
    // The last column stays empty: a line that fills it leaves some terminals' cursor on the next.
    const int room = fsdp_apps::terminal_columns(STDOUT_FILENO) - 1;
    const int width = std::min<int>(kWidth, room - static_cast<int>(head.size()) -
                                                static_cast<int>(std::string(numbers).size()));
    std::string line = head;
    if (width >= 5) {
      const auto filled = static_cast<int>(width * done / steps_);
      line += std::string(static_cast<std::size_t>(filled), '#') +
              std::string(static_cast<std::size_t>(width - filled), '.');
    }
    line += numbers;
    line.resize(std::min(line.size(), static_cast<std::size_t>(std::max(room, 0))));
    std::printf("\r\033[K%s", line.c_str());
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
  using Clock = std::chrono::steady_clock;
  bool on_;
  bool visible_ = false;
  std::int64_t epoch_ = 0, epochs_ = 0, steps_ = 1;
  Clock::time_point started_, drawn_;
};

}  // namespace fsdp_train
