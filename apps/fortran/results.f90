! The results file of the examples (--out): the final evaluation loss and every parameter,
! one "name value" line each, so runs at different rank counts can be compared.
module app_results
  use, intrinsic :: iso_c_binding, only: c_float
  implicit none
  private
  public :: write_results

contains

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
