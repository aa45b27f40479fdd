! Command line shared by the Fortran example programs:
!   --steps N  --lr X  --save-dir DIR  --save-every K  --keep K  --resume PATH|DIR|auto  --out FILE
module app_options
  implicit none
  private
  public :: options, parse_options, print_usage

  type :: options
    integer :: steps = 300                    ! train until this many optimiser steps are done
    real :: lr = 0.01                         ! AdamW learning rate
    character(len=:), allocatable :: save_dir ! '' : no checkpoints
    integer :: save_every = 0                 ! after every K steps (0: once, at the end)
    integer :: keep = 0                       ! newest checkpoints kept (0: all)
    character(len=:), allocatable :: resume   ! '' : start fresh
    character(len=:), allocatable :: out      ! '' : no results file
    logical :: help = .false.                 ! --help: the usage was printed; nothing to run
  end type

contains

  ! ok is .false. (with the reason printed) when the arguments are not valid options;
  ! --help sets o%help (ok .true.): print_usage then says what the options are.
  subroutine parse_options(program, o, ok)
    character(len=*), intent(in) :: program
    type(options), intent(out) :: o
    logical, intent(out) :: ok
    character(len=4096) :: name, value
    integer :: i, n, stat
    o%save_dir = ''
    o%resume = ''
    o%out = ''
    ok = .false.
    n = command_argument_count()
    do i = 1, n, 2  ! option names only: a value may be '-h'
      call get_command_argument(i, name)
      if (trim(name) == '--help' .or. trim(name) == '-h') then
        o%help = .true.
        ok = .true.
        return
      end if
    end do
    if (mod(n, 2) /= 0) then
      call usage('every option takes a value')
      return
    end if
    do i = 1, n, 2
      call get_command_argument(i, name)
      call get_command_argument(i + 1, value)
      stat = 0
      select case (trim(name))
      case ('--steps')
        read (value, *, iostat=stat) o%steps
      case ('--lr')
        read (value, *, iostat=stat) o%lr
      case ('--save-dir')
        o%save_dir = trim(value)
      case ('--save-every')
        read (value, *, iostat=stat) o%save_every
      case ('--keep')
        read (value, *, iostat=stat) o%keep
      case ('--resume')
        o%resume = trim(value)
      case ('--out')
        o%out = trim(value)
      case default
        call usage('unknown option '//trim(name))
        return
      end select
      if (stat /= 0) then
        call usage(trim(name)//' needs a number')
        return
      end if
    end do
    if (o%resume == 'auto' .and. o%save_dir == '') then
      call usage('--resume auto needs --save-dir')
      return
    end if
    ok = .true.

  contains

    subroutine usage(why)
      character(len=*), intent(in) :: why
      write (*, '(3a)') program, ': ', why
      call print_usage(program)
    end subroutine

  end subroutine

  subroutine print_usage(program)
    character(len=*), intent(in) :: program
    write (*, '(a)') 'usage: mpiexec -n N '//program// &
      ' [--steps N] [--lr X] [--save-dir DIR] [--save-every K] [--keep K]'// &
      ' [--resume PATH|DIR|auto] [--out FILE]'
  end subroutine

end module app_options
