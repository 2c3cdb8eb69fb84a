! A Fortran consumer of the installed fsdp: `use fsdp` from the installed module, one parameter
! sharded over the ranks and read back whole.
program consumer_fortran
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use fsdp
  implicit none
  type(fsdp_model) :: model
  real(c_double) :: values(6), back(6)
  integer :: ierr, i, rank

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call fsdp_initialize(ierr)
  if (ierr /= FSDP_SUCCESS) error stop 'fsdp_initialize'
  call fsdp_model_create(model, FSDP_FLOAT64, ierr)
  call fsdp_model_add_parameter(model, 'w', [2, 3], 'layer', ierr)
  if (ierr /= FSDP_SUCCESS) error stop 'fsdp_model_add_parameter'
  call fsdp_model_shard(model, MPI_COMM_WORLD, 'full', ierr)
  if (ierr /= FSDP_SUCCESS) error stop 'fsdp_model_shard'
  values = [(1.5d0 * i, i = 1, 6)]
  call fsdp_model_init_from_full(model, 'w', values, ierr)
  call fsdp_model_copy_parameter(model, 'w', back, ierr)
  if (ierr /= FSDP_SUCCESS .or. any(abs(back - values) > 0)) error stop 'copy_parameter'
  call fsdp_model_destroy(model)
  call fsdp_finalize(ierr)
  if (rank == 0) print '(a)', 'fortran consumer: use fsdp ok'
  call MPI_Finalize(ierr)
end program consumer_fortran
