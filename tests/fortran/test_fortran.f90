! module dtrain from Fortran: mpi_f08 interop, collectives, the grid, bring-your-own-model
! against a single-rank reference, the built-in MLP, and error codes and messages.
program test_fortran
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use dtrain
  implicit none

  type(dt_context) :: ctx, null_ctx
  type(dt_comm) :: world, dp
  type(dt_grid) :: grid
  integer :: ierr, rank, nranks, failures, total, tp_rank, pp_rank, dp_rank, version, provided

  failures = 0
  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call dt_init(ctx, ierr, comm=MPI_COMM_WORLD)
  call expect(ierr, DT_SUCCESS, 'dt_init')
  call dt_context_rank(ctx, rank, ierr)
  call dt_context_size(ctx, nranks, ierr)
  call dt_context_world(ctx, world, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_context_world')
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
  call dt_grid_create(ctx, grid, ierr, tp=nranks + 1)
  call expect(ierr, DT_ERR_INVALID_CONFIG, 'impossible grid')

  call test_byom()
  call test_mlp()

  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call dt_finalize(ctx, ierr)
  call expect(ierr, DT_SUCCESS, 'dt_finalize')
  call dt_barrier(world, ierr)
  call expect(ierr, DT_ERR_INVALID_HANDLE, 'barrier after finalize')
  call MPI_Finalize(ierr)
  if (total > 0) then
    if (rank == 0) print '(a,i0,a)', 'fortran: ', total, ' checks failed'
    error stop 1
  end if
  if (rank == 0) print '(a)', 'fortran: all checks passed'

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      failures = failures + 1
      print '(a,i0,3a)', '[rank ', rank, '] check failed: ', what, ''
    end if
  end subroutine

  subroutine expect(got, want, what)
    integer, intent(in) :: got, want
    character(len=*), intent(in) :: what
    if (got /= want) then
      failures = failures + 1
      print '(a,i0,3a,i0,a,i0,2a)', '[rank ', rank, '] ', what, ': got ', got, ', wanted ', want, &
            ': ', dt_get_last_error(ctx)
    end if
  end subroutine

  subroutine test_collectives()
    real(c_float) :: v(3), s(3)
    integer(c_int) :: one(1), bc(1)
    integer(c_int), allocatable :: all(:)
    v = [real(rank), 1.0, 2.0]
    call dt_all_reduce(world, v, s, 3, DT_F32, DT_SUM, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_all_reduce')
    call check(abs(s(1) - nranks * (nranks - 1) / 2.0) < 1e-6 .and. s(3) == 2.0 * nranks, 'all_reduce')
    one(1) = rank
    allocate(all(nranks))
    call dt_all_gather(world, one, all, 1, DT_I32, ierr)
    call check(all(nranks) == nranks - 1, 'all_gather')
    bc(1) = merge(7, -1, rank == 0)
    call dt_broadcast(world, bc, 1, DT_I32, 0, ierr)
    call check(bc(1) == 7, 'broadcast from rank 0')
    call dt_all_reduce(world, v, s, 3, 99, DT_SUM, ierr)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'unknown dtype')
    call check(index(dt_get_last_error(ctx), 'unknown dtype 99') > 0, 'dtype message')
    call dt_barrier(world, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_barrier')
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
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'duplicate name')
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
    call check(maxval(abs(w - rw)) < 2e-6 .and. maxval(abs(b - rb)) < 2e-6, 'byom equals reference')
    call dt_byom_destroy(byom, ierr)
    call expect(ierr, DT_SUCCESS, 'dt_byom_destroy')
    call dt_byom_step(byom, lr, ierr)
    call expect(ierr, DT_ERR_INVALID_HANDLE, 'step after destroy')
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

  subroutine test_mlp()
    integer, parameter :: nin = 4, batch = 8
    integer(c_int) :: sizes(3) = [nin, 16, 3]
    type(dt_model) :: model
    real(c_float) :: x(nin, batch)
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
    labels(1) = 3
    call dt_mlp_forward_backward(model, x, labels, loss, ierr)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'label out of range')
    call dt_mlp_forward_backward(model, x, labels(1:2), loss, ierr)
    call expect(ierr, DT_ERR_INVALID_ARGUMENT, 'labels shorter than the batch')
    ! left alive on purpose: dt_finalize releases it
  end subroutine

end program test_fortran
