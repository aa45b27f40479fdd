! How the examples end on an error: the message on standard error, once (rank 0's) where every
! rank fails alike and then finalises dtrain and MPI, and exit status `code` without the
! Fortran runtime's backtrace (C's exit: `stop code, quiet=.true.` needs gfortran 12).
module app_exit
  use, intrinsic :: iso_c_binding, only: c_int
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi_f08, only: MPI_Finalize
  use dtrain, only: dt_context, dt_finalize
  implicit none
  private
  public :: quit

  interface
    subroutine c_exit(status) bind(c, name='exit')
      import :: c_int
      integer(c_int), value :: status
    end subroutine
  end interface

contains

  subroutine quit(ctx, rank, why, code)
    type(dt_context), intent(inout) :: ctx
    integer, intent(in) :: rank, code
    character(len=*), intent(in) :: why
    integer :: ierr
    if (rank == 0) write (error_unit, '(a)') why
    call dt_finalize(ctx, ierr)
    call MPI_Finalize(ierr)
    flush (error_unit)
    call c_exit(int(code, c_int))
  end subroutine

end module app_exit
