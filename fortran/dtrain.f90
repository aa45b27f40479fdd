!> module dtrain: the C ABI (dtrain.h) for Fortran 2008 programs. See docs/fortran.md.
!>
!> Conventions:
!>  * every procedure is a subroutine whose last non-optional argument is ierr (DT_SUCCESS
!>    = 0, otherwise a DT_ERR_* code; dt_get_last_error(ctx) gives the message);
!>  * handles are typed (type(dt_context), type(dt_comm), ...), initially null;
!>  * communicators come from mpi_f08 (type(MPI_Comm));
!>  * arrays are passed in Fortran order; a registered tensor of Fortran shape (n1, n2, ...)
!>    is the row-major C tensor of shape (..., n2, n1) - this module reverses the dimensions;
!>  * ranks and roots are 0-based as in MPI; array indices are the usual 1-based ones.
module dtrain
  use, intrinsic :: iso_c_binding
  use mpi_f08, only: MPI_Comm
  implicit none
  private

  ! ---- handles ----------------------------------------------------------------------------
  type, bind(C), public :: dt_context
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(C), public :: dt_comm
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(C), public :: dt_grid
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(C), public :: dt_byom
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(C), public :: dt_model
    type(c_ptr) :: ptr = c_null_ptr
  end type

  ! ---- constants (values of dtrain.h) -----------------------------------------------------
  integer(c_int), parameter, public :: DT_SUCCESS = 0, DT_ERR_INVALID_ARGUMENT = 1, &
    DT_ERR_INVALID_CONFIG = 2, DT_ERR_OUT_OF_MEMORY = 3, DT_ERR_IO = 4, DT_ERR_COMM = 5, &
    DT_ERR_TIMEOUT = 6, DT_ERR_NOT_IMPLEMENTED = 7, DT_ERR_UNAVAILABLE = 8, &
    DT_ERR_CORRUPT_DATA = 9, DT_ERR_INTERNAL = 10, DT_ERR_INVALID_HANDLE = 1000, &
    DT_ERR_INVALID_STATE = 1001
  integer(c_int), parameter, public :: DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2, DT_F64 = 3, &
    DT_I32 = 4, DT_I64 = 5, DT_U8 = 6
  integer(c_int), parameter, public :: DT_SUM = 0, DT_AVG = 1, DT_MAX = 2, DT_MIN = 3
  integer(c_int), parameter, public :: DT_GROUP_WORLD = 0, DT_GROUP_TP = 1, DT_GROUP_PP = 2, &
    DT_GROUP_DP = 3

  ! ---- mirrors of the C config structs (struct_size set from c_sizeof) ---------------------
  type, bind(C) :: grid_config_c
    integer(c_size_t) :: struct_size
    integer(c_int) :: tp, pp, dp
    type(c_ptr) :: order
  end type
  type, bind(C) :: optimizer_config_c
    integer(c_size_t) :: struct_size
    real(c_float) :: beta1, beta2, eps, weight_decay, clip_grad
    integer(c_int) :: zero_stage
    real(c_double) :: bucket_mb
  end type
  type, bind(C) :: mlp_config_c
    integer(c_size_t) :: struct_size
    integer(c_int) :: num_sizes
    type(c_ptr) :: sizes
    integer(c_int) :: max_batch
    integer(c_int64_t) :: seed
  end type

  public :: dt_get_version, dt_get_error_string, dt_get_last_error
  public :: dt_init, dt_finalize, dt_context_rank, dt_context_size, dt_context_world
  public :: dt_comm_rank, dt_comm_size, dt_all_reduce, dt_all_gather, dt_reduce_scatter, &
            dt_broadcast, dt_barrier
  public :: dt_grid_create, dt_grid_destroy, dt_grid_comm, dt_grid_coords
  public :: dt_byom_create, dt_byom_destroy, dt_byom_register, dt_byom_step
  public :: dt_model_create_mlp, dt_model_destroy, dt_mlp_forward_backward, dt_mlp_evaluate, &
            dt_model_step, dt_model_num_parameters, dt_model_get_parameters

  interface
    integer(c_int) function c_get_version() bind(C, name="dt_get_version")
      import :: c_int
    end function
    type(c_ptr) function c_get_error_string(code) bind(C, name="dt_get_error_string")
      import :: c_ptr, c_int
      integer(c_int), value :: code
    end function
    type(c_ptr) function c_get_last_error(ctx) bind(C, name="dt_get_last_error")
      import :: c_ptr, dt_context
      type(dt_context), value :: ctx
    end function
    integer(c_int) function c_init(argc, argv, ctx) bind(C, name="dt_init")
      import :: c_int, c_ptr, dt_context
      type(c_ptr), value :: argc, argv
      type(dt_context), intent(out) :: ctx
    end function
    integer(c_int) function c_init_fortran_comm(fcomm, ctx) bind(C, name="dt_init_fortran_comm")
      import :: c_int, dt_context
      integer(c_int), value :: fcomm
      type(dt_context), intent(out) :: ctx
    end function
    integer(c_int) function c_finalize(ctx) bind(C, name="dt_finalize")
      import :: c_int, dt_context
      type(dt_context), value :: ctx
    end function
    integer(c_int) function c_context_int(ctx, v) bind(C, name="dt_context_rank")
      import :: c_int, dt_context
      type(dt_context), value :: ctx
      integer(c_int), intent(out) :: v
    end function
    integer(c_int) function c_context_size(ctx, v) bind(C, name="dt_context_size")
      import :: c_int, dt_context
      type(dt_context), value :: ctx
      integer(c_int), intent(out) :: v
    end function
    integer(c_int) function c_context_world(ctx, comm) bind(C, name="dt_context_world")
      import :: c_int, dt_context, dt_comm
      type(dt_context), value :: ctx
      type(dt_comm), intent(out) :: comm
    end function
    integer(c_int) function c_comm_rank(comm, v) bind(C, name="dt_comm_rank")
      import :: c_int, dt_comm
      type(dt_comm), value :: comm
      integer(c_int), intent(out) :: v
    end function
    integer(c_int) function c_comm_size(comm, v) bind(C, name="dt_comm_size")
      import :: c_int, dt_comm
      type(dt_comm), value :: comm
      integer(c_int), intent(out) :: v
    end function
    integer(c_int) function c_all_reduce(comm, send, recv, count, dtype, op) bind(C, name="dt_all_reduce")
      import :: c_int, c_size_t, dt_comm
      type(dt_comm), value :: comm
      type(*), dimension(*) :: send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype, op
    end function
    integer(c_int) function c_all_gather(comm, send, recv, count, dtype) bind(C, name="dt_all_gather")
      import :: c_int, c_size_t, dt_comm
      type(dt_comm), value :: comm
      type(*), dimension(*) :: send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype
    end function
    integer(c_int) function c_reduce_scatter(comm, send, recv, count, dtype, op) &
        bind(C, name="dt_reduce_scatter")
      import :: c_int, c_size_t, dt_comm
      type(dt_comm), value :: comm
      type(*), dimension(*) :: send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype, op
    end function
    integer(c_int) function c_broadcast(comm, send, recv, count, dtype, root) bind(C, name="dt_broadcast")
      import :: c_int, c_size_t, dt_comm
      type(dt_comm), value :: comm
      type(*), dimension(*) :: send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dtype, root
    end function
    integer(c_int) function c_barrier(comm) bind(C, name="dt_barrier")
      import :: c_int, dt_comm
      type(dt_comm), value :: comm
    end function
    integer(c_int) function c_grid_create(ctx, cfg, grid) bind(C, name="dt_grid_create")
      import :: c_int, dt_context, grid_config_c, dt_grid
      type(dt_context), value :: ctx
      type(grid_config_c), intent(in) :: cfg
      type(dt_grid), intent(out) :: grid
    end function
    integer(c_int) function c_grid_destroy(grid) bind(C, name="dt_grid_destroy")
      import :: c_int, dt_grid
      type(dt_grid), value :: grid
    end function
    integer(c_int) function c_grid_comm(grid, group, comm) bind(C, name="dt_grid_comm")
      import :: c_int, dt_grid, dt_comm
      type(dt_grid), value :: grid
      integer(c_int), value :: group
      type(dt_comm), intent(out) :: comm
    end function
    integer(c_int) function c_grid_coords(grid, tp, pp, dp) bind(C, name="dt_grid_coords")
      import :: c_int, dt_grid
      type(dt_grid), value :: grid
      integer(c_int), intent(out) :: tp, pp, dp
    end function
    integer(c_int) function c_byom_create(dp, cfg, byom) bind(C, name="dt_byom_create")
      import :: c_int, dt_comm, optimizer_config_c, dt_byom
      type(dt_comm), value :: dp
      type(optimizer_config_c), intent(in) :: cfg
      type(dt_byom), intent(out) :: byom
    end function
    integer(c_int) function c_byom_destroy(byom) bind(C, name="dt_byom_destroy")
      import :: c_int, dt_byom
      type(dt_byom), value :: byom
    end function
    integer(c_int) function c_byom_register(byom, name, ndim, shape, dtype, param, grad, flags) &
        bind(C, name="dt_byom_register")
      import :: c_int, c_char, c_int64_t, c_ptr, dt_byom
      type(dt_byom), value :: byom
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int), value :: ndim
      integer(c_int64_t), dimension(*), intent(in) :: shape
      integer(c_int), value :: dtype
      type(c_ptr), value :: param, grad
      integer(c_int), value :: flags
    end function
    integer(c_int) function c_byom_step(byom, lr, norm) bind(C, name="dt_byom_step")
      import :: c_int, c_float, dt_byom
      type(dt_byom), value :: byom
      real(c_float), value :: lr
      real(c_float), intent(out) :: norm
    end function
    integer(c_int) function c_model_create_mlp(dp, cfg, opt, model) bind(C, name="dt_model_create_mlp")
      import :: c_int, dt_comm, mlp_config_c, optimizer_config_c, dt_model
      type(dt_comm), value :: dp
      type(mlp_config_c), intent(in) :: cfg
      type(optimizer_config_c), intent(in) :: opt
      type(dt_model), intent(out) :: model
    end function
    integer(c_int) function c_model_destroy(model) bind(C, name="dt_model_destroy")
      import :: c_int, dt_model
      type(dt_model), value :: model
    end function
    integer(c_int) function c_mlp_forward_backward(model, x, labels, batch, loss) &
        bind(C, name="dt_mlp_forward_backward")
      import :: c_int, c_float, dt_model
      type(dt_model), value :: model
      real(c_float), dimension(*), intent(in) :: x
      integer(c_int), dimension(*), intent(in) :: labels
      integer(c_int), value :: batch
      real(c_float), intent(out) :: loss
    end function
    integer(c_int) function c_mlp_evaluate(model, x, labels, batch, loss) bind(C, name="dt_mlp_evaluate")
      import :: c_int, c_float, dt_model
      type(dt_model), value :: model
      real(c_float), dimension(*), intent(in) :: x
      integer(c_int), dimension(*), intent(in) :: labels
      integer(c_int), value :: batch
      real(c_float), intent(out) :: loss
    end function
    integer(c_int) function c_model_step(model, lr, norm) bind(C, name="dt_model_step")
      import :: c_int, c_float, dt_model
      type(dt_model), value :: model
      real(c_float), value :: lr
      real(c_float), intent(out) :: norm
    end function
    integer(c_int) function c_model_num_parameters(model, n) bind(C, name="dt_model_num_parameters")
      import :: c_int, c_size_t, dt_model
      type(dt_model), value :: model
      integer(c_size_t), intent(out) :: n
    end function
    integer(c_int) function c_model_get_parameters(model, dst, capacity) &
        bind(C, name="dt_model_get_parameters")
      import :: c_int, c_float, c_size_t, dt_model
      type(dt_model), value :: model
      real(c_float), dimension(*), intent(out) :: dst
      integer(c_size_t), value :: capacity
    end function
    pure integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
      import :: c_size_t, c_ptr
      type(c_ptr), value, intent(in) :: s
    end function
  end interface

contains

  ! A NUL-terminated C string as a Fortran string.
  function from_c(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  function default_optimizer() result(o)
    type(optimizer_config_c) :: o
    o = optimizer_config_c(0_c_size_t, 0.9, 0.95, 1e-8, 0.1, 1.0, 0, 25.0d0)
    o%struct_size = c_sizeof(o)
  end function

  !> Optimiser settings from the optional arguments (defaults as DT_OPTIMIZER_CONFIG_INIT).
  function optimizer_config(weight_decay, clip_grad, zero_stage) result(o)
    real, intent(in), optional :: weight_decay, clip_grad
    integer, intent(in), optional :: zero_stage
    type(optimizer_config_c) :: o
    o = default_optimizer()
    if (present(weight_decay)) o%weight_decay = weight_decay
    if (present(clip_grad)) o%clip_grad = clip_grad
    if (present(zero_stage)) o%zero_stage = zero_stage
  end function

  !> Version code of the loaded library: major*10000 + minor*100 + patch.
  subroutine dt_get_version(version)
    integer, intent(out) :: version
    version = c_get_version()
  end subroutine

  !> Static name of a result code.
  function dt_get_error_string(code) result(s)
    integer, intent(in) :: code
    character(len=:), allocatable :: s
    s = from_c(c_get_error_string(int(code, c_int)))
  end function

  !> Message of the last failure in ctx (of this thread when ctx is null or finalized).
  function dt_get_last_error(ctx) result(s)
    type(dt_context), intent(in) :: ctx
    character(len=:), allocatable :: s
    s = from_c(c_get_last_error(ctx))
  end function

  !> Starts dtrain. Without comm: over MPI_COMM_WORLD, initialising MPI if the program has
  !> not (then dt_finalize finalises it). With comm: over a duplicate of comm (MPI must be
  !> initialised; the program finalises it). Collective.
  subroutine dt_init(ctx, ierr, comm)
    type(dt_context), intent(out) :: ctx
    integer, intent(out) :: ierr
    type(MPI_Comm), intent(in), optional :: comm
    if (present(comm)) then
      ierr = c_init_fortran_comm(int(comm%MPI_VAL, c_int), ctx)
    else
      ierr = c_init(c_null_ptr, c_null_ptr, ctx)
    end if
  end subroutine

  !> Releases ctx and every handle still alive in it. Collective.
  subroutine dt_finalize(ctx, ierr)
    type(dt_context), intent(inout) :: ctx
    integer, intent(out) :: ierr
    ierr = c_finalize(ctx)
    if (ierr == DT_SUCCESS) ctx%ptr = c_null_ptr
  end subroutine

  !> 0-based rank and size of this process in the context's world.
  subroutine dt_context_rank(ctx, rank, ierr)
    type(dt_context), intent(in) :: ctx
    integer, intent(out) :: rank, ierr
    integer(c_int) :: v
    v = -1
    ierr = c_context_int(ctx, v)
    rank = v
  end subroutine

  subroutine dt_context_size(ctx, size, ierr)
    type(dt_context), intent(in) :: ctx
    integer, intent(out) :: size, ierr
    integer(c_int) :: v
    v = 0
    ierr = c_context_size(ctx, v)
    size = v
  end subroutine

  !> The context's world communicator (borrowed: never destroyed by the program).
  subroutine dt_context_world(ctx, world, ierr)
    type(dt_context), intent(in) :: ctx
    type(dt_comm), intent(out) :: world
    integer, intent(out) :: ierr
    ierr = c_context_world(ctx, world)
  end subroutine

  subroutine dt_comm_rank(comm, rank, ierr)
    type(dt_comm), intent(in) :: comm
    integer, intent(out) :: rank, ierr
    integer(c_int) :: v
    v = -1
    ierr = c_comm_rank(comm, v)
    rank = v
  end subroutine

  subroutine dt_comm_size(comm, size, ierr)
    type(dt_comm), intent(in) :: comm
    integer, intent(out) :: size, ierr
    integer(c_int) :: v
    v = 0
    ierr = c_comm_size(comm, v)
    size = v
  end subroutine

  !> recvbuf = op over ranks of sendbuf, count elements of dtype (DT_F32 for real(c_float),
  !> DT_F64 for real(c_double), DT_I32 for integer(c_int), ...). Blocking, collective.
  subroutine dt_all_reduce(comm, sendbuf, recvbuf, count, dtype, op, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer, intent(in) :: count, dtype, op
    integer, intent(out) :: ierr
    ierr = c_all_reduce(comm, sendbuf, recvbuf, int(count, c_size_t), int(dtype, c_int), int(op, c_int))
  end subroutine

  !> recvbuf(count*size) receives count elements from each rank, rank r's at r*count + 1.
  subroutine dt_all_gather(comm, sendbuf, recvbuf, count, dtype, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer, intent(in) :: count, dtype
    integer, intent(out) :: ierr
    ierr = c_all_gather(comm, sendbuf, recvbuf, int(count, c_size_t), int(dtype, c_int))
  end subroutine

  !> sendbuf holds count*size elements; rank r receives block r reduced over ranks.
  subroutine dt_reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer, intent(in) :: count, dtype, op
    integer, intent(out) :: ierr
    ierr = c_reduce_scatter(comm, sendbuf, recvbuf, int(count, c_size_t), int(dtype, c_int), int(op, c_int))
  end subroutine

  !> buf = root's buf on every rank (in place); root is 0-based as in MPI.
  subroutine dt_broadcast(comm, buf, count, dtype, root, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: buf
    integer, intent(in) :: count, dtype, root
    integer, intent(out) :: ierr
    ierr = c_broadcast(comm, buf, buf, int(count, c_size_t), int(dtype, c_int), int(root, c_int))
  end subroutine

  subroutine dt_barrier(comm, ierr)
    type(dt_comm), intent(in) :: comm
    integer, intent(out) :: ierr
    ierr = c_barrier(comm)
  end subroutine

  !> Process grid over the world: tp, pp default 1, dp defaults to world/(tp*pp). Collective.
  subroutine dt_grid_create(ctx, grid, ierr, tp, pp, dp)
    type(dt_context), intent(in) :: ctx
    type(dt_grid), intent(out) :: grid
    integer, intent(out) :: ierr
    integer, intent(in), optional :: tp, pp, dp
    type(grid_config_c) :: cfg
    cfg = grid_config_c(0_c_size_t, 1, 1, 0, c_null_ptr)
    cfg%struct_size = c_sizeof(cfg)
    if (present(tp)) cfg%tp = tp
    if (present(pp)) cfg%pp = pp
    if (present(dp)) cfg%dp = dp
    ierr = c_grid_create(ctx, cfg, grid)
  end subroutine

  subroutine dt_grid_destroy(grid, ierr)
    type(dt_grid), intent(inout) :: grid
    integer, intent(out) :: ierr
    ierr = c_grid_destroy(grid)
    if (ierr == DT_SUCCESS) grid%ptr = c_null_ptr
  end subroutine

  !> The group (DT_GROUP_TP, DT_GROUP_PP, DT_GROUP_DP or DT_GROUP_WORLD) of this rank.
  subroutine dt_grid_comm(grid, group, comm, ierr)
    type(dt_grid), intent(in) :: grid
    integer, intent(in) :: group
    type(dt_comm), intent(out) :: comm
    integer, intent(out) :: ierr
    ierr = c_grid_comm(grid, int(group, c_int), comm)
  end subroutine

  !> 0-based coordinates of this rank in the grid.
  subroutine dt_grid_coords(grid, tp_rank, pp_rank, dp_rank, ierr)
    type(dt_grid), intent(in) :: grid
    integer, intent(out) :: tp_rank, pp_rank, dp_rank, ierr
    integer(c_int) :: t, p, d
    t = -1; p = -1; d = -1
    ierr = c_grid_coords(grid, t, p, d)
    tp_rank = t; pp_rank = p; dp_rank = d
  end subroutine

  !> Bring-your-own-model optimiser over the data-parallel group dp.
  subroutine dt_byom_create(dp, byom, ierr, weight_decay, clip_grad, zero_stage)
    type(dt_comm), intent(in) :: dp
    type(dt_byom), intent(out) :: byom
    integer, intent(out) :: ierr
    real, intent(in), optional :: weight_decay, clip_grad
    integer, intent(in), optional :: zero_stage
    ierr = c_byom_create(dp, optimizer_config(weight_decay, clip_grad, zero_stage), byom)
  end subroutine

  subroutine dt_byom_destroy(byom, ierr)
    type(dt_byom), intent(inout) :: byom
    integer, intent(out) :: ierr
    ierr = c_byom_destroy(byom)
    if (ierr == DT_SUCCESS) byom%ptr = c_null_ptr
  end subroutine

  !> Registers a real(c_float) parameter array of any rank and its gradient (same shape).
  !> Both must stay allocated, contiguous and in place until the byom handle is destroyed.
  !> The C shape is the Fortran shape reversed. no_decay: exclude from weight decay.
  subroutine dt_byom_register(byom, name, param, grad, ierr, no_decay)
    type(dt_byom), intent(in) :: byom
    character(len=*), intent(in) :: name
    real(c_float), dimension(..), contiguous, target, intent(inout) :: param
    real(c_float), dimension(..), contiguous, target, intent(in) :: grad
    integer, intent(out) :: ierr
    logical, intent(in), optional :: no_decay
    integer(c_int64_t) :: c_shape(max(rank(param), 1))
    integer(c_int) :: flags
    integer :: d, nd
    nd = rank(param)
    if (nd == 0 .or. rank(grad) /= nd .or. any(shape(grad) /= shape(param))) then
      ierr = DT_ERR_INVALID_ARGUMENT
      return
    end if
    do d = 1, nd
      c_shape(d) = size(param, nd - d + 1, kind=c_int64_t)
    end do
    flags = 0
    if (present(no_decay)) then
      if (no_decay) flags = 1
    end if
    ierr = c_byom_register(byom, trim(name)//c_null_char, int(nd, c_int), c_shape, DT_F32, &
                           c_loc(param), c_loc(grad), flags)
  end subroutine

  !> DP gradient average, clipping and AdamW at rate lr. Collective over the dp group.
  subroutine dt_byom_step(byom, lr, ierr, grad_norm)
    type(dt_byom), intent(in) :: byom
    real, intent(in) :: lr
    integer, intent(out) :: ierr
    real, intent(out), optional :: grad_norm
    real(c_float) :: norm
    norm = 0
    ierr = c_byom_step(byom, real(lr, c_float), norm)
    if (present(grad_norm)) grad_norm = norm
  end subroutine

  !> The built-in MLP classifier: sizes = (inputs, hidden..., classes). Collective over dp.
  subroutine dt_model_create_mlp(dp, sizes, max_batch, model, ierr, seed, weight_decay, &
                                 clip_grad, zero_stage)
    type(dt_comm), intent(in) :: dp
    integer(c_int), dimension(:), target, contiguous, intent(in) :: sizes
    integer, intent(in) :: max_batch
    type(dt_model), intent(out) :: model
    integer, intent(out) :: ierr
    integer(c_int64_t), intent(in), optional :: seed
    real, intent(in), optional :: weight_decay, clip_grad
    integer, intent(in), optional :: zero_stage
    type(mlp_config_c) :: cfg
    cfg = mlp_config_c(0_c_size_t, size(sizes), c_loc(sizes), max_batch, 1337_c_int64_t)
    cfg%struct_size = c_sizeof(cfg)
    if (present(seed)) cfg%seed = seed
    ierr = c_model_create_mlp(dp, cfg, optimizer_config(weight_decay, clip_grad, zero_stage), model)
  end subroutine

  subroutine dt_model_destroy(model, ierr)
    type(dt_model), intent(inout) :: model
    integer, intent(out) :: ierr
    ierr = c_model_destroy(model)
    if (ierr == DT_SUCCESS) model%ptr = c_null_ptr
  end subroutine

  !> x(inputs, batch): one sample per column (Fortran order of the C [batch][inputs]);
  !> labels(batch) are 0-based class indices (they index the C logits). Gradients accumulate
  !> until dt_model_step.
  subroutine dt_mlp_forward_backward(model, x, labels, loss, ierr)
    type(dt_model), intent(in) :: model
    real(c_float), dimension(:, :), contiguous, intent(in) :: x
    integer(c_int), dimension(:), contiguous, intent(in) :: labels
    real, intent(out) :: loss
    integer, intent(out) :: ierr
    real(c_float) :: l
    l = 0
    if (size(labels) /= size(x, 2)) then
      ierr = DT_ERR_INVALID_ARGUMENT
      return
    end if
    ierr = c_mlp_forward_backward(model, x, labels, int(size(x, 2), c_int), l)
    loss = l
  end subroutine

  subroutine dt_mlp_evaluate(model, x, labels, loss, ierr)
    type(dt_model), intent(in) :: model
    real(c_float), dimension(:, :), contiguous, intent(in) :: x
    integer(c_int), dimension(:), contiguous, intent(in) :: labels
    real, intent(out) :: loss
    integer, intent(out) :: ierr
    real(c_float) :: l
    l = 0
    if (size(labels) /= size(x, 2)) then
      ierr = DT_ERR_INVALID_ARGUMENT
      return
    end if
    ierr = c_mlp_evaluate(model, x, labels, int(size(x, 2), c_int), l)
    loss = l
  end subroutine

  subroutine dt_model_step(model, lr, ierr, grad_norm)
    type(dt_model), intent(in) :: model
    real, intent(in) :: lr
    integer, intent(out) :: ierr
    real, intent(out), optional :: grad_norm
    real(c_float) :: norm
    norm = 0
    ierr = c_model_step(model, real(lr, c_float), norm)
    if (present(grad_norm)) grad_norm = norm
  end subroutine

  subroutine dt_model_num_parameters(model, n, ierr)
    type(dt_model), intent(in) :: model
    integer(c_size_t), intent(out) :: n
    integer, intent(out) :: ierr
    n = 0
    ierr = c_model_num_parameters(model, n)
  end subroutine

  !> Every parameter value, tensor after tensor, each in C (row-major) order.
  subroutine dt_model_get_parameters(model, values, ierr)
    type(dt_model), intent(in) :: model
    real(c_float), dimension(:), contiguous, intent(out) :: values
    integer, intent(out) :: ierr
    ierr = c_model_get_parameters(model, values, int(size(values), c_size_t))
  end subroutine

end module dtrain
