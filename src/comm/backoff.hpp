// How a rank waits for a collective without taking the core from the ranks it waits for.
//
// A busy poll is fastest when every rank has a core of its own, and ruinous when they do not: a
// job oversubscribed on its cores, or on hyper-threads, under srun (which, unlike mpiexec, does
// not tell Open MPI to yield) spends its time slices polling while the rank that would complete
// the collective waits for a core (fsdp-train ran 20x slower). So a wait polls freely for a few
// microseconds (a collective that is nearly done costs nothing extra), then yields the core
// between polls, then sleeps between polls, each sleep twice the last up to a bound: a long wait
// costs almost no CPU, and a completion is noticed within kMaxSleep.
//
// The bound stays short (kShortSleep) for the first kPatience of a wait. A transfer in flight
// advances only while its ranks poll (Open MPI progresses non-blocking collectives inside MPI
// calls, and a large message takes several handshakes), so a rank asleep for a millisecond holds
// up the others' transfers too: with 1 ms from the start, fsdp-train on 4 ranks of 2 cores took
// a median 10.8 s instead of 9.4 (docs/performance.md, "Waiting").
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace fsdp {

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;

  // Spinning this long costs at most a few microseconds of a core that may be needed elsewhere.
  static constexpr std::chrono::microseconds kSpin{20};
  // Then sched_yield: another runnable rank on this core runs at once, otherwise we poll again.
  static constexpr std::chrono::microseconds kYield{1000};
  // Then sleeps from kFirstSleep, doubling, at most kShortSleep until the wait has lasted
  // kPatience, at most kMaxSleep after.
  static constexpr std::chrono::microseconds kFirstSleep{5};
  static constexpr std::chrono::microseconds kShortSleep{50};
  static constexpr std::chrono::milliseconds kPatience{100};
  static constexpr std::chrono::microseconds kMaxSleep{1000};

  // Call between two polls of the thing waited for.
  void pause() {
    const auto waited = Clock::now() - start_;
    if (waited < kSpin) {
      return;
    }
    if (waited < kSpin + kYield) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    const auto bound = waited < kPatience ? std::chrono::duration_cast<Clock::duration>(kShortSleep)
                                          : std::chrono::duration_cast<Clock::duration>(kMaxSleep);
    sleep_ = std::min(sleep_ * 2, bound);
  }

 private:
  Clock::time_point start_ = Clock::now();
  Clock::duration sleep_ = kFirstSleep;
};

}  // namespace fsdp
