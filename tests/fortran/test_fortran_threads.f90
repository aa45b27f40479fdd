! The module's own failure messages are the calling thread's: one OpenMP thread's shape
! error stays readable through dt_get_last_error while another thread's successful call into
! dtrain clears only its own (it cleared the one message the process had).
program test_fortran_threads
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use omp_lib
  use dtrain
  use checks
  implicit none

  type(dt_context) :: ctx
  type(dt_comm) :: world
  type(dt_byom) :: byom
  real(c_float) :: w(4, 3), gw(3, 4)
  character(len=200) :: seen(0:1)
  integer :: ierr, provided, codes(0:1), size, team

  call start_test(ctx, world, provided)
  call check(provided == MPI_THREAD_MULTIPLE, 'MPI gives MPI_THREAD_MULTIPLE')
  call dt_byom_create(world, byom, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_byom_create')
  codes = -1
  team = 0
  !$omp parallel num_threads(2) private(ierr, size)
  !$omp single
  team = omp_get_num_threads()
  !$omp end single
  if (omp_get_thread_num() == 0) then  ! a shape only this module can see is wrong
    call dt_byom_register(byom, 'w', w, gw, ierr)
    codes(0) = ierr
  end if
  !$omp barrier
  if (omp_get_thread_num() == 1) then  ! a call into C that succeeds
    call dt_comm_size(world, size, ierr)
    codes(1) = ierr
  end if
  !$omp barrier
  seen(omp_get_thread_num()) = dt_get_last_error(ctx)
  !$omp end parallel
  call check(team == 2, 'two OpenMP threads ran (OMP_THREAD_LIMIT or OMP_DYNAMIC may not cut the team)')
  call expect(codes(0), DT_ERR_INVALID_ARGUMENT, 'dt_byom_register with a gradient of another shape')
  call expect(codes(1), DT_SUCCESS, 'dt_comm_size on the other thread')
  call check(trim(seen(0)) == 'dt_byom_register: grad must have the shape of param', &
             'the failing thread still reads its message after the other thread''s call: "' &
             //trim(seen(0))//'"')
  call check(index(seen(1), 'grad must have') == 0, 'the other thread does not read it: "' &
             //trim(seen(1))//'"')
  call dt_byom_destroy(byom, ierr)
  call dt_finalize(ctx, ierr)
  if (.not. verdict('fortran_threads')) error stop 1
  call MPI_Finalize(ierr)
end program
