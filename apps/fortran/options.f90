! Command line shared by the Fortran example programs:
!   --steps N  --lr X  --save-dir DIR  --save-every K  --keep K  --resume PATH|DIR|auto  --out FILE
module app_options
  use mpi_f08, only: MPI_COMM_WORLD, MPI_CHARACTER, MPI_INTEGER, MPI_LOGICAL, MPI_LAND, MPI_LOR, MPI_Bcast, &
                     MPI_Comm_rank, MPI_Allreduce
  implicit none
  private
  public :: options, parse_options, print_usage, usage_line, same_on_every_rank

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

  ! ok is .false., with the reason and the usage in why, when the arguments are not valid
  ! options; --help sets o%help (ok .true.): print_usage then says what the options are.
  subroutine parse_options(program, o, ok, why)
    character(len=*), intent(in) :: program
    type(options), intent(out) :: o
    logical, intent(out) :: ok
    character(len=:), allocatable, intent(out) :: why
    character(len=4096) :: name, value
    integer :: i, n
    logical :: exists, is_dir
    o%save_dir = ''
    o%resume = ''
    o%out = ''
    why = ''
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
      ! An empty value (an unset variable in a job script) would mean no checkpoints.
      if (len_trim(value) == 0) then
        call usage(trim(name)//' was given an empty value')
        return
      end if
      select case (trim(name))
      case ('--steps')
        if (.not. whole_number(value, o%steps)) return
      case ('--lr')
        if (.not. positive_number(value, o%lr)) return
      case ('--save-dir')
        o%save_dir = trim(value)
      case ('--save-every')
        if (.not. whole_number(value, o%save_every)) return
      case ('--keep')
        if (.not. whole_number(value, o%keep)) return
      case ('--resume')
        o%resume = trim(value)
      case ('--out')
        o%out = trim(value)
      case default
        call usage('unknown option '//trim(name))
        return
      end select
    end do
    if (o%resume == 'auto' .and. o%save_dir == '') then
      call usage('--resume auto needs --save-dir')
      return
    end if
    if (o%save_dir /= '') then  ! found now, not at the first save after the training
      inquire (file=trim(o%save_dir), exist=exists)
      inquire (file=trim(o%save_dir)//'/.', exist=is_dir)
      if (exists .and. .not. is_dir) then
        call usage('--save-dir "'//trim(o%save_dir)//'" exists and is not a directory')
        return
      end if
    end if
    ok = .true.

  contains

    subroutine usage(reason)
      character(len=*), intent(in) :: reason
      why = program//': '//reason//new_line('a')//usage_line(program)
    end subroutine

    ! A whole number >= 0 and nothing else (list-directed reading alone takes '7 days' as 7
    ! and '/' as no value at all).
    logical function whole_number(text, v)
      character(len=*), intent(in) :: text
      integer, intent(inout) :: v
      integer :: stat
      stat = 1
      if (len_trim(text) > 0 .and. verify(trim(text), '0123456789') == 0) read (text, *, iostat=stat) v
      if (stat /= 0) call usage(trim(name)//' needs a whole number >= 0, got "'//trim(text)//'"')
      whole_number = stat == 0
    end function

    logical function positive_number(text, v)
      character(len=*), intent(in) :: text
      real, intent(inout) :: v
      integer :: stat
      stat = 1
      if (len_trim(text) > 0 .and. verify(trim(text), '0123456789.eE+-') == 0) read (text, *, iostat=stat) v
      if (stat == 0 .and. .not. (v > 0 .and. v <= huge(v))) stat = 1
      if (stat /= 0) call usage(trim(name)//' needs a positive number, got "'//trim(text)//'"')
      positive_number = stat == 0
    end function

  end subroutine

  ! .true. where every rank was given rank 0's arguments with the same outcome (ok): a rank
  ! given others (a launcher's per-rank arguments) would otherwise wait in a collective the
  ! others never enter. Collective over MPI_COMM_WORLD.
  logical function same_on_every_rank(ok)
    logical, intent(in) :: ok
    character(len=:), allocatable :: mine, root
    character(len=4096) :: arg
    integer :: i, n, rank, ierr
    logical :: mine_flags(2), all_flags(2), any_ok
    mine = ''
    do i = 1, command_argument_count()
      call get_command_argument(i, arg, n)
      mine = mine//arg(1:min(n, len(arg)))//char(0)
    end do
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    n = len(mine)
    call MPI_Bcast(n, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
    allocate (character(len=n) :: root)
    if (rank == 0) root = mine
    call MPI_Bcast(root, n, MPI_CHARACTER, 0, MPI_COMM_WORLD, ierr)
    ! The outcome too (a --save-dir that one node sees as a file): ok on all ranks or on none.
    mine_flags = [root == mine .and. len(root) == len(mine), ok]
    call MPI_Allreduce(mine_flags, all_flags, 2, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
    call MPI_Allreduce(ok, any_ok, 1, MPI_LOGICAL, MPI_LOR, MPI_COMM_WORLD, ierr)
    same_on_every_rank = all_flags(1) .and. (all_flags(2) .eqv. any_ok)
  end function

  function usage_line(program) result(line)
    character(len=*), intent(in) :: program
    character(len=:), allocatable :: line
    line = 'usage: mpiexec -n N '//program// &
      ' [--steps N] [--lr X] [--save-dir DIR] [--save-every K] [--keep K]'// &
      ' [--resume PATH|DIR|auto] [--out FILE]'
  end function

  subroutine print_usage(program)
    character(len=*), intent(in) :: program
    write (*, '(a)') usage_line(program)
  end subroutine

end module app_options
