! The Fortran module drives a transformer: the units of fsdp-train's GPT-2 (2 blocks of width 16,
! fp64) trained three AdamW steps with every fsdp call made from Fortran: the parameters
! registered and initialised, the head tied to wte.weight (fsdp_runtime_create with
! tied_parameters), every scope opened and closed in order, each parameter and gradient taken
! with fsdp_full and fsdp_grad (the head's scopes take the tied wte.weight too, and every block's
! backward scope recomputes the block's forward: activation checkpointing), the step finished,
! the optimizer stepped. The arithmetic is C++ (tests/fortran/tiny_gpt_kernels.cpp: fsdp-train's
! passes, one unit at a time, on the pointers handed to them), as a Fortran code calls a kernel
! library. The same training through the C++ Runtime must end with the same parameters, bit for
! bit. Any mismatch prints and stops with `error stop` (a nonzero exit that ends the whole job).
module tiny_gpt_kernels
  use, intrinsic :: iso_c_binding
  implicit none
  integer, parameter :: name_capacity = 64

  interface
    type(c_ptr) function tiny_gpt_create() bind(c)
      import :: c_ptr
    end function tiny_gpt_create
    subroutine tiny_gpt_destroy(handle) bind(c)
      import :: c_ptr
      type(c_ptr), value :: handle
    end subroutine tiny_gpt_destroy
    integer(c_int64_t) function tiny_gpt_parameter_count(handle) bind(c)
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: handle
    end function tiny_gpt_parameter_count
    integer(c_int) function tiny_gpt_parameter(handle, i, name, unit, capacity, ndim, shape) &
        bind(c)
      import :: c_ptr, c_int, c_int64_t, c_char
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: i, capacity
      character(kind=c_char), intent(out) :: name(*), unit(*)
      integer(c_int), intent(out) :: ndim
      integer(c_int64_t), intent(out) :: shape(2)
    end function tiny_gpt_parameter
    integer(c_int) function tiny_gpt_initial_values(handle, i, values) bind(c)
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: i
      real(c_double), intent(out) :: values(*)
    end function tiny_gpt_initial_values
    integer(c_int64_t) function tiny_gpt_unit_count(handle) bind(c)
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: handle
    end function tiny_gpt_unit_count
    integer(c_int) function tiny_gpt_unit_name(handle, unit, name, capacity) bind(c)
      import :: c_ptr, c_int, c_int64_t, c_char
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: unit, capacity
      character(kind=c_char), intent(out) :: name(*)
    end function tiny_gpt_unit_name
    integer(c_int64_t) function tiny_gpt_unit_parameter_count(handle, unit) bind(c)
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: unit
    end function tiny_gpt_unit_parameter_count
    integer(c_int) function tiny_gpt_unit_parameter_name(handle, unit, k, name, capacity) bind(c)
      import :: c_ptr, c_int, c_int64_t, c_char
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: unit, k, capacity
      character(kind=c_char), intent(out) :: name(*)
    end function tiny_gpt_unit_parameter_name
    integer(c_int) function tiny_gpt_steps() bind(c)
      import :: c_int
    end function tiny_gpt_steps
    real(c_double) function tiny_gpt_lr() bind(c)
      import :: c_double
    end function tiny_gpt_lr
    real(c_double) function tiny_gpt_weight_decay() bind(c)
      import :: c_double
    end function tiny_gpt_weight_decay
    integer(c_int) function tiny_gpt_load(handle, rank, step) bind(c)
      import :: c_ptr, c_int
      type(c_ptr), value :: handle
      integer(c_int), value :: rank, step
    end function tiny_gpt_load
    integer(c_int) function tiny_gpt_forward(handle, unit, full) bind(c)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: unit
      type(c_ptr), intent(in) :: full(*)
    end function tiny_gpt_forward
    integer(c_int) function tiny_gpt_loss(handle, loss) bind(c)
      import :: c_ptr, c_int, c_double
      type(c_ptr), value :: handle
      real(c_double), intent(out) :: loss
    end function tiny_gpt_loss
    integer(c_int) function tiny_gpt_backward(handle, unit, full, grad) bind(c)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: handle
      integer(c_int64_t), value :: unit
      type(c_ptr), intent(in) :: full(*), grad(*)
    end function tiny_gpt_backward
    integer(c_int) function tiny_gpt_train_reference(handle, rank, values) bind(c)
      import :: c_ptr, c_int, c_double
      type(c_ptr), value :: handle
      integer(c_int), value :: rank
      real(c_double), intent(out) :: values(*)
    end function tiny_gpt_train_reference
  end interface

contains

  ! A null-terminated C string as a Fortran one.
  function from_c(buffer) result(text)
    character(kind=c_char), intent(in) :: buffer(:)
    character(len=:), allocatable :: text
    integer :: n, i
    n = 0
    do while (n < size(buffer))
      if (buffer(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate (character(len=n) :: text)
    do i = 1, n
      text(i:i) = buffer(i)
    end do
  end function from_c
end module tiny_gpt_kernels

program test_fortran_gpt
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use fsdp
  use tiny_gpt_kernels
  implicit none
  integer :: ierr, world_rank, world_size, step, i, k, ndim
  integer(c_int64_t) :: n_parameters, n_units, u, total, first
  integer(c_int) :: c_ndim
  integer(c_int64_t) :: c_shape(2)
  character(kind=c_char) :: buffer(name_capacity), unit_buffer(name_capacity)
  character(len=name_capacity), allocatable :: names(:), layers(:), order(:)
  integer(c_int64_t), allocatable :: numels(:)
  real(c_double), allocatable, target :: values(:), trained(:), reference(:)
  type(c_ptr) :: gpt
  type(fsdp_model) :: model
  type(fsdp_runtime) :: runtime
  type(fsdp_optimizer) :: adamw
  real(c_double) :: loss, moved

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, world_rank)
  call MPI_Comm_size(MPI_COMM_WORLD, world_size)
  call fsdp_initialize(ierr)
  call check_ok(ierr, 'fsdp_initialize')
  gpt = tiny_gpt_create()

  ! The model: every parameter with its shape (Fortran's order) and unit, sharded in full.
  call fsdp_model_create(model, FSDP_FLOAT64, ierr)
  call check_ok(ierr, 'fsdp_model_create')
  n_parameters = tiny_gpt_parameter_count(gpt)
  allocate (names(n_parameters), layers(n_parameters), numels(n_parameters))
  do i = 1, int(n_parameters)
    call check_kernel(tiny_gpt_parameter(gpt, int(i - 1, c_int64_t), buffer, unit_buffer, &
                                         int(name_capacity, c_int64_t), c_ndim, c_shape))
    names(i) = from_c(buffer)
    layers(i) = from_c(unit_buffer)
    ndim = int(c_ndim)
    numels(i) = product(c_shape(1:ndim))
    call fsdp_model_add_parameter(model, trim(names(i)), &
                                  [(int(c_shape(ndim + 1 - k)), k = 1, ndim)], trim(layers(i)), ierr)
    call check_ok(ierr, 'fsdp_model_add_parameter ' // trim(names(i)))
  end do
  call fsdp_model_shard(model, MPI_COMM_WORLD, 'full', ierr)
  call check_ok(ierr, 'fsdp_model_shard')
  do i = 1, int(n_parameters)
    allocate (values(numels(i)))
    call check_kernel(tiny_gpt_initial_values(gpt, int(i - 1, c_int64_t), values))
    call fsdp_model_init_from_full(model, trim(names(i)), values, ierr)
    call check_ok(ierr, 'fsdp_model_init_from_full ' // trim(names(i)))
    deallocate (values)
  end do

  ! The units in forward order; the head also reads the embedding's wte.weight.
  n_units = tiny_gpt_unit_count(gpt)
  allocate (order(n_units))
  do u = 1, n_units
    call check_kernel(tiny_gpt_unit_name(gpt, u - 1, buffer, int(name_capacity, c_int64_t)))
    order(u) = from_c(buffer)
  end do
  call fsdp_runtime_create(runtime, model, order, ierr, tied_parameters=['wte.weight'], &
                           tied_units=[order(n_units)])
  call check_ok(ierr, 'fsdp_runtime_create (tied)')
  call fsdp_optimizer_create_adamw(adamw, model, tiny_gpt_lr(), ierr, &
                                   weight_decay=tiny_gpt_weight_decay())
  call check_ok(ierr, 'fsdp_optimizer_create_adamw')

  do step = 0, tiny_gpt_steps() - 1
    call check_kernel(tiny_gpt_load(gpt, int(world_rank, c_int), int(step, c_int)))
    do u = 0, n_units - 1
      call unit_pass(u, .false.)
    end do
    call check_kernel(tiny_gpt_loss(gpt, loss))
    call check(loss > 0 .and. loss < 100, 'the loss is a loss')
    do u = n_units - 1, 0, -1
      call unit_pass(u, .true.)
    end do
    call fsdp_finish_step(runtime, ierr)
    call check_ok(ierr, 'fsdp_finish_step')
    call fsdp_optimizer_step(adamw, ierr)
    call check_ok(ierr, 'fsdp_optimizer_step')
    call fsdp_model_zero_grad(model, ierr)
    call check_ok(ierr, 'fsdp_model_zero_grad')
  end do

  ! Every parameter, whole, against the C++ Runtime's training: equal to the bit.
  total = sum(numels)
  allocate (trained(total), reference(total))
  first = 1
  do i = 1, int(n_parameters)
    call fsdp_model_copy_parameter(model, trim(names(i)), trained(first:first + numels(i) - 1), &
                                   ierr)
    call check_ok(ierr, 'fsdp_model_copy_parameter ' // trim(names(i)))
    first = first + numels(i)
  end do
  call check_kernel(tiny_gpt_train_reference(gpt, int(world_rank, c_int), reference))
  first = 1
  moved = 0
  do i = 1, int(n_parameters)
    allocate (values(numels(i)))
    call check_kernel(tiny_gpt_initial_values(gpt, int(i - 1, c_int64_t), values))
    call check(all(transfer(trained(first:first + numels(i) - 1), [0_c_int64_t]) == &
                   transfer(reference(first:first + numels(i) - 1), [0_c_int64_t])), &
               trim(names(i)) // ' differs from the C++ Runtime''s training')
    moved = max(moved, maxval(abs(trained(first:first + numels(i) - 1) - values)))
    first = first + numels(i)
    deallocate (values)
  end do
  call check(moved > 1e-3_c_double, 'the steps trained (AdamW moves each weight by about lr)')

  call fsdp_optimizer_destroy(adamw)
  call fsdp_runtime_destroy(runtime)
  call fsdp_model_destroy(model)
  call tiny_gpt_destroy(gpt)  ! its Kokkos Views go before Kokkos does
  call fsdp_finalize(ierr)
  call check_ok(ierr, 'fsdp_finalize')
  if (world_rank == 0) print '(a)', 'test_fortran_gpt: all checks passed'
  call MPI_Finalize(ierr)

contains

  ! Unit u's forward or backward scope: open it, take the whole parameters (and in backward the
  ! gradients) of every parameter it reads from fsdp, compute, close it.
  subroutine unit_pass(u, backward)
    integer(c_int64_t), intent(in) :: u
    logical, intent(in) :: backward
    type(c_ptr), allocatable :: full(:), grad(:)
    real(c_double), pointer :: array(:)
    character(len=:), allocatable :: name
    integer(c_int64_t) :: n, k
    if (backward) then
      call fsdp_begin_backward(runtime, trim(order(u + 1)), ierr)
    else
      call fsdp_begin_forward(runtime, trim(order(u + 1)), ierr)
    end if
    call check_ok(ierr, 'begin ' // trim(order(u + 1)))
    n = tiny_gpt_unit_parameter_count(gpt, u)
    allocate (full(n), grad(n))
    do k = 1, n
      call check_kernel(tiny_gpt_unit_parameter_name(gpt, u, k - 1, buffer, &
                                                     int(name_capacity, c_int64_t)))
      name = from_c(buffer)
      call fsdp_full(runtime, name, array, ierr)
      call check_ok(ierr, 'fsdp_full ' // name)
      full(k) = c_loc(array(1))
      if (backward) then
        call fsdp_grad(runtime, name, array, ierr)
        call check_ok(ierr, 'fsdp_grad ' // name)
        grad(k) = c_loc(array(1))
      end if
    end do
    if (backward) then
      call check_kernel(tiny_gpt_backward(gpt, u, full, grad))
      call fsdp_end_backward(runtime, trim(order(u + 1)), ierr)
    else
      call check_kernel(tiny_gpt_forward(gpt, u, full))
      call fsdp_end_forward(runtime, trim(order(u + 1)), ierr)
    end if
    call check_ok(ierr, 'end ' // trim(order(u + 1)))
  end subroutine unit_pass

  subroutine check(condition, message)
    logical, intent(in) :: condition
    character(len=*), intent(in) :: message
    if (.not. condition) then
      write (*, '(a,i0,a,a)') 'test_fortran_gpt: rank ', world_rank, ': check failed: ', message
      write (*, '(a,a)') '  fsdp_last_error(): ', fsdp_last_error()
      flush (6)
      error stop 1
    end if
  end subroutine check

  subroutine check_ok(code, what)
    integer, intent(in) :: code
    character(len=*), intent(in) :: what
    character(len=16) :: digits
    write (digits, '(i0)') code
    call check(code == FSDP_SUCCESS, what // ' returned ' // trim(digits))
  end subroutine check_ok

  ! The kernels print what went wrong and return 1.
  subroutine check_kernel(code)
    integer(c_int), intent(in) :: code
    call check(code == 0, 'a tiny_gpt kernel failed (its message is above)')
  end subroutine check_kernel
end program test_fortran_gpt
