! The Fortran module `fsdp`: BIND(C) interfaces to fsdp's C API (include/fsdp/fsdp.h) and thin
! wrappers in the style of HDF5 and MPI: communicators as `integer` or `type(MPI_Comm)`, Fortran
! strings, real(c_float) / real(c_double) arrays, and an `ierr` argument (FSDP_SUCCESS = 0 or an
! error code; fsdp_last_error() says what went wrong). docs/c-fortran.md.
!
! Shapes are given as Fortran declares the array; the module reverses them for the library (as
! HDF5's Fortran API does), so the library's row-major flattening is Fortran's memory order and
! element i of a flattened parameter is the i-th element of the Fortran array in memory.
module fsdp
  use, intrinsic :: iso_c_binding
  use mpi_f08, only: MPI_Comm
  implicit none
  private

  ! Return codes (enum fsdp_error).
  integer, parameter, public :: FSDP_SUCCESS = 0
  integer, parameter, public :: FSDP_ERROR_LIBRARY = 1
  integer, parameter, public :: FSDP_ERROR_INVALID_ARGUMENT = 2
  integer, parameter, public :: FSDP_ERROR_UNKNOWN_NAME = 3
  integer, parameter, public :: FSDP_ERROR_ORDER = 4
  integer, parameter, public :: FSDP_ERROR_STATE = 5
  integer, parameter, public :: FSDP_ERROR_CALLBACK = 6
  integer, parameter, public :: FSDP_ERROR_OUT_OF_MEMORY = 7
  integer, parameter, public :: FSDP_ERROR_INTERNAL = 8
  integer, parameter, public :: FSDP_ERROR_MISMATCH = 9
  integer, parameter, public :: FSDP_ERROR_TIMEOUT = 10
  integer, parameter, public :: FSDP_ERROR_COMMUNICATION = 11
  integer, parameter, public :: FSDP_ERROR_IO = 12
  ! Element types (enum fsdp_dtype; the 16-bit ones for the mixed-precision calls only) and
  ! hybrid pattern kinds (enum fsdp_pattern_kind).
  integer, parameter, public :: FSDP_FLOAT32 = 1
  integer, parameter, public :: FSDP_FLOAT64 = 2
  integer, parameter, public :: FSDP_BFLOAT16 = 3
  integer, parameter, public :: FSDP_FLOAT16 = 4
  integer, parameter, public :: FSDP_PATTERN_FULL_SHARD = 1
  integer, parameter, public :: FSDP_PATTERN_LAYER_WISE = 2
  ! Sharding modes (enum fsdp_sharding_mode; docs/modes.md).
  integer, parameter, public :: FSDP_MODE_FULL_SHARD = 1
  integer, parameter, public :: FSDP_MODE_SHARD_GRAD_OP = 2
  integer, parameter, public :: FSDP_MODE_SHARD_OPTIMIZER = 3
  integer, parameter, public :: FSDP_MODE_NO_SHARD = 4
  ! Memory report categories (enum fsdp_memory_category; FSDP_MEMORY_TOTAL is their sum).
  integer, parameter, public :: FSDP_MEMORY_PARAMETER_SHARDS = 0
  integer, parameter, public :: FSDP_MEMORY_GRADIENT_SHARDS = 1
  integer, parameter, public :: FSDP_MEMORY_OPTIMIZER_STATE = 2
  integer, parameter, public :: FSDP_MEMORY_GATHERED_PARAMETERS = 3
  integer, parameter, public :: FSDP_MEMORY_FULL_GRADIENTS = 4
  integer, parameter, public :: FSDP_MEMORY_COMMUNICATION = 5
  integer, parameter, public :: FSDP_MEMORY_POOL_IDLE = 6
  integer, parameter, public :: FSDP_MEMORY_RESIDENT_PARAMETERS = 7
  integer, parameter, public :: FSDP_MEMORY_RESIDENT_GRADIENTS = 8
  integer, parameter, public :: FSDP_MEMORY_CHECKPOINT_SNAPSHOT = 9
  integer, parameter, public :: FSDP_MEMORY_TOTAL = 10

  type, public :: fsdp_model
    type(c_ptr) :: handle = c_null_ptr
  end type fsdp_model

  type, public :: fsdp_runtime
    type(c_ptr) :: handle = c_null_ptr
    integer :: dtype = 0  ! the model's, to check the kind of the arrays fsdp_full/fsdp_grad return
  end type fsdp_runtime

  type, public :: fsdp_optimizer
    type(c_ptr) :: handle = c_null_ptr
  end type fsdp_optimizer

  type, public :: fsdp_loss_scaler
    type(c_ptr) :: handle = c_null_ptr
  end type fsdp_loss_scaler

  type, public :: fsdp_lr_schedule
    type(c_ptr) :: handle = c_null_ptr
  end type fsdp_lr_schedule

  ! A fill function for fsdp_model_init_with: fills the count elements of this rank's piece,
  ! starting at element `first` (0-based) of the flattened parameter; values points at count
  ! elements of the model's kind (c_f_pointer them). Returns 0, or nonzero to fail the call.
  abstract interface
    integer(c_int) function fsdp_fill_function(first, values, count, user_data) bind(c)
      import :: c_int, c_int64_t, c_ptr
      integer(c_int64_t), value :: first
      type(c_ptr), value :: values
      integer(c_int64_t), value :: count
      type(c_ptr), value :: user_data
    end function fsdp_fill_function
  end interface
  public :: fsdp_fill_function

  public :: fsdp_last_error, fsdp_version, fsdp_initialize, fsdp_finalize
  public :: fsdp_model_create, fsdp_model_add_parameter, fsdp_model_add_strategy_pattern
  public :: fsdp_model_set_mode, fsdp_model_set_shard_group_size, fsdp_model_set_mixed_precision
  public :: fsdp_model_set_grad_dtype
  public :: fsdp_model_shard, fsdp_model_parameter_numel, fsdp_model_parameter_piece
  public :: fsdp_model_dtype, fsdp_model_rank
  public :: fsdp_model_init_from_full, fsdp_model_init_from_root, fsdp_model_init_with
  public :: fsdp_model_zero_grad, fsdp_model_copy_parameter, fsdp_model_destroy
  public :: fsdp_runtime_create, fsdp_begin_forward, fsdp_end_forward, fsdp_begin_backward
  public :: fsdp_end_backward, fsdp_finish_step, fsdp_full, fsdp_grad, fsdp_half, fsdp_progress
  public :: fsdp_runtime_set_requires_gradient_sync, fsdp_runtime_set_overlap
  public :: fsdp_runtime_set_optimizer_in_backward
  public :: fsdp_runtime_destroy, fsdp_runtime_stats
  public :: fsdp_grad_norm, fsdp_clip_grad_norm
  public :: fsdp_memory_bytes, fsdp_memory_reset_peaks, fsdp_memory_category_name
  public :: fsdp_optimizer_create_sgd, fsdp_optimizer_create_adam, fsdp_optimizer_create_adamw
  public :: fsdp_optimizer_step, fsdp_optimizer_destroy
  public :: fsdp_optimizer_set_lr, fsdp_optimizer_set_weight_decay, fsdp_optimizer_get_state
  public :: fsdp_lr_schedule_create, fsdp_lr_schedule_lr_at, fsdp_lr_schedule_apply
  public :: fsdp_lr_schedule_destroy
  public :: fsdp_checkpoint_save, fsdp_checkpoint_load, fsdp_load_parameters
  public :: fsdp_checkpoint_save_in_background, fsdp_checkpoint_try_finish, fsdp_checkpoint_finish
  public :: fsdp_checkpoint_set_object, fsdp_checkpoint_get_object
  public :: fsdp_loss_scaler_create, fsdp_loss_scaler_scale, fsdp_loss_scaler_unscale_and_check
  public :: fsdp_loss_scaler_update, fsdp_loss_scaler_get_state, fsdp_loss_scaler_set_state
  public :: fsdp_loss_scaler_destroy

  ! A communicator as `integer` or as `type(MPI_Comm)` (mpi_f08).
  interface fsdp_model_shard
    module procedure model_shard_integer, model_shard_f08
  end interface fsdp_model_shard
  interface fsdp_model_init_from_full
    module procedure init_from_full_f32, init_from_full_f64
  end interface fsdp_model_init_from_full
  interface fsdp_model_init_from_root
    module procedure init_from_root_f32, init_from_root_f64
  end interface fsdp_model_init_from_root
  interface fsdp_model_copy_parameter
    module procedure copy_parameter_f32, copy_parameter_f64
  end interface fsdp_model_copy_parameter
  interface fsdp_full
    module procedure full_f32, full_f64
  end interface fsdp_full
  interface fsdp_grad
    module procedure grad_f32, grad_f64
  end interface fsdp_grad

  ! ---- the C functions ----
  interface
    type(c_ptr) function c_last_error() bind(c, name='fsdp_last_error')
      import :: c_ptr
    end function c_last_error
    type(c_ptr) function c_version() bind(c, name='fsdp_version')
      import :: c_ptr
    end function c_version
    integer(c_int) function c_set_error(code, message) bind(c, name='fsdp_set_error')
      import :: c_int, c_char
      integer(c_int), value :: code
      character(kind=c_char), intent(in) :: message(*)
    end function c_set_error
    integer(c_int) function c_initialize() bind(c, name='fsdp_initialize')
      import :: c_int
    end function c_initialize
    integer(c_int) function c_finalize() bind(c, name='fsdp_finalize')
      import :: c_int
    end function c_finalize

    integer(c_int) function c_model_create(dtype, model) bind(c, name='fsdp_model_create')
      import :: c_int, c_ptr
      integer(c_int), value :: dtype
      type(c_ptr), intent(out) :: model
    end function c_model_create
    integer(c_int) function c_model_add_parameter(model, name, ndim, shape, layer, always_gather) &
        bind(c, name='fsdp_model_add_parameter')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: ndim
      integer(c_int64_t), intent(in) :: shape(*)
      character(kind=c_char), intent(in) :: layer(*)
      integer(c_int), value :: always_gather
    end function c_model_add_parameter
    integer(c_int) function c_model_set_trainable(model, name, trainable) &
        bind(c, name='fsdp_model_set_trainable')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: trainable
    end function c_model_set_trainable
    integer(c_int) function c_model_add_strategy_pattern(model, kind, pattern) &
        bind(c, name='fsdp_model_add_strategy_pattern')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: model
      integer(c_int), value :: kind
      character(kind=c_char), intent(in) :: pattern(*)
    end function c_model_add_strategy_pattern
    integer(c_int) function c_model_set_mode(model, mode) bind(c, name='fsdp_model_set_mode')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int), value :: mode
    end function c_model_set_mode
    integer(c_int) function c_model_set_shard_group_size(model, size) &
        bind(c, name='fsdp_model_set_shard_group_size')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int), value :: size
    end function c_model_set_shard_group_size
    integer(c_int) function c_model_set_mixed_precision(model, param_dtype, reduce_dtype) &
        bind(c, name='fsdp_model_set_mixed_precision')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int), value :: param_dtype, reduce_dtype
    end function c_model_set_mixed_precision
    integer(c_int) function c_model_set_grad_dtype(model, grad_dtype) &
        bind(c, name='fsdp_model_set_grad_dtype')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int), value :: grad_dtype
    end function c_model_set_grad_dtype
    integer(c_int) function c_model_shard(model, comm, strategy) bind(c, name='fsdp_model_shard')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: model
      integer(c_int), value :: comm  ! MPI_Fint
      character(kind=c_char), intent(in) :: strategy(*)
    end function c_model_shard
    integer(c_int) function c_model_parameter_numel(model, name, numel) &
        bind(c, name='fsdp_model_parameter_numel')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), intent(out) :: numel
    end function c_model_parameter_numel
    integer(c_int) function c_model_parameter_piece(model, name, first, count) &
        bind(c, name='fsdp_model_parameter_piece')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), intent(out) :: first, count
    end function c_model_parameter_piece
    integer(c_int) function c_model_dtype(model, dtype) bind(c, name='fsdp_model_dtype')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int), intent(out) :: dtype
    end function c_model_dtype
    integer(c_int) function c_model_rank(model, rank, size) bind(c, name='fsdp_model_rank')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int), intent(out) :: rank, size
    end function c_model_rank
    integer(c_int) function c_model_init_from_full(model, name, full) &
        bind(c, name='fsdp_model_init_from_full')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), value :: full
    end function c_model_init_from_full
    integer(c_int) function c_model_init_from_root(model, name, full) &
        bind(c, name='fsdp_model_init_from_root')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), value :: full
    end function c_model_init_from_root
    integer(c_int) function c_model_init_with(model, name, fill, user_data) &
        bind(c, name='fsdp_model_init_with')
      import :: c_int, c_ptr, c_char, c_funptr
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*)
      type(c_funptr), value :: fill
      type(c_ptr), value :: user_data
    end function c_model_init_with
    integer(c_int) function c_model_zero_grad(model) bind(c, name='fsdp_model_zero_grad')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
    end function c_model_zero_grad
    integer(c_int) function c_model_copy_parameter(model, name, out) &
        bind(c, name='fsdp_model_copy_parameter')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), value :: out
    end function c_model_copy_parameter
    subroutine c_model_destroy(model) bind(c, name='fsdp_model_destroy')
      import :: c_ptr
      type(c_ptr), value :: model
    end subroutine c_model_destroy

    integer(c_int) function c_runtime_create_tied(model, nunits, order, prefetch, &
                                                  max_gathered_units, nkeep, keep_gathered, &
                                                  ntied, tied_parameters, tied_units, runtime) &
        bind(c, name='fsdp_runtime_create_tied')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int), value :: nunits
      type(c_ptr), intent(in) :: order(*)
      integer(c_int), value :: prefetch, max_gathered_units, nkeep
      type(c_ptr), intent(in) :: keep_gathered(*)
      integer(c_int), value :: ntied
      type(c_ptr), intent(in) :: tied_parameters(*), tied_units(*)
      type(c_ptr), intent(out) :: runtime
    end function c_runtime_create_tied
    integer(c_int) function c_runtime_stats(runtime, scopes, gathers, prefetched, &
                                            ready_on_entry, wait_s) &
        bind(c, name='fsdp_runtime_stats')
      import :: c_int, c_ptr, c_int64_t, c_double
      type(c_ptr), value :: runtime
      integer(c_int64_t), intent(out) :: scopes, gathers, prefetched, ready_on_entry
      real(c_double), intent(out) :: wait_s
    end function c_runtime_stats
    integer(c_int) function c_begin_forward(runtime, unit) bind(c, name='fsdp_begin_forward')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: runtime
      character(kind=c_char), intent(in) :: unit(*)
    end function c_begin_forward
    integer(c_int) function c_end_forward(runtime, unit) bind(c, name='fsdp_end_forward')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: runtime
      character(kind=c_char), intent(in) :: unit(*)
    end function c_end_forward
    integer(c_int) function c_begin_backward(runtime, unit) bind(c, name='fsdp_begin_backward')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: runtime
      character(kind=c_char), intent(in) :: unit(*)
    end function c_begin_backward
    integer(c_int) function c_end_backward(runtime, unit) bind(c, name='fsdp_end_backward')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: runtime
      character(kind=c_char), intent(in) :: unit(*)
    end function c_end_backward
    integer(c_int) function c_finish_step(runtime) bind(c, name='fsdp_finish_step')
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime
    end function c_finish_step
    integer(c_int) function c_runtime_set_requires_gradient_sync(runtime, sync) &
        bind(c, name='fsdp_runtime_set_requires_gradient_sync')
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime
      integer(c_int), value :: sync
    end function c_runtime_set_requires_gradient_sync
    integer(c_int) function c_runtime_set_overlap(runtime, backward_units, reductions) &
        bind(c, name='fsdp_runtime_set_overlap')
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime
      integer(c_int), value :: backward_units, reductions
    end function c_runtime_set_overlap
    integer(c_int) function c_runtime_set_optimizer_in_backward(runtime, optimizer) &
        bind(c, name='fsdp_runtime_set_optimizer_in_backward')
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime, optimizer
    end function c_runtime_set_optimizer_in_backward
    integer(c_int) function c_full(runtime, parameter, values, numel) bind(c, name='fsdp_full')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: runtime
      character(kind=c_char), intent(in) :: parameter(*)
      type(c_ptr), intent(out) :: values
      integer(c_int64_t), intent(out) :: numel
    end function c_full
    integer(c_int) function c_half(runtime, parameter, values, numel) bind(c, name='fsdp_half')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: runtime
      character(kind=c_char), intent(in) :: parameter(*)
      type(c_ptr), intent(out) :: values
      integer(c_int64_t), intent(out) :: numel
    end function c_half
    integer(c_int) function c_grad(runtime, parameter, values, numel) bind(c, name='fsdp_grad')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: runtime
      character(kind=c_char), intent(in) :: parameter(*)
      type(c_ptr), intent(out) :: values
      integer(c_int64_t), intent(out) :: numel
    end function c_grad
    integer(c_int) function c_progress(runtime) bind(c, name='fsdp_progress')
      import :: c_int, c_ptr
      type(c_ptr), value :: runtime
    end function c_progress
    subroutine c_runtime_destroy(runtime) bind(c, name='fsdp_runtime_destroy')
      import :: c_ptr
      type(c_ptr), value :: runtime
    end subroutine c_runtime_destroy

    integer(c_int) function c_optimizer_create_sgd(model, lr, momentum, dampening, nesterov, &
                                                   weight_decay, optimizer) &
        bind(c, name='fsdp_optimizer_create_sgd')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: model
      real(c_double), value :: lr, momentum, dampening
      integer(c_int), value :: nesterov
      real(c_double), value :: weight_decay
      type(c_ptr), intent(out) :: optimizer
    end function c_optimizer_create_sgd
    integer(c_int) function c_optimizer_create_adam(model, lr, beta1, beta2, eps, weight_decay, &
                                                    optimizer) bind(c, name='fsdp_optimizer_create_adam')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: model
      real(c_double), value :: lr, beta1, beta2, eps, weight_decay
      type(c_ptr), intent(out) :: optimizer
    end function c_optimizer_create_adam
    integer(c_int) function c_optimizer_create_adamw(model, lr, beta1, beta2, eps, weight_decay, &
                                                     optimizer) bind(c, name='fsdp_optimizer_create_adamw')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: model
      real(c_double), value :: lr, beta1, beta2, eps, weight_decay
      type(c_ptr), intent(out) :: optimizer
    end function c_optimizer_create_adamw
    integer(c_int) function c_optimizer_step(optimizer) bind(c, name='fsdp_optimizer_step')
      import :: c_int, c_ptr
      type(c_ptr), value :: optimizer
    end function c_optimizer_step
    subroutine c_optimizer_destroy(optimizer) bind(c, name='fsdp_optimizer_destroy')
      import :: c_ptr
      type(c_ptr), value :: optimizer
    end subroutine c_optimizer_destroy
    integer(c_int) function c_optimizer_set_lr(optimizer, lr) bind(c, name='fsdp_optimizer_set_lr')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: optimizer
      real(c_double), value :: lr
    end function c_optimizer_set_lr
    integer(c_int) function c_optimizer_set_weight_decay(optimizer, weight_decay) &
        bind(c, name='fsdp_optimizer_set_weight_decay')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: optimizer
      real(c_double), value :: weight_decay
    end function c_optimizer_set_weight_decay
    integer(c_int) function c_optimizer_get_state(optimizer, lr, steps) &
        bind(c, name='fsdp_optimizer_get_state')
      import :: c_int, c_ptr, c_double, c_int64_t
      type(c_ptr), value :: optimizer
      real(c_double), intent(out) :: lr
      integer(c_int64_t), intent(out) :: steps
    end function c_optimizer_get_state
    integer(c_int) function c_lr_schedule_create(decay, lr, warmup_steps, total_steps, min_lr, &
                                                 step_size, gamma, schedule) &
        bind(c, name='fsdp_lr_schedule_create')
      import :: c_int, c_ptr, c_double, c_int64_t, c_char
      character(kind=c_char), intent(in) :: decay(*)
      real(c_double), value :: lr, min_lr, gamma
      integer(c_int64_t), value :: warmup_steps, total_steps, step_size
      type(c_ptr), intent(out) :: schedule
    end function c_lr_schedule_create
    integer(c_int) function c_lr_schedule_lr_at(schedule, step, lr) &
        bind(c, name='fsdp_lr_schedule_lr_at')
      import :: c_int, c_ptr, c_double, c_int64_t
      type(c_ptr), value :: schedule
      integer(c_int64_t), value :: step
      real(c_double), intent(out) :: lr
    end function c_lr_schedule_lr_at
    integer(c_int) function c_lr_schedule_apply(schedule, optimizer) &
        bind(c, name='fsdp_lr_schedule_apply')
      import :: c_int, c_ptr
      type(c_ptr), value :: schedule, optimizer
    end function c_lr_schedule_apply
    subroutine c_lr_schedule_destroy(schedule) bind(c, name='fsdp_lr_schedule_destroy')
      import :: c_ptr
      type(c_ptr), value :: schedule
    end subroutine c_lr_schedule_destroy
    integer(c_int) function c_checkpoint_save(model, optimizer, scaler, path, step, epoch) &
        bind(c, name='fsdp_checkpoint_save')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: model, optimizer, scaler
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int64_t), value :: step, epoch
    end function c_checkpoint_save
    integer(c_int) function c_checkpoint_save_in_background(model, optimizer, scaler, path, &
                                                            step, epoch) &
        bind(c, name='fsdp_checkpoint_save_in_background')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: model, optimizer, scaler
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int64_t), value :: step, epoch
    end function c_checkpoint_save_in_background
    integer(c_int) function c_checkpoint_try_finish(model, finished) &
        bind(c, name='fsdp_checkpoint_try_finish')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
      integer(c_int), intent(out) :: finished
    end function c_checkpoint_try_finish
    integer(c_int) function c_checkpoint_finish(model) bind(c, name='fsdp_checkpoint_finish')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
    end function c_checkpoint_finish
    integer(c_int) function c_checkpoint_load(model, optimizer, scaler, path, step, epoch) &
        bind(c, name='fsdp_checkpoint_load')
      import :: c_int, c_ptr, c_char, c_int64_t
      type(c_ptr), value :: model, optimizer, scaler
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int64_t), intent(out) :: step, epoch
    end function c_checkpoint_load
    integer(c_int) function c_checkpoint_set_object(model, name, json) &
        bind(c, name='fsdp_checkpoint_set_object')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: name(*), json(*)
    end function c_checkpoint_set_object
    integer(c_int) function c_checkpoint_get_object(model, name, buffer, size, length) &
        bind(c, name='fsdp_checkpoint_get_object')
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: model, buffer
      character(kind=c_char), intent(in) :: name(*)
      integer(c_size_t), value :: size
      integer(c_size_t), intent(out) :: length
    end function c_checkpoint_get_object
    integer(c_int) function c_load_parameters(model, path) bind(c, name='fsdp_load_parameters')
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: model
      character(kind=c_char), intent(in) :: path(*)
    end function c_load_parameters

    integer(c_int) function c_loss_scaler_create(init_scale, growth_factor, backoff_factor, &
                                                 growth_interval, scaler) &
        bind(c, name='fsdp_loss_scaler_create')
      import :: c_int, c_ptr, c_double, c_int64_t
      real(c_double), value :: init_scale, growth_factor, backoff_factor
      integer(c_int64_t), value :: growth_interval
      type(c_ptr), intent(out) :: scaler
    end function c_loss_scaler_create
    integer(c_int) function c_loss_scaler_scale(scaler, scale) &
        bind(c, name='fsdp_loss_scaler_scale')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: scaler
      real(c_double), intent(out) :: scale
    end function c_loss_scaler_scale
    integer(c_int) function c_loss_scaler_unscale_and_check(scaler, model, found_inf) &
        bind(c, name='fsdp_loss_scaler_unscale_and_check')
      import :: c_int, c_ptr
      type(c_ptr), value :: scaler, model
      integer(c_int), intent(out) :: found_inf
    end function c_loss_scaler_unscale_and_check
    integer(c_int) function c_loss_scaler_update(scaler, found_inf) &
        bind(c, name='fsdp_loss_scaler_update')
      import :: c_int, c_ptr
      type(c_ptr), value :: scaler
      integer(c_int), value :: found_inf
    end function c_loss_scaler_update
    integer(c_int) function c_loss_scaler_get_state(scaler, scale, clean_steps, skipped_steps) &
        bind(c, name='fsdp_loss_scaler_get_state')
      import :: c_int, c_ptr, c_double, c_int64_t
      type(c_ptr), value :: scaler
      real(c_double), intent(out) :: scale
      integer(c_int64_t), intent(out) :: clean_steps, skipped_steps
    end function c_loss_scaler_get_state
    integer(c_int) function c_loss_scaler_set_state(scaler, scale, clean_steps, skipped_steps) &
        bind(c, name='fsdp_loss_scaler_set_state')
      import :: c_int, c_ptr, c_double, c_int64_t
      type(c_ptr), value :: scaler
      real(c_double), value :: scale
      integer(c_int64_t), value :: clean_steps, skipped_steps
    end function c_loss_scaler_set_state
    subroutine c_loss_scaler_destroy(scaler) bind(c, name='fsdp_loss_scaler_destroy')
      import :: c_ptr
      type(c_ptr), value :: scaler
    end subroutine c_loss_scaler_destroy

    integer(c_int) function c_grad_norm(model, norm) bind(c, name='fsdp_grad_norm')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: model
      real(c_double), intent(out) :: norm
    end function c_grad_norm
    integer(c_int) function c_clip_grad_norm(model, max_norm, norm) &
        bind(c, name='fsdp_clip_grad_norm')
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: model
      real(c_double), value :: max_norm
      real(c_double), intent(out) :: norm
    end function c_clip_grad_norm
    integer(c_int) function c_memory_bytes(model, category, current, peak) &
        bind(c, name='fsdp_memory_bytes')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: model
      integer(c_int), value :: category
      integer(c_int64_t), intent(out) :: current, peak
    end function c_memory_bytes
    integer(c_int) function c_memory_reset_peaks(model) bind(c, name='fsdp_memory_reset_peaks')
      import :: c_int, c_ptr
      type(c_ptr), value :: model
    end function c_memory_reset_peaks
    type(c_ptr) function c_memory_category_name(category) &
        bind(c, name='fsdp_memory_category_name')
      import :: c_int, c_ptr
      integer(c_int), value :: category
    end function c_memory_category_name

    integer(c_size_t) function c_strlen(text) bind(c, name='strlen')
      import :: c_size_t, c_ptr
      type(c_ptr), value :: text
    end function c_strlen
  end interface

contains

  ! ---- helpers ----

  ! A Fortran string as a NUL-terminated C string (trailing blanks dropped).
  pure function c_string(text) result(c)
    character(len=*), intent(in) :: text
    character(kind=c_char, len=:), allocatable :: c
    c = trim(text) // c_null_char
  end function c_string

  ! A NUL-terminated C string as a Fortran string ('' for a NULL pointer).
  function f_string(text) result(f)
    type(c_ptr), intent(in) :: text
    character(len=:), allocatable :: f
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(text)) then
      f = ''
      return
    end if
    n = int(c_strlen(text))
    call c_f_pointer(text, chars, [n])
    allocate (character(len=n) :: f)
    do i = 1, n
      f(i:i) = chars(i)
    end do
  end function f_string

  ! names as C strings: each NUL-terminated, one after the other in buffer, pointers(i) at the
  ! i-th. The pointers stay valid while buffer lives (both at least one element long).
  subroutine c_strings(names, buffer, pointers)
    character(len=*), intent(in) :: names(:)
    character(kind=c_char), allocatable, target, intent(out) :: buffer(:)
    type(c_ptr), allocatable, intent(out) :: pointers(:)
    integer :: i, j, at, n
    allocate (buffer(max(1, sum([(len_trim(names(i)) + 1, i = 1, size(names))]))))
    allocate (pointers(max(1, size(names))))
    pointers = c_null_ptr
    at = 1
    do i = 1, size(names)
      n = len_trim(names(i))
      pointers(i) = c_loc(buffer(at))
      do j = 1, n
        buffer(at + j - 1) = names(i)(j:j)
      end do
      buffer(at + n) = c_null_char
      at = at + n + 1
    end do
  end subroutine c_strings

  ! Records message as fsdp_last_error() and returns code: for failures the module detects.
  integer function set_error(code, message)
    integer, intent(in) :: code
    character(len=*), intent(in) :: message
    set_error = int(c_set_error(int(code, c_int), c_string(message)))
  end function set_error

  ! ierr for a call whose array must have numel elements of the model's kind.
  integer function check_array(model, name, kind, size_of_array, operation)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name, operation
    integer, intent(in) :: kind
    integer(c_int64_t), intent(in) :: size_of_array
    integer(c_int) :: dtype
    integer(c_int64_t) :: numel
    character(len=32) :: have, want
    check_array = int(c_model_dtype(model%handle, dtype))
    if (check_array /= FSDP_SUCCESS) return
    if (dtype /= kind) then
      check_array = set_error(FSDP_ERROR_INVALID_ARGUMENT, operation // ": '" // trim(name) // &
                              "' passed as " // kind_name(kind) // " to a model of " // &
                              kind_name(int(dtype)))
      return
    end if
    check_array = int(c_model_parameter_numel(model%handle, c_string(name), numel))
    if (check_array /= FSDP_SUCCESS) return
    if (size_of_array /= numel) then
      write (have, '(i0)') size_of_array
      write (want, '(i0)') numel
      check_array = set_error(FSDP_ERROR_INVALID_ARGUMENT, operation // ": the array for '" // &
                              trim(name) // "' has " // trim(have) // " elements; the parameter has " &
                              // trim(want))
    end if
  end function check_array

  function kind_name(dtype) result(name)
    integer, intent(in) :: dtype
    character(len=:), allocatable :: name
    if (dtype == FSDP_FLOAT32) then
      name = 'real(c_float)'
    else
      name = 'real(c_double)'
    end if
  end function kind_name

  ! ---- library ----

  ! The message of the last failed call ('' when none failed).
  function fsdp_last_error() result(message)
    character(len=:), allocatable :: message
    message = f_string(c_last_error())
  end function fsdp_last_error

  ! The version of the fsdp library loaded at run time, "0.1.0".
  function fsdp_version() result(version)
    character(len=:), allocatable :: version
    version = f_string(c_version())
  end function fsdp_version

  ! After MPI_Init: initializes Kokkos unless the application already did.
  subroutine fsdp_initialize(ierr)
    integer, intent(out) :: ierr
    ierr = int(c_initialize())
  end subroutine fsdp_initialize

  ! Before MPI_Finalize, after every handle is destroyed.
  subroutine fsdp_finalize(ierr)
    integer, intent(out) :: ierr
    ierr = int(c_finalize())
  end subroutine fsdp_finalize

  ! ---- model ----

  subroutine fsdp_model_create(model, dtype, ierr)
    type(fsdp_model), intent(out) :: model
    integer, intent(in) :: dtype
    integer, intent(out) :: ierr
    ierr = int(c_model_create(int(dtype, c_int), model%handle))
  end subroutine fsdp_model_create

  ! shape as Fortran declares the array (size(shape) = 0: a scalar); layer: the unit the
  ! parameter is gathered with ('' for the parameter alone); trainable = .false. freezes it
  ! (fsdp_model_set_trainable).
  subroutine fsdp_model_add_parameter(model, name, shape, layer, ierr, always_gather, trainable)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    integer, intent(in) :: shape(:)
    character(len=*), intent(in) :: layer
    integer, intent(out) :: ierr
    logical, intent(in), optional :: always_gather
    logical, intent(in), optional :: trainable
    integer(c_int64_t) :: c_shape(max(size(shape), 1))
    integer(c_int) :: replicated
    integer :: i, n
    n = size(shape)
    c_shape = 0
    do i = 1, n
      c_shape(i) = int(shape(n + 1 - i), c_int64_t)  ! Fortran's column-major order reversed
    end do
    replicated = 0
    if (present(always_gather)) then
      if (always_gather) replicated = 1
    end if
    ierr = int(c_model_add_parameter(model%handle, c_string(name), int(n, c_int), c_shape, &
                                     c_string(layer), replicated))
    if (ierr /= FSDP_SUCCESS .or. .not. present(trainable)) return
    if (.not. trainable) then
      ierr = int(c_model_set_trainable(model%handle, c_string(name), 0_c_int))
    end if
  end subroutine fsdp_model_add_parameter

  subroutine fsdp_model_add_strategy_pattern(model, kind, pattern, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(in) :: kind
    character(len=*), intent(in) :: pattern
    integer, intent(out) :: ierr
    ierr = int(c_model_add_strategy_pattern(model%handle, int(kind, c_int), c_string(pattern)))
  end subroutine fsdp_model_add_strategy_pattern

  ! Before fsdp_model_shard: the sharding mode (FSDP_MODE_*; FSDP_MODE_FULL_SHARD unless set).
  subroutine fsdp_model_set_mode(model, mode, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(in) :: mode
    integer, intent(out) :: ierr
    ierr = int(c_model_set_mode(model%handle, int(mode, c_int)))
  end subroutine fsdp_model_set_mode

  ! Before fsdp_model_shard: hybrid sharding within groups of size consecutive ranks (0: the
  ! ranks of each node; -1, the default: one group of every rank).
  subroutine fsdp_model_set_shard_group_size(model, size, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(in) :: size
    integer, intent(out) :: ierr
    ierr = int(c_model_set_shard_group_size(model%handle, int(size, c_int)))
  end subroutine fsdp_model_set_shard_group_size

  ! Before fsdp_model_shard: mixed precision for an FSDP_FLOAT32 model. param_dtype: the dtype
  ! the parameters are gathered in (fsdp_full gives those values as real(c_float)); reduce_dtype:
  ! the dtype the gradients are reduced in. FSDP_BFLOAT16, FSDP_FLOAT16, or FSDP_FLOAT32 for no
  ! cast (the default).
  subroutine fsdp_model_set_mixed_precision(model, param_dtype, reduce_dtype, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(in) :: param_dtype, reduce_dtype
    integer, intent(out) :: ierr
    ierr = int(c_model_set_mixed_precision(model%handle, int(param_dtype, c_int), &
                                           int(reduce_dtype, c_int)))
  end subroutine fsdp_model_set_mixed_precision

  ! Before fsdp_model_shard: the dtype of the gradients kept between the backward and the
  ! optimizer step, FSDP_BFLOAT16 (2 bytes, an FSDP_FLOAT32 model) or FSDP_FLOAT32 for no cast
  ! (the default); fsdp_grad stays the model's dtype.
  subroutine fsdp_model_set_grad_dtype(model, grad_dtype, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(in) :: grad_dtype
    integer, intent(out) :: ierr
    ierr = int(c_model_set_grad_dtype(model%handle, int(grad_dtype, c_int)))
  end subroutine fsdp_model_set_grad_dtype

  ! Collective over comm: agrees on the plan of strategy 'full', 'layerwise' or 'hybrid'.
  subroutine model_shard_integer(model, comm, strategy, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(in) :: comm
    character(len=*), intent(in) :: strategy
    integer, intent(out) :: ierr
    ierr = int(c_model_shard(model%handle, int(comm, c_int), c_string(strategy)))
  end subroutine model_shard_integer

  subroutine model_shard_f08(model, comm, strategy, ierr)
    type(fsdp_model), intent(in) :: model
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: strategy
    integer, intent(out) :: ierr
    ierr = int(c_model_shard(model%handle, int(comm%MPI_VAL, c_int), c_string(strategy)))
  end subroutine model_shard_f08

  subroutine fsdp_model_parameter_numel(model, name, numel, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(out) :: numel
    integer, intent(out) :: ierr
    ierr = int(c_model_parameter_numel(model%handle, c_string(name), numel))
  end subroutine fsdp_model_parameter_numel

  ! This rank's piece: `first` is the 0-based offset of its first element in the flattened
  ! parameter, count its length (0 when this rank holds none).
  subroutine fsdp_model_parameter_piece(model, name, first, count, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(out) :: first, count
    integer, intent(out) :: ierr
    ierr = int(c_model_parameter_piece(model%handle, c_string(name), first, count))
  end subroutine fsdp_model_parameter_piece

  subroutine fsdp_model_dtype(model, dtype, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(out) :: dtype, ierr
    integer(c_int) :: c_dtype
    ierr = int(c_model_dtype(model%handle, c_dtype))
    dtype = int(c_dtype)
  end subroutine fsdp_model_dtype

  subroutine fsdp_model_rank(model, rank, size, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(out) :: rank, size, ierr
    integer(c_int) :: c_rank, c_size
    ierr = int(c_model_rank(model%handle, c_rank, c_size))
    rank = int(c_rank)
    size = int(c_size)
  end subroutine fsdp_model_rank

  ! Every rank passes the whole parameter (any rank, numel elements); each keeps its piece.
  subroutine init_from_full_f32(model, name, values, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_float), intent(in), target, contiguous :: values(..)
    integer, intent(out) :: ierr
    ierr = check_array(model, name, FSDP_FLOAT32, int(size(values), c_int64_t), &
                       'fsdp_model_init_from_full')
    if (ierr /= FSDP_SUCCESS) return
    ierr = int(c_model_init_from_full(model%handle, c_string(name), c_loc(values)))
  end subroutine init_from_full_f32

  subroutine init_from_full_f64(model, name, values, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_double), intent(in), target, contiguous :: values(..)
    integer, intent(out) :: ierr
    ierr = check_array(model, name, FSDP_FLOAT64, int(size(values), c_int64_t), &
                       'fsdp_model_init_from_full')
    if (ierr /= FSDP_SUCCESS) return
    ierr = int(c_model_init_from_full(model%handle, c_string(name), c_loc(values)))
  end subroutine init_from_full_f64

  ! Collective: rank 0 passes the whole parameter; the other ranks' values are ignored (pass any
  ! array of the model's kind, e.g. of size 0).
  subroutine init_from_root_f32(model, name, values, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_float), intent(in), target, contiguous :: values(..)
    integer, intent(out) :: ierr
    integer(c_int64_t) :: numel
    integer :: rank, nranks
    call fsdp_model_rank(model, rank, nranks, ierr)
    if (ierr /= FSDP_SUCCESS) return
    numel = int(size(values), c_int64_t)
    if (rank /= 0) call fsdp_model_parameter_numel(model, name, numel, ierr)
    if (ierr /= FSDP_SUCCESS) return
    ierr = check_array(model, name, FSDP_FLOAT32, numel, 'fsdp_model_init_from_root')
    if (ierr /= FSDP_SUCCESS) return
    if (rank == 0) then
      ierr = int(c_model_init_from_root(model%handle, c_string(name), c_loc(values)))
    else
      ierr = int(c_model_init_from_root(model%handle, c_string(name), c_null_ptr))
    end if
  end subroutine init_from_root_f32

  subroutine init_from_root_f64(model, name, values, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_double), intent(in), target, contiguous :: values(..)
    integer, intent(out) :: ierr
    integer(c_int64_t) :: numel
    integer :: rank, nranks
    call fsdp_model_rank(model, rank, nranks, ierr)
    if (ierr /= FSDP_SUCCESS) return
    numel = int(size(values), c_int64_t)
    if (rank /= 0) call fsdp_model_parameter_numel(model, name, numel, ierr)
    if (ierr /= FSDP_SUCCESS) return
    ierr = check_array(model, name, FSDP_FLOAT64, numel, 'fsdp_model_init_from_root')
    if (ierr /= FSDP_SUCCESS) return
    if (rank == 0) then
      ierr = int(c_model_init_from_root(model%handle, c_string(name), c_loc(values)))
    else
      ierr = int(c_model_init_from_root(model%handle, c_string(name), c_null_ptr))
    end if
  end subroutine init_from_root_f64

  ! fill (a BIND(C) function, see fsdp_fill_function) fills this rank's piece; user_data is
  ! passed to it unchanged.
  subroutine fsdp_model_init_with(model, name, fill, ierr, user_data)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    procedure(fsdp_fill_function) :: fill
    integer, intent(out) :: ierr
    type(c_ptr), intent(in), optional :: user_data
    type(c_ptr) :: data
    data = c_null_ptr
    if (present(user_data)) data = user_data
    ierr = int(c_model_init_with(model%handle, c_string(name), c_funloc(fill), data))
  end subroutine fsdp_model_init_with

  subroutine fsdp_model_zero_grad(model, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(out) :: ierr
    ierr = int(c_model_zero_grad(model%handle))
  end subroutine fsdp_model_zero_grad

  ! Collective: the whole parameter into values on every rank.
  subroutine copy_parameter_f32(model, name, values, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_float), intent(inout), target, contiguous :: values(..)
    integer, intent(out) :: ierr
    ierr = check_array(model, name, FSDP_FLOAT32, int(size(values), c_int64_t), &
                       'fsdp_model_copy_parameter')
    if (ierr /= FSDP_SUCCESS) return
    ierr = int(c_model_copy_parameter(model%handle, c_string(name), c_loc(values)))
  end subroutine copy_parameter_f32

  subroutine copy_parameter_f64(model, name, values, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_double), intent(inout), target, contiguous :: values(..)
    integer, intent(out) :: ierr
    ierr = check_array(model, name, FSDP_FLOAT64, int(size(values), c_int64_t), &
                       'fsdp_model_copy_parameter')
    if (ierr /= FSDP_SUCCESS) return
    ierr = int(c_model_copy_parameter(model%handle, c_string(name), c_loc(values)))
  end subroutine copy_parameter_f64

  ! Never fails. The model's storage lives until its runtimes and optimizers are destroyed too.
  subroutine fsdp_model_destroy(model)
    type(fsdp_model), intent(inout) :: model
    call c_model_destroy(model%handle)
    model%handle = c_null_ptr
  end subroutine fsdp_model_destroy

  ! ---- runtime ----

  ! order: every unit once, in forward execution order. prefetch (default .true.) and
  ! max_gathered_units (default 2) as in the C++ RuntimeOptions; the units in keep_gathered (default
  ! none) stay gathered from their forward scope until their backward scope (one gather a step
  ! instead of two, their whole parameters held meanwhile). Tied parameters (default none):
  ! tied_parameters(i) is also used by unit tied_units(i), which must come after the parameter's
  ! unit in the order (fsdp_runtime_create_tied in fsdp.h): one parameter, gathered once a step,
  ! its gradient the sum of every use.
  subroutine fsdp_runtime_create(runtime, model, order, ierr, prefetch, max_gathered_units, &
                                 keep_gathered, tied_parameters, tied_units)
    type(fsdp_runtime), intent(out) :: runtime
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: order(:)
    integer, intent(out) :: ierr
    logical, intent(in), optional :: prefetch
    integer, intent(in), optional :: max_gathered_units
    character(len=*), intent(in), optional :: keep_gathered(:)
    character(len=*), intent(in), optional :: tied_parameters(:), tied_units(:)
    character(kind=c_char), allocatable, target :: order_buffer(:), keep_buffer(:)
    character(kind=c_char), allocatable, target :: tied_buffer(:), users_buffer(:)
    type(c_ptr), allocatable :: order_pointers(:), keep_pointers(:)
    type(c_ptr), allocatable :: tied_pointers(:), users_pointers(:)
    character(len=1) :: none(0)
    integer(c_int) :: c_prefetch, c_limit, dtype, nkeep, ntied
    if (present(tied_parameters) .neqv. present(tied_units)) then
      ierr = FSDP_ERROR_INVALID_ARGUMENT
      return
    end if
    call c_strings(order, order_buffer, order_pointers)
    if (present(tied_parameters)) then
      if (size(tied_parameters) /= size(tied_units)) then
        ierr = FSDP_ERROR_INVALID_ARGUMENT
        return
      end if
      call c_strings(tied_parameters, tied_buffer, tied_pointers)
      call c_strings(tied_units, users_buffer, users_pointers)
      ntied = int(size(tied_parameters), c_int)
    else
      call c_strings(none, tied_buffer, tied_pointers)
      call c_strings(none, users_buffer, users_pointers)
      ntied = 0
    end if
    if (present(keep_gathered)) then
      call c_strings(keep_gathered, keep_buffer, keep_pointers)
      nkeep = int(size(keep_gathered), c_int)
    else
      call c_strings(none, keep_buffer, keep_pointers)
      nkeep = 0
    end if
    c_prefetch = 1
    if (present(prefetch)) then
      if (.not. prefetch) c_prefetch = 0
    end if
    c_limit = 2
    if (present(max_gathered_units)) c_limit = int(max_gathered_units, c_int)
    ierr = int(c_model_dtype(model%handle, dtype))
    if (ierr /= FSDP_SUCCESS) return
    runtime%dtype = int(dtype)
    ierr = int(c_runtime_create_tied(model%handle, int(size(order), c_int), order_pointers, &
                                     c_prefetch, c_limit, nkeep, keep_pointers, ntied, &
                                     tied_pointers, users_pointers, runtime%handle))
  end subroutine fsdp_runtime_create

  subroutine fsdp_begin_forward(runtime, unit, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: unit
    integer, intent(out) :: ierr
    ierr = int(c_begin_forward(runtime%handle, c_string(unit)))
  end subroutine fsdp_begin_forward

  subroutine fsdp_end_forward(runtime, unit, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: unit
    integer, intent(out) :: ierr
    ierr = int(c_end_forward(runtime%handle, c_string(unit)))
  end subroutine fsdp_end_forward

  subroutine fsdp_begin_backward(runtime, unit, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: unit
    integer, intent(out) :: ierr
    ierr = int(c_begin_backward(runtime%handle, c_string(unit)))
  end subroutine fsdp_begin_backward

  subroutine fsdp_end_backward(runtime, unit, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: unit
    integer, intent(out) :: ierr
    ierr = int(c_end_backward(runtime%handle, c_string(unit)))
  end subroutine fsdp_end_backward

  subroutine fsdp_finish_step(runtime, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    integer, intent(out) :: ierr
    ierr = int(c_finish_step(runtime%handle))
  end subroutine fsdp_finish_step

  ! Gradient accumulation: with .false., the following steps' gradients wait whole and unreduced
  ! and add up; the first step with .true. (the default) reduces the sum once. Between steps;
  ! collective (FSDP_ERROR_MISMATCH on every rank when ranks pass different values).
  subroutine fsdp_runtime_set_requires_gradient_sync(runtime, sync, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    logical, intent(in) :: sync
    integer, intent(out) :: ierr
    ierr = int(c_runtime_set_requires_gradient_sync(runtime%handle, merge(1_c_int, 0_c_int, sync)))
  end subroutine fsdp_runtime_set_requires_gradient_sync

  ! Overlap from the next step on (fsdp_runtime_set_overlap in fsdp.h): the units gathered at
  ! once in backward (0: max_gathered_units) and the gradient reductions left in flight after
  ! fsdp_end_backward (default 2; 0: wait for each). Between steps; collective.
  subroutine fsdp_runtime_set_overlap(runtime, max_gathered_units_backward, &
                                      max_reductions_in_flight, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    integer, intent(in) :: max_gathered_units_backward, max_reductions_in_flight
    integer, intent(out) :: ierr
    ierr = int(c_runtime_set_overlap(runtime%handle, int(max_gathered_units_backward, c_int), &
                                     int(max_reductions_in_flight, c_int)))
  end subroutine fsdp_runtime_set_overlap

  ! The optimizer in backward from the next step on (fsdp_runtime_set_optimizer_in_backward in
  ! fsdp.h): each unit steps as soon as its gradient reduction lands, and fsdp_finish_step
  ! returns with the step taken. Without optimizer= it is turned off. Between steps; collective.
  subroutine fsdp_runtime_set_optimizer_in_backward(runtime, optimizer, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    type(fsdp_optimizer), intent(in), optional :: optimizer
    integer, intent(out) :: ierr
    type(c_ptr) :: handle
    handle = c_null_ptr
    if (present(optimizer)) handle = optimizer%handle
    ierr = int(c_runtime_set_optimizer_in_backward(runtime%handle, handle))
  end subroutine fsdp_runtime_set_optimizer_in_backward

  ! Inside the open scope of the parameter's unit: the whole parameter, flattened (remap it with
  ! `w(1:m, 1:n) => values`). Read only; valid until the scope ends.
  subroutine full_f32(runtime, parameter, values, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: parameter
    real(c_float), pointer, intent(out) :: values(:)
    integer, intent(out) :: ierr
    call scope_array(runtime, parameter, .false., FSDP_FLOAT32, ierr, values32=values)
  end subroutine full_f32

  subroutine full_f64(runtime, parameter, values, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: parameter
    real(c_double), pointer, intent(out) :: values(:)
    integer, intent(out) :: ierr
    call scope_array(runtime, parameter, .false., FSDP_FLOAT64, ierr, values64=values)
  end subroutine full_f64

  ! In a backward scope only: the whole gradient of the parameter, to add this rank's into.
  subroutine grad_f32(runtime, parameter, values, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: parameter
    real(c_float), pointer, intent(out) :: values(:)
    integer, intent(out) :: ierr
    call scope_array(runtime, parameter, .true., FSDP_FLOAT32, ierr, values32=values)
  end subroutine grad_f32

  subroutine grad_f64(runtime, parameter, values, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: parameter
    real(c_double), pointer, intent(out) :: values(:)
    integer, intent(out) :: ierr
    call scope_array(runtime, parameter, .true., FSDP_FLOAT64, ierr, values64=values)
  end subroutine grad_f64

  ! Mixed precision with a 16-bit param_dtype, inside the open scope of the parameter's unit: the
  ! whole parameter as gathered, bfloat16 or float16 bits (as param_dtype says) in 16-bit
  ! integers. Read only; valid until the scope ends. FSDP_ERROR_STATE for a model gathered in its
  ! own kind.
  subroutine fsdp_half(runtime, parameter, values, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: parameter
    integer(c_int16_t), pointer, intent(out) :: values(:)
    integer, intent(out) :: ierr
    type(c_ptr) :: data
    integer(c_int64_t) :: numel
    nullify (values)
    ierr = int(c_half(runtime%handle, c_string(parameter), data, numel))
    if (ierr /= FSDP_SUCCESS) return
    call c_f_pointer(data, values, [numel])
  end subroutine fsdp_half

  subroutine scope_array(runtime, parameter, gradient, kind, ierr, values32, values64)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: parameter
    logical, intent(in) :: gradient
    integer, intent(in) :: kind
    integer, intent(out) :: ierr
    real(c_float), pointer, intent(out), optional :: values32(:)
    real(c_double), pointer, intent(out), optional :: values64(:)
    type(c_ptr) :: data
    integer(c_int64_t) :: numel
    if (present(values32)) nullify (values32)
    if (present(values64)) nullify (values64)
    if (runtime%dtype /= kind) then
      ierr = set_error(FSDP_ERROR_INVALID_ARGUMENT, "fsdp_full/fsdp_grad: '" // trim(parameter) &
                       // "' requested as " // kind_name(kind) // " from a model of " // &
                       kind_name(runtime%dtype))
      return
    end if
    if (gradient) then
      ierr = int(c_grad(runtime%handle, c_string(parameter), data, numel))
    else
      ierr = int(c_full(runtime%handle, c_string(parameter), data, numel))
    end if
    if (ierr /= FSDP_SUCCESS) return
    if (present(values32)) call c_f_pointer(data, values32, [numel])
    if (present(values64)) call c_f_pointer(data, values64, [numel])
  end subroutine scope_array

  subroutine fsdp_progress(runtime, ierr)
    type(fsdp_runtime), intent(in) :: runtime
    integer, intent(out) :: ierr
    ierr = int(c_progress(runtime%handle))
  end subroutine fsdp_progress

  subroutine fsdp_runtime_destroy(runtime)
    type(fsdp_runtime), intent(inout) :: runtime
    call c_runtime_destroy(runtime%handle)
    runtime%handle = c_null_ptr
  end subroutine fsdp_runtime_destroy

  ! What the runtime observed since it was made (any of the outputs may be left out): scopes
  ! entered, gathers started, of those the ones started ahead of their scope, scopes whose unit
  ! was gathered when they opened, and seconds spent waiting for gathers.
  subroutine fsdp_runtime_stats(runtime, ierr, scopes, gathers, prefetched, ready_on_entry, wait_s)
    type(fsdp_runtime), intent(in) :: runtime
    integer, intent(out) :: ierr
    integer(c_int64_t), intent(out), optional :: scopes, gathers, prefetched, ready_on_entry
    real(c_double), intent(out), optional :: wait_s
    integer(c_int64_t) :: counts(4)
    real(c_double) :: waited
    ierr = int(c_runtime_stats(runtime%handle, counts(1), counts(2), counts(3), counts(4), waited))
    if (ierr /= FSDP_SUCCESS) return
    if (present(scopes)) scopes = counts(1)
    if (present(gathers)) gathers = counts(2)
    if (present(prefetched)) prefetched = counts(3)
    if (present(ready_on_entry)) ready_on_entry = counts(4)
    if (present(wait_s)) wait_s = waited
  end subroutine fsdp_runtime_stats

  ! ---- gradient norm and clipping ----

  ! Collective: the global L2 norm of the model's gradient pieces, every element counted once.
  subroutine fsdp_grad_norm(model, norm, ierr)
    type(fsdp_model), intent(in) :: model
    real(c_double), intent(out) :: norm
    integer, intent(out) :: ierr
    ierr = int(c_grad_norm(model%handle, norm))
  end subroutine fsdp_grad_norm

  ! Collective: scales the gradient pieces by max_norm / (norm + 1e-6) when the norm exceeds
  ! max_norm (> 0); norm (optional) is the norm before clipping.
  subroutine fsdp_clip_grad_norm(model, max_norm, ierr, norm)
    type(fsdp_model), intent(in) :: model
    real(c_double), intent(in) :: max_norm
    integer, intent(out) :: ierr
    real(c_double), intent(out), optional :: norm
    real(c_double) :: before
    ierr = int(c_clip_grad_norm(model%handle, max_norm, before))
    if (ierr == FSDP_SUCCESS .and. present(norm)) norm = before
  end subroutine fsdp_clip_grad_norm

  ! ---- memory report ----

  ! The bytes of one category (FSDP_MEMORY_*) on this rank now and at their peak.
  subroutine fsdp_memory_bytes(model, category, current, peak, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(in) :: category
    integer(c_int64_t), intent(out) :: current, peak
    integer, intent(out) :: ierr
    ierr = int(c_memory_bytes(model%handle, int(category, c_int), current, peak))
  end subroutine fsdp_memory_bytes

  subroutine fsdp_memory_reset_peaks(model, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(out) :: ierr
    ierr = int(c_memory_reset_peaks(model%handle))
  end subroutine fsdp_memory_reset_peaks

  ! 'parameter_shards', ..., 'total'; '' for a category out of range.
  function fsdp_memory_category_name(category) result(name)
    integer, intent(in) :: category
    character(len=:), allocatable :: name
    name = f_string(c_memory_category_name(int(category, c_int)))
  end function fsdp_memory_category_name

  ! ---- optimizers (PyTorch's rules; defaults as PyTorch's) ----

  subroutine fsdp_optimizer_create_sgd(optimizer, model, lr, ierr, momentum, dampening, nesterov, &
                                       weight_decay)
    type(fsdp_optimizer), intent(out) :: optimizer
    type(fsdp_model), intent(in) :: model
    real(c_double), intent(in) :: lr
    integer, intent(out) :: ierr
    real(c_double), intent(in), optional :: momentum, dampening, weight_decay
    logical, intent(in), optional :: nesterov
    real(c_double) :: m, d, wd
    integer(c_int) :: n
    m = 0
    d = 0
    wd = 0
    n = 0
    if (present(momentum)) m = momentum
    if (present(dampening)) d = dampening
    if (present(weight_decay)) wd = weight_decay
    if (present(nesterov)) then
      if (nesterov) n = 1
    end if
    ierr = int(c_optimizer_create_sgd(model%handle, lr, m, d, n, wd, optimizer%handle))
  end subroutine fsdp_optimizer_create_sgd

  ! Adam with L2 weight decay (default 0).
  subroutine fsdp_optimizer_create_adam(optimizer, model, lr, ierr, beta1, beta2, eps, &
                                        weight_decay)
    type(fsdp_optimizer), intent(out) :: optimizer
    type(fsdp_model), intent(in) :: model
    real(c_double), intent(in) :: lr
    integer, intent(out) :: ierr
    real(c_double), intent(in), optional :: beta1, beta2, eps, weight_decay
    real(c_double) :: b1, b2, e, wd
    call adam_defaults(0.0_c_double, b1, b2, e, wd, beta1, beta2, eps, weight_decay)
    ierr = int(c_optimizer_create_adam(model%handle, lr, b1, b2, e, wd, optimizer%handle))
  end subroutine fsdp_optimizer_create_adam

  ! AdamW: decoupled weight decay (default 0.01).
  subroutine fsdp_optimizer_create_adamw(optimizer, model, lr, ierr, beta1, beta2, eps, &
                                         weight_decay)
    type(fsdp_optimizer), intent(out) :: optimizer
    type(fsdp_model), intent(in) :: model
    real(c_double), intent(in) :: lr
    integer, intent(out) :: ierr
    real(c_double), intent(in), optional :: beta1, beta2, eps, weight_decay
    real(c_double) :: b1, b2, e, wd
    call adam_defaults(0.01_c_double, b1, b2, e, wd, beta1, beta2, eps, weight_decay)
    ierr = int(c_optimizer_create_adamw(model%handle, lr, b1, b2, e, wd, optimizer%handle))
  end subroutine fsdp_optimizer_create_adamw

  subroutine adam_defaults(default_decay, b1, b2, e, wd, beta1, beta2, eps, weight_decay)
    real(c_double), intent(in) :: default_decay
    real(c_double), intent(out) :: b1, b2, e, wd
    real(c_double), intent(in), optional :: beta1, beta2, eps, weight_decay
    b1 = 0.9_c_double
    b2 = 0.999_c_double
    e = 1e-8_c_double
    wd = default_decay
    if (present(beta1)) b1 = beta1
    if (present(beta2)) b2 = beta2
    if (present(eps)) e = eps
    if (present(weight_decay)) wd = weight_decay
  end subroutine adam_defaults

  subroutine fsdp_optimizer_step(optimizer, ierr)
    type(fsdp_optimizer), intent(in) :: optimizer
    integer, intent(out) :: ierr
    ierr = int(c_optimizer_step(optimizer%handle))
  end subroutine fsdp_optimizer_step

  ! The learning rate and weight decay of the steps that follow; every rank makes the same calls
  ! with the same values (the next step checks: FSDP_ERROR_MISMATCH on every rank otherwise).
  subroutine fsdp_optimizer_set_lr(optimizer, lr, ierr)
    type(fsdp_optimizer), intent(in) :: optimizer
    real(c_double), intent(in) :: lr
    integer, intent(out) :: ierr
    ierr = int(c_optimizer_set_lr(optimizer%handle, lr))
  end subroutine fsdp_optimizer_set_lr

  subroutine fsdp_optimizer_set_weight_decay(optimizer, weight_decay, ierr)
    type(fsdp_optimizer), intent(in) :: optimizer
    real(c_double), intent(in) :: weight_decay
    integer, intent(out) :: ierr
    ierr = int(c_optimizer_set_weight_decay(optimizer%handle, weight_decay))
  end subroutine fsdp_optimizer_set_weight_decay

  ! The learning rate of the next step and the steps taken (a loaded checkpoint's included).
  subroutine fsdp_optimizer_get_state(optimizer, ierr, lr, steps)
    type(fsdp_optimizer), intent(in) :: optimizer
    integer, intent(out) :: ierr
    real(c_double), intent(out), optional :: lr
    integer(c_int64_t), intent(out), optional :: steps
    real(c_double) :: rate
    integer(c_int64_t) :: count
    ierr = int(c_optimizer_get_state(optimizer%handle, rate, count))
    if (present(lr)) lr = rate
    if (present(steps)) steps = count
  end subroutine fsdp_optimizer_get_state

  ! ---- learning-rate schedules (docs/units.md) ----

  ! decay: 'constant', 'linear', 'cosine' or 'step'. Absent arguments: warmup_steps 0,
  ! total_steps 0 (give it for linear and cosine), min_lr 0, step_size 1, gamma 0.1.
  subroutine fsdp_lr_schedule_create(schedule, decay, lr, ierr, warmup_steps, total_steps, &
                                     min_lr, step_size, gamma)
    type(fsdp_lr_schedule), intent(out) :: schedule
    character(len=*), intent(in) :: decay
    real(c_double), intent(in) :: lr
    integer, intent(out) :: ierr
    integer(c_int64_t), intent(in), optional :: warmup_steps, total_steps, step_size
    real(c_double), intent(in), optional :: min_lr, gamma
    integer(c_int64_t) :: warmup, total, size
    real(c_double) :: floor, factor
    warmup = 0
    total = 0
    size = 1
    floor = 0
    factor = 0.1d0
    if (present(warmup_steps)) warmup = warmup_steps
    if (present(total_steps)) total = total_steps
    if (present(step_size)) size = step_size
    if (present(min_lr)) floor = min_lr
    if (present(gamma)) factor = gamma
    ierr = int(c_lr_schedule_create(c_string(decay), lr, warmup, total, floor, size, factor, &
                                    schedule%handle))
  end subroutine fsdp_lr_schedule_create

  ! The rate of step `step` (from 0).
  subroutine fsdp_lr_schedule_lr_at(schedule, step, lr, ierr)
    type(fsdp_lr_schedule), intent(in) :: schedule
    integer(c_int64_t), intent(in) :: step
    real(c_double), intent(out) :: lr
    integer, intent(out) :: ierr
    ierr = int(c_lr_schedule_lr_at(schedule%handle, step, lr))
  end subroutine fsdp_lr_schedule_lr_at

  ! Sets the optimizer's rate for its next step from its step count: call before every step.
  subroutine fsdp_lr_schedule_apply(schedule, optimizer, ierr)
    type(fsdp_lr_schedule), intent(in) :: schedule
    type(fsdp_optimizer), intent(in) :: optimizer
    integer, intent(out) :: ierr
    ierr = int(c_lr_schedule_apply(schedule%handle, optimizer%handle))
  end subroutine fsdp_lr_schedule_apply

  subroutine fsdp_lr_schedule_destroy(schedule)
    type(fsdp_lr_schedule), intent(inout) :: schedule
    call c_lr_schedule_destroy(schedule%handle)
    schedule%handle = c_null_ptr
  end subroutine fsdp_lr_schedule_destroy

  ! ---- checkpoints (docs/checkpoints.md) ----

  ! Collective: the model's parameters, and the optimizer's state and the loss scaler's when they
  ! are given, saved to path (one HDF5 file, written under path.tmp and renamed when complete),
  ! with step and epoch (0 when absent). ierr = FSDP_ERROR_IO when the file cannot be written.
  subroutine fsdp_checkpoint_save(model, path, ierr, optimizer, step, epoch, scaler)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: path
    integer, intent(out) :: ierr
    type(fsdp_optimizer), intent(in), optional :: optimizer
    integer(c_int64_t), intent(in), optional :: step, epoch
    type(fsdp_loss_scaler), intent(in), optional :: scaler
    ierr = checkpoint_save(model, path, .false., optimizer, step, epoch, scaler)
  end subroutine fsdp_checkpoint_save

  ! Collective: fsdp_checkpoint_save in the background: returns once every rank has copied its
  ! pieces into a snapshot, while a thread of each rank writes the file. path appears when the
  ! save is finished (fsdp_checkpoint_finish, an fsdp_checkpoint_try_finish that gives
  ! finished = .true., or the model's next save or load); ierr = FSDP_ERROR_IO from the call that
  ! finishes a save whose writing failed on any rank.
  subroutine fsdp_checkpoint_save_in_background(model, path, ierr, optimizer, step, epoch, scaler)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: path
    integer, intent(out) :: ierr
    type(fsdp_optimizer), intent(in), optional :: optimizer
    integer(c_int64_t), intent(in), optional :: step, epoch
    type(fsdp_loss_scaler), intent(in), optional :: scaler
    ierr = checkpoint_save(model, path, .true., optimizer, step, epoch, scaler)
  end subroutine fsdp_checkpoint_save_in_background

  ! Both saves: the optional arguments' defaults (no optimizer, step and epoch 0, no scaler), then
  ! the call.
  integer function checkpoint_save(model, path, background, optimizer, step, epoch, scaler)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: path
    logical, intent(in) :: background
    type(fsdp_optimizer), intent(in), optional :: optimizer
    integer(c_int64_t), intent(in), optional :: step, epoch
    type(fsdp_loss_scaler), intent(in), optional :: scaler
    type(c_ptr) :: optimizer_handle, scaler_handle
    integer(c_int64_t) :: at_step, at_epoch
    optimizer_handle = c_null_ptr
    if (present(optimizer)) optimizer_handle = optimizer%handle
    scaler_handle = c_null_ptr
    if (present(scaler)) scaler_handle = scaler%handle
    at_step = 0
    if (present(step)) at_step = step
    at_epoch = 0
    if (present(epoch)) at_epoch = epoch
    if (background) then
      checkpoint_save = int(c_checkpoint_save_in_background(model%handle, optimizer_handle, &
                                                            scaler_handle, c_string(path), &
                                                            at_step, at_epoch))
    else
      checkpoint_save = int(c_checkpoint_save(model%handle, optimizer_handle, scaler_handle, &
                                              c_string(path), at_step, at_epoch))
    end if
  end function checkpoint_save

  ! Collective, never waits: publishes the save in the background once every rank has written
  ! it; finished is .true. when no save is pending any more (the same on every rank).
  subroutine fsdp_checkpoint_try_finish(model, finished, ierr)
    type(fsdp_model), intent(in) :: model
    logical, intent(out) :: finished
    integer, intent(out) :: ierr
    integer(c_int) :: done
    done = 0
    ierr = int(c_checkpoint_try_finish(model%handle, done))
    finished = ierr == FSDP_SUCCESS .and. done /= 0
  end subroutine fsdp_checkpoint_try_finish

  ! Collective: waits for the save in the background and publishes it.
  subroutine fsdp_checkpoint_finish(model, ierr)
    type(fsdp_model), intent(in) :: model
    integer, intent(out) :: ierr
    ierr = int(c_checkpoint_finish(model%handle))
  end subroutine fsdp_checkpoint_finish

  ! Collective: a checkpoint written at any number of ranks with any strategy into the model (and
  ! the optimizer's state and the loss scaler's when they are given); its step and epoch when
  ! asked for. Nothing changes unless everything matches: FSDP_ERROR_MISMATCH lists the
  ! differences, FSDP_ERROR_IO names a missing, damaged or foreign file.
  subroutine fsdp_checkpoint_load(model, path, ierr, optimizer, step, epoch, scaler)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: path
    integer, intent(out) :: ierr
    type(fsdp_optimizer), intent(in), optional :: optimizer
    integer(c_int64_t), intent(out), optional :: step, epoch
    type(fsdp_loss_scaler), intent(in), optional :: scaler
    type(c_ptr) :: optimizer_handle, scaler_handle
    integer(c_int64_t) :: at_step, at_epoch
    optimizer_handle = c_null_ptr
    if (present(optimizer)) optimizer_handle = optimizer%handle
    scaler_handle = c_null_ptr
    if (present(scaler)) scaler_handle = scaler%handle
    ierr = int(c_checkpoint_load(model%handle, optimizer_handle, scaler_handle, c_string(path), &
                                 at_step, at_epoch))
    if (ierr /= FSDP_SUCCESS) return
    if (present(step)) step = at_step
    if (present(epoch)) epoch = at_epoch
  end subroutine fsdp_checkpoint_load

  ! Objects of the caller's own in the model's checkpoints: the JSON text of object name (a number,
  ! a string, an array, an object), which every later save stores and every later load replaces
  ! with the file's (requiring it there). Set the same objects on every rank. ierr =
  ! FSDP_ERROR_INVALID_ARGUMENT when json is not JSON.
  subroutine fsdp_checkpoint_set_object(model, name, json, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name, json
    integer, intent(out) :: ierr
    ierr = int(c_checkpoint_set_object(model%handle, c_string(name), c_string(json)))
  end subroutine fsdp_checkpoint_set_object

  ! The JSON text of object name, as set or as the last load gave it ('' on failure; ierr =
  ! FSDP_ERROR_UNKNOWN_NAME when the model has no such object).
  subroutine fsdp_checkpoint_get_object(model, name, json, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    character(len=:), allocatable, intent(out) :: json
    integer, intent(out) :: ierr
    character(kind=c_char), allocatable, target :: chars(:)
    integer(c_size_t) :: length, capacity
    integer :: i
    json = ''
    ierr = int(c_checkpoint_get_object(model%handle, c_string(name), c_null_ptr, 0_c_size_t, &
                                       capacity))
    if (ierr /= FSDP_SUCCESS) return
    capacity = capacity + 1  ! the NUL
    allocate (chars(capacity))
    ierr = int(c_checkpoint_get_object(model%handle, c_string(name), c_loc(chars), capacity, &
                                       length))
    if (ierr /= FSDP_SUCCESS) return
    json = repeat(' ', int(length))
    do i = 1, int(length)
      json(i:i) = chars(i)
    end do
  end subroutine fsdp_checkpoint_get_object

  ! Collective: the parameters from pretrained weights (a plain HDF5 file with one dataset per
  ! parameter, named as the parameter, or a checkpoint), with fsdp_checkpoint_load's checks.
  subroutine fsdp_load_parameters(model, path, ierr)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: path
    integer, intent(out) :: ierr
    ierr = int(c_load_parameters(model%handle, c_string(path)))
  end subroutine fsdp_load_parameters

  subroutine fsdp_optimizer_destroy(optimizer)
    type(fsdp_optimizer), intent(inout) :: optimizer
    call c_optimizer_destroy(optimizer%handle)
    optimizer%handle = c_null_ptr
  end subroutine fsdp_optimizer_destroy

  ! ---- dynamic loss scaling (docs/modes.md) ----

  ! Absent settings take PyTorch's defaults: init_scale 65536, growth_factor 2, backoff_factor 0.5,
  ! growth_interval 2000.
  subroutine fsdp_loss_scaler_create(scaler, ierr, init_scale, growth_factor, backoff_factor, &
                                     growth_interval)
    type(fsdp_loss_scaler), intent(out) :: scaler
    integer, intent(out) :: ierr
    real(c_double), intent(in), optional :: init_scale, growth_factor, backoff_factor
    integer, intent(in), optional :: growth_interval
    real(c_double) :: scale, growth, backoff
    integer(c_int64_t) :: interval
    scale = 0  ! 0: the default
    growth = 0
    backoff = 0
    interval = 0
    if (present(init_scale)) scale = init_scale
    if (present(growth_factor)) growth = growth_factor
    if (present(backoff_factor)) backoff = backoff_factor
    if (present(growth_interval)) interval = int(growth_interval, c_int64_t)
    ierr = int(c_loss_scaler_create(scale, growth, backoff, interval, scaler%handle))
  end subroutine fsdp_loss_scaler_create

  ! The scale to multiply the loss (the gradients written in the backward scopes) by.
  subroutine fsdp_loss_scaler_scale(scaler, scale, ierr)
    type(fsdp_loss_scaler), intent(in) :: scaler
    real(c_double), intent(out) :: scale
    integer, intent(out) :: ierr
    ierr = int(c_loss_scaler_scale(scaler%handle, scale))
  end subroutine fsdp_loss_scaler_scale

  ! Collective, after fsdp_finish_step: divides the gradient pieces by the scale; found_inf is
  ! .true. on every rank when any element on any rank is infinite or NaN (skip the optimizer step).
  subroutine fsdp_loss_scaler_unscale_and_check(scaler, model, found_inf, ierr)
    type(fsdp_loss_scaler), intent(in) :: scaler
    type(fsdp_model), intent(in) :: model
    logical, intent(out) :: found_inf
    integer, intent(out) :: ierr
    integer(c_int) :: found
    found = 0
    ierr = int(c_loss_scaler_unscale_and_check(scaler%handle, model%handle, found))
    found_inf = found /= 0
  end subroutine fsdp_loss_scaler_unscale_and_check

  ! After every step, with fsdp_loss_scaler_unscale_and_check's answer.
  subroutine fsdp_loss_scaler_update(scaler, found_inf, ierr)
    type(fsdp_loss_scaler), intent(in) :: scaler
    logical, intent(in) :: found_inf
    integer, intent(out) :: ierr
    ierr = int(c_loss_scaler_update(scaler%handle, merge(1_c_int, 0_c_int, found_inf)))
  end subroutine fsdp_loss_scaler_update

  ! The state a checkpoint needs: the scale, the clean steps since the last overflow or growth,
  ! the skipped steps so far.
  subroutine fsdp_loss_scaler_get_state(scaler, scale, clean_steps, skipped_steps, ierr)
    type(fsdp_loss_scaler), intent(in) :: scaler
    real(c_double), intent(out) :: scale
    integer(c_int64_t), intent(out) :: clean_steps, skipped_steps
    integer, intent(out) :: ierr
    ierr = int(c_loss_scaler_get_state(scaler%handle, scale, clean_steps, skipped_steps))
  end subroutine fsdp_loss_scaler_get_state

  subroutine fsdp_loss_scaler_set_state(scaler, scale, clean_steps, skipped_steps, ierr)
    type(fsdp_loss_scaler), intent(in) :: scaler
    real(c_double), intent(in) :: scale
    integer(c_int64_t), intent(in) :: clean_steps, skipped_steps
    integer, intent(out) :: ierr
    ierr = int(c_loss_scaler_set_state(scaler%handle, scale, clean_steps, skipped_steps))
  end subroutine fsdp_loss_scaler_set_state

  subroutine fsdp_loss_scaler_destroy(scaler)
    type(fsdp_loss_scaler), intent(inout) :: scaler
    call c_loss_scaler_destroy(scaler%handle)
    scaler%handle = c_null_ptr
  end subroutine fsdp_loss_scaler_destroy

end module fsdp
