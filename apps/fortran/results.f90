! The results file of the examples (--out): the final evaluation loss and every parameter,
! one "name value" line each, so runs at different rank counts can be compared.
module app_results
  use, intrinsic :: iso_c_binding, only: c_float
  implicit none
  private
  public :: write_results

contains

  subroutine write_results(path, eval_loss, params)
    character(len=*), intent(in) :: path
    real, intent(in) :: eval_loss
    real(c_float), intent(in) :: params(:)
    integer :: unit, i
    open (newunit=unit, file=path, status='replace', action='write')
    write (unit, '(a,es17.9e3)') 'eval_loss ', eval_loss
    do i = 1, size(params)
      write (unit, '(a,es17.9e3)') 'param ', params(i)
    end do
    close (unit)
  end subroutine

end module app_results
