! module dtrain from Fortran: mpi_f08 and integer communicator interop, collectives, the
! grid and its groups, bring-your-own-model against a single-rank reference, the built-in
! MLP, and error codes and messages: null, destroyed and finalized handles, shapes the
! module checks itself. GPT and checkpoints: test_fortran_models.f90.
program test_fortran
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use dtrain
  use checks
  implicit none

  type(dt_context) :: ctx, null_ctx, other
  type(dt_comm) :: world, dp
  type(dt_grid) :: grid
  integer :: ierr, rank, nranks, tp_rank, pp_rank, dp_rank, version, provided, t, p, d, threads
  integer, allocatable :: members(:)

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call dt_init(ctx, ierr, comm=MPI_COMM_WORLD)
  test_ctx = ctx
  call expect(ierr, DT_SUCCESS, 'dt_init')
  call dt_context_rank(ctx, rank, ierr)
  my_rank = rank
  call dt_context_size(ctx, nranks, ierr)
  call dt_context_world(ctx, world, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_context_world')
  threads = 0
  call dt_context_cpu_threads(ctx, threads, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_context_cpu_threads')
  call check(threads >= 1, 'cpu threads')
  call dt_get_version(version)
  call check(version >= 0, 'version')

  ! A null handle is refused with a code and a message.
  call dt_context_rank(null_ctx, rank, ierr)
  call expect(ierr, DT_ERR_INVALID_HANDLE, 'null context')
  call check(index(dt_get_last_error(null_ctx), 'ctx is not a live dt_context_t (NULL)') > 0, &
             'message for a null context')
  call check(dt_get_error_string(DT_ERR_INVALID_HANDLE) == 'invalid handle', 'error string')
  call dt_context_rank(ctx, rank, ierr)

  call test_collectives()

  call dt_grid_create(ctx, grid, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_grid_create')
  call dt_grid_coords(grid, tp_rank, pp_rank, dp_rank, ierr)
  call check(tp_rank == 0 .and. pp_rank == 0 .and. dp_rank == rank, 'grid coordinates')
  call dt_grid_comm(grid, DT_GROUP_DP, dp, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_grid_comm')
  call dt_grid_shape(grid, t, p, d, ierr)
  call check(ierr == DT_SUCCESS .and. t == 1 .and. p == 1 .and. d == nranks, 'grid shape')
  call dt_comm_world_ranks(dp, members, ierr)
  call check(ierr == DT_SUCCESS .and. size(members) == nranks, 'dp group size')
  call check(all(members == [(t, t = 0, nranks - 1)]), 'dp group members in order')
  call dt_grid_create(ctx, grid, ierr, tp=nranks + 1)
  call expect(ierr, DT_ERR_INVALID_CONFIG, 'impossible grid')
  ! The order reaches C: an invalid one is refused, and at 4 ranks (tp 2 x dp 2) data
  ! parallelism fastest puts ranks 0 and 2, not 0 and 1, in a TP group.
  call dt_grid_create(ctx, grid, ierr, tp=1, order='tp-tp-pp')
  call expect_message(ierr, DT_ERR_INVALID_CONFIG, ctx, "invalid process grid order 'tp-tp-pp'", &
                      'grid order refused')
  if (nranks == 4) then
    call dt_grid_create(ctx, grid, ierr, tp=2, order='dp-tp-pp')
    call expect(ierr, DT_SUCCESS, 'dt_grid_create with an order')
    call dt_grid_coords(grid, tp_rank, pp_rank, dp_rank, ierr)
    call check(dp_rank == mod(rank, 2) .and. tp_rank == rank / 2 .and. pp_rank == 0, &
               'coordinates of an ordered grid')
    call dt_grid_destroy(grid, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_grid_destroy of the ordered grid')
  end if

  ! A second context over an integer communicator handle (mpi module, mpif.h programs).
  call dt_init(other, ierr, fcomm=MPI_COMM_WORLD%MPI_VAL)
  call expect(ierr, DT_SUCCESS, 'dt_init with fcomm')
  call dt_finalize(other, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_finalize of the second context')
  call dt_init(other, ierr, comm=MPI_COMM_WORLD, fcomm=MPI_COMM_WORLD%MPI_VAL)
  call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_init: give comm or fcomm, not both', &
                      'comm and fcomm')

  call test_byom()
  call test_byom_16bit()
  call test_byom_grid()
  call test_mlp()
  call test_handles_refused()

  if (.not. verdict('fortran')) error stop 1
  call MPI_Finalize(ierr)

contains

  subroutine test_collectives()
    type(dt_comm) :: dworld
    real(c_float) :: v(3), s(3)
    integer(c_int) :: one(1), bc(1), r
    integer(c_int), allocatable :: gathered(:)
    real(c_double), allocatable :: blocks(:)
    real(c_double) :: block(2)
    v = [real(rank), 1.0, 2.0]
    call dt_all_reduce(world, v, s, 3, DT_F32, DT_SUM, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_all_reduce')
    call check(abs(s(1) - nranks * (nranks - 1) / 2.0) < 1e-6 .and. s(3) == 2.0 * nranks, 'all_reduce')
    s = -1
    call dt_all_reduce(world, v, s, 3_c_int64_t, DT_F32, DT_SUM, ierr)  ! a 64-bit count
    call expect(ierr, DT_SUCCESS, 'dt_all_reduce with an integer(c_int64_t) count')
    call check(s(3) == 2.0 * nranks, 'all_reduce with an integer(c_int64_t) count')
    one(1) = rank
    allocate(gathered(nranks))
    gathered = -1
    call dt_all_gather(world, one, gathered, 1, DT_I32, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_all_gather')
    call check(all(gathered == [(r, r = 0, nranks - 1)]), 'all_gather')
    ! block r of every rank's [r*10 + rank + 1, ...] summed: rank r gets sum over ranks
    allocate(blocks(2 * nranks))
    do r = 0, nranks - 1
      blocks(2 * r + 1:2 * r + 2) = [real(10 * r + rank, c_double), 1.0_c_double]
    end do
    call dt_reduce_scatter(world, blocks, block, 2, DT_F64, DT_SUM, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_reduce_scatter')
    call check(block(1) == 10.0_c_double * rank * nranks + nranks * (nranks - 1) / 2 .and. &
               block(2) == nranks, 'reduce_scatter')
    bc(1) = merge(7, -1, rank == 0)
    call dt_broadcast(world, bc, 1, DT_I32, 0, ierr)
    call check(bc(1) == 7, 'broadcast from rank 0')
    ! a count that wrapped past 2^31: refused by every rank before C sees a huge size
    call dt_broadcast(world, bc, -5, DT_I32, 0, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, &
                        'dt_broadcast: count must not be negative, got -5', 'negative count')
    call dt_all_reduce(world, v, s, 3, 99, DT_SUM, ierr)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'unknown dtype')
    call check(index(dt_get_last_error(ctx), 'unknown dtype 99') > 0, 'dtype message')
    call dt_barrier(world, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_barrier')
    ! A device handle: host buffers still work on it; without a GPU every rank is refused.
    call dt_comm_device(world, dworld, ierr)
    if (ierr == DT_SUCCESS) then
      call dt_all_reduce(dworld, v, s, 3, DT_F32, DT_SUM, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_all_reduce of host buffers on a device handle')
      call check(s(3) == 2.0 * nranks, 'all_reduce on a device handle')
    else
      call expect(ierr, DT_ERR_UNAVAILABLE, 'dt_comm_device without a gpu')
      call check(index(dt_get_last_error(ctx), 'no usable GPU') > 0, 'dt_comm_device message')
    end if
  end subroutine

  ! y = W x + b on 12 samples; rank r owns an equal share. The DP step must equal the
  ! reference AdamW on the whole batch, computed here.
  subroutine test_byom()
    integer, parameter :: nin = 4, nout = 2, ns = 12, steps = 5
    real(c_float), target :: w(nout, nin), b(nout), gw(nout, nin), gb(nout)
    real(c_float) :: rw(nout, nin), rb(nout), rgw(nout, nin), rgb(nout)
    real(c_float) :: mw(nout, nin), vw(nout, nin), mb(nout), vb(nout)
    type(dt_byom) :: byom
    integer :: step, per, first
    real :: norm, rnorm, scale
    real, parameter :: lr = 0.05, clip = 0.3
    if (mod(ns, nranks) /= 0) return
    per = ns / nranks
    first = rank * per + 1
    call init(w, b)
    call init(rw, rb)
    mw = 0; vw = 0; mb = 0; vb = 0
    call dt_byom_create(dp, byom, ierr, clip_grad=clip)
    call expect(ierr, DT_SUCCESS, 'dt_byom_create')
    call dt_byom_register(byom, 'linear.weight', w, gw, ierr)
    call expect(ierr, DT_SUCCESS, 'register weight')
    call dt_byom_register(byom, 'linear.bias', b, gb, ierr, no_decay=.true.)
    call expect(ierr, DT_SUCCESS, 'register bias')
    call dt_byom_register(byom, 'linear.bias', b, gb, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, "parameter 'linear.bias' registered twice", &
                        'duplicate name')
    call dt_byom_register(byom, 'other', w, gb, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_byom_register: grad must have the shape of param', &
                        'grad of another shape')
    call register_assumed_size(byom, b, gb, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_byom_register: param is an assumed-size array', &
                        'an assumed-size array')
    do step = 1, steps
      call grad(w, b, first, per, gw, gb)
      call dt_byom_step(byom, lr, ierr, grad_norm=norm)
      call expect(ierr, DT_SUCCESS, 'dt_byom_step')
      call grad(rw, rb, 1, ns, rgw, rgb)
      rnorm = sqrt(sum(rgw**2) + sum(rgb**2))
      call check(abs(norm - rnorm) < 1e-5 * (1 + rnorm), 'gradient norm')
      scale = 1.0
      if (rnorm > clip) scale = real(clip / (real(rnorm, 8) + 1d-6))
      call adamw(rw, rgw * scale, mw, vw, 0.1, step)
      call adamw(rb, rgb * scale, mb, vb, 0.0, step)
    end do
    if (rank == 0) print '(a,es10.3)', 'fortran byom: max |dtrain - reference| = ', &
                         max(maxval(abs(w - rw)), maxval(abs(b - rb)))
    call check(all(abs(w - rw) < 2e-6) .and. all(abs(b - rb) < 2e-6), 'byom equals reference')
    call dt_byom_steps(byom, step, ierr)
    call check(ierr == DT_SUCCESS .and. step == steps, 'dt_byom_steps')
    call dt_byom_destroy(byom, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_destroy')
    call check(.not. c_associated(byom%ptr), 'byom null after destroy')
    call dt_byom_step(byom, lr, ierr)
    ! No context is known from a null handle: the message is the thread's (null context).
    call expect_message(ierr, DT_ERR_INVALID_HANDLE, null_ctx, 'dt_byom_step: byom is not a live dt_byom_t (NULL)', &
                        'step after destroy')
  end subroutine

  ! Passes on arrays whose size Fortran does not know here (a(*)).
  subroutine register_assumed_size(byom, a, g, ierr)
    type(dt_byom), intent(in) :: byom
    real(c_float), target :: a(*), g(*)
    integer, intent(out) :: ierr
    call dt_byom_register(byom, 'assumed', a, g, ierr)
  end subroutine

  subroutine init(w, b)
    real(c_float), intent(out) :: w(:, :), b(:)
    integer :: i, j
    do j = 1, size(w, 2)
      do i = 1, size(w, 1)
        w(i, j) = 0.1 * mod(i * 3 + j, 5) - 0.2
      end do
    end do
    b = 0.05
  end subroutine

  pure real function xs(s, i)
    integer, intent(in) :: s, i
    xs = sin(0.37 * (s * 4 + i))
  end function

  pure real function ys(s, o)
    integer, intent(in) :: s, o
    ys = cos(0.21 * (s * 2 + o))
  end function

  ! Gradient of the mean of 0.5*|W x + b - y|^2 over samples first .. first+count-1.
  subroutine grad(w, b, first, count, gw, gb)
    real(c_float), intent(in) :: w(:, :), b(:)
    integer, intent(in) :: first, count
    real(c_float), intent(out) :: gw(:, :), gb(:)
    integer :: s, o, i
    real :: e
    gw = 0; gb = 0
    do s = first, first + count - 1
      do o = 1, size(w, 1)
        e = b(o)
        do i = 1, size(w, 2)
          e = e + w(o, i) * xs(s, i)
        end do
        e = (e - ys(s, o)) / count
        gb(o) = gb(o) + e
        do i = 1, size(w, 2)
          gw(o, i) = gw(o, i) + e * xs(s, i)
        end do
      end do
    end do
  end subroutine

  ! AdamW with the defaults of DT_OPTIMIZER_CONFIG_INIT (beta 0.9/0.95, eps 1e-8), lr 0.05.
  elemental subroutine adamw(p, g, m, v, wd, step)
    real(c_float), intent(inout) :: p, m, v
    real(c_float), intent(in) :: g
    real, intent(in) :: wd
    integer, intent(in) :: step
    real :: c1, c2
    c1 = real(1d0 / (1d0 - 0.9d0**step))
    c2 = real(1d0 / (1d0 - real(0.95, 8)**step))
    m = 0.9 * m + (1 - 0.9) * g
    v = 0.95 * v + (1 - 0.95) * g * g
    p = p - 0.05 * (m * c1 / (sqrt(v * c2) + 1e-8) + wd * p)
  end subroutine

  ! Arrays of 16-bit words (bf16 here): dtrain keeps fp32 masters, and the words move with the
  ! steps; a dtype other than DT_BF16 and DT_F16 is refused.
  subroutine test_byom_16bit()
    type(dt_byom) :: b
    integer(c_int16_t), target :: w(6), g(6)
    integer(c_int16_t) :: w0(6)
    integer :: i, ierr
    do i = 1, 6  ! positive values below 2: their upper 16 bits fit integer(c_int16_t)
      w(i) = int(ishft(transfer(0.5 + 0.1 * i, 0_c_int32_t), -16), c_int16_t)
      g(i) = int(ishft(transfer(0.25 * i, 0_c_int32_t), -16), c_int16_t)
    end do
    w0 = w
    call dt_byom_create(world, b, ierr)
    call dt_byom_register(b, 'w16', w, g, ierr, dtype=DT_I32)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register of 16-bit words as DT_I32')
    call dt_byom_register(b, 'w16', w, g, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_register of bf16 words')
    do i = 1, 3
      call dt_byom_step(b, 0.05, ierr)
      call expect(ierr, DT_SUCCESS, 'dt_byom_step of bf16 words')
    end do
    call check(all(w /= w0), 'every bf16 word moved')
    call check(all(w > 0 .and. w < w0), 'positive gradients lowered every value')
    call dt_byom_destroy(b, ierr)
    call test_loss_scaling(w, g)
  end subroutine

  ! A byom on a grid whose TP group is the world: w is this rank's slice of W(2 tp, 3), split
  ! along dimension 1, b replicated. With every gradient 1 the norm is the whole model's,
  ! sqrt(6 tp + 3), on every rank. A split along a middle dimension is refused.
  subroutine test_byom_grid()
    type(dt_grid) :: split
    type(dt_byom) :: b
    real(c_float), target :: w(2, 3), gw(2, 3), bias(3), gb(3), cube(2, 2, 2), gcube(2, 2, 2)
    real :: norm
    integer :: ierr
    w = 0.5
    bias = 0.25
    gw = 1
    gb = 1
    call dt_grid_create(ctx, split, ierr, tp=nranks)
    call expect(ierr, DT_SUCCESS, 'dt_grid_create tp')
    call dt_byom_create_grid(split, b, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_create_grid')
    call dt_byom_register(b, 'w', w, gw, ierr, tp_split=1)
    call expect(ierr, DT_SUCCESS, 'dt_byom_register tp_split')
    call dt_byom_register(b, 'cube', cube, gcube, ierr, tp_split=2)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register tp_split in the middle')
    call dt_byom_register(b, 'b', bias, gb, ierr, no_decay=.true.)
    call dt_byom_step(b, 0.0, ierr, grad_norm=norm)
    call expect(ierr, DT_SUCCESS, 'dt_byom_step on a grid')
    call check(abs(norm - sqrt(6.0 * nranks + 3)) < 1e-5, 'the norm of the whole split model')
    call dt_byom_destroy(b, ierr)
    call dt_grid_destroy(split, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_grid_destroy')
  end subroutine

  ! Loss scaling: the scale set, one that halves on an overflowed (inf) gradient as the step
  ! is skipped, and an overflow at scale 1 refused.
  subroutine test_loss_scaling(w, g)
    integer(c_int16_t), target, intent(inout) :: w(6), g(6)
    integer(c_int16_t) :: before(6)
    type(dt_byom) :: b
    real(c_float) :: scale
    integer(c_long) :: skipped
    integer :: ierr
    call dt_byom_create(world, b, ierr)
    call dt_byom_register(b, 'w16', w, g, ierr)
    call dt_byom_scale_loss(b, ierr, initial_scale=0.5)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_scale_loss below 1')
    call dt_byom_scale_loss(b, ierr, initial_scale=2.0)
    call expect(ierr, DT_SUCCESS, 'dt_byom_scale_loss')
    call dt_byom_loss_scale(b, scale, skipped, ierr)
    call check(ierr == DT_SUCCESS .and. scale == 2.0 .and. skipped == 0, 'loss scale 2 set')
    g(2) = int(z'7F80', c_int16_t)  ! bf16 +inf
    before = w
    call dt_byom_step(b, 0.05, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_step skipped on overflow')
    call dt_byom_loss_scale(b, scale, skipped, ierr)
    call check(scale == 1.0 .and. skipped == 1 .and. all(w == before), 'skipped, the scale halved')
    call dt_byom_step(b, 0.05, ierr)
    call expect(ierr, DT_ERR_INVALID_CONFIG, 'dt_byom_step overflowing at scale 1')
    call dt_byom_loss_scale(b, scale, skipped, ierr)
    call check(scale == 1.0 .and. skipped == 1 .and. all(w == before), 'the refused step changed nothing')
    call dt_byom_scale_loss(b, ierr)
    call expect(ierr, DT_ERR_INVALID_STATE, 'dt_byom_scale_loss after a step')
    call dt_byom_destroy(b, ierr)
  end subroutine

  subroutine test_mlp()
    integer, parameter :: nin = 4, batch = 8
    integer(c_int) :: sizes(3) = [nin, 16, 3]
    type(dt_model) :: model, zero2
    real(c_float) :: x(nin, batch), logits(3, batch)
    integer(c_int) :: labels(batch)
    real :: loss, first_loss
    integer :: step, s, i
    call dt_model_create_mlp(world, sizes, batch, model, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_model_create_mlp')
    do s = 1, batch
      do i = 1, nin
        x(i, s) = sin(0.7 * ((rank * batch + s) * nin + i))
      end do
      labels(s) = merge(1, 0, sum(x(:, s)) > 0)
    end do
    do step = 1, 40
      call dt_mlp_forward_backward(model, x, labels, loss, ierr)
      if (step == 1) first_loss = loss
      call dt_model_step(model, 0.01, ierr)
    end do
    call dt_mlp_evaluate(model, x, labels, loss, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_mlp_evaluate')
    if (rank == 0) print '(a,f8.4,a,f8.4)', 'fortran mlp: loss ', first_loss, ' -> ', loss
    call check(loss < 0.7 * first_loss, 'mlp loss falls')
    call dt_mlp_predict(model, x, logits, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_mlp_predict')
    call check(count(maxloc(logits, dim=1) - 1 == labels) > batch / 2, 'predictions mostly right')
    labels(1) = 3
    call dt_mlp_forward_backward(model, x, labels, loss, ierr)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'label out of range')
    call dt_mlp_forward_backward(model, x, labels(1:2), loss, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, &
                        'dt_mlp_forward_backward: labels must have one entry per column of x', 'labels too short')
    call dt_mlp_evaluate(model, x(1:2, :), labels, loss, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_mlp_evaluate: x must have one row per input', &
                        'x with too few rows')
    call dt_mlp_predict(model, x, logits(1:2, :), ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'dt_mlp_predict: logits must be (classes, batch)', &
                        'logits of the wrong shape')
    ! The next call into C clears a message found on the Fortran side.
    call dt_model_step(model, -1.0, ierr)
    call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, 'lr must be', 'negative lr')
    ! left alive on purpose: dt_finalize releases it

    ! Under ZeRO 2 the pass is collective over dp: a shape only rank 0 gets wrong, which the
    ! module finds before calling C, fails every rank instead of leaving the others waiting.
    call dt_model_create_mlp(world, sizes, batch, zero2, ierr, zero_stage=2)
    call expect(ierr, DT_SUCCESS, 'dt_model_create_mlp zero 2')
    labels(1) = 0
    if (rank == 0) then
      call dt_mlp_forward_backward(zero2, x, labels(1:2), loss, ierr)
      call expect_message(ierr, DT_ERR_INVALID_ARGUMENT, ctx, &
                          'dt_mlp_forward_backward: labels must have one entry', 'zero 2: labels too short')
    else
      call dt_mlp_forward_backward(zero2, x, labels, loss, ierr)
      call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'zero 2: rank 0 refused')
    end if
    call dt_mlp_forward_backward(zero2, x, labels, loss, ierr)
    call expect(ierr, DT_SUCCESS, 'zero 2: the next pass runs')
    call dt_model_destroy(zero2, ierr)
  end subroutine

  ! Null, destroyed and finalized handles are refused with DT_ERR_INVALID_HANDLE and a message
  ! naming the procedure and the argument.
  subroutine test_handles_refused()
    type(dt_comm) :: null_comm
    type(dt_grid) :: null_grid, g
    type(dt_byom) :: null_byom, b
    type(dt_model) :: null_model, m
    real(c_float) :: x(4, 1), w(2), gw(2)
    integer(c_int) :: labels(1)
    integer :: n, tp, pp, dp
    integer, allocatable :: members(:)
    real :: loss, norm
    n = 777
    call dt_comm_size(null_comm, n, ierr)
    call expect_message(ierr, DT_ERR_INVALID_HANDLE, null_ctx, 'dt_comm_size: comm is not a live dt_comm_t (NULL)', &
                        'null comm')
    ! What a failed call leaves in its outputs: -1 for a rank or coordinate, 0 for a count or
    ! a norm, an empty array (the compiler once dropped these stores, leaving stack contents).
    call check(n == 0, 'dt_comm_size leaves 0')
    n = 777
    call dt_comm_rank(null_comm, n, ierr)
    call check(ierr == DT_ERR_INVALID_HANDLE .and. n == -1, 'dt_comm_rank leaves -1')
    tp = 777
    pp = 777
    dp = 777
    call dt_grid_coords(null_grid, tp, pp, dp, ierr)
    call check(ierr == DT_ERR_INVALID_HANDLE .and. all([tp, pp, dp] == -1), 'dt_grid_coords leaves -1')
    norm = 777
    call dt_byom_step(null_byom, 0.1, ierr, grad_norm=norm)
    call check(ierr == DT_ERR_INVALID_HANDLE .and. norm == 0, 'dt_byom_step leaves a norm of 0')
    norm = 777
    call dt_model_step(null_model, 0.1, ierr, grad_norm=norm)
    call check(ierr == DT_ERR_INVALID_HANDLE .and. norm == 0, 'dt_model_step leaves a norm of 0')
    call dt_comm_world_ranks(null_comm, members, ierr)
    call check(ierr == DT_ERR_INVALID_HANDLE .and. allocated(members), 'dt_comm_world_ranks leaves an array')
    if (allocated(members)) call check(size(members) == 0, 'dt_comm_world_ranks leaves it empty')
    call dt_grid_comm(null_grid, DT_GROUP_DP, null_comm, ierr)
    call expect_message(ierr, DT_ERR_INVALID_HANDLE, null_ctx, 'dt_grid_comm: grid is not a live dt_grid_t', 'null grid')
    call dt_byom_step(null_byom, 0.1, ierr)
    call expect_message(ierr, DT_ERR_INVALID_HANDLE, null_ctx, 'dt_byom_step: byom is not a live dt_byom_t', 'null byom')
    call dt_mlp_forward_backward(null_model, x, labels, loss, ierr)
    call expect_message(ierr, DT_ERR_INVALID_HANDLE, null_ctx, &
                        'dt_mlp_forward_backward: model is not a live dt_model_t (NULL)', 'null model')
    ! Destroyed: the handle variable is reset to null; a copy kept from before is stale.
    call dt_grid_create(ctx, g, ierr)
    call dt_byom_create(world, b, ierr)
    call dt_byom_register(b, 'w', w, gw, ierr)
    call dt_model_create_mlp(world, [4_c_int, 2_c_int], 1, m, ierr)
    call dt_finalize(ctx, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_finalize')
    call check(.not. c_associated(ctx%ptr), 'context null after dt_finalize')
    call dt_barrier(world, ierr)
    call expect_message(ierr, DT_ERR_INVALID_HANDLE, ctx, &
                        'dt_barrier: comm is not a live dt_comm_t (destroyed, finalized', 'barrier after finalize')
    call dt_grid_coords(g, tp_rank, pp_rank, dp_rank, ierr)
    call expect(ierr, DT_ERR_INVALID_HANDLE, 'grid after finalize')
    call dt_byom_save_checkpoint(b, 'unused', ierr)
    call expect_message(ierr, DT_ERR_INVALID_HANDLE, ctx, 'dt_byom_save_checkpoint: byom is not a live', &
                        'byom after finalize')
    call dt_model_step(m, 0.1, ierr)
    call expect_message(ierr, DT_ERR_INVALID_HANDLE, ctx, 'dt_model_step: model is not a live', 'model after finalize')
    call dt_context_size(ctx, n, ierr)
    call expect(ierr, DT_ERR_INVALID_HANDLE, 'context after finalize')
    call dt_finalize(ctx, ierr)
    call expect(ierr, DT_ERR_INVALID_HANDLE, 'second dt_finalize')
  end subroutine

end program test_fortran
