! dtrain-fortran-byom: a Fortran program that owns its model, y = W2 tanh(W1 x + b1) + b2
! with forward and backward written here, and lets dtrain average the gradients over the
! ranks, clip them, apply ZeRO-1 sharded AdamW and write HDF5 checkpoints.
!
!   mpiexec -n 2 dtrain-fortran-byom --steps 300 --save-dir ckpt --save-every 100
!   mpiexec -n 2 dtrain-fortran-byom --steps 400 --save-dir ckpt --resume auto
!
! Each step trains on a global batch of 32 samples split evenly over the ranks, so any rank
! count trains the same model (to rounding). A fresh run stops with an error unless the
! evaluation loss at least halves.
program fortran_byom
  use, intrinsic :: iso_c_binding
  use, intrinsic :: ieee_arithmetic, only: ieee_is_nan
  use mpi_f08
  use dtrain
  use app_options
  use app_results
  use app_exit
  use synthetic
  implicit none
  integer, parameter :: nhid = 32, global_batch = 32, eval_samples = 256
  ! Fortran shapes; checkpoints hold the C shapes, reversed: hidden.weight is [nin, nhid].
  real(c_float), target :: w1(nhid, nin), b1(nhid), w2(nout, nhid), b2(nout)
  real(c_float), target :: gw1(nhid, nin), gb1(nhid), gw2(nout, nhid), gb2(nout)
  type(dt_context) :: ctx
  type(dt_comm) :: world
  type(dt_byom) :: byom
  type(options) :: opt
  character(len=:), allocatable :: source
  integer :: ierr, rank, nranks, provided, per, step, start, i, j
  real :: loss, norm, eval_before, eval_after
  logical :: ok, written
  character(len=:), allocatable :: why

  written = .true.  ! rank 0 writes the results file, if any
  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)  ! which rank reports, should dt_init fail
  call dt_init(ctx, ierr, comm=MPI_COMM_WORLD)
  call check('dt_init')
  call parse_options('dtrain-fortran-byom', opt, ok, why)
  if (.not. same_on_every_rank(ok)) &
    call quit(ctx, rank, 'dtrain-fortran-byom: the ranks were given different options', 2)
  if (.not. ok) call quit(ctx, rank, why, 2)
  if (opt%help) then
    if (rank == 0) call print_usage('dtrain-fortran-byom')
    call dt_finalize(ctx, ierr)
    call MPI_Finalize(ierr)
    stop
  end if
  call dt_context_size(ctx, nranks, ierr)
  call check('dt_context_size')
  call dt_context_world(ctx, world, ierr)
  call check('dt_context_world')
  if (mod(global_batch, nranks) /= 0) call quit(ctx, rank, 'dtrain-fortran-byom: the number of ranks must divide 32', 2)
  if (opt%out /= '') then
    if (.not. writable_by_rank_0(opt%out, rank)) call quit(ctx, rank, 'dtrain-fortran-byom: cannot write '//opt%out, 1)
  end if
  per = global_batch / nranks

  ! The same initial weights on every rank: a fixed pattern scaled by 1/sqrt(fan-in).
  do i = 1, nin
    do j = 1, nhid
      w1(j, i) = sin(1.7 * ((j - 1) * nin + i - 1) + 0.3) / sqrt(real(nin))
    end do
  end do
  do j = 1, nhid
    w2(:, j) = [(cos(2.3 * ((i - 1) * nhid + j - 1)), i = 1, nout)] / sqrt(real(nhid))
  end do
  b1 = 0
  b2 = 0

  call dt_byom_create(world, byom, ierr, weight_decay=0.01, clip_grad=1.0, zero_stage=1)
  call check('dt_byom_create')
  call dt_byom_register(byom, 'hidden.weight', w1, gw1, ierr)
  call check('dt_byom_register')
  call dt_byom_register(byom, 'hidden.bias', b1, gb1, ierr, no_decay=.true.)
  call check('dt_byom_register')
  call dt_byom_register(byom, 'out.weight', w2, gw2, ierr)
  call check('dt_byom_register')
  call dt_byom_register(byom, 'out.bias', b2, gb2, ierr, no_decay=.true.)
  call check('dt_byom_register')

  start = 0
  source = opt%resume
  if (source == 'auto') then
    call dt_checkpoint_find(world, opt%save_dir, source, ierr)
    call check('dt_checkpoint_find')
  end if
  if (source /= '') then
    call dt_byom_load_checkpoint(byom, source, ierr)
    call check('dt_byom_load_checkpoint')
    call dt_byom_steps(byom, start, ierr)
    call check('dt_byom_steps')
    if (rank == 0) print '(3a,i0)', 'resumed from ', source, ' at step ', start
  end if

  eval_before = mean_loss(eval_first + rank * (eval_samples / nranks), eval_samples / nranks, .false.)
  do step = start, opt%steps - 1
    loss = mean_loss(int(step, c_int64_t) * global_batch + rank * per, per, .true.)
    call dt_byom_step(byom, opt%lr, ierr, grad_norm=norm)
    call check('dt_byom_step')
    if (opt%save_dir /= '' .and. opt%save_every > 0) then
      if (mod(step + 1, opt%save_every) == 0) call save()
    end if
    if (rank == 0 .and. (mod(step, 50) == 0 .or. step + 1 == opt%steps)) &
      print '(a,i5,a,f9.5,a,f8.4)', 'step', step, '  loss', loss, '  grad-norm', norm
  end do
  if (opt%save_dir /= '' .and. opt%save_every == 0) call save()
  eval_after = mean_loss(eval_first + rank * (eval_samples / nranks), eval_samples / nranks, .false.)

  if (rank == 0) then
    print '(a,f9.5,a,f9.5,a,i0,a,i0,a,i0,a)', 'fortran-byom: eval loss ', eval_before, ' -> ', &
      eval_after, ', steps ', start, '..', opt%steps, ' on ', nranks, ' ranks'
    if (opt%out /= '') call write_results(opt%out, eval_after, [reshape(w1, [size(w1)]), b1, &
                                                               reshape(w2, [size(w2)]), b2], written)
  end if
  if (.not. written) call quit(ctx, rank, 'dtrain-fortran-byom: cannot write '//opt%out, 1)
  if (ieee_is_nan(eval_after)) call quit(ctx, rank, 'dtrain-fortran-byom: the loss is not a number', 1)
  if (start == 0 .and. opt%steps > 0 .and. .not. eval_after < 0.5 * eval_before) &
    call quit(ctx, rank, 'dtrain-fortran-byom: the loss did not halve', 1)
  call dt_finalize(ctx, ierr)
  call MPI_Finalize(ierr)

contains

  ! Mean of 0.5*|f(x) - y|^2 over samples first .. first+n-1, averaged over the ranks' equal
  ! shares. With grads, the gradients of this rank's mean are written to gw1, gb1, gw2, gb2.
  real function mean_loss(first, n, grads)
    integer(c_int64_t), intent(in) :: first
    integer, intent(in) :: n
    logical, intent(in) :: grads
    real(c_float) :: x(nin), y(nout), h(nhid), e(nout), dh(nhid)
    real :: mine(1), mean(1)
    integer :: s
    if (grads) then
      gw1 = 0; gb1 = 0; gw2 = 0; gb2 = 0
    end if
    mine = 0
    do s = 0, n - 1
      call sample(first + s, x, y)
      h = tanh(matmul(w1, x) + b1)
      e = matmul(w2, h) + b2 - y
      mine(1) = mine(1) + 0.5 * sum(e**2) / n
      if (.not. grads) cycle
      e = e / n
      gw2 = gw2 + spread(e, 2, nhid) * spread(h, 1, nout)
      gb2 = gb2 + e
      dh = matmul(e, w2) * (1 - h**2)
      gw1 = gw1 + spread(dh, 2, nin) * spread(x, 1, nhid)
      gb1 = gb1 + dh
    end do
    call dt_all_reduce(world, mine, mean, 1, DT_F32, DT_AVG, ierr)
    call check('dt_all_reduce')
    mean_loss = mean(1)
  end function

  subroutine save()
    call dt_byom_save_checkpoint(byom, opt%save_dir, ierr, keep=opt%keep)
    call check('dt_byom_save_checkpoint')
  end subroutine

  subroutine check(what)
    character(len=*), intent(in) :: what
    if (ierr /= DT_SUCCESS) then
      call quit(ctx, rank, 'dtrain-fortran-byom: '//what//' failed: '//dt_get_last_error(ctx), 1)
    end if
  end subroutine

end program fortran_byom
