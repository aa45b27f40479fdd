! Assertion helpers of the Fortran tests: every check counts, a failed one prints what and
! why (with dtrain's last message), and the verdict is agreed over all ranks.
module checks
  use dtrain
  use mpi_f08
  implicit none
  private
  public :: check, expect, expect_message, verdict, my_rank, test_ctx, start_test

  integer :: failures = 0, total_checks = 0
  integer :: my_rank = 0
  type(dt_context) :: test_ctx  ! whose last error explains a failed expectation

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    total_checks = total_checks + 1
    if (.not. ok) then
      failures = failures + 1
      print '(a,i0,2a)', '[rank ', my_rank, '] check failed: ', what
    end if
  end subroutine

  ! ierr must equal want; on mismatch print the library's message.
  subroutine expect(got, want, what)
    integer, intent(in) :: got, want
    character(len=*), intent(in) :: what
    total_checks = total_checks + 1
    if (got /= want) then
      failures = failures + 1
      print '(a,i0,3a,i0,a,i0,2a)', '[rank ', my_rank, '] ', what, ': got ', got, ', wanted ', want, &
            ': ', dt_get_last_error(test_ctx)
    end if
  end subroutine

  ! ierr must equal want and the last message (of ctx) must contain text.
  subroutine expect_message(got, want, ctx, text, what)
    integer, intent(in) :: got, want
    type(dt_context), intent(in) :: ctx
    character(len=*), intent(in) :: text, what
    character(len=:), allocatable :: msg
    call expect(got, want, what)
    msg = dt_get_last_error(ctx)
    total_checks = total_checks + 1
    if (index(msg, text) == 0) then
      failures = failures + 1
      print '(a,i0,6a)', '[rank ', my_rank, '] ', what, ': message "', msg, '" lacks: ', text
    end if
  end subroutine

  ! A test program's start: MPI (MPI_THREAD_MULTIPLE asked for; `provided`, what MPI gives),
  ! dtrain over MPI_COMM_WORLD (ctx, also the one messages come from), this rank and the
  ! world's group.
  subroutine start_test(ctx, world, provided)
    type(dt_context), intent(out) :: ctx
    type(dt_comm), intent(out) :: world
    integer, intent(out), optional :: provided
    integer :: given, ierr
    call MPI_Init_thread(MPI_THREAD_MULTIPLE, given, ierr)
    if (present(provided)) provided = given
    call dt_init(ctx, ierr, comm=MPI_COMM_WORLD)
    test_ctx = ctx
    call expect(ierr, DT_SUCCESS, 'dt_init')
    call dt_context_rank(ctx, my_rank, ierr)
    call dt_context_world(ctx, world, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_context_world')
  end subroutine

  ! Sums the failures over MPI_COMM_WORLD; rank 0 prints "<name>: all checks passed" or the
  ! count. Returns .true. when every rank passed.
  logical function verdict(name)
    character(len=*), intent(in) :: name
    integer :: total, ierr
    call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    verdict = total == 0
    if (my_rank /= 0) return
    if (verdict) then
      print '(2a,i0,a)', name, ': all checks passed (', total_checks, ' on rank 0)'
    else
      print '(2a,i0,a)', name, ': ', total, ' checks failed'
    end if
  end function

end module checks
