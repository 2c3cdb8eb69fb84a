! The Fortran module `fsdp` under mpiexec at 1, 2 and 3 ranks: a 2-layer linear model trained
! through the begin/end calls against the same training done unsharded by hand, an exact SGD
! invariant in single precision with a fill callback, and the error paths. Any mismatch prints
! and stops with `error stop` (a nonzero exit that ends the whole job).
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

  ! Every parameter, whole, on every rank (fp64 models), into one array.
  subroutine copy_all(model, values)
    type(fsdp_model), intent(in) :: model
    real(c_double), intent(out), target :: values(n_all)
    integer, parameter :: b0 = n_in * n_hidden, w1 = b0 + n_hidden, b1 = w1 + n_hidden * n_out
    integer :: ierr
    call fsdp_model_copy_parameter(model, 'l0.w', values(1:b0), ierr)
    call check_ok(ierr, 'copy l0.w')
    call fsdp_model_copy_parameter(model, 'l0.b', values(b0 + 1:w1), ierr)
    call check_ok(ierr, 'copy l0.b')
    call fsdp_model_copy_parameter(model, 'l1.w', values(w1 + 1:b1), ierr)
    call check_ok(ierr, 'copy l1.w')
    call fsdp_model_copy_parameter(model, 'l1.b', values(b1 + 1:n_all), ierr)
    call check_ok(ierr, 'copy l1.b')
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

  call train_and_compare()
  ! ZeRO-1 with hybrid sharding: shard groups of 2 on an even world, of 1 otherwise.
  call train_and_compare(FSDP_MODE_SHARD_OPTIMIZER, merge(2, 1, mod(world_size, 2) == 0))
  call train_and_compare(FSDP_MODE_NO_SHARD)
  call sgd_rule_single_precision()
  call error_paths()
  call checkpoints()

  call fsdp_finalize(ierr)
  call check_ok(ierr, 'fsdp_finalize')
  if (world_rank == 0) print '(a)', 'test_fortran: all checks passed'
  call MPI_Finalize(ierr)

contains

  subroutine make_model(model, dtype, strategy, integer_comm, mode, shard_group_size)
    type(fsdp_model), intent(out) :: model
    integer, intent(in) :: dtype
    character(len=*), intent(in) :: strategy
    logical, intent(in) :: integer_comm
    integer, intent(in), optional :: mode, shard_group_size
    call fsdp_model_create(model, dtype, ierr)
    call check_ok(ierr, 'fsdp_model_create')
    if (present(mode)) then
      call fsdp_model_set_mode(model, mode, ierr)
      call check_ok(ierr, 'fsdp_model_set_mode')
    end if
    if (present(shard_group_size)) then
      call fsdp_model_set_shard_group_size(model, shard_group_size, ierr)
      call check_ok(ierr, 'fsdp_model_set_shard_group_size')
    end if
    call fsdp_model_add_parameter(model, 'l0.w', [n_in, n_hidden], 'l0', ierr)
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

  ! One step of rank world_rank's batch through the scopes, the gradients written by hand: the
  ! forward and backward of every unit and finish_step (the optimizer step is the caller's).
  subroutine api_step(runtime, step)
    type(fsdp_runtime), intent(in) :: runtime
    integer, intent(in) :: step
    real(c_double), pointer :: p(:), pw0(:, :), pw1(:, :), g(:), gw(:, :)
    real(c_double) :: x(n_in, 0:batch - 1), t(n_out, 0:batch - 1), h(n_hidden, 0:batch - 1)
    real(c_double) :: y(n_out, 0:batch - 1), dh(n_hidden, 0:batch - 1), dy(n_out)
    integer :: k, j
    do k = 0, batch - 1
      call sample(world_rank, step, k, x(:, k), t(:, k))
    end do
    call fsdp_begin_forward(runtime, 'l0', ierr)
    call check_ok(ierr, 'begin_forward l0')
    call fsdp_full(runtime, 'l0.w', p, ierr)
    call check_ok(ierr, 'full l0.w')
    call check(size(p) == n_in * n_hidden, 'l0.w has n_in * n_hidden elements')
    pw0(1:n_in, 1:n_hidden) => p
    call fsdp_full(runtime, 'l0.b', p, ierr)
    call check_ok(ierr, 'full l0.b')
    do k = 0, batch - 1
      h(:, k) = matmul(x(:, k), pw0) + p
    end do
    call fsdp_end_forward(runtime, 'l0', ierr)
    call check_ok(ierr, 'end_forward l0')
    call fsdp_begin_forward(runtime, 'l1', ierr)
    call check_ok(ierr, 'begin_forward l1')
    call fsdp_full(runtime, 'l1.w', p, ierr)
    call check_ok(ierr, 'full l1.w')
    pw1(1:n_hidden, 1:n_out) => p
    call fsdp_full(runtime, 'l1.b', p, ierr)
    call check_ok(ierr, 'full l1.b')
    do k = 0, batch - 1
      y(:, k) = matmul(h(:, k), pw1) + p
    end do
    call fsdp_end_forward(runtime, 'l1', ierr)
    call check_ok(ierr, 'end_forward l1')

    call fsdp_begin_backward(runtime, 'l1', ierr)
    call check_ok(ierr, 'begin_backward l1')
    call fsdp_full(runtime, 'l1.w', p, ierr)
    call check_ok(ierr, 'full l1.w in backward')
    pw1(1:n_hidden, 1:n_out) => p
    call fsdp_grad(runtime, 'l1.w', g, ierr)
    call check_ok(ierr, 'grad l1.w')
    gw(1:n_hidden, 1:n_out) => g
    call fsdp_grad(runtime, 'l1.b', g, ierr)
    call check_ok(ierr, 'grad l1.b')
    do k = 0, batch - 1
      dy = (y(:, k) - t(:, k)) / batch
      g = g + dy
      do j = 1, n_out
        gw(:, j) = gw(:, j) + dy(j) * h(:, k)
      end do
      dh(:, k) = matmul(pw1, dy)
    end do
    call fsdp_end_backward(runtime, 'l1', ierr)
    call check_ok(ierr, 'end_backward l1')
    call fsdp_begin_backward(runtime, 'l0', ierr)
    call check_ok(ierr, 'begin_backward l0')
    call fsdp_grad(runtime, 'l0.w', g, ierr)
    call check_ok(ierr, 'grad l0.w')
    gw(1:n_in, 1:n_hidden) => g
    call fsdp_grad(runtime, 'l0.b', g, ierr)
    call check_ok(ierr, 'grad l0.b')
    do k = 0, batch - 1
      g = g + dh(:, k)
      do j = 1, n_hidden
        gw(:, j) = gw(:, j) + dh(j, k) * x(:, k)
      end do
    end do
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

  ! fp64, SGD with momentum and weight decay, 3 steps, full sharding, integer communicator.
  ! mode, shard_group_size: passed to the model when present (the result must not depend on them).
  subroutine train_and_compare(mode, shard_group_size)
    integer, intent(in), optional :: mode, shard_group_size
    type(fsdp_model) :: model
    type(fsdp_runtime) :: runtime
    type(fsdp_optimizer) :: sgd
    real(c_double) :: w0(n_in, n_hidden), b0(n_hidden), w1(n_hidden, n_out), b1(n_out)
    real(c_double) :: gw0(n_in, n_hidden), gb0(n_hidden), gw1(n_hidden, n_out), gb1(n_out)
    real(c_double) :: mw0(n_in, n_hidden), mb0(n_hidden), mw1(n_hidden, n_out), mb1(n_out)
    real(c_double) :: got_w0(n_in, n_hidden), got_b0(n_hidden), got_w1(n_hidden, n_out)
    real(c_double) :: got_b1(n_out), largest
    real(c_double), parameter :: lr = 0.1d0, momentum = 0.9d0, decay = 0.01d0
    integer, parameter :: steps = 3
    integer :: step, r

    call make_model(model, FSDP_FLOAT64, 'full', .true., mode, shard_group_size)
    call initial(w0, b0, w1, b1)
    call fsdp_model_init_from_full(model, 'l0.w', w0, ierr)
    call check_ok(ierr, 'init l0.w')
    call fsdp_model_init_from_full(model, 'l0.b', b0, ierr)
    call check_ok(ierr, 'init l0.b')
    call fsdp_model_init_from_root(model, 'l1.w', w1, ierr)
    call check_ok(ierr, 'init l1.w from root')
    call fsdp_model_init_from_full(model, 'l1.b', b1, ierr)
    call check_ok(ierr, 'init l1.b')
    call fsdp_runtime_create(runtime, model, ['l0', 'l1'], ierr, max_gathered_units=2)
    call check_ok(ierr, 'fsdp_runtime_create')
    call fsdp_optimizer_create_sgd(sgd, model, lr, ierr, momentum=momentum, weight_decay=decay)
    call check_ok(ierr, 'fsdp_optimizer_create_sgd')

    call train_steps(runtime, sgd, model, 0, steps)

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

    call fsdp_model_copy_parameter(model, 'l0.w', got_w0, ierr)
    call check_ok(ierr, 'copy l0.w')
    call fsdp_model_copy_parameter(model, 'l0.b', got_b0, ierr)
    call check_ok(ierr, 'copy l0.b')
    call fsdp_model_copy_parameter(model, 'l1.w', got_w1, ierr)
    call check_ok(ierr, 'copy l1.w')
    call fsdp_model_copy_parameter(model, 'l1.b', got_b1, ierr)
    call check_ok(ierr, 'copy l1.b')
    largest = max(maxval(abs(got_w0 - w0)), maxval(abs(got_b0 - b0)), &
                  maxval(abs(got_w1 - w1)), maxval(abs(got_b1 - b1)))
    call check(largest <= 1d-12, 'the parameters agree with unsharded training to 1e-12')
    call initial(gw0, gb0, gw1, gb1)  ! the comparison means something only if training moved them
    call check(max(maxval(abs(w0 - gw0)), maxval(abs(w1 - gw1))) > 1d-3, 'training moved the weights')
    if (world_rank == 0) print '(a,es10.3)', &
      'test_fortran: fp64 SGD through the scopes: largest difference from unsharded training ', &
      largest

    call fsdp_optimizer_destroy(sgd)
    call fsdp_runtime_destroy(runtime)
    call fsdp_model_destroy(model)
  end subroutine train_and_compare

  ! fp32 through type(MPI_Comm): initialized by a fill callback with 0.5 * index; every rank adds
  ! rank + 1 to every gradient element, so the average is (N + 1) / 2 and one plain SGD step with
  ! lr 0.25 gives exactly 0.5 * index - 0.25 (N + 1) / 2.
  subroutine sgd_rule_single_precision()
    type(fsdp_model) :: model
    type(fsdp_runtime) :: runtime
    type(fsdp_optimizer) :: sgd
    real(c_float), pointer :: g(:)
    real(c_float) :: whole(n_in * n_hidden)
    character(len=4), parameter :: names(4) = ['l0.w', 'l0.b', 'l1.w', 'l1.b']
    character(len=2), parameter :: backward_order(2) = ['l1', 'l0']
    integer(c_int64_t) :: numel, first, count, total
    integer :: i, u, e

    call make_model(model, FSDP_FLOAT32, 'full', .false.)
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
        call check(abs(whole(e) - (0.5 * (e - 1) - 0.25 * (world_size + 1) / 2.0)) <= 0, &  ! exact
                   'one SGD step on ' // names(i) // ' gives p - lr * (N + 1) / 2 exactly')
      end do
    end do
    if (world_rank == 0) print '(a)', 'test_fortran: fp32 fill callback and SGD rule: ok'
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

    call fsdp_model_create(model, 3, ierr)
    call check_code(ierr, FSDP_ERROR_INVALID_ARGUMENT, 'fsdp_model_create with dtype 3')
    call make_model(model, FSDP_FLOAT64, 'layerwise', .true.)
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
    integer(c_int64_t) :: step, epoch
    character(len=:), allocatable :: path, missing

    path = scratch_path('sgd')
    missing = scratch_path('missing')
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

end program test_fortran

