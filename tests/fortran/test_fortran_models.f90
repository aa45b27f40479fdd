! module dtrain's built-in GPT, tensor access and checkpoints from Fortran: the data-parallel
! (ZeRO 3), tensor- and pipeline-parallel GPTs and the tensor-parallel MLP equal one rank on
! the whole batch; tensors by index and name in Fortran order;
! registered arrays, the MLP and the GPT saved and loaded, a resumed run ending where the
! uninterrupted one does; error codes and messages for shapes, names and files; the device
! argument.
!   mpiexec -n N test_fortran_models SCRATCH_DIR
program test_fortran_models
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use dtrain
  use checks
  implicit none
  integer, parameter :: seq = 8, batch = 4, vocab = 24, d_model = 16
  type(dt_context) :: ctx
  type(dt_comm) :: world
  integer :: ierr, nranks
  character(len=512) :: arg
  character(len=:), allocatable :: scratch

  call start_test(ctx, world)
  call dt_context_size(ctx, nranks, ierr)
  call get_command_argument(1, arg)
  scratch = trim(arg)//'/np'//achar(iachar('0') + nranks)
  call empty_scratch()

  if (mod(batch, nranks) == 0) then
    call test_gpt_data_parallel()
    call test_tensors()
    call test_byom_checkpoint()
    call test_byom_grid_checkpoint()
    call test_model_checkpoints()
  end if
  call test_device_choice()
  if (mod(nranks, 2) == 0) call test_gpt_tensor_parallel()
  if (mod(nranks, 2) == 0) call test_mlp_tensor_parallel()
  if (mod(nranks, 2) == 0) call test_gpt_pipeline_parallel()
  ! dt_finalize releases what the tests left alive on purpose: checked before the verdict.
  call dt_finalize(ctx, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_finalize')
  if (.not. verdict('fortran_models')) error stop 1
  call MPI_Finalize(ierr)

contains

  ! A previous run's checkpoints would hide a save that failed: rank 0 removes them first.
  subroutine empty_scratch()
    integer :: rank, status
    call dt_comm_rank(world, rank, ierr)
    if (rank == 0) then
      call execute_command_line('rm -rf "'//scratch//'"', exitstat=status)
      call check(status == 0, 'scratch directory emptied')
    end if
    call dt_barrier(world, ierr)
  end subroutine empty_scratch

  ! This rank's loss on its columns of the batch, averaged over `comm` (the ranks that split
  ! the batch), equals the single rank's loss on the whole batch within 1e-5 relative.
  subroutine check_step_loss(comm, loss, ref_loss, what)
    type(dt_comm), intent(in) :: comm
    real, intent(in) :: loss, ref_loss
    character(len=*), intent(in) :: what
    real :: mine(1), mean(1)
    mine(1) = loss
    call dt_all_reduce(comm, mine, mean, 1, DT_F32, DT_AVG, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_all_reduce of the step''s loss')
    call check(abs(mean(1) - ref_loss) <= 1e-5 * ref_loss, what)
  end subroutine

  ! Sequence s of step t: tokens and their next-token targets.
  subroutine make_batch(t, first, tokens, targets)
    integer, intent(in) :: t, first
    integer(c_int32_t), intent(out) :: tokens(:, :), targets(:, :)
    integer :: i, s
    do s = 1, size(tokens, 2)
      do i = 1, seq
        tokens(i, s) = int(mod(3 * (first + s) + 5 * i + 7 * t, vocab), c_int32_t)
        targets(i, s) = int(mod(tokens(i, s) + 1, vocab), c_int32_t)
      end do
    end do
  end subroutine

  ! zero: the ZeRO stage (default 1); recompute: activation recomputation (default off).
  subroutine make_gpt(dp, model, seed, zero, recompute)
    type(dt_comm), intent(in) :: dp
    type(dt_model), intent(out) :: model
    integer(c_int64_t), intent(in) :: seed
    integer, intent(in), optional :: zero
    logical, intent(in), optional :: recompute
    integer :: stage
    logical :: again
    stage = 1
    if (present(zero)) stage = zero
    again = .false.
    if (present(recompute)) again = recompute
    call dt_model_create_gpt(dp, model, ierr, layers=1, heads=2, d_model=d_model, seq_len=seq, &
                             vocab=vocab, max_batch=batch, seed=seed, zero_stage=stage, &
                             recompute=again)
    call expect(ierr, DT_SUCCESS, 'dt_model_create_gpt')
  end subroutine

  ! The MLP split over tp 2 (ZeRO 1 over the rest) trains as one rank on the whole batch.
  subroutine test_mlp_tensor_parallel()
    type(dt_grid) :: grid, solo_grid
    type(dt_comm) :: solo, dp_comm
    type(dt_model) :: split, ref
    integer(c_int) :: sizes(4) = [4, 8, 6, 3]
    real(c_float) :: x(4, batch)
    integer(c_int) :: labels(batch)
    real(c_float), allocatable :: a(:), r(:)
    integer(c_size_t) :: n, nr
    real :: loss, ref_loss
    integer :: t, s, i, tp_rank, pp_rank, dp_rank, tp, pp, dp, per, lo
    call dt_grid_create(ctx, grid, ierr, tp=2)
    call dt_grid_shape(grid, tp, pp, dp, ierr)
    call dt_grid_coords(grid, tp_rank, pp_rank, dp_rank, ierr)
    call dt_grid_comm(grid, DT_GROUP_DP, dp_comm, ierr)
    call dt_grid_create(ctx, solo_grid, ierr, pp=nranks)
    call dt_grid_comm(solo_grid, DT_GROUP_DP, solo, ierr)
    per = batch / dp
    lo = dp_rank * per + 1
    call dt_model_create_mlp(grid, sizes, per, split, ierr, seed=9_c_int64_t, zero_stage=1)
    call expect(ierr, DT_SUCCESS, 'dt_model_create_mlp on a grid')
    call dt_model_create_mlp(solo, sizes, batch, ref, ierr, seed=9_c_int64_t, zero_stage=1)
    do t = 1, 4
      do s = 1, batch
        x(:, s) = [(sin(0.3 * (t * 7 + s * 4 + i)), i = 1, 4)]
        labels(s) = mod(s + t, 3)
      end do
      call dt_mlp_forward_backward(split, x(:, lo:lo + per - 1), labels(lo:lo + per - 1), loss, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_mlp_forward_backward, tensor parallel')
      call dt_model_step(split, 1e-2, ierr)
      call dt_mlp_forward_backward(ref, x, labels, ref_loss, ierr)
      call dt_model_step(ref, 1e-2, ierr)
      call check_step_loss(dp_comm, loss, ref_loss, 'tensor-parallel mlp loss equals one rank''s')
    end do
    call dt_model_num_parameters(split, n, ierr)
    call dt_model_num_parameters(ref, nr, ierr)
    call check(n == nr, 'a split MLP has the whole model''s parameter count')
    allocate(a(n), r(nr))
    call dt_model_get_parameters(split, a, ierr)
    call dt_model_get_parameters(ref, r, ierr)
    if (my_rank == 0) print '(a,es10.3)', 'fortran mlp tp=2: max |split - single rank| = ', &
                            maxval(abs(a - r))
    call check(all(abs(a - r) < 1e-4), 'tensor-parallel mlp equals one rank')
    call dt_model_destroy(split, ierr)
    call dt_model_destroy(ref, ierr)
    call dt_grid_destroy(solo_grid, ierr)
    call dt_grid_destroy(grid, ierr)
  end subroutine

  ! A GPT split over the TP groups of a tp = 2 grid (sequence parallelism on, the generic
  ! dt_model_create_gpt with a grid) trains as one rank does on the whole batch (each DP
  ! group gets its columns); dt_model_get_parameters gathers the whole tensors.
  subroutine test_gpt_tensor_parallel()
    type(dt_grid) :: grid, solo_grid
    type(dt_comm) :: solo, dp_comm
    type(dt_model) :: split, ref
    integer(c_int32_t) :: tokens(seq, batch), targets(seq, batch)
    real(c_float), allocatable :: a(:), r(:)
    integer(c_size_t) :: n, nr
    real :: loss, ref_loss
    integer :: t, tp_rank, pp_rank, dp_rank, tp, pp, dp, per, lo
    call dt_grid_create(ctx, grid, ierr, tp=2)
    call dt_grid_shape(grid, tp, pp, dp, ierr)
    call dt_grid_coords(grid, tp_rank, pp_rank, dp_rank, ierr)
    call dt_grid_comm(grid, DT_GROUP_DP, dp_comm, ierr)
    call dt_grid_create(ctx, solo_grid, ierr, pp=nranks)
    call dt_grid_comm(solo_grid, DT_GROUP_DP, solo, ierr)
    call dt_model_create_gpt(grid, split, ierr, layers=1, heads=2, d_model=d_model, seq_len=seq, &
                             vocab=vocab, max_batch=batch, seed=5_c_int64_t, sequence_parallel=.true.)
    call expect(ierr, DT_SUCCESS, 'dt_model_create_gpt on a grid')
    call make_gpt(solo, ref, 5_c_int64_t, zero=0)
    per = batch / dp
    lo = dp_rank * per + 1
    do t = 1, 4
      call make_batch(t, 0, tokens, targets)
      call dt_gpt_forward_backward(split, tokens(:, lo:lo + per - 1), targets(:, lo:lo + per - 1), &
                                   loss, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_gpt_forward_backward, tensor parallel')
      call dt_model_step(split, 1e-2, ierr)
      call dt_gpt_forward_backward(ref, tokens, targets, ref_loss, ierr)
      call dt_model_step(ref, 1e-2, ierr)
      call check_step_loss(dp_comm, loss, ref_loss, 'tensor-parallel gpt loss equals one rank''s')
    end do
    call dt_model_num_parameters(split, n, ierr)
    call dt_model_num_parameters(ref, nr, ierr)
    call check(n == nr, 'a split model has the whole model''s parameter count')
    allocate(a(n), r(nr))
    call dt_model_get_parameters(split, a, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_get_parameters, tensor parallel')
    call dt_model_get_parameters(ref, r, ierr)
    if (my_rank == 0) print '(a,es10.3)', 'fortran gpt tp=2: max |split - single rank| = ', &
                            maxval(abs(a - r))
    call check(all(abs(a - r) < 1e-4), 'tensor-parallel gpt equals one rank')
    call dt_model_destroy(split, ierr)
    call dt_model_destroy(ref, ierr)
    call dt_grid_destroy(solo_grid, ierr)
    call dt_grid_destroy(grid, ierr)
  end subroutine

  ! A GPT cut into the two stages of a pp = 2 grid (GPipe over two micro-batches) trains as
  ! one rank does on the whole batch: the losses of every step (the last stage's, on both
  ! stages) and the evaluation after them.
  subroutine test_gpt_pipeline_parallel()
    type(dt_grid) :: grid, solo_grid
    type(dt_comm) :: solo, dp_comm
    type(dt_model) :: staged, ref
    integer(c_int32_t) :: tokens(seq, batch), targets(seq, batch)
    real :: loss(1), mean(1), ref_loss, worst
    real(c_float) :: short(vocab - 1), full(vocab)
    integer :: t, tp_rank, pp_rank, dp_rank, tp, pp, dp, per, lo, n_logits
    call dt_grid_create(ctx, grid, ierr, pp=2)
    call dt_grid_shape(grid, tp, pp, dp, ierr)
    call dt_grid_coords(grid, tp_rank, pp_rank, dp_rank, ierr)
    call dt_grid_comm(grid, DT_GROUP_DP, dp_comm, ierr)
    call dt_grid_create(ctx, solo_grid, ierr, pp=nranks)
    call dt_grid_comm(solo_grid, DT_GROUP_DP, solo, ierr)
    per = batch / dp
    lo = dp_rank * per + 1
    call dt_model_create_gpt(grid, staged, ierr, layers=2, heads=2, d_model=d_model, seq_len=seq, &
                             vocab=vocab, max_batch=per / 2, seed=5_c_int64_t, zero_stage=0, &
                             schedule='gpipe', micro_batches=2, pipeline_layers='1,1')
    call expect(ierr, DT_SUCCESS, 'dt_model_create_gpt on a pipeline grid')
    call dt_model_create_gpt(solo, ref, ierr, layers=2, heads=2, d_model=d_model, seq_len=seq, &
                             vocab=vocab, max_batch=batch, seed=5_c_int64_t, zero_stage=0)
    worst = 0
    do t = 1, 4
      call make_batch(t, 0, tokens, targets)
      call dt_gpt_forward_backward(staged, tokens(:, lo:lo + per - 1), targets(:, lo:lo + per - 1), &
                                   loss(1), ierr)
      call expect(ierr, DT_SUCCESS, 'dt_gpt_forward_backward, pipeline parallel')
      call dt_model_step(staged, 1e-2, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_model_step, pipeline parallel')
      call dt_gpt_forward_backward(ref, tokens, targets, ref_loss, ierr)
      call dt_model_step(ref, 1e-2, ierr)
      call dt_all_reduce(dp_comm, loss, mean, 1, DT_F32, DT_AVG, ierr)
      call check(abs(mean(1) - ref_loss) <= 1e-5 * ref_loss, 'pipeline-parallel gpt loss equals one rank''s')
      worst = max(worst, abs(mean(1) - ref_loss) / ref_loss)
    end do
    call dt_gpt_evaluate(staged, tokens(:, 1:per), targets(:, 1:per), loss(1), ierr)
    call expect(ierr, DT_SUCCESS, 'dt_gpt_evaluate, pipeline parallel')
    call dt_gpt_evaluate(ref, tokens(:, 1:per), targets(:, 1:per), ref_loss, ierr)
    call check(abs(loss(1) - ref_loss) <= 1e-5 * ref_loss, 'pipeline-parallel gpt evaluates as one rank')
    worst = max(worst, abs(loss(1) - ref_loss) / ref_loss)
    if (my_rank == 0) print '(a,es10.3)', 'fortran gpt pp=2: max relative loss gap to one rank = ', worst
    call dt_model_destroy(staged, ierr)
    ! Untied, the last stage holds no wte: every stage still knows the vocabulary, and a
    ! logits array of another length is refused on every rank (it was written past there).
    call dt_model_create_gpt(grid, staged, ierr, layers=2, heads=2, d_model=d_model, seq_len=seq, &
                             vocab=vocab, max_batch=per / 2, tie_embeddings=.false., &
                             micro_batches=2, pipeline_layers='1,1')
    call expect(ierr, DT_SUCCESS, 'dt_model_create_gpt untied on a pipeline grid')
    call dt_model_num_logits(staged, n_logits, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_num_logits')
    call check(n_logits == vocab, 'dt_model_num_logits gives the vocabulary on every stage')
    call dt_gpt_decode(staged, tokens(1:2, 1), .true., short, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'logits must have vocab entries', &
                        'logits too short on every stage')
    ! Too short on the last stage only, where the logits are broadcast to: refused there,
    ! and the first stage fails with it.
    if (pp_rank == 1) then
      call dt_gpt_decode(staged, tokens(1:2, 1), .true., short, ierr)
    else
      call dt_gpt_decode(staged, tokens(1:2, 1), .true., full, ierr)
    end if
    call check(ierr == DT_ERR_INVALID_ARGUMENT, 'logits too short on the last stage fail every stage')
    call dt_model_destroy(staged, ierr)
    call dt_model_destroy(ref, ierr)
    call dt_grid_destroy(solo_grid, ierr)
    call dt_grid_destroy(grid, ierr)
  end subroutine

  ! device: 'cpu' gives a CPU model, an unknown name DT_ERR_INVALID_CONFIG, 'cuda' (trailing
  ! blanks trimmed) a GPU model where one is usable and DT_ERR_UNAVAILABLE elsewhere;
  ! precision: 'bf16' computes with bf16 values, an unknown one is refused; dt_sample_token.
  subroutine test_device_choice()
    type(dt_model) :: model
    character(len=:), allocatable :: name
    integer(c_int), target :: sizes(3) = [4, 8, 2]
    integer(c_int32_t) :: tokens(seq, batch), targets(seq, batch), token
    real(c_float) :: scale
    integer(c_long) :: skipped
    real(c_float), allocatable :: params(:)
    integer(c_size_t) :: n
    real :: loss
    call dt_model_create_gpt(world, model, ierr, layers=1, heads=2, d_model=d_model, &
                             seq_len=seq, vocab=vocab, device='cpu')
    call expect(ierr, DT_SUCCESS, 'dt_model_create_gpt on the cpu')
    call dt_model_device(model, name, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_device')
    call check(name == 'cpu (OpenBLAS)', 'dt_model_device names the cpu')
    call dt_model_destroy(model, ierr)
    ! dt_sample_token: softmax([0, ln 3]) = [1/4, 3/4], walked from the most likely token.
    call dt_sample_token([0.0_c_float, 1.0986123_c_float], 0.5d0, token, ierr)
    call check(ierr == DT_SUCCESS .and. token == 1, 'a draw below 3/4 gives token 1')
    call dt_sample_token([0.0_c_float, 1.0986123_c_float], 0.8d0, token, ierr)
    call check(ierr == DT_SUCCESS .and. token == 0, 'a draw above 3/4 gives token 0')
    call dt_sample_token([0.0_c_float, 1.0986123_c_float], 0.8d0, token, ierr, top_k=1)
    call check(ierr == DT_SUCCESS .and. token == 1, 'top_k 1 gives the most likely token')
    call dt_sample_token([0.0_c_float, 1.0986123_c_float], 1.0d0, token, ierr)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'uniform 1 is refused')
    ! bf16: after a step every parameter the model computes with is a bf16 value.
    call dt_model_create_gpt(world, model, ierr, layers=1, heads=2, d_model=d_model, &
                             seq_len=seq, vocab=vocab, max_batch=batch, precision='bf16')
    call expect(ierr, DT_SUCCESS, 'dt_model_create_gpt in bf16')
    call make_batch(1, my_rank, tokens, targets)
    call dt_gpt_forward_backward(model, tokens, targets, loss, ierr)
    call dt_model_step(model, 1e-2, ierr)
    call expect(ierr, DT_SUCCESS, 'a bf16 step')
    call dt_model_num_parameters(model, n, ierr)
    allocate(params(n))
    call dt_model_get_parameters(model, params, ierr)
    call check(all(iand(transfer(params, 0_c_int32_t, size(params)), 65535_c_int32_t) == 0), &
               'bf16 parameters are bf16 values')
    call dt_model_loss_scale(model, scale, skipped, ierr)
    call check(ierr == DT_SUCCESS .and. scale == 1.0 .and. skipped == 0, 'bf16 has no loss scaling')
    call dt_model_destroy(model, ierr)
    ! The MLP in bf16 too.
    block
      real(c_float) :: x(4, 3)
      integer(c_int) :: labels(3)
      real(c_float), allocatable :: w(:)
      integer :: i
      x = reshape([(0.1 * mod(i, 7) - 0.3, i = 1, 12)], [4, 3])
      labels = [0, 1, 1]
      call dt_model_create_mlp(world, sizes, 4, model, ierr, precision='bf16')
      call expect(ierr, DT_SUCCESS, 'dt_model_create_mlp in bf16')
      call dt_mlp_forward_backward(model, x, labels, loss, ierr)
      call expect(ierr, DT_SUCCESS, 'a bf16 mlp forward-backward')
      call check(loss > 0, 'a bf16 mlp has a loss')
      call dt_model_step(model, 1e-2, ierr)
      call expect(ierr, DT_SUCCESS, 'a bf16 mlp step')
      call dt_model_num_parameters(model, n, ierr)
      allocate(w(n))
      call dt_model_get_parameters(model, w, ierr)
      call check(all(iand(transfer(w, 0_c_int32_t, size(w)), 65535_c_int32_t) == 0), &
                 'bf16 mlp parameters are bf16 values')
      ! An MLP decodes nothing, whatever the size of the logits given.
      tokens = 1
      call dt_gpt_decode(model, tokens(1:2, 1), .true., w(1:5), ierr)
      call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_gpt_decode: model is not a GPT', &
                          'dt_gpt_decode on an mlp')
      call dt_model_destroy(model, ierr)
    end block
    call dt_model_create_gpt(world, model, ierr, layers=1, heads=2, d_model=d_model, &
                             seq_len=seq, vocab=vocab, precision='fp8')
    call expect_message(ierr, DT_ERR_INVALID_CONFIG, ctx, &
                        "config->precision must be fp32, bf16 or fp16, got 'fp8'", 'an unknown precision')
    call dt_model_create_mlp(world, sizes, 4, model, ierr, device='tpu')
    call expect_message(ierr, DT_ERR_INVALID_CONFIG, ctx, &
                        "config->device must be auto, cpu or cuda, got 'tpu'", 'an unknown device')
    call dt_model_create_mlp(world, sizes, 4, model, ierr, device='cuda  ')
    if (ierr == DT_SUCCESS) then
      call dt_model_device(model, name, ierr)
      call check(name(1:4) == 'cuda', 'dt_model_device names the gpu')
      call dt_model_destroy(model, ierr)
    else
      call expect_message(ierr, DT_ERR_UNAVAILABLE, ctx, 'config->device cuda: no CUDA device', &
                          'cuda without a gpu')
    end if
  end subroutine

  ! Each rank trains on its columns of the batch (under ZeRO 3); a model over a dp group of
  ! one (pp = world size) trains on all of them: same parameters, to rounding.
  subroutine test_gpt_data_parallel()
    type(dt_grid) :: solo_grid
    type(dt_comm) :: solo
    type(dt_model) :: dp_model, ref, recomputing
    integer(c_int32_t) :: tokens(seq, batch), targets(seq, batch)
    real(c_float), allocatable :: a(:), r(:), rc(:)
    integer(c_size_t) :: n
    real :: loss, ref_loss, first, eval
    integer :: t, per, lo
    per = batch / nranks
    lo = my_rank * per + 1
    call dt_grid_create(ctx, solo_grid, ierr, pp=nranks)
    call dt_grid_comm(solo_grid, DT_GROUP_DP, solo, ierr)
    call make_gpt(world, dp_model, 11_c_int64_t, zero=3)
    call make_gpt(solo, ref, 11_c_int64_t)
    call make_gpt(solo, recomputing, 11_c_int64_t, recompute=.true.)
    do t = 1, 8
      call make_batch(t, 0, tokens, targets)
      call dt_gpt_forward_backward(dp_model, tokens(:, lo:lo + per - 1), targets(:, lo:lo + per - 1), &
                                   loss, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_gpt_forward_backward')
      call dt_model_step(dp_model, 1e-2, ierr)
      call dt_gpt_forward_backward(ref, tokens, targets, ref_loss, ierr)
      call dt_model_step(ref, 1e-2, ierr)
      call check_step_loss(world, loss, ref_loss, 'data-parallel gpt loss equals one rank''s')
      call dt_gpt_forward_backward(recomputing, tokens, targets, loss, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_gpt_forward_backward with recompute')
      call check(loss == ref_loss, 'a recomputing gpt''s loss equals the plain one''s bit for bit')
      call dt_model_step(recomputing, 1e-2, ierr)
      if (t == 1) first = ref_loss
    end do
    call dt_gpt_evaluate(ref, tokens, targets, eval, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_gpt_evaluate')
    call check(eval < first, 'gpt loss falls')
    call dt_model_num_parameters(dp_model, n, ierr)
    allocate(a(n), r(n), rc(n))
    call dt_model_get_parameters(dp_model, a, ierr)
    call dt_model_get_parameters(ref, r, ierr)
    call dt_model_get_parameters(recomputing, rc, ierr)
    call check(all(rc == r), 'a recomputing gpt trains the same parameters bit for bit')
    call dt_model_destroy(recomputing, ierr)
    if (my_rank == 0) print '(a,f8.4,a,f8.4,a,es10.3)', 'fortran gpt: loss ', first, ' -> ', eval, &
                            '; max |dp - single rank| = ', maxval(abs(a - r))
    call check(all(abs(a - r) < 1e-4), 'data-parallel gpt equals one rank')
    call check_gpt_decode(ref, dp_model, tokens(:, 1), targets(:, 1))

    tokens(2, 1) = vocab
    call dt_gpt_evaluate(ref, tokens, targets, eval, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'tokens[1] = 24 is outside [0, vocab)', &
                        'token out of range')
    call dt_gpt_forward_backward(ref, tokens, targets(:, 1:2), loss, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, &
                        'dt_gpt_forward_backward: tokens and targets must have the same shape', 'shapes differ')
    call dt_mlp_evaluate(ref, real(tokens, c_float), targets(1, :), eval, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'model is not an MLP', 'gpt as mlp')
    call dt_model_destroy(ref, ierr)
    call dt_grid_destroy(solo_grid, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_grid_destroy after its model')
    call dt_model_destroy(dp_model, ierr)
  end subroutine

  ! Generation's logits, one token at a time, give the cross-entropy dt_gpt_evaluate averages
  ! over the sequence; the ZeRO-3 model (collective) gives the same logits to rounding.
  subroutine check_gpt_decode(ref, sharded, tokens, targets)
    type(dt_model), intent(in) :: ref, sharded
    integer(c_int32_t), intent(in) :: tokens(seq), targets(seq)
    real(c_float) :: logits(vocab), sharded_logits(vocab), short(vocab - 1)
    real :: eval
    double precision :: total
    integer :: t
    total = 0
    do t = 1, seq
      call dt_gpt_decode(ref, tokens(t:t), t == 1, logits, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_gpt_decode')
      call dt_gpt_decode(sharded, tokens(t:t), t == 1, sharded_logits, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_gpt_decode under ZeRO 3')
      call check(all(abs(logits - sharded_logits) < 1e-3), 'ZeRO-3 logits equal one rank''s')
      total = total + maxval(logits) + log(sum(exp(dble(logits - maxval(logits))))) &
              - logits(targets(t) + 1)
    end do
    call dt_gpt_evaluate(ref, reshape(tokens, [seq, 1]), reshape(targets, [seq, 1]), eval, ierr)
    call check(abs(total / seq - eval) < 1e-5 * eval, 'decode logits give the evaluated loss')
    call dt_gpt_decode(ref, tokens(1:1), .false., logits, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'longer than seq_len', 'text too long')
    call dt_gpt_decode(ref, tokens, .true., short, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'logits must have vocab entries', &
                        'logits too short')
  end subroutine

  ! Tensors by 1-based index and by name; shapes in Fortran order.
  subroutine test_tensors()
    type(dt_model) :: gpt
    character(len=:), allocatable :: name
    integer(c_int64_t), allocatable :: s(:)
    real(c_float) :: wte(d_model, vocab), back(d_model, vocab), small(3)
    integer :: n
    small = 0
    call make_gpt(world, gpt, 5_c_int64_t)
    call dt_model_num_tensors(gpt, n, ierr)
    call check(ierr == DT_SUCCESS .and. n > 2, 'dt_model_num_tensors')
    call dt_model_tensor_name(gpt, 1, name, ierr)
    call check(ierr == DT_SUCCESS .and. name == 'wte', 'first tensor is wte')
    call dt_model_tensor_name(gpt, n + 1, name, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'is not in [1, ', 'index past the end')
    call dt_model_tensor_name(gpt, 0, name, ierr)  ! counted from 1 here, and so in the message
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_model_tensor_name: index 0 is not in [1, ', 'index 0')
    call dt_model_tensor_shape(gpt, 'wte', s, ierr)
    call check(ierr == DT_SUCCESS .and. size(s) == 2, 'wte has two dimensions')
    call check(s(1) == d_model .and. s(2) == vocab, 'wte is (d_model, vocab) in Fortran order')
    call dt_model_get_tensor(gpt, 'wte', wte, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_get_tensor')
    wte(:, 1) = 0.5
    call dt_model_set_tensor(gpt, 'wte', wte, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_set_tensor')
    call dt_model_get_tensor(gpt, 'wte', back, ierr)
    call check(all(back == wte), 'wte written and read back')
    call dt_model_get_tensor(gpt, 'no.such.tensor', wte, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, "the model has no parameter named 'no.such.tensor'", &
                        'unknown name')
    call dt_model_set_tensor(gpt, 'wte', small, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, "count is 3 but tensor 'wte' has 384 elements", &
                        'wrong size')
    call dt_model_get_tensor(gpt, 'wte', small, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'capacity is smaller', 'too small to read')
    ! Through an assumed-size dummy (buf(*)), whose size Fortran does not know: refused, where
    ! the read wrote past the end of small and the write claimed SIZE_MAX elements.
    call get_through_assumed_size(gpt, small, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_model_get_tensor: values is an assumed-size array', &
                        'assumed-size read')
    call check(all(small == 0), 'the assumed-size read wrote nothing')
    call set_through_assumed_size(gpt, wte, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_model_set_tensor: values is an assumed-size array', &
                        'assumed-size write')
    ! A strided section of a larger array: its elements past the parameters keep their values
    ! (with intent(out) the copy back wrote undefined values there).
    block
      integer(c_size_t) :: count
      real(c_float), allocatable :: every_other(:)
      call dt_model_num_parameters(gpt, count, ierr)
      call check(ierr == DT_SUCCESS .and. count < 20000, 'the parameters fit in every_other')
      allocate(every_other(2 * 20000), source=-9.0_c_float)
      call dt_model_get_parameters(gpt, every_other(1::2), ierr)
      call expect(ierr, DT_SUCCESS, 'dt_model_get_parameters into a strided section')
      call check(all(every_other(2 * count + 1::2) == -9), 'a strided read left the section''s other elements alone')
    end block
    call dt_model_destroy(gpt, ierr)
    ! Under ZeRO 3 a read is collective: an assumed-size array on the last rank only fails
    ! every rank, where the others waited in the gather for it.
    call make_gpt(world, gpt, 5_c_int64_t, zero=3)
    if (my_rank == nranks - 1) then
      call get_through_assumed_size(gpt, back, ierr)
      call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'values is an assumed-size array', &
                          'assumed-size read under ZeRO 3')
    else
      call dt_model_get_tensor(gpt, 'wte', back, ierr)
      call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'a ZeRO-3 read with an assumed-size array on another rank')
    end if
    call dt_model_destroy(gpt, ierr)
  end subroutine

  subroutine get_through_assumed_size(model, buf, ierr)
    type(dt_model), intent(in) :: model
    real(c_float) :: buf(*)
    integer, intent(out) :: ierr
    call dt_model_get_tensor(model, 'wte', buf, ierr)
  end subroutine

  subroutine set_through_assumed_size(model, buf, ierr)
    type(dt_model), intent(in) :: model
    real(c_float) :: buf(d_model, *)
    integer, intent(out) :: ierr
    call dt_model_set_tensor(model, 'wte', buf, ierr)
  end subroutine

  ! y = W x + b, this rank's share of 8 samples per step.
  subroutine linear_grads(t, w, b, gw, gb)
    integer, intent(in) :: t
    real(c_float), intent(in) :: w(:, :), b(:)
    real(c_float), intent(out) :: gw(:, :), gb(:)
    integer :: s, i, per
    real(c_float) :: x(size(w, 2)), e(size(w, 1))
    per = 8 / nranks
    gw = 0
    gb = 0
    do s = my_rank * per + 1, (my_rank + 1) * per
      x = [(sin(0.3 * (t * 8 + s) + 0.7 * i), i = 1, size(x))]
      e = (matmul(w, x) + b - cos(0.2 * (t + s))) / per
      gw = gw + spread(e, 2, size(x)) * spread(x, 1, size(e))
      gb = gb + e
    end do
  end subroutine

  subroutine open_linear(byom, w, b, gw, gb, init)
    type(dt_byom), intent(out) :: byom
    real(c_float), target, intent(inout) :: w(:, :), b(:), gw(:, :), gb(:)
    real, intent(in) :: init
    w = init
    b = -init
    call dt_byom_create(world, byom, ierr, zero_stage=1)
    call dt_byom_register(byom, 'linear.weight', w, gw, ierr)
    call dt_byom_register(byom, 'linear.bias', b, gb, ierr, no_decay=.true.)
    call expect(ierr, DT_SUCCESS, 'register the linear model')
  end subroutine

  subroutine test_byom_checkpoint()
    real(c_float), target :: w(3, 2), b(3), gw(3, 2), gb(3), w2(3, 2), b2(3), gw2(3, 2), gb2(3)
    real(c_float), target :: e(4), ge(4)
    real(c_float) :: w_saved(3, 2), w_end(3, 2), b_end(3)
    type(dt_byom) :: a, r, bad
    character(len=:), allocatable :: dir, found
    integer :: t, steps
    dir = scratch//'/fortran_byom'
    call dt_byom_create(world, bad, ierr)
    call dt_byom_register(bad, 'strided', w(1:3:2, :), gw(1:3:2, :), ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'param and grad must be contiguous', 'strided section')
    call dt_byom_register(bad, 'empty', e(1:0), ge(1:0), ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'every extent of shape must be positive', &
                        'empty array')
    call dt_byom_destroy(bad, ierr)
    call open_linear(a, w, b, gw, gb, 0.1)
    do t = 1, 3
      call linear_grads(t, w, b, gw, gb)
      call dt_byom_step(a, 0.05, ierr)
    end do
    call dt_byom_save_checkpoint(a, dir, ierr, keep=2)
    call expect(ierr, DT_SUCCESS, 'dt_byom_save_checkpoint')
    w_saved = w
    do t = 4, 6
      call linear_grads(t, w, b, gw, gb)
      call dt_byom_step(a, 0.05, ierr)
    end do
    w_end = w
    b_end = b

    call open_linear(r, w2, b2, gw2, gb2, 0.7)
    call dt_byom_load_checkpoint(r, dir, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_load_checkpoint')
    call dt_byom_steps(r, steps, ierr)
    call check(steps == 3, 'steps restored')
    call check(all(w2 == w_saved), 'arrays restored in Fortran order')
    do t = 4, 6
      call linear_grads(t, w2, b2, gw2, gb2)
      call dt_byom_step(r, 0.05, ierr)
    end do
    call check(all(w2 == w_end) .and. all(b2 == b_end), 'resumed run ends where the uninterrupted one does')

    call dt_checkpoint_find(world, dir, found, ierr)
    call check(ierr == DT_SUCCESS .and. index(found, 'step_00000003.h5') > 0, 'dt_checkpoint_find')
    call dt_checkpoint_find(world, dir//'/none', found, ierr)
    call check(ierr == DT_SUCCESS .and. found == '', 'no checkpoint in a missing directory')
    call dt_byom_load_checkpoint(r, dir//'/missing.h5', ierr)
    call expect_message(ierr, DT_ERR_IO, ctx, 'no checkpoint file or directory', 'missing file')

    call dt_byom_create(world, bad, ierr)
    call dt_byom_register(bad, 'extra', e, ge, ierr)
    call dt_byom_load_checkpoint(bad, dir, ierr)
    call expect_message(ierr, DT_ERR_INVALID_CONFIG, ctx, "has no tensor 'extra'", 'unregistered in the file')
    call dt_byom_destroy(bad, ierr)
    call dt_byom_destroy(a, ierr)
    call dt_byom_destroy(r, ierr)
  end subroutine

  ! A byom on a grid whose TP group is the world, holding this rank's slice w(2, 3) of
  ! W(2 tp, 3) (tp_split=1), writes W whole: a byom of W on each rank alone loads it with
  ! rank r's slice in rows 2r+1 and 2r+2.
  subroutine test_byom_grid_checkpoint()
    type(dt_grid) :: split, solo
    type(dt_comm) :: one
    type(dt_byom) :: s, whole
    real(c_float), target :: w(2, 3), gw(2, 3), full(2 * nranks, 3), gfull(2 * nranks, 3)
    character(len=:), allocatable :: dir
    integer :: i, j, r
    dir = scratch//'/fortran_byom_grid'
    do j = 1, 3
      do i = 1, 2
        w(i, j) = real(10 * my_rank + i) + 0.25 * j
      end do
    end do
    call dt_grid_create(ctx, split, ierr, tp=nranks)
    call expect(ierr, DT_SUCCESS, 'dt_grid_create tp')
    call dt_byom_create_grid(split, s, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_create_grid')
    call dt_byom_register(s, 'w', w, gw, ierr, tp_split=1)
    call expect(ierr, DT_SUCCESS, 'dt_byom_register tp_split')
    call dt_byom_save_checkpoint(s, dir, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_save_checkpoint on a grid')
    call dt_grid_create(ctx, solo, ierr, pp=nranks)
    call dt_grid_comm(solo, DT_GROUP_DP, one, ierr)
    call dt_byom_create(one, whole, ierr)
    full = -1
    call dt_byom_register(whole, 'w', full, gfull, ierr)
    call dt_byom_load_checkpoint(whole, dir, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_load_checkpoint of the whole array')
    do r = 0, nranks - 1
      do j = 1, 3
        do i = 1, 2
          call check(full(2 * r + i, j) == real(10 * r + i) + 0.25 * j, 'a slice in its place')
        end do
      end do
    end do
    call dt_byom_destroy(whole, ierr)
    call dt_byom_destroy(s, ierr)
    call dt_grid_destroy(solo, ierr)
    call dt_grid_destroy(split, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_grid_destroy')
  end subroutine

  subroutine test_model_checkpoints()
    type(dt_model) :: mlp, mlp2, gpt, gpt2
    integer(c_int) :: sizes(3) = [4, 8, 3]
    real(c_float) :: x(4, batch), pa(100), pb(100)
    integer(c_int) :: labels(batch)
    integer(c_int32_t) :: tokens(seq, batch), targets(seq, batch)
    integer(c_size_t) :: n
    real :: loss, loss2
    integer :: steps, s, i
    character(len=:), allocatable :: mlp_dir, gpt_dir
    mlp_dir = scratch//'/fortran_mlp'
    gpt_dir = scratch//'/fortran_gpt'
    call dt_model_create_mlp(world, sizes, batch, mlp, ierr, seed=1_c_int64_t)
    call dt_model_create_mlp(world, sizes, batch, mlp2, ierr, seed=2_c_int64_t)
    do s = 1, batch
      x(:, s) = [(sin(0.5 * (s * 4 + i)), i = 1, 4)]
      labels(s) = mod(s, 3)
    end do
    call dt_mlp_forward_backward(mlp, x, labels, loss, ierr)
    call dt_model_step(mlp, 1e-2, ierr)
    call dt_model_save_checkpoint(mlp, mlp_dir, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_save_checkpoint (mlp)')
    call dt_model_load_checkpoint(mlp2, mlp_dir, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_load_checkpoint (mlp)')
    call dt_model_steps(mlp2, steps, ierr)
    call check(steps == 1, 'mlp steps restored')
    call dt_model_num_parameters(mlp, n, ierr)
    call dt_model_get_parameters(mlp, pa, ierr)
    call dt_model_get_parameters(mlp2, pb, ierr)
    call check(all(pa(1:n) == pb(1:n)), 'mlp parameters restored')

    call make_gpt(world, gpt, 3_c_int64_t)
    call make_gpt(world, gpt2, 4_c_int64_t)
    call make_batch(1, 0, tokens, targets)
    call dt_gpt_forward_backward(gpt, tokens, targets, loss, ierr)
    call dt_model_step(gpt, 1e-2, ierr)
    call dt_model_save_checkpoint(gpt, gpt_dir, ierr, keep=1)
    call expect(ierr, DT_SUCCESS, 'dt_model_save_checkpoint (gpt)')
    call dt_model_load_checkpoint(gpt2, gpt_dir, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_load_checkpoint (gpt)')
    call dt_gpt_evaluate(gpt, tokens, targets, loss, ierr)
    call dt_gpt_evaluate(gpt2, tokens, targets, loss2, ierr)
    call check(loss == loss2, 'gpt restored: same loss')
    call dt_model_load_checkpoint(gpt2, mlp_dir, ierr)
    call expect_message(ierr, DT_ERR_INVALID_CONFIG, ctx, 'written for', 'mlp checkpoint into a gpt')
    call dt_model_load_checkpoint(mlp2, gpt_dir, ierr)
    call expect_message(ierr, DT_ERR_INVALID_CONFIG, ctx, "has no tensor 'layers.0.weight'", &
                        'gpt checkpoint into an mlp')
    ! The weights alone (dt_model_load_weights) from the checkpoint file into a third GPT:
    ! the same loss, its own step count kept; a GPT checkpoint into an MLP is refused.
    block
      type(dt_model) :: gpt3
      character(len=:), allocatable :: file
      call make_gpt(world, gpt3, 5_c_int64_t)
      call dt_checkpoint_find(world, gpt_dir, file, ierr)
      call dt_model_load_weights(gpt3, file, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_model_load_weights (gpt)')
      call dt_gpt_evaluate(gpt3, tokens, targets, loss2, ierr)
      call check(loss == loss2, 'gpt weights loaded: same loss')
      call dt_model_steps(gpt3, steps, ierr)
      call check(steps == 0, 'dt_model_load_weights keeps the step count')
      call dt_model_load_weights(mlp2, file, ierr)
      call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'the model is an MLP', 'weights into an mlp')
    end block
    call dt_model_save_checkpoint(gpt2, '', ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dir must not be empty', 'empty dir')
    call dt_model_save_checkpoint(gpt2, gpt_dir, ierr, keep=-1)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'keep must be >= 0', 'negative keep')
    ! left alive on purpose: dt_finalize releases them
  end subroutine

end program test_fortran_models
