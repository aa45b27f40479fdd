! fortran-byom: a Fortran program that owns its model (a two-layer tanh network fitting
! y = sin(x1) * cos(x2)) and lets dtrain average the gradients over the ranks, clip them and
! apply AdamW. Each rank samples its own points. Prints the loss; stops with an error unless
! it falls.
!
!   mpiexec -n 2 dtrain-fortran-byom [steps]
program fortran_byom
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use dtrain
  implicit none
  integer, parameter :: nin = 2, nhid = 16, batch = 32
  real(c_float), target :: w1(nhid, nin), b1(nhid), w2(nhid), b2(1)
  real(c_float), target :: gw1(nhid, nin), gb1(nhid), gw2(nhid), gb2(1)
  real(c_float) :: x(nin, batch), y(batch), h(nhid), dh(nhid), pred, e
  type(dt_context) :: ctx
  type(dt_comm) :: world
  type(dt_byom) :: byom
  integer :: ierr, rank, nranks, step, steps, s, provided
  real :: loss, first, global(1), mine(1)
  character(len=16) :: arg

  steps = 300
  if (command_argument_count() > 0) then
    call get_command_argument(1, arg)
    read (arg, *) steps
  end if
  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call dt_init(ctx, ierr, comm=MPI_COMM_WORLD)
  call check('dt_init')
  call dt_context_rank(ctx, rank, ierr)
  call dt_context_size(ctx, nranks, ierr)
  call dt_context_world(ctx, world, ierr)

  ! The same initial weights on every rank (a fixed pattern, no random state to share).
  do s = 1, nhid
    w1(s, :) = [0.5 * sin(1.3 * s), 0.5 * cos(0.7 * s)]
    w2(s) = 0.3 * sin(2.1 * s + 1)
  end do
  b1 = 0
  b2 = 0
  call dt_byom_create(world, byom, ierr, weight_decay=0.0, clip_grad=1.0)
  call check('dt_byom_create')
  call dt_byom_register(byom, 'hidden.weight', w1, gw1, ierr)   ! C shape [nin, nhid]
  call dt_byom_register(byom, 'hidden.bias', b1, gb1, ierr, no_decay=.true.)
  call dt_byom_register(byom, 'out.weight', w2, gw2, ierr)
  call dt_byom_register(byom, 'out.bias', b2, gb2, ierr, no_decay=.true.)
  call check('dt_byom_register')

  do step = 0, steps - 1
    do s = 1, batch   ! points of this rank, different every step
      x(:, s) = [sin(0.37 * (step * nranks + rank) * batch + 1.7 * s), cos(0.53 * s + step)] * 3
      y(s) = sin(x(1, s)) * cos(x(2, s))
    end do
    gw1 = 0; gb1 = 0; gw2 = 0; gb2 = 0
    loss = 0
    do s = 1, batch   ! forward and backward of the mean squared error
      h = tanh(matmul(w1, x(:, s)) + b1)
      pred = dot_product(w2, h) + b2(1)
      e = (pred - y(s)) / batch
      loss = loss + 0.5 * (pred - y(s))**2 / batch
      gw2 = gw2 + e * h
      gb2 = gb2 + e
      dh = e * w2 * (1 - h**2)
      gw1 = gw1 + spread(dh, 2, nin) * spread(x(:, s), 1, nhid)
      gb1 = gb1 + dh
    end do
    call dt_byom_step(byom, 0.01, ierr)
    call check('dt_byom_step')
    mine(1) = loss
    call dt_all_reduce(world, mine, global, 1, DT_F32, DT_AVG, ierr)
    if (step == 0) first = global(1)
    if (rank == 0 .and. mod(step, 50) == 0) print '(a,i5,a,f9.5)', 'step', step, '  loss', global(1)
  end do
  if (rank == 0) print '(a,f9.5,a,f9.5,a,i0,a)', 'fortran-byom: loss ', first, ' -> ', global(1), &
                       ' on ', nranks, ' ranks'
  call dt_finalize(ctx, ierr)
  call MPI_Finalize(ierr)
  if (.not. global(1) < 0.5 * first) error stop 2

contains

  subroutine check(what)
    character(len=*), intent(in) :: what
    if (ierr /= DT_SUCCESS) then
      print '(3a)', what, ' failed: ', dt_get_last_error(ctx)
      error stop 1
    end if
  end subroutine

end program fortran_byom
