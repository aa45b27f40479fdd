! The synthetic task of the examples: inputs uniform in [-1, 1]^4 and two smooth regression
! targets; the classifier's label is the bin of the first target. Sample id is a pure
! function of id, so any split of a batch over ranks sees the same samples.
module synthetic
  use, intrinsic :: iso_c_binding, only: c_float, c_int, c_int64_t
  implicit none
  private
  public :: sample, label_of, nin, nout, nclasses, eval_first

  integer, parameter :: nin = 4, nout = 2, nclasses = 3
  integer(c_int64_t), parameter :: eval_first = 1000000000_c_int64_t  ! held-out samples from here

contains

  ! x(nin) and y(nout) of sample id.
  subroutine sample(id, x, y)
    integer(c_int64_t), intent(in) :: id
    real(c_float), intent(out) :: x(nin), y(nout)
    integer :: i
    do i = 1, nin
      x(i) = real(2 * hash01(id, i - 1) - 1, c_float)
    end do
    y(1) = sin(2 * x(1)) * cos(x(2))
    y(2) = 0.5 * x(3) * x(4) + 0.3 * x(1)
  end subroutine

  ! Class 0, 1 or 2: the first target below -0.25, within 0.25 of zero, or above.
  integer(c_int) function label_of(y) result(label)
    real(c_float), intent(in) :: y(nout)
    label = merge(0, merge(2, 1, y(1) > 0.25), y(1) < -0.25)
  end function

  ! A value in [0, 1): the fractional part of a scaled sine, in double precision so that every
  ! rank computes the same bits.
  double precision function hash01(id, i)
    integer(c_int64_t), intent(in) :: id
    integer, intent(in) :: i
    double precision :: v
    v = sin(real(id, kind(v)) * 12.9898d0 + i * 78.233d0) * 43758.5453d0
    hash01 = v - floor(v)
  end function

end module synthetic
