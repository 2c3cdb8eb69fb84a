#include "fsdp/comm/dialled_network.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "dialled_backend.hpp"
#include "fsdp/comm/forwarding_backend.hpp"
#include "fsdp/comm/ring_traffic.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

namespace fsdp {

double DialledNetwork::seconds(double most_bytes_sent, int ranks) const {
  return ranks <= 1 || !on() ? 0.0 : latency_s + most_bytes_sent / bytes_per_s;
}

std::string DialledNetwork::text() const {
  return number_text(bytes_per_s) + "," + number_text(latency_s);
}

DialledNetwork parse_network(const std::string& text) {
  const std::string accepted =
      "; give BANDWIDTH,LATENCY: bytes per second > 0 and seconds >= 0, e.g. 25e9,5e-6";
  const auto comma = text.find(',');
  require(comma != std::string::npos, "network '" + text + "' has no comma" + accepted);
  const auto number = [&](const std::string& part, const char* what) {
    char* end = nullptr;
    const double value = std::strtod(part.c_str(), &end);
    require(!part.empty() && end == part.c_str() + part.size() && std::isfinite(value),
            "network '" + text + "': " + what + " '" + part + "' is not a number" + accepted);
    return value;
  };
  DialledNetwork network;
  network.bytes_per_s = number(text.substr(0, comma), "the bandwidth");
  network.latency_s = number(text.substr(comma + 1), "the latency");
  require(network.bytes_per_s > 0 && network.latency_s >= 0,
          "network '" + text + "' out of range" + accepted);
  return network;
}

double NetworkLink::deliver(double now, double seconds) {
  free_at_ = std::max(now, free_at_) + seconds;
  return free_at_;
}

namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_now() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Complete once the operation underneath is and the link has delivered it.
class DeliveredOperation final : public PendingOperation {
 public:
  DeliveredOperation(std::unique_ptr<PendingOperation> inner, double delivered_at)
      : inner_(std::move(inner)),
        delivered_at_(Clock::time_point(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(delivered_at)))) {}
  bool test() override {
    inner_done_ = inner_done_ || inner_->test();
    return inner_done_ && Clock::now() >= delivered_at_;
  }
  void wait() override {
    if (!inner_done_) {
      inner_->wait();
      inner_done_ = true;
    }
    std::this_thread::sleep_until(delivered_at_);
  }

 private:
  std::unique_ptr<PendingOperation> inner_;
  Clock::time_point delivered_at_;
  bool inner_done_ = false;
};

class DialledBackend final : public ForwardingBackend {
 public:
  DialledBackend(std::shared_ptr<Backend> inner, DialledNetwork network,
                 std::shared_ptr<NetworkLink> link)
      : ForwardingBackend(std::move(inner)), network_(network), link_(std::move(link)) {}

  std::unique_ptr<PendingOperation> all_gather(const void* send, void* recv, std::size_t count,
                                               DType dtype, const std::string& problem) override {
    return delivered(ForwardingBackend::all_gather(send, recv, count, dtype, problem),
                     ring::all_gather(count, size()), dtype);
  }
  std::unique_ptr<PendingOperation> all_gather_v(const void* send, std::size_t send_count,
                                                 void* recv, const std::vector<std::size_t>& counts,
                                                 DType dtype, const std::string& problem) override {
    return delivered(
        ForwardingBackend::all_gather_v(send, send_count, recv, counts, dtype, problem),
        ring::all_gather_v(counts, size()), dtype);
  }
  std::unique_ptr<PendingOperation> reduce_scatter(const void* send, void* recv, std::size_t count,
                                                   DType dtype, ReduceOp op,
                                                   const std::string& problem) override {
    return delivered(ForwardingBackend::reduce_scatter(send, recv, count, dtype, op, problem),
                     ring::reduce_scatter(count, size()), dtype);
  }
  std::unique_ptr<PendingOperation> all_reduce(const void* send, void* recv, std::size_t count,
                                               DType dtype, ReduceOp op,
                                               const std::string& problem) override {
    return delivered(ForwardingBackend::all_reduce(send, recv, count, dtype, op, problem),
                     ring::all_reduce(count, size()), dtype);
  }
  // The root sends the most of a broadcast, a rank that is not the root the most of a reduce.
  std::unique_ptr<PendingOperation> broadcast(void* data, std::size_t count, DType dtype, int root,
                                              const std::string& problem) override {
    return delivered(ForwardingBackend::broadcast(data, count, dtype, root, problem),
                     ring::broadcast(count, size(), true), dtype);
  }
  std::unique_ptr<PendingOperation> reduce(const void* send, void* recv, std::size_t count,
                                           DType dtype, ReduceOp op, int root,
                                           const std::string& problem) override {
    return delivered(ForwardingBackend::reduce(send, recv, count, dtype, op, root, problem),
                     ring::reduce(count, size(), false), dtype);
  }
  std::unique_ptr<PendingOperation> scatter_v(const void* send,
                                              const std::vector<std::size_t>& counts, void* recv,
                                              std::size_t recv_count, DType dtype, int root,
                                              const std::string& problem) override {
    return delivered(
        ForwardingBackend::scatter_v(send, counts, recv, recv_count, dtype, root, problem),
        ring::scatter_v(counts, root, root), dtype);
  }
  std::unique_ptr<PendingOperation> barrier() override {
    return delivered(ForwardingBackend::barrier(), 0, DType::f32);
  }

 protected:
  std::shared_ptr<Backend> wrap(std::shared_ptr<Backend> inner) const override {
    return std::make_shared<DialledBackend>(std::move(inner), network_, link_);  // one link
  }

 private:
  std::unique_ptr<PendingOperation> delivered(std::unique_ptr<PendingOperation> inner,
                                              std::int64_t elements, DType dtype) {
    const double bytes = static_cast<double>(elements) * static_cast<double>(size_of(dtype));
    return std::make_unique<DeliveredOperation>(
        std::move(inner), link_->deliver(seconds_now(), network_.seconds(bytes, size())));
  }

  DialledNetwork network_;
  std::shared_ptr<NetworkLink> link_;
};

}  // namespace

std::shared_ptr<Backend> dialled_backend(std::shared_ptr<Backend> inner, DialledNetwork network) {
  return std::make_shared<DialledBackend>(std::move(inner), network,
                                          std::make_shared<NetworkLink>());
}

}  // namespace detail
}  // namespace fsdp
