! The Fortran module `fsdp` under mpiexec at 1, 2 and 3 ranks: a 2-layer linear model trained
! through the begin/end calls (fp64, and fp32 in bf16 mixed precision with a loss scaler) against
! the same training done unsharded by hand, an exact SGD invariant in single precision with a
! fill callback, and the error paths. Any mismatch prints and stops with `error stop` (a nonzero
! exit that ends the whole job).
module test_support
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use fsdp
  implicit none
  integer, parameter :: n_in = 3, n_hidden = 5, n_out = 2, batch = 2
  ! Every parameter of the model, one after the other: l0.w, l0.b, l1.w, l1.b.
  integer, parameter :: n_all = n_in * n_hidden + n_hidden + n_hidden * n_out + n_out
  integer :: world_rank = 0, world_size = 1

  interface
    ! POSIX getpid (pid_t is an int on the systems fsdp runs on).
    integer(c_int) function c_getpid() bind(c, name='getpid')
      import :: c_int
    end function c_getpid
  end interface

contains

  subroutine check(condition, message)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: message
    if (.not. condition) then
      write (*, '(a,i0,a,a)') 'test_fortran: rank ', world_rank, ': check failed: ', message
      write (*, '(a,a)') '  fsdp_last_error(): ', fsdp_last_error()
      flush (6)
      error stop 1
    end if
  end subroutine check

  subroutine check_ok(ierr, what)
    integer, intent(in) :: ierr
    character(len=*), intent(in) :: what
    character(len=16) :: code
    write (code, '(i0)') ierr
    call check(ierr == FSDP_SUCCESS, what // ' returned ' // trim(code))
  end subroutine check_ok

  subroutine check_code(ierr, expected, what)
    integer, intent(in) :: ierr, expected
    character(len=*), intent(in) :: what
    character(len=32) :: codes
    write (codes, '(i0,a,i0)') ierr, ', expected ', expected
    call check(ierr == expected, what // ' returned ' // trim(codes))
  end subroutine check_code

  ! A file name in the working directory unique to this run: rank 0's process id, broadcast (the
  ! np1, np2 and np3 runs of this test may run side by side), and what it holds.
  function scratch_path(what) result(path)
    character(len=*), intent(in) :: what
    character(len=:), allocatable :: path
    integer(c_int) :: pid
    integer :: ierror
    character(len=16) :: digits
    pid = c_getpid()
    call MPI_Bcast(pid, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierror)
    call check(ierror == MPI_SUCCESS, 'MPI_Bcast of the pid')
    write (digits, '(i0)') pid
    path = 'test_fortran_' // trim(digits) // '_' // what // '.h5'
  end function scratch_path

  ! Rank 0 deletes a file the test wrote, and checks that its temporary is gone too.
  subroutine remove_scratch(path)
    character(len=*), intent(in) :: path
    logical :: exists
    integer :: unit, status
    if (world_rank /= 0) return
    inquire (file=path // '.tmp', exist=exists)
    call check(.not. exists, path // '.tmp was left behind')
    open (newunit=unit, file=path, status='old', iostat=status)
    call check(status == 0, 'cannot open ' // path // ' to delete it')
    close (unit, status='delete')
  end subroutine remove_scratch

  ! Every parameter, whole, on every rank, into one array; single: the model is real(c_float).
  subroutine copy_all(model, values, single)
    type(fsdp_model), intent(in) :: model
    real(c_double), intent(out), target :: values(n_all)
    logical, intent(in), optional :: single
    integer, parameter :: ends(0:4) = [0, n_in * n_hidden, n_in * n_hidden + n_hidden, &
                                       n_in * n_hidden + n_hidden + n_hidden * n_out, n_all]
    character(len=4), parameter :: names(4) = ['l0.w', 'l0.b', 'l1.w', 'l1.b']
    real(c_float) :: values32(n_all)
    logical :: in_single
    integer :: i, ierr
    in_single = .false.
    if (present(single)) in_single = single
    do i = 1, 4
      if (in_single) then
        call fsdp_model_copy_parameter(model, names(i), values32(ends(i - 1) + 1:ends(i)), ierr)
      else
        call fsdp_model_copy_parameter(model, names(i), values(ends(i - 1) + 1:ends(i)), ierr)
      end if
      call check_ok(ierr, 'copy ' // names(i))
    end do
    if (in_single) values = real(values32, c_double)
  end subroutine copy_all

  ! Rank r's sample k at a step: deterministic, different on every rank.
  subroutine sample(rank, step, k, x, t)
    integer, intent(in) :: rank, step, k
    real(c_double), intent(out) :: x(n_in), t(n_out)
    integer :: i
    do i = 1, n_in
      x(i) = sin(1.0d0 + 7.0d0 * rank + 3.0d0 * k + 11.0d0 * step + (i - 1))
    end do
    do i = 1, n_out
      t(i) = cos(0.5d0 * rank + k + 2.0d0 * step + (i - 1))
    end do
  end subroutine sample

  subroutine initial(w0, b0, w1, b1)
    real(c_double), intent(out) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    integer :: i, j
    do j = 1, n_hidden
      do i = 1, n_in
        w0(i, j) = 0.3d0 * sin(0.1d0 * (i + n_in * j))
      end do
      b0(j) = 0.2d0 * cos(1.0d0 * j)
    end do
    do j = 1, n_out
      do i = 1, n_hidden
        w1(i, j) = 0.3d0 * cos(0.2d0 * (i + n_hidden * j))
      end do
      b1(j) = 0.1d0 * j
    end do
  end subroutine initial

  ! The gradient of rank `rank`'s batch (loss: the mean over the batch of |y - t|^2 / 2), added
  ! into g*. y = w1^T (w0^T x + b0) + b1 with w0(n_in, n_hidden), w1(n_hidden, n_out).
  subroutine batch_gradient(w0, b0, w1, b1, rank, step, gw0, gb0, gw1, gb1)
    real(c_double), intent(in) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    integer, intent(in) :: rank, step
    real(c_double), intent(inout) :: gw0(n_in, n_hidden), gb0(n_hidden), gw1(n_hidden, n_out)
    real(c_double), intent(inout) :: gb1(n_out)
    real(c_double) :: x(n_in), t(n_out), h(n_hidden), y(n_out), dy(n_out), dh(n_hidden)
    integer :: k, j
    do k = 0, batch - 1
      call sample(rank, step, k, x, t)
      h = matmul(x, w0) + b0
      y = matmul(h, w1) + b1
      dy = (y - t) / batch
      gb1 = gb1 + dy
      do j = 1, n_out
        gw1(:, j) = gw1(:, j) + dy(j) * h
      end do
      dh = matmul(w1, dy)
      gb0 = gb0 + dh
      do j = 1, n_hidden
        gw0(:, j) = gw0(:, j) + dh(j) * x
      end do
    end do
  end subroutine batch_gradient

  ! 0.5 * (global index) into this rank's piece of a real(c_float) parameter.
  integer(c_int) function fill_half_index(first, values, count, user_data) bind(c)
    integer(c_int64_t), value :: first
    type(c_ptr), value :: values
    integer(c_int64_t), value :: count
    type(c_ptr), value :: user_data
    real(c_float), pointer :: piece(:)
    integer(c_int64_t) :: i
    call c_f_pointer(values, piece, [count])
    do i = 1, count
      piece(i) = 0.5 * real(first + i - 1, c_float)
    end do
    if (c_associated(user_data)) then
      fill_half_index = 1
    else
      fill_half_index = 0
    end if
  end function fill_half_index

end module test_support

program test_fortran
  use test_support
  implicit none
  integer :: ierr

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, world_rank)
  call MPI_Comm_size(MPI_COMM_WORLD, world_size)
  call fsdp_initialize(ierr)
  call check_ok(ierr, 'fsdp_initialize')
  ! The library's version, as the project declares it (tests/CMakeLists.txt passes it).
  call check(fsdp_version() == FSDP_EXPECTED_VERSION, 'fsdp_version() is ' // fsdp_version())

  call train_and_compare()
  ! ZeRO-1 with hybrid sharding: shard groups of 2 on an even world, of 1 otherwise.
  call train_and_compare(FSDP_MODE_SHARD_OPTIMIZER, merge(2, 1, mod(world_size, 2) == 0))
  call train_and_compare(FSDP_MODE_NO_SHARD)
  call train_and_compare(FSDP_MODE_FULL_SHARD, half=FSDP_BFLOAT16)
  call train_and_compare(FSDP_MODE_SHARD_OPTIMIZER, half=FSDP_BFLOAT16, grad_dtype=FSDP_BFLOAT16)
  call sgd_rule_single_precision(.false.)
  call sgd_rule_single_precision(.true.)
  call error_paths()
  call checkpoints()
  call lr_schedule()
  call clipping_memory_keep_gathered()
  call tied_parameters()

  call fsdp_finalize(ierr)
  call check_ok(ierr, 'fsdp_finalize')
  if (world_rank == 0) print '(a)', 'test_fortran: all checks passed'
  call MPI_Finalize(ierr)

contains

  ! half: gathers and reductions in that 16-bit dtype (mixed precision) when present.
  subroutine make_model(model, dtype, strategy, integer_comm, mode, shard_group_size, half, &
                        freeze_l0w, grad_dtype)
    type(fsdp_model), intent(out) :: model
    integer, intent(in) :: dtype
    character(len=*), intent(in) :: strategy
    logical, intent(in) :: integer_comm
    integer, intent(in), optional :: mode, shard_group_size, half
    integer, intent(in), optional :: grad_dtype  ! of the kept gradients
    logical, intent(in), optional :: freeze_l0w  ! l0.w frozen (trainable=.false.)
    logical :: l0w_trainable
    call fsdp_model_create(model, dtype, ierr)
    call check_ok(ierr, 'fsdp_model_create')
    if (present(half)) then
      call fsdp_model_set_mixed_precision(model, half, half, ierr)
      call check_ok(ierr, 'fsdp_model_set_mixed_precision')
    end if
    if (present(grad_dtype)) then
      call fsdp_model_set_grad_dtype(model, grad_dtype, ierr)
      call check_ok(ierr, 'fsdp_model_set_grad_dtype')
    end if
    if (present(mode)) then
      call fsdp_model_set_mode(model, mode, ierr)
      call check_ok(ierr, 'fsdp_model_set_mode')
    end if
    if (present(shard_group_size)) then
      call fsdp_model_set_shard_group_size(model, shard_group_size, ierr)
      call check_ok(ierr, 'fsdp_model_set_shard_group_size')
    end if
    l0w_trainable = .true.
    if (present(freeze_l0w)) l0w_trainable = .not. freeze_l0w
    call fsdp_model_add_parameter(model, 'l0.w', [n_in, n_hidden], 'l0', ierr, &
                                  trainable=l0w_trainable)
    call check_ok(ierr, 'add l0.w')
    call fsdp_model_add_parameter(model, 'l0.b', [n_hidden], 'l0', ierr)
    call check_ok(ierr, 'add l0.b')
    call fsdp_model_add_parameter(model, 'l1.w', [n_hidden, n_out], 'l1', ierr)
    call check_ok(ierr, 'add l1.w')
    call fsdp_model_add_parameter(model, 'l1.b', [n_out], 'l1', ierr)
    call check_ok(ierr, 'add l1.b')
    if (integer_comm) then
      call fsdp_model_shard(model, MPI_COMM_WORLD%MPI_VAL, strategy, ierr)  ! an integer handle
    else
      call fsdp_model_shard(model, MPI_COMM_WORLD, strategy, ierr)  ! type(MPI_Comm)
    end if
    call check_ok(ierr, 'fsdp_model_shard')
  end subroutine make_model

  ! The whole parameter (n elements) inside its unit's scope, as real(c_double); single: from a
  ! real(c_float) model, whose floats must have the bits of zero_bits clear (16-bit values), and
  ! fsdp_half must give them in 16 bits (bf16: the upper halves of the floats), or be refused
  ! when the model gathers in its own kind. With bf16 the values come from fsdp_half's 16 bits,
  ! widened here: what the model computes with.
  subroutine read_full(runtime, name, n, values, single, zero_bits)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: name
    integer, intent(in) :: n, zero_bits
    real(c_double), intent(out) :: values(n)
    logical, intent(in) :: single
    real(c_float), pointer :: p32(:)
    real(c_double), pointer :: p64(:)
    integer(c_int16_t), pointer :: h(:)
    call fsdp_half(runtime, name, h, ierr)
    if (zero_bits == 0) then
      call check_code(ierr, FSDP_ERROR_STATE, 'fsdp_half of ' // name // ' gathered in its kind')
      call check(.not. associated(h), 'a refused fsdp_half gives no array')
    else
      call check_ok(ierr, 'half ' // name)
      call check(size(h) == n, 'fsdp_half: ' // name // ' has its declared size')
    end if
    if (single) then
      call fsdp_full(runtime, name, p32, ierr)
      call check_ok(ierr, 'full ' // name)
      call check(size(p32) == n, name // ' has its declared size')
      call check(all(iand(transfer(p32, [0_c_int32_t]), int(zero_bits, c_int32_t)) == 0), &
                 name // ' holds 16-bit values only')
      if (zero_bits == int(z'FFFF')) then
        call check(all(shiftl(iand(int(h, c_int32_t), int(z'FFFF', c_int32_t)), 16) == &
                       transfer(p32, [0_c_int32_t])), 'fsdp_half gives the bf16 bits of ' // name)
        values = real(transfer(shiftl(iand(int(h, c_int32_t), int(z'FFFF', c_int32_t)), 16), &
                               0.0_c_float, n), c_double)
      else
        values = real(p32, c_double)
      end if
    else
      call fsdp_full(runtime, name, p64, ierr)
      call check_ok(ierr, 'full ' // name)
      call check(size(p64) == n, name // ' has its declared size')
      values = p64
    end if
  end subroutine read_full

  ! Adds delta (n elements) into the whole gradient of the parameter, in a backward scope.
  subroutine add_grad(runtime, name, n, delta, single)
    type(fsdp_runtime), intent(in) :: runtime
    character(len=*), intent(in) :: name
    integer, intent(in) :: n
    real(c_double), intent(in) :: delta(n)
    logical, intent(in) :: single
    real(c_float), pointer :: g32(:)
    real(c_double), pointer :: g64(:)
    if (single) then
      call fsdp_grad(runtime, name, g32, ierr)
      call check_ok(ierr, 'grad ' // name)
      call check(size(g32) == n, 'the gradient of ' // name // ' has its declared size')
      g32 = g32 + real(delta, c_float)
    else
      call fsdp_grad(runtime, name, g64, ierr)
      call check_ok(ierr, 'grad ' // name)
      call check(size(g64) == n, 'the gradient of ' // name // ' has its declared size')
      g64 = g64 + delta
    end if
  end subroutine add_grad

  ! One step of rank world_rank's batch through the scopes: the forward scopes read the
  ! parameters, the backward scope of l1 reads l1.w again and writes batch_gradient's result
  ! times scale (a loss scale; default 1); then finish_step (the optimizer step is the caller's).
  ! single: a real(c_float) model; zero_bits: bits of its gathered floats that must be clear.
  ! tied: the runtime ties l0.w to l1, which reads it in its forward scope and writes half of
  ! its gradient in its backward scope; l0 writes the other half (the same sum, exactly).
  subroutine api_step(runtime, step, single, scale, zero_bits, tied)
    type(fsdp_runtime), intent(in) :: runtime
    integer, intent(in) :: step
    logical, intent(in), optional :: single
    real(c_double), intent(in), optional :: scale
    integer, intent(in), optional :: zero_bits
    logical, intent(in), optional :: tied
    real(c_double) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    real(c_double) :: gw0(n_in, n_hidden), gb0(n_hidden), gw1(n_hidden, n_out), gb1(n_out)
    real(c_double) :: s, shared(n_in, n_hidden), own
    logical :: sp, tie
    integer :: bits
    sp = .false.
    if (present(single)) sp = single
    tie = .false.
    if (present(tied)) tie = tied
    own = 1
    if (tie) own = 0.5d0
    s = 1
    if (present(scale)) s = scale
    bits = 0
    if (present(zero_bits)) bits = zero_bits
    call fsdp_begin_forward(runtime, 'l0', ierr)
    call check_ok(ierr, 'begin_forward l0')
    call read_full(runtime, 'l0.w', size(w0), w0, sp, bits)
    call read_full(runtime, 'l0.b', size(b0), b0, sp, bits)
    call fsdp_end_forward(runtime, 'l0', ierr)
    call check_ok(ierr, 'end_forward l0')
    call fsdp_begin_forward(runtime, 'l1', ierr)
    call check_ok(ierr, 'begin_forward l1')
    call read_full(runtime, 'l1.w', size(w1), w1, sp, bits)
    call read_full(runtime, 'l1.b', size(b1), b1, sp, bits)
    if (tie) then
      call read_full(runtime, 'l0.w', size(shared), shared, sp, bits)
      call check(all(transfer(shared, [0_c_int64_t]) == transfer(w0, [0_c_int64_t])), &
                 'l1 reads the tied l0.w as l0 does')
    end if
    call fsdp_end_forward(runtime, 'l1', ierr)
    call check_ok(ierr, 'end_forward l1')

    call fsdp_begin_backward(runtime, 'l1', ierr)
    call check_ok(ierr, 'begin_backward l1')
    call read_full(runtime, 'l1.w', size(w1), w1, sp, bits)  ! gathered again for the backward
    gw0 = 0
    gb0 = 0
    gw1 = 0
    gb1 = 0
    call batch_gradient(w0, b0, w1, b1, world_rank, step, gw0, gb0, gw1, gb1)
    call add_grad(runtime, 'l1.w', size(gw1), s * gw1, sp)
    call add_grad(runtime, 'l1.b', size(gb1), s * gb1, sp)
    if (tie) call add_grad(runtime, 'l0.w', size(gw0), 0.5d0 * s * gw0, sp)
    call fsdp_end_backward(runtime, 'l1', ierr)
    call check_ok(ierr, 'end_backward l1')
    call fsdp_begin_backward(runtime, 'l0', ierr)
    call check_ok(ierr, 'begin_backward l0')
    call add_grad(runtime, 'l0.w', size(gw0), own * s * gw0, sp)
    call add_grad(runtime, 'l0.b', size(gb0), s * gb0, sp)
    call fsdp_end_backward(runtime, 'l0', ierr)
    call check_ok(ierr, 'end_backward l0')
    call fsdp_finish_step(runtime, ierr)
    call check_ok(ierr, 'finish_step')
  end subroutine api_step

  ! Steps first .. last - 1: the scopes, the optimizer step, zero_grad.
  subroutine train_steps(runtime, optimizer, model, first, last)
    type(fsdp_runtime), intent(in) :: runtime
    type(fsdp_optimizer), intent(in) :: optimizer
    type(fsdp_model), intent(in) :: model
    integer, intent(in) :: first, last
    integer :: step
    do step = first, last - 1
      call api_step(runtime, step)
      call fsdp_optimizer_step(optimizer, ierr)
      call check_ok(ierr, 'optimizer step')
      call fsdp_model_zero_grad(model, ierr)
      call check_ok(ierr, 'zero_grad')
    end do
  end subroutine train_steps

  ! A parameter's initial values, flattened; single: into a real(c_float) model.
  subroutine init_parameter(model, name, values, single, from_root)
    type(fsdp_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_double), intent(in) :: values(:)
    logical, intent(in) :: single, from_root
    if (single .and. from_root) then
      call fsdp_model_init_from_root(model, name, real(values, c_float), ierr)
    else if (single) then
      call fsdp_model_init_from_full(model, name, real(values, c_float), ierr)
    else if (from_root) then
      call fsdp_model_init_from_root(model, name, values, ierr)
    else
      call fsdp_model_init_from_full(model, name, values, ierr)
    end if
    call check_ok(ierr, 'init ' // name)
  end subroutine init_parameter

  ! SGD with momentum and weight decay, 3 steps, full sharding, integer communicator, against the
  ! same training done unsharded by hand in fp64. mode, shard_group_size: passed to the model when
  ! present (the result must not depend on them). half (FSDP_BFLOAT16 or FSDP_FLOAT16): an fp32
  ! model gathering and reducing in that dtype, its gradients scaled by a loss scaler (1024,
  ! growing after 2 clean steps), within half_tolerance; without half, fp64 within 1e-12.
  subroutine train_and_compare(mode, shard_group_size, half, grad_dtype)
    integer, intent(in), optional :: mode, shard_group_size, half, grad_dtype
    ! |fsdp - fp64 by hand| after 3 steps in 16 bits; measured at 1-3 ranks: bf16 at most 6.4e-4.
    real(c_double), parameter :: half_tolerance = 2d-3
    type(fsdp_model) :: model
    type(fsdp_runtime) :: runtime
    type(fsdp_optimizer) :: sgd
    type(fsdp_loss_scaler) :: scaler
    real(c_double) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    real(c_double) :: gw0(n_in, n_hidden), gb0(n_hidden), gw1(n_hidden, n_out), gb1(n_out)
    real(c_double) :: mw0(n_in, n_hidden), mb0(n_hidden), mw1(n_hidden, n_out), mb1(n_out)
    real(c_double) :: got(n_all), expected(n_all), largest, scale
    real(c_double), parameter :: lr = 0.1d0, momentum = 0.9d0, decay = 0.01d0
    integer, parameter :: steps = 3
    integer(c_int64_t) :: clean, skipped, whole_grad_bytes, peak_bytes
    logical :: mixed, found_inf
    integer :: step, r, zero_bits

    mixed = present(half)
    zero_bits = 0
    if (mixed) zero_bits = merge(int(z'FFFF'), int(z'1FFF'), half == FSDP_BFLOAT16)
    call make_model(model, merge(FSDP_FLOAT32, FSDP_FLOAT64, mixed), 'full', .true., mode, &
                    shard_group_size, half, grad_dtype=grad_dtype)
    call initial(w0, b0, w1, b1)
    call init_parameter(model, 'l0.w', [w0], mixed, .false.)
    call init_parameter(model, 'l0.b', b0, mixed, .false.)
    call init_parameter(model, 'l1.w', [w1], mixed, .true.)
    call init_parameter(model, 'l1.b', b1, mixed, .false.)
    call fsdp_runtime_create(runtime, model, ['l0', 'l1'], ierr, max_gathered_units=2)
    call check_ok(ierr, 'fsdp_runtime_create')
    call fsdp_optimizer_create_sgd(sgd, model, lr, ierr, momentum=momentum, weight_decay=decay)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd')
    if (mixed) then
      call fsdp_loss_scaler_create(scaler, ierr, init_scale=1024.0_c_double, growth_interval=2)
      call check_ok(ierr, 'fsdp_loss_scaler_create')
    end if

    do step = 0, steps - 1
      scale = 1
      if (mixed) then
        call fsdp_loss_scaler_scale(scaler, scale, ierr)
        call check_ok(ierr, 'fsdp_loss_scaler_scale')
      end if
      call api_step(runtime, step, mixed, scale, zero_bits)
      if (mixed) then
        call fsdp_loss_scaler_unscale_and_check(scaler, model, found_inf, ierr)
        call check_ok(ierr, 'fsdp_loss_scaler_unscale_and_check')
        call check(.not. found_inf, 'no overflow at loss scale 1024')
        call fsdp_loss_scaler_update(scaler, found_inf, ierr)
        call check_ok(ierr, 'fsdp_loss_scaler_update')
      end if
      call fsdp_optimizer_step(sgd, ierr)
      call check_ok(ierr, 'optimizer step')
      call fsdp_model_zero_grad(model, ierr)
      call check_ok(ierr, 'zero_grad')
    end do
    if (mixed) then
      ! 1024, then 2048 after 2 clean steps, and 1 clean step since.
      call fsdp_loss_scaler_get_state(scaler, scale, clean, skipped, ierr)
      call check_ok(ierr, 'fsdp_loss_scaler_get_state')
      call check(abs(scale - 2048) <= 0 .and. clean == 1 .and. skipped == 0, &
                 'the loss scaler grew once in 3 clean steps')
      call fsdp_loss_scaler_destroy(scaler)
    end if

    ! The same unsharded, by hand: gradients averaged over every rank's batch, SGD's rule.
    call initial(w0, b0, w1, b1)
    do step = 0, steps - 1
      gw0 = 0
      gb0 = 0
      gw1 = 0
      gb1 = 0
      do r = 0, world_size - 1
        call batch_gradient(w0, b0, w1, b1, r, step, gw0, gb0, gw1, gb1)
      end do
      gw0 = gw0 / world_size + decay * w0
      gb0 = gb0 / world_size + decay * b0
      gw1 = gw1 / world_size + decay * w1
      gb1 = gb1 / world_size + decay * b1
      if (step == 0) then
        mw0 = gw0
        mb0 = gb0
        mw1 = gw1
        mb1 = gb1
      else
        mw0 = momentum * mw0 + gw0
        mb0 = momentum * mb0 + gb0
        mw1 = momentum * mw1 + gw1
        mb1 = momentum * mb1 + gb1
      end if
      w0 = w0 - lr * mw0
      b0 = b0 - lr * mb0
      w1 = w1 - lr * mw1
      b1 = b1 - lr * mb1
    end do

    expected = [w0, b0, w1, b1]
    call copy_all(model, got, mixed)
    largest = maxval(abs(got - expected))
    call check(largest <= merge(half_tolerance, 1d-12, mixed), &
               'the parameters agree with unsharded training (fp64: 1e-12; 16-bit: half_tolerance)')
    call initial(gw0, gb0, gw1, gb1)  ! the comparison means something only if training moved them
    call check(max(maxval(abs(w0 - gw0)), maxval(abs(w1 - gw1))) > 1d-3, 'training moved the weights')
    if (world_rank == 0 .and. mixed) print '(a,a,a,es10.3)', 'test_fortran: ', &
      merge('bf16', 'fp16', half == FSDP_BFLOAT16), &
      ' SGD with a loss scaler: largest difference from fp64 unsharded training ', largest
    if (world_rank == 0 .and. .not. mixed) print '(a,es10.3)', &
      'test_fortran: fp64 SGD through the scopes: largest difference from unsharded training ', &
      largest

    if (present(grad_dtype)) then  ! shard_optimizer's whole gradients kept in 2 bytes
      call fsdp_memory_bytes(model, FSDP_MEMORY_RESIDENT_GRADIENTS, whole_grad_bytes, peak_bytes, &
                             ierr)
      call check_ok(ierr, 'fsdp_memory_bytes')
      call check(whole_grad_bytes == 2 * n_all, 'the whole gradients are bfloat16')
    end if

    call fsdp_optimizer_destroy(sgd)
    call fsdp_runtime_destroy(runtime)
    call fsdp_model_destroy(model)
  end subroutine train_and_compare

  ! fp32 through type(MPI_Comm): initialized by a fill callback with 0.5 * index; every rank adds
  ! rank + 1 to every gradient element, so the average is (N + 1) / 2 and one plain SGD step with
  ! lr 0.25 gives exactly 0.5 * index - 0.25 (N + 1) / 2.
  ! freeze: l0.w frozen, so it has no gradient (fsdp_grad fails with FSDP_ERROR_STATE) and keeps
  ! its values exactly through the step.
  subroutine sgd_rule_single_precision(freeze)
    logical, intent(in) :: freeze
    type(fsdp_model) :: model
    type(fsdp_runtime) :: runtime
    type(fsdp_optimizer) :: sgd
    real(c_float), pointer :: g(:)
    real(c_float) :: whole(n_in * n_hidden)
    character(len=4), parameter :: names(4) = ['l0.w', 'l0.b', 'l1.w', 'l1.b']
    character(len=2), parameter :: backward_order(2) = ['l1', 'l0']
    integer(c_int64_t) :: numel, first, count, total
    integer :: i, u, e

    call make_model(model, FSDP_FLOAT32, 'full', .false., freeze_l0w=freeze)
    do i = 1, 4
      call fsdp_model_init_with(model, names(i), fill_half_index, ierr)
      call check_ok(ierr, 'init_with ' // names(i))
    end do
    call fsdp_model_parameter_piece(model, 'l0.w', first, count, ierr)
    call check_ok(ierr, 'parameter_piece')
    call MPI_Allreduce(count, total, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD)
    call check(total == n_in * n_hidden, 'the pieces of l0.w add up to the parameter')
    call fsdp_runtime_create(runtime, model, ['l0', 'l1'], ierr, prefetch=.false.)
    call check_ok(ierr, 'fsdp_runtime_create')
    call fsdp_optimizer_create_sgd(sgd, model, 0.25_c_double, ierr)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd')
    call fsdp_begin_forward(runtime, 'l0', ierr)
    call check_ok(ierr, 'begin_forward l0')
    call fsdp_end_forward(runtime, 'l0', ierr)
    call check_ok(ierr, 'end_forward l0')
    call fsdp_begin_forward(runtime, 'l1', ierr)
    call check_ok(ierr, 'begin_forward l1')
    call fsdp_end_forward(runtime, 'l1', ierr)
    call check_ok(ierr, 'end_forward l1')
    do u = 1, 2
      call fsdp_begin_backward(runtime, backward_order(u), ierr)
      call check_ok(ierr, 'begin_backward ' // backward_order(u))
      do i = 1, 4
        if (names(i)(1:2) /= backward_order(u)) cycle
        call fsdp_grad(runtime, names(i), g, ierr)
        if (freeze .and. i == 1) then
          call check_code(ierr, FSDP_ERROR_STATE, 'grad of the frozen l0.w')
          cycle
        end if
        call check_ok(ierr, 'grad ' // names(i))
        g = g + real(world_rank + 1, c_float)
      end do
      call fsdp_end_backward(runtime, backward_order(u), ierr)
      call check_ok(ierr, 'end_backward ' // backward_order(u))
    end do
    call fsdp_finish_step(runtime, ierr)
    call check_ok(ierr, 'finish_step')
    call fsdp_optimizer_step(sgd, ierr)
    call check_ok(ierr, 'optimizer step')
    do i = 1, 4
      call fsdp_model_parameter_numel(model, names(i), numel, ierr)
      call check_ok(ierr, 'parameter_numel')
      call fsdp_model_copy_parameter(model, names(i), whole(1:numel), ierr)
      call check_ok(ierr, 'copy ' // names(i))
      do e = 1, int(numel)
        if (freeze .and. i == 1) then
          call check(abs(whole(e) - 0.5 * (e - 1)) <= 0, 'the frozen l0.w keeps its values exactly')
          cycle
        end if
        call check(abs(whole(e) - (0.5 * (e - 1) - 0.25 * (world_size + 1) / 2.0)) <= 0, &  ! exact
                   'one SGD step on ' // names(i) // ' gives p - lr * (N + 1) / 2 exactly')
      end do
    end do
    if (world_rank == 0 .and. freeze) print '(a)', 'test_fortran: frozen parameter: ok'
    if (world_rank == 0 .and. .not. freeze) then
      print '(a)', 'test_fortran: fp32 fill callback and SGD rule: ok'
    end if
    call fsdp_optimizer_destroy(sgd)
    call fsdp_runtime_destroy(runtime)
    call fsdp_model_destroy(model)
  end subroutine sgd_rule_single_precision

  subroutine error_paths()
    type(fsdp_model) :: model
    type(fsdp_runtime) :: runtime
    real(c_float), pointer :: p32(:)
    real(c_double), pointer :: p64(:)
    real(c_double) :: too_short(4)

    call fsdp_model_create(model, 5, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'fsdp_model_create with dtype 5')
    call fsdp_model_create(model, FSDP_BFLOAT16, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'fsdp_model_create with FSDP_BFLOAT16')
    call check(index(fsdp_last_error(), 'fsdp_model_set_mixed_precision') > 0, &
               'the message says where 16-bit types go')
    call fsdp_model_create(model, FSDP_FLOAT64, ierr)
    call check_ok(ierr, 'fsdp_model_create')
    call fsdp_model_set_mixed_precision(model, FSDP_BFLOAT16, FSDP_BFLOAT16, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'bf16 for an fp64 model')
    call check(index(fsdp_last_error(), 'create the model with FSDP_FLOAT32') > 0, &
               'the message says what would be right')
    call fsdp_model_set_grad_dtype(model, FSDP_FLOAT16, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'fp16 kept gradients')
    call check(index(fsdp_last_error(), "below float16's range") > 0, 'the message says why')
    call fsdp_model_destroy(model)
    call loss_scaler_settings()
    call make_model(model, FSDP_FLOAT64, 'layerwise', .true.)
    call fsdp_model_set_mixed_precision(model, FSDP_FLOAT32, FSDP_FLOAT32, ierr)
    call check_code(ierr, FSDP_ERROR_STATE, 'fsdp_model_set_mixed_precision after sharding')
    call fsdp_model_init_from_full(model, 'l0.w', too_short, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'init_from_full with 4 elements')
    call check(index(fsdp_last_error(), 'has 4 elements') > 0, 'the message gives the size')
    call fsdp_model_init_from_full(model, 'l0.x', too_short, ierr)
    call check_code(ierr, FSDP_ERROR_UNKNOWN_NAME, 'init_from_full of l0.x')
    call check(index(fsdp_last_error(), "'l0.x'") > 0, 'the message names the parameter')
    call fsdp_runtime_create(runtime, model, ['l0', 'l1'], ierr)
    call check_ok(ierr, 'fsdp_runtime_create')

    ! A wrong unit name: the code, and a message naming it.
    call fsdp_begin_forward(runtime, 'decoder', ierr)
    call check_code(ierr, FSDP_ERROR_UNKNOWN_NAME, 'begin_forward decoder')
    call check(index(fsdp_last_error(), "'decoder'") > 0, 'the message names the unit')
    ! Calls out of order.
    call fsdp_begin_forward(runtime, 'l1', ierr)
    call check_code(ierr, FSDP_ERROR_ORDER, 'begin_forward l1 first')
    call check(index(fsdp_last_error(), "expected 'l0'") > 0, 'the message says what is expected')
    call fsdp_end_backward(runtime, 'l0', ierr)
    call check_code(ierr, FSDP_ERROR_ORDER, 'end_backward with nothing open')
    call fsdp_finish_step(runtime, ierr)
    call check_code(ierr, FSDP_ERROR_ORDER, 'finish_step before the forward')
    call fsdp_begin_forward(runtime, 'l0', ierr)
    call check_ok(ierr, 'begin_forward l0')
    call fsdp_full(runtime, 'l0.w', p32, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'fsdp_full into a real(c_float) pointer')
    call fsdp_grad(runtime, 'l0.w', p64, ierr)
    call check_code(ierr, FSDP_ERROR_STATE, 'fsdp_grad in a forward scope')
    call fsdp_full(runtime, 'l0.w', p64, ierr)
    call check_ok(ierr, 'fsdp_full l0.w')
    call check(size(p64) == n_in * n_hidden, 'l0.w while gathered')
    call fsdp_end_forward(runtime, 'l0', ierr)
    call check_ok(ierr, 'end_forward l0')
    call fsdp_begin_forward(runtime, 'l1', ierr)
    call check_ok(ierr, 'begin_forward l1')
    call fsdp_end_forward(runtime, 'l1', ierr)
    call check_ok(ierr, 'end_forward l1')
    call fsdp_finish_step(runtime, ierr)
    call check_ok(ierr, 'finish_step after an evaluation step')

    call fsdp_finalize(ierr)
    call check_code(ierr, FSDP_ERROR_STATE, 'fsdp_finalize with handles alive')
    call fsdp_runtime_destroy(runtime)
    call fsdp_model_destroy(model)
    call fsdp_model_destroy(model)  ! a destroyed handle is null: no effect
    if (world_rank == 0) print '(a)', 'test_fortran: error paths: ok'
  end subroutine error_paths

  ! Steps first .. last - 1 as train_steps, each at the rate the schedule gives the optimizer's
  ! step count (checked against fsdp_lr_schedule_lr_at and fsdp_optimizer_get_state).
  subroutine scheduled_steps(runtime, optimizer, model, schedule, first, last)
    type(fsdp_runtime), intent(in) :: runtime
    type(fsdp_optimizer), intent(in) :: optimizer
    type(fsdp_model), intent(in) :: model
    type(fsdp_lr_schedule), intent(in) :: schedule
    integer, intent(in) :: first, last
    real(c_double) :: expected, lr
    integer(c_int64_t) :: steps
    integer :: step
    do step = first, last - 1
      call fsdp_lr_schedule_apply(schedule, optimizer, ierr)
      call check_ok(ierr, 'fsdp_lr_schedule_apply')
      call fsdp_lr_schedule_lr_at(schedule, int(step, c_int64_t), expected, ierr)
      call check_ok(ierr, 'fsdp_lr_schedule_lr_at')
      call fsdp_optimizer_get_state(optimizer, ierr, lr=lr, steps=steps)
      call check_ok(ierr, 'fsdp_optimizer_get_state')
      call check(abs(lr - expected) <= 0 .and. steps == step, &
                 'the optimizer takes the scheduled rate of its step count')
      call train_steps(runtime, optimizer, model, step, step + 1)
    end do
  end subroutine scheduled_steps

  ! A cosine schedule after a warm-up, saved with the model after 2 steps and loaded into a fresh
  ! model and optimizer: the next 2 steps take the rates of steps 2 and 3 (the loaded step count),
  ! so they end bit for bit where the uninterrupted run ends; gradient accumulation on the two
  ! models, which now hold the same parameters; and what a schedule refuses.
  subroutine lr_schedule()
    type(fsdp_model) :: model, other
    type(fsdp_runtime) :: runtime, other_runtime
    type(fsdp_optimizer) :: sgd, other_sgd, plain, other_plain
    type(fsdp_lr_schedule) :: schedule, refused
    type(fsdp_loss_scaler) :: saved_scaler, loaded_scaler
    real(c_double) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    real(c_double) :: expected(n_all), got(n_all), scale
    integer(c_int64_t) :: clean, skipped
    character(len=:), allocatable :: path, text

    path = scratch_path('schedule')
    call fsdp_lr_schedule_create(schedule, 'cosine', 0.1d0, ierr, warmup_steps=1_c_int64_t, &
                                 total_steps=5_c_int64_t, min_lr=0.01d0)
    call check_ok(ierr, 'fsdp_lr_schedule_create')
    call initial(w0, b0, w1, b1)
    call make_model(model, FSDP_FLOAT64, 'full', .false.)
    call init_parameter(model, 'l0.w', [w0], .false., .false.)
    call init_parameter(model, 'l0.b', b0, .false., .false.)
    call init_parameter(model, 'l1.w', [w1], .false., .false.)
    call init_parameter(model, 'l1.b', b1, .false., .false.)
    call fsdp_runtime_create(runtime, model, ['l0', 'l1'], ierr)
    call check_ok(ierr, 'fsdp_runtime_create')
    call fsdp_optimizer_create_sgd(sgd, model, 99d0, ierr, momentum=0.9d0)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd')
    call scheduled_steps(runtime, sgd, model, schedule, 0, 2)
    ! A loss scaler's state goes into the checkpoint with the model.
    call fsdp_loss_scaler_create(saved_scaler, ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_create')
    call fsdp_loss_scaler_set_state(saved_scaler, 1024d0 / 3, 17_c_int64_t, 2_c_int64_t, ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_set_state')
    ! So does an object of the caller's own: a solver's time and iteration as JSON.
    call fsdp_checkpoint_set_object(model, 'solver', '{"time": 0.5, "iteration": 120}', ierr)
    call check_ok(ierr, 'fsdp_checkpoint_set_object')
    call fsdp_checkpoint_set_object(model, 'broken', '{"time": ', ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'an object whose text is not JSON')
    call fsdp_checkpoint_save(model, path, ierr, optimizer=sgd, scaler=saved_scaler)
    call check_ok(ierr, 'fsdp_checkpoint_save')
    call scheduled_steps(runtime, sgd, model, schedule, 2, 4)
    call copy_all(model, expected)

    call make_model(other, FSDP_FLOAT64, 'layerwise', .true.)
    call fsdp_runtime_create(other_runtime, other, ['l0', 'l1'], ierr)
    call check_ok(ierr, 'fsdp_runtime_create (other)')
    call fsdp_optimizer_create_sgd(other_sgd, other, 99d0, ierr, momentum=0.9d0)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd (other)')
    call fsdp_loss_scaler_create(loaded_scaler, ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_create (loaded)')
    call fsdp_checkpoint_set_object(other, 'solver', 'null', ierr)  ! the load fills it
    call check_ok(ierr, 'fsdp_checkpoint_set_object (other)')
    call fsdp_checkpoint_load(other, path, ierr, optimizer=other_sgd, scaler=loaded_scaler)
    call check_ok(ierr, 'fsdp_checkpoint_load')
    call fsdp_checkpoint_get_object(other, 'solver', text, ierr)
    call check_ok(ierr, 'fsdp_checkpoint_get_object')
    call check(text == '{"time": 0.5, "iteration": 120}', 'the object comes back: '//text)
    call fsdp_checkpoint_get_object(other, 'reader', text, ierr)
    call check_code(ierr, FSDP_ERROR_UNKNOWN_NAME, 'an object the model does not have')
    call fsdp_loss_scaler_get_state(loaded_scaler, scale, clean, skipped, ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_get_state')
    call check(abs(scale - 1024d0 / 3) <= 0 .and. clean == 17 .and. skipped == 2, &
               'the loss scaler state comes back from the checkpoint')
    call fsdp_loss_scaler_destroy(saved_scaler)
    call fsdp_loss_scaler_destroy(loaded_scaler)
    call scheduled_steps(other_runtime, other_sgd, other, schedule, 2, 4)
    call copy_all(other, got)
    call check(maxval(abs(got - expected)) <= 0, &  ! exact
               'the schedule goes on from the loaded step count, bit for bit')

    ! Gradient accumulation: two passes over step 4's batch, the first without gradient sync,
    ! reduce the sum once; a plain SGD step then moves the model exactly as one pass whose
    ! gradients are doubled (x + x and 2 x are the same double).
    call fsdp_optimizer_create_sgd(plain, model, 0.5d0, ierr)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd (plain)')
    call fsdp_optimizer_create_sgd(other_plain, other, 0.5d0, ierr)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd (other plain)')
    call fsdp_runtime_set_requires_gradient_sync(runtime, .false., ierr)
    call check_ok(ierr, 'fsdp_runtime_set_requires_gradient_sync(.false.)')
    call api_step(runtime, 4)
    call fsdp_optimizer_step(plain, ierr)
    call check_code(ierr, FSDP_ERROR_LIBRARY, 'an optimizer step before any reduction')
    call fsdp_runtime_set_requires_gradient_sync(runtime, .true., ierr)
    call check_ok(ierr, 'fsdp_runtime_set_requires_gradient_sync(.true.)')
    call api_step(runtime, 4)
    call fsdp_optimizer_step(plain, ierr)
    call check_ok(ierr, 'the step after accumulating')
    ! The reference pass waits for each reduction (fsdp_runtime_set_overlap): the same bits.
    call fsdp_runtime_set_overlap(other_runtime, 1, 0, ierr)
    call check_ok(ierr, 'fsdp_runtime_set_overlap(1, 0)')
    call fsdp_runtime_set_overlap(other_runtime, 1, -1, ierr)
    call check_code(ierr, FSDP_ERROR_LIBRARY, 'fsdp_runtime_set_overlap with a negative limit')
    call api_step(other_runtime, 4, scale=2d0)
    call fsdp_optimizer_step(other_plain, ierr)
    call check_ok(ierr, 'the step of doubled gradients')
    call copy_all(model, expected)
    call copy_all(other, got)
    call check(maxval(abs(got - expected)) <= 0, &  ! exact
               'two accumulated passes step as one pass of doubled gradients, bit for bit')
    call fsdp_model_zero_grad(model, ierr)
    call fsdp_model_zero_grad(other, ierr)
    ! The optimizer in backward: one more step on step 5's batch, plain stepped after
    ! fsdp_finish_step and other_plain by the runtime as each reduction lands: the same bits.
    call fsdp_runtime_set_optimizer_in_backward(other_runtime, other_plain, ierr)
    call check_ok(ierr, 'fsdp_runtime_set_optimizer_in_backward')
    call api_step(runtime, 5)
    call fsdp_optimizer_step(plain, ierr)
    call check_ok(ierr, 'the step after fsdp_finish_step')
    call api_step(other_runtime, 5)
    call copy_all(model, expected)
    call copy_all(other, got)
    call check(maxval(abs(got - expected)) <= 0, &  ! exact
               'the optimizer in backward steps as fsdp_optimizer_step does, bit for bit')
    call fsdp_runtime_set_optimizer_in_backward(other_runtime, ierr=ierr)
    call check_ok(ierr, 'fsdp_runtime_set_optimizer_in_backward without an optimizer')
    call fsdp_model_zero_grad(model, ierr)
    call fsdp_model_zero_grad(other, ierr)
    call fsdp_begin_forward(runtime, 'l0', ierr)
    call fsdp_runtime_set_requires_gradient_sync(runtime, .false., ierr)
    call check_code(ierr, FSDP_ERROR_ORDER, 'fsdp_runtime_set_requires_gradient_sync in a step')
    call fsdp_end_forward(runtime, 'l0', ierr)
    call fsdp_begin_forward(runtime, 'l1', ierr)
    call fsdp_end_forward(runtime, 'l1', ierr)
    call fsdp_finish_step(runtime, ierr)
    call check_ok(ierr, 'an evaluation step')

    call fsdp_lr_schedule_create(refused, 'exponential', 0.1d0, ierr)
    call check_code(ierr, FSDP_ERROR_LIBRARY, 'a schedule of an unknown decay')
    call check(index(fsdp_last_error(), 'expected constant, linear, cosine or step') > 0, &
               'the message lists the decays')
    call fsdp_lr_schedule_create(refused, 'linear', 0.1d0, ierr)
    call check_code(ierr, FSDP_ERROR_LIBRARY, 'a linear decay without total_steps')
    call fsdp_optimizer_set_lr(sgd, -1d0, ierr)
    call check_code(ierr, FSDP_ERROR_LIBRARY, 'a negative learning rate')
    call fsdp_optimizer_set_weight_decay(sgd, 0.5d0, ierr)
    call check_ok(ierr, 'fsdp_optimizer_set_weight_decay')

    call remove_scratch(path)
    call fsdp_optimizer_destroy(plain)
    call fsdp_optimizer_destroy(other_plain)
    call fsdp_lr_schedule_destroy(schedule)
    call fsdp_optimizer_destroy(other_sgd)
    call fsdp_runtime_destroy(other_runtime)
    call fsdp_model_destroy(other)
    call fsdp_optimizer_destroy(sgd)
    call fsdp_runtime_destroy(runtime)
    call fsdp_model_destroy(model)
    if (world_rank == 0) print '(a)', &
        'test_fortran: learning-rate schedule across a checkpoint, gradient accumulation, the '// &
        'optimizer in backward: ok'
  end subroutine lr_schedule

  ! A loss scaler's settings, defaults and state, and what it refuses.
  subroutine loss_scaler_settings()
    type(fsdp_loss_scaler) :: scaler
    real(c_double) :: scale
    integer(c_int64_t) :: clean, skipped
    call fsdp_loss_scaler_create(scaler, ierr, growth_factor=0.5_c_double)
    call check_code(ierr, FSDP_ERROR_LIBRARY, 'a loss scaler with growth_factor 0.5')
    call check(index(fsdp_last_error(), 'growth_factor must be > 1') > 0, 'the message names it')
    call fsdp_loss_scaler_create(scaler, ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_create')
    call fsdp_loss_scaler_scale(scaler, scale, ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_scale')
    call check(abs(scale - 65536) <= 0, 'the default scale is 65536')
    call fsdp_loss_scaler_set_state(scaler, 8.0_c_double, 3_c_int64_t, 1_c_int64_t, ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_set_state')
    call fsdp_loss_scaler_update(scaler, .true., ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_update')
    call fsdp_loss_scaler_get_state(scaler, scale, clean, skipped, ierr)
    call check_ok(ierr, 'fsdp_loss_scaler_get_state')
    call check(abs(scale - 4) <= 0 .and. clean == 0 .and. skipped == 2, &
               'an overflow halves the scale')
    call fsdp_loss_scaler_set_state(scaler, -1.0_c_double, 0_c_int64_t, 0_c_int64_t, ierr)
    call check_code(ierr, FSDP_ERROR_LIBRARY, 'a loss scaler state with scale -1')
    call fsdp_loss_scaler_destroy(scaler)
    call fsdp_loss_scaler_scale(scaler, scale, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'a destroyed loss scaler')
    call fsdp_loss_scaler_destroy(scaler)  ! a destroyed handle is null: no effect
  end subroutine loss_scaler_settings

  ! Saved after 2 SGD steps (momentum, weight decay) by a fully sharded model, loaded by a
  ! layer-wise one with a fresh optimizer: 2 more steps on each end bit for bit alike (so the
  ! momentum and the step count came back), the step and epoch; then the error codes.
  subroutine checkpoints()
    type(fsdp_model) :: model, other, wider
    type(fsdp_runtime) :: runtime, other_runtime
    type(fsdp_optimizer) :: sgd, other_sgd
    real(c_double) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    real(c_double) :: at_save(n_all), expected(n_all), got(n_all)
    real(c_double) :: wide(n_in + 1, n_hidden), wide_after(n_in + 1, n_hidden)
    real(c_double), parameter :: lr = 0.1d0, momentum = 0.9d0, decay = 0.01d0
    integer(c_int64_t) :: step, epoch, background_step
    character(len=:), allocatable :: path, missing, background
    logical :: finished, published

    path = scratch_path('sgd')
    missing = scratch_path('missing')
    background = scratch_path('background')
    call make_model(model, FSDP_FLOAT64, 'full', .false.)
    call initial(w0, b0, w1, b1)
    call fsdp_model_init_from_full(model, 'l0.w', w0, ierr)
    call check_ok(ierr, 'init l0.w')
    call fsdp_model_init_from_full(model, 'l0.b', b0, ierr)
    call check_ok(ierr, 'init l0.b')
    call fsdp_model_init_from_full(model, 'l1.w', w1, ierr)
    call check_ok(ierr, 'init l1.w')
    call fsdp_model_init_from_full(model, 'l1.b', b1, ierr)
    call check_ok(ierr, 'init l1.b')
    call fsdp_runtime_create(runtime, model, ['l0', 'l1'], ierr)
    call check_ok(ierr, 'fsdp_runtime_create')
    call fsdp_optimizer_create_sgd(sgd, model, lr, ierr, momentum=momentum, weight_decay=decay)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd')
    call train_steps(runtime, sgd, model, 0, 2)
    call copy_all(model, at_save)
    call fsdp_checkpoint_save(model, path, ierr, optimizer=sgd, step=2_c_int64_t, &
                              epoch=3_c_int64_t)
    call check_ok(ierr, 'fsdp_checkpoint_save')
    call train_steps(runtime, sgd, model, 2, 4)
    call copy_all(model, expected)

    call make_model(other, FSDP_FLOAT64, 'layerwise', .true.)  ! all zero
    call fsdp_runtime_create(other_runtime, other, ['l0', 'l1'], ierr)
    call check_ok(ierr, 'fsdp_runtime_create (other)')
    call fsdp_optimizer_create_sgd(other_sgd, other, lr, ierr, momentum=momentum, &
                                   weight_decay=decay)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd (other)')
    call fsdp_checkpoint_load(other, path, ierr, optimizer=other_sgd, step=step, epoch=epoch)
    call check_ok(ierr, 'fsdp_checkpoint_load')
    call check(step == 2 .and. epoch == 3, 'the loaded step and epoch are the saved ones')
    call copy_all(other, got)
    call check(maxval(abs(got - at_save)) <= 0, &  ! exact
               'the loaded parameters are the saved ones, bit for bit')
    call train_steps(other_runtime, other_sgd, other, 2, 4)
    call copy_all(other, got)
    call check(maxval(abs(got - expected)) <= 0, &  ! exact
               '2 steps after loading are 2 steps after saving, bit for bit (optimizer state ' // &
               'not restored?)')
    call check(maxval(abs(got - at_save)) > 1d-3, 'the 2 steps moved the parameters')

    ! The parameters alone, as pretrained weights.
    call fsdp_load_parameters(other, path, ierr)
    call check_ok(ierr, 'fsdp_load_parameters')
    call copy_all(other, got)
    call check(maxval(abs(got - at_save)) <= 0, 'fsdp_load_parameters gives the saved parameters')

    ! In the background: the file holds the parameters of the call (model is at step 4 now),
    ! published once finished, while the model trains on.
    call fsdp_checkpoint_save_in_background(model, background, ierr, optimizer=sgd, &
                                            step=4_c_int64_t)
    call check_ok(ierr, 'fsdp_checkpoint_save_in_background')
    call train_steps(runtime, sgd, model, 4, 5)
    finished = .false.
    do while (.not. finished)
      call fsdp_checkpoint_try_finish(model, finished, ierr)
      call check_ok(ierr, 'fsdp_checkpoint_try_finish')
    end do
    inquire (file=background, exist=published)
    call check(published, 'fsdp_checkpoint_try_finish published ' // background)
    call fsdp_checkpoint_finish(model, ierr)  ! nothing pending: nothing to do
    call check_ok(ierr, 'fsdp_checkpoint_finish')
    call fsdp_checkpoint_load(other, background, ierr, optimizer=other_sgd, step=background_step)
    call check_ok(ierr, 'fsdp_checkpoint_load of the background save')
    call copy_all(other, got)
    call check(background_step == 4 .and. maxval(abs(got - expected)) <= 0, &
               'the background save holds the parameters of its call, bit for bit')
    call remove_scratch(background)

    ! Errors: every rank gets the same code, and nothing changes.
    call fsdp_checkpoint_load(other, missing, ierr, step=step)
    call check_code(ierr, FSDP_ERROR_IO, 'fsdp_checkpoint_load of a missing file')
    call check(index(fsdp_last_error(), missing) > 0, 'the message names the missing file')
    call check(step == 2, 'a failed load leaves step alone')
    call fsdp_load_parameters(other, missing, ierr)
    call check_code(ierr, FSDP_ERROR_IO, 'fsdp_load_parameters of a missing file')
    call check(index(fsdp_last_error(), missing) > 0, 'the message names the missing file')
    call fsdp_checkpoint_save(model, path, ierr, optimizer=other_sgd)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'save with another model''s optimizer')
    call check(index(fsdp_last_error(), 'another model') > 0, 'the message says another model')
    call fsdp_checkpoint_load(other, path, ierr, optimizer=sgd)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'load with another model''s optimizer')
    call fsdp_checkpoint_load(other, '', ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'fsdp_checkpoint_load of an empty path')

    ! Another shape: refused with the file and the difference named, and nothing changes.
    call fsdp_model_create(wider, FSDP_FLOAT64, ierr)
    call check_ok(ierr, 'fsdp_model_create (wider)')
    call fsdp_model_add_parameter(wider, 'l0.w', [n_in + 1, n_hidden], 'l0', ierr)
    call check_ok(ierr, 'add l0.w (wider)')
    call fsdp_model_add_parameter(wider, 'l0.b', [n_hidden], 'l0', ierr)
    call check_ok(ierr, 'add l0.b (wider)')
    call fsdp_model_add_parameter(wider, 'l1.w', [n_hidden, n_out], 'l1', ierr)
    call check_ok(ierr, 'add l1.w (wider)')
    call fsdp_model_add_parameter(wider, 'l1.b', [n_out], 'l1', ierr)
    call check_ok(ierr, 'add l1.b (wider)')
    call fsdp_model_shard(wider, MPI_COMM_WORLD, 'full', ierr)
    call check_ok(ierr, 'fsdp_model_shard (wider)')
    wide = 0.25d0
    call fsdp_model_init_from_full(wider, 'l0.w', wide, ierr)
    call check_ok(ierr, 'init l0.w (wider)')
    call fsdp_checkpoint_load(wider, path, ierr)
    call check_code(ierr, FSDP_ERROR_MISMATCH, 'fsdp_checkpoint_load into another shape')
    call check(index(fsdp_last_error(), 'model/l0.w: shape [5, 3] in the file, [5, 4] in the model') &
               > 0, 'the mismatch names the parameter and both shapes')
    call check(index(fsdp_last_error(), path) > 0, 'the mismatch names the file')
    call fsdp_model_copy_parameter(wider, 'l0.w', wide_after, ierr)
    call check_ok(ierr, 'copy l0.w (wider, after)')
    call check(maxval(abs(wide_after - wide)) <= 0, 'a refused load changes nothing')  ! exact

    call fsdp_model_destroy(wider)
    call fsdp_optimizer_destroy(other_sgd)
    call fsdp_runtime_destroy(other_runtime)
    call fsdp_model_destroy(other)
    call fsdp_optimizer_destroy(sgd)
    call fsdp_runtime_destroy(runtime)
    call fsdp_model_destroy(model)
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    call check(ierr == MPI_SUCCESS, 'MPI_Barrier')
    call remove_scratch(path)
    if (world_rank == 0) print '(a)', 'test_fortran: checkpoints: ok'
  end subroutine checkpoints

  ! Gradient clipping against the norm by hand, the memory report, and a unit kept gathered from
  ! its forward to its backward scope (one gather fewer a step, the same result).
  subroutine clipping_memory_keep_gathered()
    type(fsdp_model) :: model
    type(fsdp_runtime) :: runtime, keeping
    type(fsdp_optimizer) :: sgd
    real(c_double) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    real(c_double) :: gw0(n_in, n_hidden), gb0(n_hidden), gw1(n_hidden, n_out), gb1(n_out)
    real(c_double) :: got(n_all), expected(n_all), norm, by_hand, before, coefficient
    real(c_double), parameter :: lr = 0.5d0
    integer(c_int64_t) :: current, peak, pieces, gathers, kept_gathers, sum_of
    integer :: r, c

    call make_model(model, FSDP_FLOAT64, 'full', .false.)
    call initial(w0, b0, w1, b1)
    call init_parameter(model, 'l0.w', [w0], .false., .false.)
    call init_parameter(model, 'l0.b', b0, .false., .false.)
    call init_parameter(model, 'l1.w', [w1], .false., .false.)
    call init_parameter(model, 'l1.b', b1, .false., .false.)
    call fsdp_runtime_create(runtime, model, ['l0', 'l1'], ierr)
    call check_ok(ierr, 'fsdp_runtime_create')
    call fsdp_runtime_create(keeping, model, ['l0', 'l1'], ierr, keep_gathered=['l0'])
    call check_ok(ierr, 'fsdp_runtime_create keep_gathered')
    call fsdp_optimizer_create_sgd(sgd, model, lr, ierr)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd')

    ! The memory report: names, and the gradient pieces as large as the parameter pieces.
    call check(fsdp_memory_category_name(FSDP_MEMORY_OPTIMIZER_STATE) == 'optimizer_state', &
               'name of FSDP_MEMORY_OPTIMIZER_STATE: ' // &
               fsdp_memory_category_name(FSDP_MEMORY_OPTIMIZER_STATE))
    call check(fsdp_memory_category_name(FSDP_MEMORY_TOTAL) == 'total', 'name of the total')
    call check(fsdp_memory_category_name(FSDP_MEMORY_CHECKPOINT_SNAPSHOT) == 'checkpoint_snapshot', &
               'name of FSDP_MEMORY_CHECKPOINT_SNAPSHOT')
    call check(fsdp_memory_category_name(11) == '', 'no name for category 11')
    call fsdp_memory_bytes(model, FSDP_MEMORY_PARAMETER_SHARDS, pieces, peak, ierr)
    call check_ok(ierr, 'fsdp_memory_bytes')
    call fsdp_memory_bytes(model, FSDP_MEMORY_GRADIENT_SHARDS, current, peak, ierr)
    call check_ok(ierr, 'fsdp_memory_bytes')
    call check(current == pieces .and. pieces > 0, 'gradient pieces as large as the parameters')
    call fsdp_memory_bytes(model, 11, current, peak, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'fsdp_memory_bytes category 11')
    call fsdp_memory_reset_peaks(model, ierr)
    call check_ok(ierr, 'fsdp_memory_reset_peaks')

    ! One step keeping l0 gathered; the same step with the plain runtime gathers once more.
    call api_step(keeping, 0)
    call fsdp_runtime_stats(keeping, ierr, gathers=kept_gathers)
    call check_ok(ierr, 'fsdp_runtime_stats')
    call fsdp_model_zero_grad(model, ierr)
    call check_ok(ierr, 'zero_grad')
    call api_step(runtime, 0)
    call fsdp_runtime_stats(runtime, ierr, gathers=gathers)
    call check_ok(ierr, 'fsdp_runtime_stats')
    call check(kept_gathers == 2 .and. gathers == 3, 'a step keeping l0 gathered gathers twice, ' &
               // 'otherwise three times')
    call fsdp_memory_bytes(model, FSDP_MEMORY_GATHERED_PARAMETERS, current, peak, ierr)
    call check_ok(ierr, 'fsdp_memory_bytes')
    call check(current == 0 .and. peak >= 8 * (n_in * n_hidden + n_hidden + n_hidden * n_out), &
               'both units were gathered at once keeping l0')
    sum_of = 0
    do c = FSDP_MEMORY_PARAMETER_SHARDS, FSDP_MEMORY_CHECKPOINT_SNAPSHOT
      call fsdp_memory_bytes(model, c, current, peak, ierr)
      call check_ok(ierr, 'fsdp_memory_bytes')
      sum_of = sum_of + current
    end do
    call fsdp_memory_bytes(model, FSDP_MEMORY_TOTAL, current, peak, ierr)
    call check(ierr == FSDP_SUCCESS .and. current == sum_of, 'the total is the sum')

    ! The norm of the gradient averaged over the ranks, then clipping to half of it.
    gw0 = 0
    gb0 = 0
    gw1 = 0
    gb1 = 0
    do r = 0, world_size - 1
      call batch_gradient(w0, b0, w1, b1, r, 0, gw0, gb0, gw1, gb1)
    end do
    expected = [gw0, gb0, gw1, gb1] / world_size
    by_hand = sqrt(sum(expected**2))
    call fsdp_grad_norm(model, norm, ierr)
    call check_ok(ierr, 'fsdp_grad_norm')
    call check(abs(norm - by_hand) <= 1d-12 * by_hand, 'the norm of the gradient')
    call fsdp_clip_grad_norm(model, -1.0_c_double, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'fsdp_clip_grad_norm max_norm -1')
    call fsdp_clip_grad_norm(model, 0.5d0 * by_hand, ierr, norm=before)
    call check_ok(ierr, 'fsdp_clip_grad_norm')
    call check(abs(before - by_hand) <= 1d-12 * by_hand, 'clip returns the norm before')
    call fsdp_optimizer_step(sgd, ierr)
    call check_ok(ierr, 'optimizer step')
    coefficient = 0.5d0 * by_hand / (by_hand + 1d-6)
    call copy_all(model, got)
    expected = [w0, b0, w1, b1] - lr * coefficient * expected
    call check(maxval(abs(got - expected)) <= 1d-14, 'a clipped SGD step')

    call fsdp_optimizer_destroy(sgd)
    call fsdp_runtime_destroy(keeping)
    call fsdp_runtime_destroy(runtime)
    call fsdp_model_destroy(model)
    if (world_rank == 0) print '(a)', 'test_fortran: clipping, memory, keep gathered: ok'
  end subroutine clipping_memory_keep_gathered

  ! A parameter tied to a later unit: read in both scopes, its gradient the sum of both uses. The
  ! tied step ends where the plain one ends, bit for bit.
  subroutine tied_parameters()
    type(fsdp_runtime) :: plain, tied
    type(fsdp_optimizer) :: plain_sgd, tied_sgd
    type(fsdp_model) :: models(2)
    real(c_double) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    real(c_double) :: plain_result(n_all), tied_result(n_all)
    integer :: m

    call initial(w0, b0, w1, b1)
    do m = 1, 2
      call make_model(models(m), FSDP_FLOAT64, 'full', .false.)
      call init_parameter(models(m), 'l0.w', [w0], .false., .false.)
      call init_parameter(models(m), 'l0.b', b0, .false., .false.)
      call init_parameter(models(m), 'l1.w', [w1], .false., .false.)
      call init_parameter(models(m), 'l1.b', b1, .false., .false.)
    end do
    call fsdp_runtime_create(plain, models(1), ['l0', 'l1'], ierr)
    call check_ok(ierr, 'fsdp_runtime_create')
    call fsdp_runtime_create(tied, models(2), ['l0', 'l1'], ierr, tied_parameters=['l0.w'], &
                             tied_units=['l1'])
    call check_ok(ierr, 'fsdp_runtime_create tied_parameters')
    call fsdp_optimizer_create_sgd(plain_sgd, models(1), 0.5d0, ierr)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd')
    call fsdp_optimizer_create_sgd(tied_sgd, models(2), 0.5d0, ierr)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd')
    call api_step(plain, 0)
    call api_step(tied, 0, tied=.true.)
    call fsdp_optimizer_step(plain_sgd, ierr)
    call check_ok(ierr, 'optimizer step')
    call fsdp_optimizer_step(tied_sgd, ierr)
    call check_ok(ierr, 'optimizer step')
    call copy_all(models(1), plain_result)
    call copy_all(models(2), tied_result)
    call check(all(transfer(plain_result, [0_c_int64_t]) == transfer(tied_result, [0_c_int64_t])), &
               'a tied gradient is the sum of its uses')

    call fsdp_runtime_destroy(tied)
    call fsdp_runtime_create(tied, models(2), ['l0', 'l1'], ierr, tied_parameters=['l1.w'], &
                             tied_units=['l0'])
    call check_code(ierr, FSDP_ERROR_LIBRARY, 'a parameter tied to an earlier unit')
    call fsdp_runtime_create(tied, models(2), ['l0', 'l1'], ierr, tied_parameters=['l0.w'])
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'tied_parameters without tied_units')

    call fsdp_optimizer_destroy(plain_sgd)
    call fsdp_optimizer_destroy(tied_sgd)
    call fsdp_runtime_destroy(plain)
    call fsdp_model_destroy(models(1))
    call fsdp_model_destroy(models(2))
    if (world_rank == 0) print '(a)', 'test_fortran: tied parameters: ok'
  end subroutine tied_parameters

end program test_fortran

