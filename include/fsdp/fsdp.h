/* fsdp's C API: sharded models, the forward/backward begin/end calls and the optimizers, for C
 * (C99 or later) and, through the Fortran module `fsdp`, for Fortran. docs/c-fortran.md.
 *
 * Every function returns FSDP_SUCCESS (0) or one of the fsdp_error codes, and on failure leaves
 * a message in fsdp_last_error(). No C++ exception ever leaves these functions. Handles are
 * opaque; the destroy functions accept NULL and never fail. Calls on one handle are not
 * thread-safe (like the C++ objects behind them). */
#ifndef FSDP_FSDP_H
#define FSDP_FSDP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. The message of fsdp_last_error() says what was wrong and what would be right. */
enum fsdp_error {
  FSDP_SUCCESS = 0,
  /* The library refused the call: a rule of the call broken (an optimizer step without
   * gradients, a runtime order with a unit missing or repeated), or a failure without a code of
   * its own below. */
  FSDP_ERROR_LIBRARY = 1,
  /* A NULL handle or pointer, a dtype or count out of range, a strategy name not known. */
  FSDP_ERROR_INVALID_ARGUMENT = 2,
  /* A unit or parameter name the model does not have (the message names it). */
  FSDP_ERROR_UNKNOWN_NAME = 3,
  /* A begin/end call out of order: a scope opened while another is open, out of the registered
   * order, closed without being open, a step finished half way. Nothing changed: the expected
   * call still works. */
  FSDP_ERROR_ORDER = 4,
  /* A call the handle's state does not allow: a parameter added after fsdp_model_shard, a model
   * used before it, a gradient outside a backward scope, a runtime whose step failed, fsdp not
   * initialized, fsdp_finalize with handles alive. */
  FSDP_ERROR_STATE = 5,
  /* The user's callback returned nonzero. */
  FSDP_ERROR_CALLBACK = 6,
  FSDP_ERROR_OUT_OF_MEMORY = 7,
  /* Any other exception: a bug in fsdp; please report the message. */
  FSDP_ERROR_INTERNAL = 8,
  /* The ranks disagree: the arguments of a collective, the plan. The group stays usable. */
  FSDP_ERROR_MISMATCH = 9,
  /* A collective did not complete in time (FSDP_COLLECTIVE_TIMEOUT_S): the group is unusable;
   * end the job (MPI_Abort). */
  FSDP_ERROR_TIMEOUT = 10,
  /* MPI or NCCL reported a failure. */
  FSDP_ERROR_COMMUNICATION = 11,
  /* A file cannot be read or written, or is not what it must be: not an fsdp checkpoint, of a
   * newer format version, damaged (a checksum does not match), in a directory that does not
   * exist. The message names the file (and the tensor). */
  FSDP_ERROR_IO = 12
};

/* Element types: FSDP_FLOAT32 and FSDP_FLOAT64 for a model's parameters (one per model); the
 * 16-bit ones only for the mixed-precision policy (fsdp_model_set_mixed_precision,
 * fsdp_model_set_grad_dtype). */
enum fsdp_dtype { FSDP_FLOAT32 = 1, FSDP_FLOAT64 = 2, FSDP_BFLOAT16 = 3, FSDP_FLOAT16 = 4 };

/* Kinds of pattern for the hybrid strategy (fsdp_model_add_strategy_pattern). */
enum fsdp_pattern_kind { FSDP_PATTERN_FULL_SHARD = 1, FSDP_PATTERN_LAYER_WISE = 2 };

/* What stays in pieces (fsdp_model_set_mode; docs/modes.md): ZeRO-3, ZeRO-2, ZeRO-1 and
 * replicated data parallel. */
enum fsdp_sharding_mode {
  FSDP_MODE_FULL_SHARD = 1,
  FSDP_MODE_SHARD_GRAD_OP = 2,
  FSDP_MODE_SHARD_OPTIMIZER = 3,
  FSDP_MODE_NO_SHARD = 4
};

typedef struct fsdp_model_s* fsdp_model_t;
typedef struct fsdp_runtime_s* fsdp_runtime_t;
typedef struct fsdp_optimizer_s* fsdp_optimizer_t;
typedef struct fsdp_loss_scaler_s* fsdp_loss_scaler_t;
typedef struct fsdp_lr_schedule_s* fsdp_lr_schedule_t;

/* The message of the last failed call on this thread ("" when none failed). Valid until the
 * next failing call on this thread. */
const char* fsdp_last_error(void);
/* "FSDP_ERROR_ORDER" and so on; "unknown fsdp error code" for anything else. */
const char* fsdp_error_name(int code);

/* The version of the fsdp library loaded at run time, "0.1.0" (FSDP_VERSION_STRING in
 * fsdp/config.hpp is the one the program was compiled against). Callable at any time. */
const char* fsdp_version(void);

/* For language bindings (the Fortran module): records message as fsdp_last_error() of this
 * thread and returns code. */
int fsdp_set_error(int code, const char* message);

/* ---- library ---------------------------------------------------------------------------- */
/* After MPI_Init: initializes Kokkos unless the application already did. */
int fsdp_initialize(void);
/* Before MPI_Finalize, after every handle is destroyed: finalizes Kokkos if fsdp_initialize
 * initialized it. FSDP_ERROR_STATE (and nothing finalized) while handles are alive. */
int fsdp_finalize(void);

/* ---- model: a builder, then sharded over a communicator --------------------------------- */
/* An empty model of dtype FSDP_FLOAT32 or FSDP_FLOAT64, to which parameters are added. */
int fsdp_model_create(int dtype, fsdp_model_t* model);
/* A parameter of `ndim` dimensions (0: a scalar) in row-major (C) order; layer: the unit it is
 * gathered with (NULL or "": the parameter alone); always_gather: replicated on every rank. */
int fsdp_model_add_parameter(fsdp_model_t model, const char* name, int ndim, const int64_t* shape,
                             const char* layer, int always_gather);
/* Before fsdp_model_shard: trainable 0 freezes the parameter added as `name` (fine-tuning): it is
 * gathered with its unit, but has no gradient (fsdp_grad of it fails with FSDP_ERROR_STATE), is
 * never reduced or stepped and keeps no optimizer state; 1 (the default) trains it.
 * FSDP_ERROR_UNKNOWN_NAME when no parameter of that name was added. */
int fsdp_model_set_trainable(fsdp_model_t model, const char* name, int trainable);
/* A glob pattern for the "hybrid" strategy (kind: fsdp_pattern_kind). */
int fsdp_model_add_strategy_pattern(fsdp_model_t model, int kind, const char* pattern);
/* Before fsdp_model_shard: the sharding mode (fsdp_sharding_mode; FSDP_MODE_FULL_SHARD unless
 * set). */
int fsdp_model_set_mode(fsdp_model_t model, int mode);
/* Before fsdp_model_shard: hybrid sharding. The model shards within groups of shard_group_size
 * consecutive ranks of the communicator (0: the ranks of each node) and averages gradients
 * across the groups; -1 (the default): one group of every rank. Split the data over the whole
 * communicator either way; fsdp_model_rank then gives the rank and size of the shard group.
 * fsdp_model_shard fails with FSDP_ERROR_INVALID_ARGUMENT when the size does not divide the
 * communicator's. */
int fsdp_model_set_shard_group_size(fsdp_model_t model, int shard_group_size);
/* Before fsdp_model_shard: mixed precision (PyTorch's MixedPrecisionPolicy; docs/modes.md) for
 * an FSDP_FLOAT32 model, in every mode. param_dtype FSDP_BFLOAT16 or FSDP_FLOAT16: each piece is
 * rounded to 16 bits for the all-gather, fsdp_half gives those 16-bit values and fsdp_full
 * gives them widened to float (a copy freed when the scope ends);
 * reduce_dtype FSDP_BFLOAT16 or FSDP_FLOAT16: gradients are reduced in 16 bits. The pieces, the
 * gradient pieces and the optimizer stay fp32. FSDP_FLOAT32 (or the model's own dtype): no cast,
 * the default. FSDP_ERROR_INVALID_ARGUMENT for another value or a 16-bit dtype on an
 * FSDP_FLOAT64 model; FSDP_ERROR_STATE after fsdp_model_shard. */
int fsdp_model_set_mixed_precision(fsdp_model_t model, int param_dtype, int reduce_dtype);
/* Before fsdp_model_shard: the dtype of the gradients the model keeps between the backward and
 * the optimizer step (the gradient pieces, and FSDP_MODE_SHARD_OPTIMIZER's whole gradients;
 * UnitOptions::grad_dtype, docs/modes.md). FSDP_BFLOAT16 keeps them in 2 bytes (an FSDP_FLOAT32
 * model); what fsdp_grad hands the backward stays the model's dtype. FSDP_FLOAT32 (or the
 * model's own dtype): no cast, the default. FSDP_ERROR_INVALID_ARGUMENT for FSDP_FLOAT16
 * (unscaling loss-scaled gradients would leave its range), another value, or FSDP_BFLOAT16 on an
 * FSDP_FLOAT64 model; FSDP_ERROR_STATE after fsdp_model_shard. */
int fsdp_model_set_grad_dtype(fsdp_model_t model, int grad_dtype);
/* Collective over comm: makes the plan with strategy "full", "layerwise" or "hybrid" on rank 0,
 * agrees on it over the group (agree_on_plan: every rank must have added the same parameters),
 * and allocates this rank's pieces, all zero. The model keeps its own duplicate of comm.
 * comm is a Fortran handle (MPI_Comm_c2f, or a Fortran `integer` communicator). */
int fsdp_model_shard(fsdp_model_t model, MPI_Fint comm, const char* strategy);
/* The same with a C communicator. */
int fsdp_model_shard_comm(fsdp_model_t model, MPI_Comm comm, const char* strategy);

/* Elements of a parameter, and the part of it this rank holds: the first element (of the
 * flattened parameter) and the count (0 when it holds none). */
int fsdp_model_parameter_numel(fsdp_model_t model, const char* name, int64_t* numel);
int fsdp_model_parameter_piece(fsdp_model_t model, const char* name, int64_t* first,
                               int64_t* count);
/* FSDP_FLOAT32 or FSDP_FLOAT64, as created. */
int fsdp_model_dtype(fsdp_model_t model, int* dtype);
/* The rank of this process in the model's group and the group's size (the shard group under
 * hybrid sharding). */
int fsdp_model_rank(fsdp_model_t model, int* rank, int* size);

/* Initialization. values point at elements of the model's dtype (float or double). */
/* Every rank passes the whole parameter (numel elements); each keeps its piece. No communication.*/
int fsdp_model_init_from_full(fsdp_model_t model, const char* name, const void* full);
/* Rank 0 passes the whole parameter (others may pass NULL); collective. */
int fsdp_model_init_from_root(fsdp_model_t model, const char* name, const void* full_on_root);
/* fill(first, values, count, user_data) fills this rank's piece: the count elements of the
 * flattened parameter from element first (0-based). Return 0, or nonzero to fail the call with
 * FSDP_ERROR_CALLBACK. Not called on a rank that holds none of the parameter. */
typedef int (*fsdp_fill_function)(int64_t first, void* values, int64_t count, void* user_data);
int fsdp_model_init_with(fsdp_model_t model, const char* name, fsdp_fill_function fill,
                         void* user_data);

/* Sets every gradient piece to zero (after the optimizer step). */
int fsdp_model_zero_grad(fsdp_model_t model);
/* Collective: the whole parameter, numel elements, into out on every rank (for checking and
 * saving). Any time after fsdp_model_shard; leaves the units' state alone. */
int fsdp_model_copy_parameter(fsdp_model_t model, const char* name, void* out);
/* Never fails. The model's storage lives until its runtimes and optimizers are destroyed too. */
void fsdp_model_destroy(fsdp_model_t model);

/* ---- runtime: forward and backward scopes as begin/end calls --------------------------- */
/* order: every unit of the model once, in forward execution order (backward runs it in
 * reverse). prefetch: nonzero to gather the next units while one computes. max_gathered_units:
 * units gathered or gathering at once, the current one included (>= 1; FSDP's default is 2). */
int fsdp_runtime_create(fsdp_model_t model, int nunits, const char* const* order, int prefetch,
                        int max_gathered_units, fsdp_runtime_t* runtime);
/* fsdp_runtime_create, and the units named in keep_gathered (nkeep of them; keep_gathered may be
 * NULL when nkeep is 0) stay gathered from their forward scope until their backward scope, like
 * PyTorch's reshard_after_forward=False: one gather per step instead of two, the unit's whole
 * parameters held meanwhile. The last unit of the order always stays gathered (its backward comes
 * next). FSDP_ERROR_UNKNOWN_NAME for a name the order does not have. */
int fsdp_runtime_create_keep_gathered(fsdp_model_t model, int nunits, const char* const* order,
                                      int prefetch, int max_gathered_units, int nkeep,
                                      const char* const* keep_gathered, fsdp_runtime_t* runtime);
/* fsdp_runtime_create_keep_gathered, and tied parameters: parameter tied_parameters[i] is also
 * used by unit tied_units[i] (ntied pairs; a parameter used by several other units is listed once
 * per unit), as a language model's output head reads its token embedding. It stays one
 * parameter: its unit stays gathered from its forward scope to its backward scope, fsdp_full
 * gives it in the listed units' scopes, fsdp_grad in their backward scopes adds to its gradient,
 * and its own unit's fsdp_end_backward reduces the sum of every use once. Each listed unit must
 * come after the parameter's unit in the order (FSDP_ERROR_LIBRARY otherwise). */
int fsdp_runtime_create_tied(fsdp_model_t model, int nunits, const char* const* order, int prefetch,
                             int max_gathered_units, int nkeep, const char* const* keep_gathered,
                             int ntied, const char* const* tied_parameters,
                             const char* const* tied_units, fsdp_runtime_t* runtime);
/* A step: for every unit in order, begin_forward .. end_forward; then for every unit in
 * reverse order, begin_backward .. end_backward; then finish_step (also after forward only:
 * evaluation). begin_* gathers the unit (or waits for its prefetch); end_forward releases it;
 * end_backward releases it and reduce-scatters the gradients written in the scope. */
int fsdp_begin_forward(fsdp_runtime_t runtime, const char* unit);
int fsdp_end_forward(fsdp_runtime_t runtime, const char* unit);
int fsdp_begin_backward(fsdp_runtime_t runtime, const char* unit);
int fsdp_end_backward(fsdp_runtime_t runtime, const char* unit);
int fsdp_finish_step(fsdp_runtime_t runtime);
/* Gradient accumulation (docs/runtime.md): with sync 0, the following steps' fsdp_end_backward
 * leave each unit's whole gradients unreduced and the next steps add into them; the first step
 * with sync 1 (the default) reduces the sum once, before the optimizer step. Costs one whole copy
 * of the model's gradients until then. Between steps only (FSDP_ERROR_ORDER otherwise);
 * collective: ranks that pass different values all get FSDP_ERROR_MISMATCH. */
int fsdp_runtime_set_requires_gradient_sync(fsdp_runtime_t runtime, int sync);
/* Overlap (docs/runtime.md), from the next step on: the units gathered at once while the backward
 * pass runs (max_gathered_units_backward; 0: the max_gathered_units the runtime was made with)
 * and the gradient reductions left in flight after fsdp_end_backward (max_reductions_in_flight,
 * default 2; 0: each fsdp_end_backward waits for its unit's). A negative value is
 * FSDP_ERROR_LIBRARY. Between steps only (FSDP_ERROR_ORDER otherwise); collective: ranks that
 * pass different values all get FSDP_ERROR_MISMATCH. */
int fsdp_runtime_set_overlap(fsdp_runtime_t runtime, int max_gathered_units_backward,
                             int max_reductions_in_flight);
/* The optimizer in backward (docs/runtime.md), from the next step on: the runtime steps the
 * optimizer on each unit as soon as it has waited for the unit's gradient reduction (in
 * fsdp_end_backward when the reductions in flight make it wait, and in fsdp_finish_step for the
 * rest), so the optimizer computes while the last reductions are in flight; fsdp_finish_step
 * returns with the step taken: do not call fsdp_optimizer_step. The same numbers, bit for bit.
 * Not with fsdp_clip_grad_norm or a loss scaler (both need every gradient first). The optimizer
 * must be of the runtime's model (FSDP_ERROR_INVALID_ARGUMENT otherwise); the runtime keeps it
 * alive. NULL turns it off. Between steps only (FSDP_ERROR_ORDER otherwise); collective: ranks that
 * set one and none all get FSDP_ERROR_MISMATCH. */
int fsdp_runtime_set_optimizer_in_backward(fsdp_runtime_t runtime, fsdp_optimizer_t optimizer);
/* Inside an open scope, for a parameter of its unit: the whole parameter (read only) and, in a
 * backward scope only, its whole gradient, to add this rank's gradient into (zero on the
 * first backward of a step). numel elements of the model's dtype, valid until the scope ends. */
int fsdp_full(fsdp_runtime_t runtime, const char* parameter, void** values, int64_t* numel);
int fsdp_grad(fsdp_runtime_t runtime, const char* parameter, void** values, int64_t* numel);
/* Mixed precision (fsdp_model_set_mixed_precision with a 16-bit param_dtype), inside an open
 * scope: the whole parameter as gathered, numel 16-bit values (bfloat16 or float16 bits, as
 * param_dtype says), read only, valid until the scope ends. Reading it instead of fsdp_full
 * leaves out fsdp_full's float copy (freed when the scope ends). FSDP_ERROR_STATE for a model
 * gathered in its own dtype. */
int fsdp_half(fsdp_runtime_t runtime, const char* parameter, const uint16_t** values,
              int64_t* numel);
/* Moves the prefetched gathers along; call it now and then inside a long computation. */
int fsdp_progress(fsdp_runtime_t runtime);
void fsdp_runtime_destroy(fsdp_runtime_t runtime);
/* What the runtime observed since it was made: scopes entered, gathers started, of those the
 * ones started ahead of their scope (prefetch), scopes whose unit was gathered when they opened,
 * and seconds scopes spent waiting for their unit (communication not hidden). Any pointer may be
 * NULL. */
int fsdp_runtime_stats(fsdp_runtime_t runtime, int64_t* scopes, int64_t* gathers,
                       int64_t* prefetched, int64_t* ready_on_entry, double* wait_s);

/* ---- optimizers: PyTorch's rules on each rank's pieces (docs/units.md) ------------------ */
int fsdp_optimizer_create_sgd(fsdp_model_t model, double lr, double momentum, double dampening,
                              int nesterov, double weight_decay, fsdp_optimizer_t* optimizer);
/* Adam: weight_decay is L2 (added to the gradient). */
int fsdp_optimizer_create_adam(fsdp_model_t model, double lr, double beta1, double beta2,
                               double eps, double weight_decay, fsdp_optimizer_t* optimizer);
/* AdamW: decoupled weight decay (p *= 1 - lr * weight_decay first). */
int fsdp_optimizer_create_adamw(fsdp_model_t model, double lr, double beta1, double beta2,
                                double eps, double weight_decay, fsdp_optimizer_t* optimizer);
/* Updates every piece of the optimizer's model from its reduce-scattered gradient. The optimizer
 * keeps its state (momentum, Adam's moments), made at its first step: another optimizer on the
 * same model starts without it, and fsdp_optimizer_destroy frees it (unless a runtime still steps
 * the optimizer in backward). */
int fsdp_optimizer_step(fsdp_optimizer_t optimizer);
void fsdp_optimizer_destroy(fsdp_optimizer_t optimizer);
/* The learning rate and weight decay of the steps that follow. Every rank must make the same calls
 * with the same values: the next fsdp_optimizer_step checks so on every rank (FSDP_ERROR_MISMATCH
 * naming the setting). A value the rule refuses (< 0) is FSDP_ERROR_LIBRARY and changes nothing. */
int fsdp_optimizer_set_lr(fsdp_optimizer_t optimizer, double lr);
int fsdp_optimizer_set_weight_decay(fsdp_optimizer_t optimizer, double weight_decay);
/* The learning rate of the next step and the steps taken (a loaded checkpoint's count
 * included). Either pointer may be NULL. */
int fsdp_optimizer_get_state(fsdp_optimizer_t optimizer, double* lr, int64_t* steps);

/* ---- learning-rate schedules (docs/units.md, "Learning-rate schedules") ------------------- */
/* The rate of each step t (from 0): lr * (t + 1) / warmup_steps during the warm-up, then by
 * decay: "constant" (lr), "linear" or "cosine" (from lr to min_lr at step total_steps, then
 * min_lr), "step" (lr * gamma^floor((t - warmup_steps) / step_size)). Arguments a decay does not
 * use are ignored. Bad settings (an unknown decay, min_lr outside [0, lr], total_steps <=
 * warmup_steps for linear and cosine, step_size < 1 or gamma <= 0 for step) are
 * FSDP_ERROR_LIBRARY naming the setting. A schedule keeps no position: see
 * fsdp_lr_schedule_apply. */
int fsdp_lr_schedule_create(const char* decay, double lr, int64_t warmup_steps, int64_t total_steps,
                            double min_lr, int64_t step_size, double gamma,
                            fsdp_lr_schedule_t* schedule);
/* The rate of step `step` (>= 0). */
int fsdp_lr_schedule_lr_at(fsdp_lr_schedule_t schedule, int64_t step, double* lr);
/* Sets the optimizer's learning rate for its next step: the rate of the step its step count
 * names. Call it before every fsdp_optimizer_step; after fsdp_checkpoint_load the count is the
 * checkpoint's, so the schedule goes on where the saved run stopped. */
int fsdp_lr_schedule_apply(fsdp_lr_schedule_t schedule, fsdp_optimizer_t optimizer);
void fsdp_lr_schedule_destroy(fsdp_lr_schedule_t schedule);

/* ---- gradient norm and clipping (docs/units.md) ----------------------------------------- */
/* Collective: the global L2 norm of the gradients of the model's pieces, every element counted
 * once (replicated parameters once, padding never), into *norm on every rank. */
int fsdp_grad_norm(fsdp_model_t model, double* norm);
/* Collective: as fsdp_grad_norm, then when the norm exceeds max_norm (> 0) scales every gradient
 * piece by max_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_. *norm (may be NULL) is
 * the norm before clipping. Call it after fsdp_finish_step, before fsdp_optimizer_step. */
int fsdp_clip_grad_norm(fsdp_model_t model, double max_norm, double* norm);

/* ---- memory report: the bytes fsdp holds on this rank (docs/units.md) --------------------- */
/* Categories of fsdp_memory_bytes; FSDP_MEMORY_TOTAL is their sum (its peak is the peak of the
 * sum, not the sum of the peaks). */
enum fsdp_memory_category {
  FSDP_MEMORY_PARAMETER_SHARDS = 0,    /* this rank's pieces (and replicated parameters) */
  FSDP_MEMORY_GRADIENT_SHARDS = 1,     /* their gradients */
  FSDP_MEMORY_OPTIMIZER_STATE = 2,     /* momentum, Adam moments */
  FSDP_MEMORY_GATHERED_PARAMETERS = 3, /* whole parameters of gathered units */
  FSDP_MEMORY_FULL_GRADIENTS = 4,      /* whole gradients written in backward scopes */
  FSDP_MEMORY_COMMUNICATION = 5,       /* staging buffers of collectives */
  FSDP_MEMORY_POOL_IDLE = 6,           /* released buffers kept for the next gather */
  FSDP_MEMORY_RESIDENT_PARAMETERS = 7, /* whole parameters kept by shard_grad_op/optimizer */
  FSDP_MEMORY_RESIDENT_GRADIENTS = 8,  /* whole gradients kept by shard_optimizer */
  FSDP_MEMORY_CHECKPOINT_SNAPSHOT = 9, /* host copy a save in the background writes from */
  FSDP_MEMORY_TOTAL = 10
};
/* The bytes of one category now and at their peak since the model was sharded or the peaks were
 * last reset. Either pointer may be NULL. Local: no communication. */
int fsdp_memory_bytes(fsdp_model_t model, int category, int64_t* current, int64_t* peak);
/* The peaks restart from the current values (e.g. after initialization, to measure a step). */
int fsdp_memory_reset_peaks(fsdp_model_t model);
/* "parameter_shards", ..., "total" (as fsdp-bench and fsdp-train print them); NULL for a value
 * out of range. Never fails otherwise. */
const char* fsdp_memory_category_name(int category);

/* ---- dynamic loss scaling for 16-bit gradients (PyTorch's GradScaler; docs/modes.md) ------ */
/* A loss scaler: multiply the loss (the gradient written in the backward scopes) by its scale;
 * after fsdp_finish_step, fsdp_loss_scaler_unscale_and_check divides the gradient pieces by it
 * and says whether any is infinite or NaN; skip fsdp_optimizer_step when it is (zero the
 * gradients), and call fsdp_loss_scaler_update with the answer: the scale is multiplied by
 * backoff_factor on an overflow and by growth_factor after growth_interval clean steps in a row.
 * 0 for any setting gives PyTorch's default: init_scale 65536, growth_factor 2, backoff_factor
 * 0.5, growth_interval 2000. FSDP_ERROR_LIBRARY, naming the setting, for init_scale < 0 or not
 * finite, growth_factor <= 1, backoff_factor outside (0, 1), growth_interval < 0. Local: a
 * scaler is not tied to a model or a communicator. */
int fsdp_loss_scaler_create(double init_scale, double growth_factor, double backoff_factor,
                            int64_t growth_interval, fsdp_loss_scaler_t* scaler);
/* The scale to multiply the loss by. */
int fsdp_loss_scaler_scale(fsdp_loss_scaler_t scaler, double* scale);
/* Collective over the model's ranks, after fsdp_finish_step and before the optimizer step:
 * divides every gradient piece of the model by the scale; found_inf = 1 on every rank when any
 * element on any rank is infinite or NaN, else 0. */
int fsdp_loss_scaler_unscale_and_check(fsdp_loss_scaler_t scaler, fsdp_model_t model,
                                       int* found_inf);
/* After every step, with fsdp_loss_scaler_unscale_and_check's answer (nonzero: an overflow). */
int fsdp_loss_scaler_update(fsdp_loss_scaler_t scaler, int found_inf);
/* The state a checkpoint needs to resume the scaler exactly: the scale, the clean steps since the
 * last overflow or growth, the skipped steps so far. Any output pointer may be NULL. */
int fsdp_loss_scaler_get_state(fsdp_loss_scaler_t scaler, double* scale, int64_t* clean_steps,
                               int64_t* skipped_steps);
/* Resumes from such a state; FSDP_ERROR_LIBRARY (and nothing changed) unless scale is positive
 * and finite and the counters >= 0. */
int fsdp_loss_scaler_set_state(fsdp_loss_scaler_t scaler, double scale, int64_t clean_steps,
                               int64_t skipped_steps);
/* Never fails. */
void fsdp_loss_scaler_destroy(fsdp_loss_scaler_t scaler);

/* ---- checkpoints: one HDF5 file, any world size and strategy (docs/checkpoints.md) -------- */
/* Collective over the model's ranks: saves the model's parameters, and the optimizer's state,
 * settings and step count unless optimizer is NULL, and the loss scaler's state (the object
 * "loss_scaler" of docs/checkpoints.md) unless scaler is NULL, with step and epoch (>= 0), to
 * path: a parallel HDF5 file written under path.tmp and renamed once complete and synced, so path
 * is the previous file or the complete new one. The optimizer must be one made for this model
 * (FSDP_ERROR_INVALID_ARGUMENT otherwise). FSDP_ERROR_IO when the file cannot be written. A
 * save in the background still pending (below) is finished first. */
int fsdp_checkpoint_save(fsdp_model_t model, fsdp_optimizer_t optimizer, fsdp_loss_scaler_t scaler,
                         const char* path, int64_t step, int64_t epoch);
/* Collective: fsdp_checkpoint_save in the background (docs/checkpoints.md, "Saving in the
 * background"): returns once every rank has copied its pieces into a snapshot of host memory
 * that the model keeps for its next save, while a thread of each rank writes the file. path
 * appears once the save is finished: by fsdp_checkpoint_finish, by an fsdp_checkpoint_try_finish
 * that sets *finished to 1, or by the model's next save (either kind) or load, which finish it
 * first; until then path keeps its previous file, also when the job dies. The same checks and
 * codes as fsdp_checkpoint_save; FSDP_ERROR_IO from the call that finishes a save whose writing
 * failed on any rank (nothing was published then). fsdp_model_destroy abandons a save that is
 * not finished. */
int fsdp_checkpoint_save_in_background(fsdp_model_t model, fsdp_optimizer_t optimizer,
                                       fsdp_loss_scaler_t scaler, const char* path, int64_t step,
                                       int64_t epoch);
/* Collective: publishes the model's save in the background if every rank has written it; never
 * waits. *finished: 1 when no save is pending any more (or none was), 0 while it is written; the
 * same on every rank. */
int fsdp_checkpoint_try_finish(fsdp_model_t model, int* finished);
/* Collective: waits for the model's save in the background and publishes it (nothing to do when
 * none is pending). */
int fsdp_checkpoint_finish(fsdp_model_t model);
/* Collective: loads a checkpoint written at any world size with any strategy into the model
 * (and the optimizer's state and step count unless optimizer is NULL; it must be one made for
 * this model, as for fsdp_checkpoint_save; and the loss scaler's state unless scaler is NULL),
 * and gives its step and epoch (either pointer may be NULL; neither is written on failure).
 * Nothing changes unless everything matches on every rank: FSDP_ERROR_MISMATCH lists every
 * tensor whose name, shape or dtype differs (or another optimizer, or none in the file, or no
 * loss scaler's state in it when scaler is given); FSDP_ERROR_IO for a missing, damaged or
 * foreign file, naming it. */
int fsdp_checkpoint_load(fsdp_model_t model, fsdp_optimizer_t optimizer, fsdp_loss_scaler_t scaler,
                         const char* path, int64_t* step, int64_t* epoch);
/* Objects of the caller's own in the model's checkpoints (docs/checkpoints.md, "Objects of your
 * own"): named state as JSON text (a number, a string, an array, an object), e.g. a solver's time
 * and iteration. Sets the text of the object `name` (created on first use); every later save of
 * the model stores it under that name, and every later fsdp_checkpoint_load requires the file to
 * hold a state for it and replaces the text with that state, all or nothing with the model.
 * FSDP_ERROR_INVALID_ARGUMENT (nothing changes) when name is empty or json is not JSON. Local: set
 * the same objects on every rank (a save stores rank 0's texts). */
int fsdp_checkpoint_set_object(fsdp_model_t model, const char* name, const char* json);
/* The text of the object `name` (as set, or as the last load gave it): its length in bytes into
 * *length (unless NULL), and, unless buffer is NULL, the text and a NUL into buffer, which must
 * hold length + 1 bytes (FSDP_ERROR_INVALID_ARGUMENT otherwise, nothing written but *length).
 * FSDP_ERROR_UNKNOWN_NAME when the model has no such object. */
int fsdp_checkpoint_get_object(fsdp_model_t model, const char* name, char* buffer, size_t size,
                               size_t* length);
/* Collective: the model's parameters from pretrained weights: a plain HDF5 file with one dataset
 * per parameter, named as the parameter (fsdp-ckpt export writes one), or a checkpoint. The same
 * all-or-nothing checks and codes as fsdp_checkpoint_load (FSDP_ERROR_MISMATCH, FSDP_ERROR_IO). */
int fsdp_load_parameters(fsdp_model_t model, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* FSDP_FSDP_H */
