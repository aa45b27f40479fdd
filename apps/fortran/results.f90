! The results file of the examples (--out): the final evaluation loss and every parameter,
! one "name value" line each, so runs at different rank counts can be compared.
module app_results
  use, intrinsic :: iso_c_binding, only: c_float
  use mpi_f08, only: MPI_Allreduce, MPI_IN_PLACE, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD
  implicit none
  private
  public :: write_results, writable_by_rank_0

contains

  ! Whether rank 0, which writes the results at the end, can write path: tried before the
  ! training (the file is opened to append, so nothing in it is lost; a file the try made is
  ! deleted again, so a run that fails leaves none), agreed by every rank.
  logical function writable_by_rank_0(path, rank) result(ok)
    character(len=*), intent(in) :: path
    integer, intent(in) :: rank
    integer :: unit, stat
    logical :: existed
    ok = .true.
    if (rank == 0) then
      inquire (file=path, exist=existed)
      open (newunit=unit, file=path, status='unknown', position='append', action='write', iostat=stat)
      ok = stat == 0
      if (ok .and. existed) close (unit, iostat=stat)
      if (ok .and. .not. existed) close (unit, status='delete', iostat=stat)
    end if
    call MPI_Allreduce(MPI_IN_PLACE, ok, 1, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD)
  end function

  ! ok is .false. where the file cannot be written.
  subroutine write_results(path, eval_loss, params, ok)
    character(len=*), intent(in) :: path
    real, intent(in) :: eval_loss
    real(c_float), intent(in) :: params(:)
    logical, intent(out) :: ok
    integer :: unit, i, stat, closed
    open (newunit=unit, file=path, status='replace', action='write', iostat=stat)
    ok = stat == 0
    if (.not. ok) return
    write (unit, '(a,es17.9e3)', iostat=stat) 'eval_loss ', eval_loss
    do i = 1, size(params)
      if (stat == 0) write (unit, '(a,es17.9e3)', iostat=stat) 'param ', params(i)
    end do
    close (unit, iostat=closed)
    ok = stat == 0 .and. closed == 0
  end subroutine

end module app_results
