// ShardedUnit: parameters that are gathered, released and reduce-scattered together (usually the
// parameters of one layer: those of one unit of the ShardingPlan).
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.hpp"
#include "fsdp/shard/sharding_mode.hpp"
#include "fsdp/shard/sharding_plan.hpp"
#include "fsdp/unit/buffer_pool.hpp"
#include "fsdp/unit/memory_tracker.hpp"
#include "fsdp/unit/sharded_parameter.hpp"
#include "fsdp/unit/unit_layout.hpp"

namespace fsdp {

enum class UnitState { sharded, gathering, gathered };
const char* name_of(UnitState state);

// How a unit moves its bytes.
struct UnitOptions {
  // A sharded parameter whose piece on each rank has at least this many bytes is gathered by an
  // all_gather of its own, straight into its full buffer; smaller ones are packed together into
  // one all_gather and copied out. Copying out a large parameter costs as much as moving it.
  std::int64_t direct_gather_bytes = std::int64_t{256} << 10;
  // What stays in pieces (sharding_mode.hpp). full_shard and no_shard units work alike: a
  // no_shard model hands its units a plan in which every parameter is replicated.
  // shard_grad_op and shard_optimizer units keep their whole parameters resident: each rank's
  // piece is a View into them, gather() refreshes them from the pieces and release() only marks
  // them stale. shard_optimizer units also keep their whole gradients resident, and each rank's
  // gradient piece is a View into them.
  ShardingMode mode = ShardingMode::full_shard;
  // Hybrid-sharded data parallel (comm/hybrid_groups.hpp): the ranks that hold the same pieces in
  // the other shard groups. Gradients are reduce-scattered in the unit's group, then each piece is
  // averaged over these ranks, so every replica holds the same pieces and steps alike.
  std::optional<ProcessGroup> replicas;
  // Mixed precision (PyTorch's MixedPrecisionPolicy) for float models, every mode:
  // param_dtype bf16 or fp16 casts each piece while it is copied into the all-gather
  // buffer, so the gather moves 16-bit bytes, and the gathered parameters stay 16-bit
  // (ShardedParameter::half()), also where the mode keeps them from forward to backward; the
  // pieces stay fp32 master weights. full() widens a parameter to float when it is read, a copy
  // that lives until drop_widened() or release() (a Runtime drops them when a scope closes).
  // reduce_dtype bf16 or fp16 reduces the gradients in 16 bits (summed in float and rounded by
  // the MPI operator) and adds the result into the gradient pieces. f32: no cast.
  DType param_dtype = DType::f32;
  DType reduce_dtype = DType::f32;
  // The gradients the unit keeps between the backward and the optimizer step: the pieces, and
  // shard_optimizer's whole gradients. bf16 keeps them in bfloat16 (ZeRO's 2 bytes per element;
  // DeepSpeed's grad_accum_dtype): each reduction's result is added in and rounded, and the
  // optimizers read them widened (ShardedParameter::grad_piece()). What a backward writes,
  // grad(), stays T: a whole unit's sums in 16 bits would lose their low bits at every addition.
  // fp16 is refused: dividing loss-scaled gradients by the scale would take them below float16's
  // range. f32: no cast.
  DType grad_dtype = DType::f32;
};

template <class T>
class ShardedModel;

// Communication is batched per unit, never one collective per small parameter: one all_gather for
// all its small sharded parameters (each rank's pieces packed in one flat buffer), one all_gather
// per large sharded parameter (into place, no copy), one broadcast per owner of its whole
// parameters, nothing for replicated ones; gradients likewise with reduce_scatter, reduce and
// all_reduce. All of a unit's collectives are in flight together. Element type T: float or double.
template <class T>
class ShardedUnit {
 public:
  using View = DeviceView<T>;

  // The parameters plan.parameters()[i] for i in indices, all of unit `name`.
  // Gathered buffers come from pool (shared by the units of a model) and go back to it.
  // Collective over group (and options.replicas): every rank must pass the same name, plan
  // entries and options, else every rank throws fsdp::Error (ErrorKind::mismatch) naming the
  // first that differs (fsdp/comm/configuration_agreement.hpp).
  ShardedUnit(std::string name, ProcessGroup group, const ShardingPlan& plan,
              const std::vector<std::size_t>& indices, std::shared_ptr<MemoryTracker> tracker,
              std::shared_ptr<BufferPool<T>> pool, const UnitOptions& options = {});
  ShardedUnit(const ShardedUnit&) = delete;
  ShardedUnit& operator=(const ShardedUnit&) = delete;
  ~ShardedUnit();

  const std::string& name() const { return name_; }
  UnitState state() const { return state_; }
  std::vector<ShardedParameter<T>>& parameters() { return parameters_; }
  const std::vector<ShardedParameter<T>>& parameters() const { return parameters_; }
  // Throws Error naming the unit's parameters when it has no parameter called name.
  ShardedParameter<T>& parameter(const std::string& name);
  // nullptr when the unit has no parameter called name.
  ShardedParameter<T>* find_parameter(const std::string& name);

  // ---- parameters ----
  // Starts gathering: sharded -> gathering. Error in any other state.
  void gather_async();
  // Makes progress; true once gathered (finishing the gather when its transfers are done).
  bool test_gather();
  // Completes a gather in flight: gathering -> gathered. Error when none is in flight.
  void wait_gather();
  // gather_async() + wait_gather(). Error when already gathered or gathering.
  void gather();
  // Gathers go over `gathers`, a group of the same ranks in the same order (a split of group()),
  // instead of group(): a runtime gives its units a group of their own for the gathers it
  // announces with expect_gather() (a gather in flight completes where it started). Error when
  // the ranks differ.
  void gather_over(ProcessGroup gathers);
  ProcessGroup& gather_group() { return gather_group_; }
  // Announces the unit's next gather on its gather group (ProcessGroup::expect_all_gather and
  // expect_broadcast), so that its signature checks run before gather_async() issues it. The next
  // collectives issued on the gather group must be that gather's. Error unless sharded.
  void expect_gather();
  // Frees the full parameters: gathered -> sharded. No-op when sharded; error while gathering.
  void release();
  // A 16-bit param_dtype: frees the float copies full() widened, keeping the 16-bit gathered
  // parameters (the next full() widens again). No-op otherwise.
  void drop_widened();

  // ---- gradients ----
  // Averages the full-shape gradients written since the last call across the ranks and adds the
  // result to each rank's gradient pieces, then frees the full gradients. A rank that wrote none
  // contributes zeros, so every rank may call it. Works in any state.
  void reduce_scatter_grads();
  // The same reduction, started and not waited for: the collectives (and any 16-bit cast before
  // them) are issued and the call returns. The unit's whole gradients move to the reduction, so
  // grad() starts new ones (shard_optimizer's resident ones in T: grad() waits for the reduction
  // first). A reduction in flight holds those gradients and its communication buffers (counted
  // by the tracker) until it completes. One per unit: a second waits for the first.
  void reduce_scatter_grads_async();
  // A reduction was started and not yet completed by wait_reduction() or test_reduction().
  bool reducing() const { return reduction_.stage != ReductionStage::none; }
  // Makes progress on the reduction in flight; true once it completed (its result is in the
  // gradient pieces) or when none is in flight. Never throws: a failure is kept and rethrown by
  // wait_reduction(), where every rank meets it. may_issue false keeps hybrid sharding's replica
  // all-reduces, which can start only once the reduce-scatter is done, from being issued now: a
  // caller with several units reducing lets only the oldest issue, so that every rank issues
  // them in the same order (ShardedModel does).
  bool test_reduction(bool may_issue = true);
  // Every collective of the reduction in flight has been issued (true when none is in flight).
  bool reduction_issued() const {
    return reduction_.stage != ReductionStage::group || !averages_over_replicas();
  }
  // Completes the reduction in flight (no-op when none); rethrows its failure, after which the
  // unit has no reduction in flight and its gradients of that reduction are lost.
  void wait_reduction();
  // shard_optimizer with grad_dtype bf16: adds the whole gradients written since into the kept
  // bfloat16 whole gradients and frees them, so that micro-batches accumulate without holding T
  // copies of every unit (a runtime folds at the end of each backward scope it does not reduce).
  // No-op otherwise.
  void fold_gradients();
  // True once gradients were reduce-scattered since the last zero_grad().
  bool has_grads() const { return has_grads_; }
  // Zeroes the gradient pieces, and drops whole gradients written and not reduced since.
  void zero_grad();

  // ---- observation ----
  ShardingMode mode() const { return mode_; }
  // UnitOptions::param_dtype: bf16 or fp16 when the gathered parameters are 16-bit.
  DType param_dtype() const { return param_dtype_; }
  // The gathered parameters are 16-bit (param_dtype bf16 or fp16): half() reads them.
  bool gathers_in_half() const;
  // Hybrid sharding: the replica group (UnitOptions::replicas); nullptr without one.
  ProcessGroup* replicas() { return replicas_ ? &*replicas_ : nullptr; }
  // The mode keeps whole parameters from the forward to the backward (shard_grad_op,
  // shard_optimizer): a runtime gathers the unit once per step and releases it after backward.
  bool stays_gathered() const;
  // Whole parameters stay allocated between gathers and the pieces are views into them
  // (stays_gathered() in fp32): gathering costs no memory. With a 16-bit param_dtype the whole
  // parameters are 16-bit, so the fp32 pieces are stored apart and the gathered parameters are
  // allocated at each gather, as under full_shard.
  bool keeps_parameters() const;
  // Whole gradients stay allocated and gradient pieces are views into them (shard_optimizer; in
  // bfloat16 under grad_dtype bf16, beside a transient T buffer that grad() writes).
  bool keeps_gradients() const;
  // UnitOptions::grad_dtype bf16: the kept gradients are bfloat16.
  bool keeps_bfloat16_gradients() const { return grad_dtype_ == DType::bf16; }
  std::int64_t gather_count() const { return gather_count_; }
  std::int64_t release_count() const { return release_count_; }
  // Bytes of the unit's full parameters (a gather holds these, plus the padding of the
  // parameters gathered in place: fewer than N elements each).
  std::int64_t full_bytes() const;
  // A checkpoint's load reads into new memory for the pieces instead of copying into them: where
  // the unit keeps its sharded parameters' pieces in one flat buffer (it is sharded, and its mode
  // does not keep whole parameters), new_pieces() gives a buffer of that layout, uninitialized
  // but for the padding, counted as parameter shards; piece_in(buffer, p) is p's piece in it
  // (empty View for a parameter that is not in the flat buffer: whole or replicated ones). Once
  // every piece of it is written, adopt_pieces(buffer) makes it the unit's: each parameter's
  // shard() is a view into it from then on, and the old buffer is freed (Views taken before
  // keep the old values). new_pieces() is empty where there is no flat buffer or the unit is not
  // sharded (a gather in flight reads the old one).
  TrackedView<T> new_pieces() const;
  View piece_in(const TrackedView<T>& buffer, const ShardedParameter<T>& p) const;
  void adopt_pieces(TrackedView<T> buffer);

  // Where each parameter lives in the unit's buffers on this rank.
  const UnitLayout& layout() const { return layout_; }
  // Where each trainable parameter's gradient lives: the layout of the unit without its frozen
  // parameters (ParameterInfo::trainable), which are never reduced.
  const UnitLayout& gradient_layout() const { return grad_layout_; }
  ProcessGroup& group() { return group_; }
  // The instance the unit's kernels and copies run on; it is fenced before a collective reads
  // what they wrote, and nothing else is.
  const ExecutionSpace& execution_space() const { return space_; }

 private:
  friend class ShardedParameter<T>;
  friend class ShardedModel<T>;  // makes its units without a check each (it checked them all)
                                 // and gives them their replica_reductions_
  ShardedUnit(std::string name, ProcessGroup group, const ShardingPlan& plan,
              const std::vector<std::size_t>& indices, std::shared_ptr<MemoryTracker> tracker,
              std::shared_ptr<BufferPool<T>> pool, const UnitOptions& options,
              bool check_agreement);
  // A gradient buffer the unit keeps (pieces, shard_optimizer's whole gradients): in T, or in
  // bfloat16 under grad_dtype bf16; the other stays unallocated.
  struct KeptGradients {
    TrackedView<T> values;
    TrackedView<std::uint16_t> bfloat16;
  };
  struct OwnerBuffers {       // of the whole parameters of one owner rank (UnitLayout::owners)
    TrackedView<T> storage;   // the owner's persistent copy
    TrackedView<T> gathered;  // everyone else's copy while gathered
  };
  // A parameter of the gradient layout (grad_layout_), by its position there.
  ShardedParameter<T>& grad_parameter(std::size_t position) {
    return parameters_[trained_[position]];
  }

  void require_state(UnitState expected, const char* operation) const;
  View full_gradients();
  void start_gather();
  void abandon_gather();
  void finish_gather();

  void make_resident_parameters();
  void make_resident_gradients();
  KeptGradients keep_gradients(MemoryCategory category, const std::string& label,
                               std::int64_t count);
  // The whole gradients a backward writes are the resident ones (shard_optimizer in T).
  bool writes_resident_gradients() const {
    return keeps_gradients() && !keeps_bfloat16_gradients();
  }
  // shard_optimizer in bfloat16: the reduction's T input, the kept whole gradients plus what was
  // written since (fold_gradients), widened into the buffer grad() wrote.
  void widen_resident_gradients();
  void start_resident_gather();
  void give_back_whole_parameters();
  bool reduces_in_half() const;
  template <class H>
  void start_half_gather();
  template <class H>
  void finish_half_gather();
  // full() of a parameter of a 16-bit gather: its float copy, widened from half().
  void widen(ShardedParameter<T>& parameter);
  void start_half_reduction();
  template <class H>
  void reduce_in_half();
  // A 16-bit buffer of the gather in flight, and of the reduction in flight.
  DeviceView<std::uint16_t> half_buffer(const std::string& label, std::int64_t count);
  DeviceView<std::uint16_t> reduction_half_buffer(const std::string& label, std::int64_t count);
  bool averages_over_replicas() const { return replicas_ && replicas_->size() > 1; }
  void average_over_replicas(const std::vector<TrackedView<T>>& staging, const View& grads,
                             std::vector<Work>& works);
  // The reduction in flight goes on once its collectives completed: 16-bit results widened, then
  // the replicas' average issued or the result added into the pieces; true when finished.
  bool advance_reduction();
  void finish_reduction();
  void release_reduction();
  void reduce_into_resident_gradients(const std::vector<TrackedView<T>>& staging,
                                      const View& grads);

  std::string name_;
  ProcessGroup group_;
  ProcessGroup gather_group_;  // group_, or what gather_over() gave
  ShardingMode mode_ = ShardingMode::full_shard;
  std::optional<ProcessGroup> replicas_;
  // The replicas' average of the gradients goes over this group: replicas_, or in a model a split
  // of it that carries nothing else, since each reduction issues it when its reduce-scatter
  // completes, a point other collectives on replicas_ (agreement checks) do not keep order with.
  std::optional<ProcessGroup> replica_reductions_;
  DType param_dtype_;
  DType reduce_dtype_;
  DType grad_dtype_;
  // A 16-bit gather's or reduction's buffers, in the order they were made; freed when it ends.
  std::vector<TrackedView<std::uint16_t>> half_buffers_;
  // A 16-bit param_dtype: the gathered parameters, in 16 bits, while gathered.
  std::vector<TrackedView<std::uint16_t>> gathered_half_;
  std::shared_ptr<MemoryTracker> tracker_;
  std::vector<ShardedParameter<T>> parameters_;
  std::map<std::string, std::size_t> index_;

  std::shared_ptr<BufferPool<T>> pool_;
  UnitLayout layout_;
  // The layout of the trainable parameters alone, which every gradient buffer and reduction
  // follows (layout_ itself when none is frozen); trained_[k] is the position in parameters_ of
  // its k-th parameter.
  UnitLayout grad_layout_;
  std::vector<std::size_t> trained_;
  // Sharded parameters: rank r's pieces, each padded to ceil(numel / N), back to back in one flat
  // buffer: the packed (small) ones first, then the direct (large) ones.
  ExecutionSpace space_;
  TrackedView<T> flat_shard_;
  KeptGradients flat_grad_shard_;
  std::vector<OwnerBuffers> owners_;        // parallel to layout_.owners
  std::vector<KeptGradients> owner_grads_;  // parallel to grad_layout_.owners; owned ones only
  std::vector<TrackedView<T>> replicated_storage_;
  std::vector<KeptGradients> replicated_grads_;
  // shard_optimizer in bfloat16: the whole gradients kept between steps (in T they are
  // full_grads_ itself).
  KeptGradients resident_grads_;

  UnitState state_ = UnitState::sharded;
  std::vector<Work> in_flight_;
  TrackedView<T> packed_gather_;              // all_gather output of the packed pieces
  std::vector<TrackedView<T>> gather_sends_;  // resident modes: copies of the pieces being sent
  TrackedView<T> packed_full_;                // the packed parameters whole, after copy-out
  std::vector<TrackedView<T>> direct_full_;   // per direct parameter: N padded pieces
  TrackedView<T> full_grads_;
  // A gradient reduction in flight: started by reduce_scatter_grads_async, in its group's
  // collectives, then (hybrid sharding) in the replicas' average, until its result is added into
  // the pieces; failed: abandoned, its error kept for wait_reduction.
  enum class ReductionStage { none, group, replicas, failed };
  struct Reduction {
    ReductionStage stage = ReductionStage::none;
    std::vector<Work> works;
    View grads;                           // the whole gradients being reduced
    TrackedView<T> owned_grads;           // ... unless resident (shard_optimizer in T)
    std::vector<TrackedView<T>> staging;  // outputs, added into the gradient pieces at the end
    TrackedView<T> packed_send;
    std::vector<TrackedView<std::uint16_t>> half_buffers;           // reduce_dtype copies
    std::vector<std::pair<DeviceView<std::uint16_t>, View>> widen;  // 16-bit results, widened
    std::exception_ptr error;
  };
  Reduction reduction_;
  bool has_grads_ = false;
  std::int64_t gather_count_ = 0;
  std::int64_t release_count_ = 0;
};

extern template class ShardedParameter<float>;
extern template class ShardedParameter<double>;
extern template class ShardedUnit<float>;
extern template class ShardedUnit<double>;

}  // namespace fsdp
