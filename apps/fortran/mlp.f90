! dtrain-fortran-mlp: dtrain's built-in MLP classifier trained from Fortran, data parallel
! over the ranks with ZeRO-1 AdamW and HDF5 checkpoints. The task: the class (bin) of the
! first target of the synthetic regression of the other examples.
!
!   mpiexec -n 2 dtrain-fortran-mlp --steps 300 --save-dir ckpt --save-every 100
!
! Each step trains on a global batch of 32 samples split evenly over the ranks, so any rank
! count trains the same model (to rounding). A fresh run stops with an error unless the
! evaluation loss at least halves.
program fortran_mlp
  use, intrinsic :: iso_c_binding
  use, intrinsic :: ieee_arithmetic, only: ieee_is_nan
  use mpi_f08
  use dtrain
  use app_options
  use app_results
  use app_exit
  use synthetic
  implicit none
  integer, parameter :: global_batch = 32, eval_samples = 256
  integer(c_int), parameter :: sizes(3) = [nin, 32, nclasses]
  type(dt_context) :: ctx
  type(dt_comm) :: world
  type(dt_model) :: model
  type(options) :: opt
  character(len=:), allocatable :: source
  real(c_float), allocatable :: x(:, :), logits(:, :), params(:)
  integer(c_int), allocatable :: labels(:)
  integer(c_size_t) :: n
  integer :: ierr, rank, nranks, provided, per, step, start
  real :: loss, eval_before, eval_after, accuracy, mine(1), mean(1)
  logical :: ok, written
  character(len=:), allocatable :: why

  written = .true.  ! rank 0 writes the results file, if any
  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)  ! which rank reports, should dt_init fail
  call dt_init(ctx, ierr, comm=MPI_COMM_WORLD)
  call check('dt_init')
  call parse_options('dtrain-fortran-mlp', opt, ok, why)
  if (.not. same_on_every_rank(ok)) &
    call quit(ctx, rank, 'dtrain-fortran-mlp: the ranks were given different options', 2)
  if (.not. ok) call quit(ctx, rank, why, 2)
  if (opt%help) then
    if (rank == 0) call print_usage('dtrain-fortran-mlp')
    call dt_finalize(ctx, ierr)
    call MPI_Finalize(ierr)
    stop
  end if
  call dt_context_size(ctx, nranks, ierr)
  call check('dt_context_size')
  call dt_context_world(ctx, world, ierr)
  call check('dt_context_world')
  if (mod(global_batch, nranks) /= 0) call quit(ctx, rank, 'dtrain-fortran-mlp: the number of ranks must divide 32', 2)
  if (opt%out /= '') then
    if (.not. writable_by_rank_0(opt%out, rank)) call quit(ctx, rank, 'dtrain-fortran-mlp: cannot write '//opt%out, 1)
  end if
  per = global_batch / nranks

  call dt_model_create_mlp(world, sizes, global_batch, model, ierr, weight_decay=0.01, &
                           zero_stage=1)
  call check('dt_model_create_mlp')
  start = 0
  source = opt%resume
  if (source == 'auto') then
    call dt_checkpoint_find(world, opt%save_dir, source, ierr)
    call check('dt_checkpoint_find')
  end if
  if (source /= '') then
    call dt_model_load_checkpoint(model, source, ierr)
    call check('dt_model_load_checkpoint')
    call dt_model_steps(model, start, ierr)
    call check('dt_model_steps')
    if (rank == 0) print '(3a,i0)', 'resumed from ', source, ' at step ', start
  end if

  call evaluate(eval_before, accuracy)
  do step = start, opt%steps - 1
    call make_batch(int(step, c_int64_t) * global_batch + rank * per, per)
    call dt_mlp_forward_backward(model, x, labels, loss, ierr)
    call check('dt_mlp_forward_backward')
    call dt_model_step(model, opt%lr, ierr)
    call check('dt_model_step')
    if (opt%save_dir /= '' .and. opt%save_every > 0) then
      if (mod(step + 1, opt%save_every) == 0) call save()
    end if
    if (mod(step, 50) == 0 .or. step + 1 == opt%steps) then
      ! The step's loss over the global batch: each rank's is of its own share.
      mine(1) = loss
      call dt_all_reduce(world, mine, mean, 1, DT_F32, DT_AVG, ierr)
      call check('dt_all_reduce')
      if (rank == 0) print '(a,i5,a,f9.5)', 'step', step, '  loss', mean(1)
    end if
  end do
  if (opt%save_dir /= '' .and. opt%save_every == 0) call save()
  call evaluate(eval_after, accuracy)

  if (rank == 0) then
    print '(a,f9.5,a,f9.5,a,f6.3,a,i0,a,i0,a,i0,a)', 'fortran-mlp: eval loss ', eval_before, &
      ' -> ', eval_after, ' (accuracy ', accuracy, '), steps ', start, '..', opt%steps, ' on ', &
      nranks, ' ranks'
    if (opt%out /= '') then
      call dt_model_num_parameters(model, n, ierr)
      call check('dt_model_num_parameters')
      allocate(params(n))
      call dt_model_get_parameters(model, params, ierr)
      call check('dt_model_get_parameters')
      call write_results(opt%out, eval_after, params, written)
    end if
  end if
  if (.not. written) call quit(ctx, rank, 'dtrain-fortran-mlp: cannot write '//opt%out, 1)
  if (ieee_is_nan(eval_after)) call quit(ctx, rank, 'dtrain-fortran-mlp: the loss is not a number', 1)
  if (start == 0 .and. opt%steps > 0 .and. .not. eval_after < 0.5 * eval_before) &
    call quit(ctx, rank, 'dtrain-fortran-mlp: the loss did not halve', 1)
  call dt_finalize(ctx, ierr)
  call MPI_Finalize(ierr)

contains

  ! x(nin, n) and labels(n) of samples first .. first+n-1: one sample per column.
  subroutine make_batch(first, n)
    integer(c_int64_t), intent(in) :: first
    integer, intent(in) :: n
    real(c_float) :: y(nout)
    integer :: s
    if (allocated(x)) deallocate(x, labels)
    allocate(x(nin, n), labels(n))
    do s = 1, n
      call sample(first + s - 1, x(:, s), y)
      labels(s) = label_of(y)
    end do
  end subroutine

  ! Mean loss and accuracy on the held-out samples: each rank evaluates an equal share, in
  ! chunks of at most max_batch (global_batch) samples.
  subroutine evaluate(mean_loss, accuracy)
    real, intent(out) :: mean_loss, accuracy
    real :: mine(2), mean(2), chunk_loss
    integer :: share, first, k
    share = eval_samples / nranks
    mine = 0
    do first = 0, share - 1, global_batch
      k = min(global_batch, share - first)
      call make_batch(eval_first + rank * share + first, k)
      call dt_mlp_evaluate(model, x, labels, chunk_loss, ierr)
      call check('dt_mlp_evaluate')
      if (allocated(logits)) deallocate(logits)
      allocate(logits(nclasses, k))
      call dt_mlp_predict(model, x, logits, ierr)
      call check('dt_mlp_predict')
      mine(1) = mine(1) + chunk_loss * k / share
      mine(2) = mine(2) + count(maxloc(logits, dim=1) - 1 == labels) / real(share)
    end do
    call dt_all_reduce(world, mine, mean, 2, DT_F32, DT_AVG, ierr)
    call check('dt_all_reduce')
    mean_loss = mean(1)
    accuracy = mean(2)
  end subroutine

  subroutine save()
    call dt_model_save_checkpoint(model, opt%save_dir, ierr, keep=opt%keep)
    call check('dt_model_save_checkpoint')
  end subroutine

  subroutine check(what)
    character(len=*), intent(in) :: what
    if (ierr /= DT_SUCCESS) then
      call quit(ctx, rank, 'dtrain-fortran-mlp: '//what//' failed: '//dt_get_last_error(ctx), 1)
    end if
  end subroutine

end program fortran_mlp
