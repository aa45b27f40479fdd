!> @file
!> Bring your own model: arrays the program owns, averaged, clipped and updated by dtrain.
!> @brief Part of module dtrain: registered parameter arrays and their optimiser step.
module dtrain_byom
  use, intrinsic :: iso_c_binding
  use dtrain_types
  use dtrain_c_binding
  implicit none
  private

  public :: dt_byom_create, dt_byom_create_grid, dt_byom_destroy, dt_byom_register, dt_byom_step, &
            dt_byom_steps, dt_byom_scale_loss, dt_byom_loss_scale

  ! dt_byom_register's flags of a slice split over the TP group (DT_PARAM_TP_ROWS and
  ! DT_PARAM_TP_COLS of dtrain.h)
  integer(c_int), parameter :: TP_ROWS = 2, TP_COLS = 4

  !> dt_byom_register(byom, name, param, grad, ierr, ...) for arrays of real(c_float), or of
  !> integer(c_int16_t) holding 16-bit words (see each form).
  interface dt_byom_register
    module procedure register_f32, register_16bit
  end interface

contains

  !> An optimiser for arrays the program owns (AdamW, data parallel over dp). Not collective.
  !> @param[in] dp the data-parallel group (the world, or dt_grid_comm(..., DT_GROUP_DP)).
  !> @param[out] byom the new handle (null on failure).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_HANDLE; DT_ERR_INVALID_CONFIG (a setting out
  !>             of range); DT_ERR_NOT_IMPLEMENTED (zero_stage 3).
  !> @param[in] weight_decay optional decoupled weight decay (default 0.1).
  !> @param[in] clip_grad optional global-norm clipping threshold, 0 disables (default 1).
  !> @param[in] zero_stage optional 0 (default); 1: ZeRO-1, moments sharded over dp; 2: runs
  !>            as 1 (the program's arrays hold whole gradients); 3: refused (the program
  !>            owns the parameters).
  !> @param[in] beta1 optional first-moment decay (default 0.9).
  !> @param[in] beta2 optional second-moment decay (default 0.95).
  !> @param[in] eps optional AdamW epsilon (default 1e-8).
  !> @param[in] bucket_mb optional gradient bucket size in MiB, real(c_double) (default 25).
  subroutine dt_byom_create(dp, byom, ierr, weight_decay, clip_grad, zero_stage, beta1, beta2, &
                            eps, bucket_mb)
    type(dt_comm), intent(in) :: dp
    type(dt_byom), intent(out) :: byom
    integer, intent(out) :: ierr
    real, intent(in), optional :: weight_decay, clip_grad, beta1, beta2, eps
    integer, intent(in), optional :: zero_stage
    real(c_double), intent(in), optional :: bucket_mb
    ierr = ret(c_byom_create(dp, optimizer_config(weight_decay, clip_grad, zero_stage, beta1, &
                                                  beta2, eps, bucket_mb), byom))
  end subroutine

  !> An optimiser for a model the program splits over a grid itself (tensor and pipeline
  !> parallelism in its own code; dt_byom_create_grid, docs/c-api.md): each stage registers
  !> its arrays, each TP rank its slice of a split array (dt_byom_register's tp_split). The
  !> steps average over dp and clip by the whole model's norm; they and the checkpoint calls
  !> are collective over the grid's world. Not collective.
  !> @param[in] grid a live grid.
  !> @param[out] byom the new handle (null on failure).
  !> @param[out] ierr as dt_byom_create.
  !> @param[in] weight_decay optional, as dt_byom_create.
  !> @param[in] clip_grad optional, as dt_byom_create.
  !> @param[in] zero_stage optional, as dt_byom_create.
  !> @param[in] beta1 optional, as dt_byom_create.
  !> @param[in] beta2 optional, as dt_byom_create.
  !> @param[in] eps optional, as dt_byom_create.
  !> @param[in] bucket_mb optional, as dt_byom_create.
  subroutine dt_byom_create_grid(grid, byom, ierr, weight_decay, clip_grad, zero_stage, beta1, &
                                 beta2, eps, bucket_mb)
    type(dt_grid), intent(in) :: grid
    type(dt_byom), intent(out) :: byom
    integer, intent(out) :: ierr
    real, intent(in), optional :: weight_decay, clip_grad, beta1, beta2, eps
    integer, intent(in), optional :: zero_stage
    real(c_double), intent(in), optional :: bucket_mb
    ierr = ret(c_byom_create_grid(grid, optimizer_config(weight_decay, clip_grad, zero_stage, &
                                                         beta1, beta2, eps, bucket_mb), byom))
  end subroutine

  !> Releases a byom handle (never the program's arrays).
  !> @param[inout] byom the handle; null afterwards on success.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_byom_destroy(byom, ierr)
    type(dt_byom), intent(inout) :: byom
    integer, intent(out) :: ierr
    ierr = ret(c_byom_destroy(byom))
    if (ierr == DT_SUCCESS) byom%ptr = c_null_ptr
  end subroutine

  !> Registers a parameter array and its gradient array, before the first step or checkpoint.
  !> Both must be contiguous and stay allocated and in place until the handle is destroyed
  !> (dtrain keeps their addresses: pass the arrays themselves, or dummies that refer to
  !> them, never expressions or copies); every rank registers the same arrays in the same
  !> order. The C (and checkpoint) shape is the Fortran shape reversed: w(nout, nin) is
  !> stored as a row-major [nin, nout] tensor.
  !> @param[in] byom a live byom.
  !> @param[in] name unique name; the checkpoint dataset is /model/name.
  !> @param[inout] param real(c_float) array of any rank, updated in place by each step.
  !> @param[inout] grad real(c_float) array of the same shape, read by each step (a variable
  !>            the program keeps: an expression does not compile).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (a scalar, shapes differ, a strided
  !>             section, a name used twice); DT_ERR_INVALID_STATE (after the first step or
  !>             checkpoint).
  !> @param[in] no_decay optional; .true. excludes the array from weight decay (biases).
  !> @param[in] tp_split optional, for a byom made on a grid: the array is this TP rank's
  !>            slice of one split evenly along this dimension, 1 or rank(param) (Fortran's
  !>            numbering; w(nout/tp, nin) of a column-parallel layer is split along 1).
  subroutine register_f32(byom, name, param, grad, ierr, no_decay, tp_split)
    type(dt_byom), intent(in) :: byom
    character(len=*), intent(in) :: name
    ! Not declared contiguous: that would let the compiler pass a temporary copy whose
    ! address dies with the call. Contiguity is checked instead.
    real(c_float), dimension(..), target, intent(inout) :: param
    ! inout: a variable the program keeps (an expression's temporary dies with the call)
    real(c_float), dimension(..), target, intent(inout) :: grad
    integer, intent(out) :: ierr
    logical, intent(in), optional :: no_decay
    integer, intent(in), optional :: tp_split
    logical :: usable
    type(c_ptr) :: p, g
    ! c_loc is defined only for a contiguous array of nonzero size: the checks come first
    usable = is_contiguous(param) .and. is_contiguous(grad) .and. size(param) > 0 .and. &
             size(grad) > 0
    p = c_null_ptr
    g = c_null_ptr
    if (usable) then
      p = c_loc(param)
      g = c_loc(grad)
    end if
    call register_arrays(byom, name, rank(param), shape(param, kind=c_int64_t), &
                         shape(grad, kind=c_int64_t), rank(grad), &
                         is_contiguous(param) .and. is_contiguous(grad), DT_F32, p, g, ierr, &
                         no_decay, tp_split)
  end subroutine

  !> As the real(c_float) form, for arrays of 16-bit words: bf16 (default) or fp16. dtrain
  !> keeps an fp32 master of each value, started from the array at the first step or
  !> checkpoint call, updated from the widened gradients and written back rounded; where the
  !> program changes any word between steps, the array's masters become its values
  !> (dt_byom_register, docs/c-api.md).
  !> @param[in] byom a live byom.
  !> @param[in] name unique name; the checkpoint dataset is /model/name (fp32 masters).
  !> @param[inout] param integer(c_int16_t) array of any rank, updated in place by each step.
  !> @param[inout] grad integer(c_int16_t) array of the same shape and format, read by each
  !>            step (a variable, as the real(c_float) form).
  !> @param[out] ierr as the real(c_float) form; DT_ERR_INVALID_ARGUMENT also for a dtype
  !>             other than DT_BF16 and DT_F16.
  !> @param[in] no_decay optional; .true. excludes the array from weight decay (biases).
  !> @param[in] dtype optional DT_BF16 (default) or DT_F16: the words' format.
  !> @param[in] tp_split optional, as the real(c_float) form.
  subroutine register_16bit(byom, name, param, grad, ierr, no_decay, dtype, tp_split)
    type(dt_byom), intent(in) :: byom
    character(len=*), intent(in) :: name
    integer(c_int16_t), dimension(..), target, intent(inout) :: param
    integer(c_int16_t), dimension(..), target, intent(inout) :: grad
    integer, intent(out) :: ierr
    logical, intent(in), optional :: no_decay
    integer, intent(in), optional :: dtype, tp_split
    integer :: format
    logical :: usable
    type(c_ptr) :: p, g
    usable = is_contiguous(param) .and. is_contiguous(grad) .and. size(param) > 0 .and. &
             size(grad) > 0
    p = c_null_ptr
    g = c_null_ptr
    if (usable) then
      p = c_loc(param)
      g = c_loc(grad)
    end if
    format = DT_BF16
    if (present(dtype)) format = dtype
    if (format /= DT_BF16 .and. format /= DT_F16) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register', &
                     'dtype must be DT_BF16 or DT_F16 for integer(c_int16_t) arrays')
      return
    end if
    call register_arrays(byom, name, rank(param), shape(param, kind=c_int64_t), &
                         shape(grad, kind=c_int64_t), rank(grad), &
                         is_contiguous(param) .and. is_contiguous(grad), format, p, g, ierr, &
                         no_decay, tp_split)
  end subroutine

  ! The checks and the C call of both forms: nd, pshape, gshape are the arrays' ranks and
  ! Fortran shapes.
  subroutine register_arrays(byom, name, nd, pshape, gshape, gd, contiguous, dtype, param, grad, &
                             ierr, no_decay, tp_split)
    type(dt_byom), intent(in) :: byom
    character(len=*), intent(in) :: name
    integer, intent(in) :: nd, gd, dtype
    integer(c_int64_t), intent(in) :: pshape(:), gshape(:)
    logical, intent(in) :: contiguous
    type(c_ptr), intent(in) :: param, grad
    integer, intent(out) :: ierr
    logical, intent(in), optional :: no_decay
    integer, intent(in), optional :: tp_split
    integer(c_int64_t) :: c_shape(max(nd, 1))
    integer(c_int) :: flags
    integer :: d
    if (nd == 0) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register', 'param must be an array')
      return
    end if
    if (gd /= nd) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register', &
                     'grad must have the shape of param')
      return
    end if
    if (any(gshape /= pshape)) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register', &
                     'grad must have the shape of param')
      return
    end if
    if (.not. contiguous) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register', &
                     'param and grad must be contiguous (whole arrays, not strided sections)')
      return
    end if
    if (pshape(nd) < 0) then  ! the extent Fortran gives an assumed-size array's last dimension
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register', 'param is an assumed-size array '// &
                     '(a dummy declared a(*)), whose size Fortran cannot tell: pass a section of known size, '// &
                     'e.g. a(1:n), or the array itself')
      return
    end if
    if (any(pshape <= 0)) then  ! as C refuses it, before a null address reaches C
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register', &
                     'every extent of shape must be positive')
      return
    end if
    do d = 1, nd
      c_shape(d) = pshape(nd - d + 1)
    end do
    flags = 0
    if (present(no_decay)) then
      if (no_decay) flags = 1
    end if
    if (present(tp_split)) then  ! the C shape is reversed: Fortran's first dimension is C's last
      if (tp_split == 1) then
        flags = ior(flags, TP_COLS)
      else if (tp_split == nd) then
        flags = ior(flags, TP_ROWS)
      else
        call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_byom_register', &
                       'tp_split must be 1 or the rank of param')
        return
      end if
    end if
    ierr = ret(c_byom_register(byom, c_string(name), int(nd, c_int), c_shape, int(dtype, c_int), &
                               param, grad, flags))
  end subroutine

  !> One optimiser step: gradient average over dp, global-norm clipping, AdamW. Collective
  !> over every rank of the byom (on a grid, its world). The gradient arrays are read, never written: zero them yourself.
  !> @param[in] byom a live byom.
  !> @param[in] lr learning rate, >= 0.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_STATE (nothing registered);
  !>             DT_ERR_INVALID_ARGUMENT (lr).
  !> @param[out] grad_norm optional global gradient norm before clipping.
  subroutine dt_byom_step(byom, lr, ierr, grad_norm)
    type(dt_byom), intent(in) :: byom
    real, intent(in) :: lr
    integer, intent(out) :: ierr
    real, intent(out), optional :: grad_norm
    real(c_float) :: norm
    norm = 0
    ierr = ret(c_byom_step(byom, real(lr, c_float), norm))
    if (present(grad_norm)) grad_norm = norm
  end subroutine

  !> Optimiser steps taken (restored by dt_byom_load_checkpoint).
  !> @param[in] byom a live byom.
  !> @param[out] steps the count.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_byom_steps(byom, steps, ierr)
    type(dt_byom), intent(in) :: byom
    integer, intent(out) :: steps, ierr
    integer(c_long) :: n
    n = 0
    ierr = ret(c_byom_steps(byom, n))
    steps = int(n)
  end subroutine

  !> Dynamic loss scaling, for gradients computed in fp16 (dt_byom_scale_loss, docs/c-api.md):
  !> multiply the loss by dt_byom_loss_scale's scale before each backward; each step divides
  !> the gradients by it, skips a step whose gradients overflowed (the scale halves) and
  !> doubles the scale after 2000 clean steps. Before the first step or checkpoint call.
  !> @param[in] byom a live byom.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (initial_scale);
  !>             DT_ERR_INVALID_STATE (after the first step or checkpoint call).
  !> @param[in] initial_scale optional first scale, in [1, 16777216]; absent or 0: 65536.
  subroutine dt_byom_scale_loss(byom, ierr, initial_scale)
    type(dt_byom), intent(in) :: byom
    integer, intent(out) :: ierr
    real, intent(in), optional :: initial_scale
    real(c_float) :: first
    first = 0
    if (present(initial_scale)) first = real(initial_scale, c_float)
    ierr = ret(c_byom_scale_loss(byom, first))
  end subroutine

  !> A byom's loss scale (1 without dt_byom_scale_loss) and the steps it skipped on overflow.
  !> @param[in] byom a live byom.
  !> @param[out] scale real(c_float): what the next loss is multiplied by.
  !> @param[out] skipped integer(c_long): steps skipped so far.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_byom_loss_scale(byom, scale, skipped, ierr)
    type(dt_byom), intent(in) :: byom
    real(c_float), intent(out) :: scale
    integer(c_long), intent(out) :: skipped
    integer, intent(out) :: ierr
    scale = 1
    skipped = 0
    ierr = ret(c_byom_loss_scale(byom, scale, skipped))
  end subroutine

end module dtrain_byom
