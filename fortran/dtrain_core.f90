!> @file
!> Version and errors, the context, groups, collectives and the process grid.
!> @brief Part of module dtrain: start and stop, ranks, collectives, process grid.
module dtrain_core
  use, intrinsic :: iso_c_binding
  use mpi_f08, only: MPI_Comm
  use dtrain_types
  use dtrain_c_binding
  implicit none
  private

  public :: dt_get_version, dt_get_error_string, dt_get_last_error
  public :: dt_init, dt_finalize, dt_context_rank, dt_context_size, dt_context_world, &
            dt_context_cpu_threads
  public :: dt_comm_rank, dt_comm_size, dt_comm_world_ranks
  public :: dt_all_reduce, dt_all_gather, dt_reduce_scatter, dt_broadcast, dt_barrier, &
            dt_comm_device
  public :: dt_grid_create, dt_grid_destroy, dt_grid_shape, dt_grid_coords, dt_grid_comm

  ! The collectives take a count of either kind: a default integer, or integer(c_int64_t)
  ! for 2^31 elements or more.
  interface dt_all_reduce
    module procedure all_reduce_count32, all_reduce_count64
  end interface
  interface dt_all_gather
    module procedure all_gather_count32, all_gather_count64
  end interface
  interface dt_reduce_scatter
    module procedure reduce_scatter_count32, reduce_scatter_count64
  end interface
  interface dt_broadcast
    module procedure broadcast_count32, broadcast_count64
  end interface

contains

  !> Version of the loaded library.
  !> @param[out] version major*10000 + minor*100 + patch (DT_VERSION_CODE).
  subroutine dt_get_version(version)
    integer, intent(out) :: version
    version = c_get_version()
  end subroutine

  !> Static name of a result code ("invalid argument", ...).
  !> @param[in] code a DT_SUCCESS or DT_ERR_* value.
  !> @return the name; "unknown result code" for other values.
  function dt_get_error_string(code) result(s)
    integer, intent(in) :: code
    character(len=:), allocatable :: s
    s = from_c(c_get_error_string(int(code, c_int)))
  end function

  !> Message of the last failure: "procedure: reason".
  !> @param[in] ctx a live context: its last failure; a null or finalized one: the last
  !>            failure of the calling thread. A failure found by this module's own checks
  !>            (array shapes) is reported whatever ctx, until the calling thread's next
  !>            call into dtrain.
  !> @return the message; '' when nothing failed.
  function dt_get_last_error(ctx) result(s)
    type(dt_context), intent(in) :: ctx
    character(len=:), allocatable :: s
    s = fortran_error()
    if (len(s) > 0) return
    s = from_c(c_get_last_error(ctx))
  end function

  !> Starts dtrain. Collective over the communicator used.
  !> Without comm or fcomm: over MPI_COMM_WORLD, initialising MPI if the program has not
  !> (then dt_finalize finalises it). With comm (mpi_f08) or fcomm (an integer handle of the
  !> mpi module): over a duplicate of it; MPI must be initialised and is finalised by the
  !> program.
  !> @param[out] ctx the new context (null on failure).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT when both comm and fcomm are given
  !>             or the communicator is MPI_COMM_NULL; DT_ERR_COMM.
  !> @param[in] comm optional mpi_f08 communicator.
  !> @param[in] fcomm optional integer communicator handle (mpi module, mpif.h).
  subroutine dt_init(ctx, ierr, comm, fcomm)
    type(dt_context), intent(out) :: ctx
    integer, intent(out) :: ierr
    type(MPI_Comm), intent(in), optional :: comm
    integer, intent(in), optional :: fcomm
    if (present(comm) .and. present(fcomm)) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_init', 'give comm or fcomm, not both')
    else if (present(comm)) then
      ierr = ret(c_init_fortran_comm(int(comm%MPI_VAL, c_int), ctx))
    else if (present(fcomm)) then
      ierr = ret(c_init_fortran_comm(int(fcomm, c_int), ctx))
    else
      ierr = ret(c_init(c_null_ptr, c_null_ptr, ctx))
    end if
  end subroutine

  !> Releases ctx and every handle still alive in it (models, byoms, grids). Collective.
  !> @param[inout] ctx the context; null afterwards on success.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_finalize(ctx, ierr)
    type(dt_context), intent(inout) :: ctx
    integer, intent(out) :: ierr
    ierr = ret(c_finalize(ctx))
    if (ierr == DT_SUCCESS) ctx%ptr = c_null_ptr
  end subroutine

  !> This process's rank in the context's world.
  !> @param[in] ctx a live context.
  !> @param[out] rank 0-based, as in MPI.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_context_rank(ctx, rank, ierr)
    type(dt_context), intent(in) :: ctx
    integer, intent(out) :: rank, ierr
    integer(c_int) :: v
    v = -1
    ierr = ret(c_context_rank(ctx, v))
    rank = v
  end subroutine

  !> Number of ranks in the context's world.
  !> @param[in] ctx a live context.
  !> @param[out] size the number of ranks.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_context_size(ctx, size, ierr)
    type(dt_context), intent(in) :: ctx
    integer, intent(out) :: size, ierr
    integer(c_int) :: v
    v = 0
    ierr = ret(c_context_size(ctx, v))
    size = v
  end subroutine

  !> The threads this rank's share of its node's CPUs allows (dt_context_cpu_threads in
  !> dtrain.h): what a built-in model on the CPU runs, and what a program's own threads can
  !> be sized by.
  !> @param[in] ctx a live context.
  !> @param[out] threads at least 1.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_context_cpu_threads(ctx, threads, ierr)
    type(dt_context), intent(in) :: ctx
    integer, intent(out) :: threads, ierr
    integer(c_int) :: v
    v = 0
    ierr = ret(c_context_cpu_threads(ctx, v))
    threads = v
  end subroutine

  !> The context's world communicator.
  !> @param[in] ctx a live context.
  !> @param[out] world borrowed: valid until dt_finalize, never destroyed by the program.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_context_world(ctx, world, ierr)
    type(dt_context), intent(in) :: ctx
    type(dt_comm), intent(out) :: world
    integer, intent(out) :: ierr
    ierr = ret(c_context_world(ctx, world))
  end subroutine

  !> This process's rank in a group.
  !> @param[in] comm a live group.
  !> @param[out] rank 0-based.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_comm_rank(comm, rank, ierr)
    type(dt_comm), intent(in) :: comm
    integer, intent(out) :: rank, ierr
    integer(c_int) :: v
    v = -1
    ierr = ret(c_comm_rank(comm, v))
    rank = v
  end subroutine

  !> Number of ranks in a group.
  !> @param[in] comm a live group.
  !> @param[out] size the number of ranks.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_comm_size(comm, size, ierr)
    type(dt_comm), intent(in) :: comm
    integer, intent(out) :: size, ierr
    integer(c_int) :: v
    v = 0
    ierr = ret(c_comm_size(comm, v))
    size = v
  end subroutine

  !> World ranks of the members of a group.
  !> @param[in] comm a live group.
  !> @param[out] ranks ranks(i) is the 0-based world rank of group rank i-1.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_comm_world_ranks(comm, ranks, ierr)
    type(dt_comm), intent(in) :: comm
    integer, allocatable, intent(out) :: ranks(:)
    integer, intent(out) :: ierr
    integer(c_int), allocatable, target :: buf(:)
    integer(c_int) :: n, capacity
    n = 0
    allocate(ranks(0))  ! what a failed call leaves, as the other allocatable outputs
    ierr = ret(c_comm_world_ranks(comm, c_null_ptr, 0_c_int, n))
    if (ierr /= DT_SUCCESS) return
    capacity = n
    allocate(buf(max(capacity, 1)))
    ierr = ret(c_comm_world_ranks(comm, c_loc(buf), capacity, n))
    if (ierr /= DT_SUCCESS) return  ! ranks stays empty
    ranks = buf(1:min(n, capacity))
  end subroutine

  !> recvbuf = op over the ranks of sendbuf. Blocking; collective over comm.
  !> @param[in] comm a live group.
  !> @param[in] sendbuf count elements of any type and rank (type(*), dimension(*)).
  !> @param[out] recvbuf count elements; a distinct array (use dt_broadcast for in place).
  !> @param[in] count elements per rank: a default integer, or integer(c_int64_t) for 2^31
  !>            elements or more (every collective below takes either).
  !> @param[in] dtype DT_F32 for real(c_float), DT_F64 for real(c_double), DT_I32 for
  !>            integer(c_int), ...
  !> @param[in] op DT_SUM, DT_AVG, DT_MAX or DT_MIN.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_HANDLE, DT_ERR_INVALID_ARGUMENT (dtype, op,
  !>             a negative count).
  subroutine all_reduce_count64(comm, sendbuf, recvbuf, count, dtype, op, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer(c_int64_t), intent(in) :: count
    integer, intent(in) :: dtype, op
    integer, intent(out) :: ierr
    if (negative(count, 'dt_all_reduce', ierr)) return
    ierr = ret(c_all_reduce(comm, sendbuf, recvbuf, int(count, c_size_t), int(dtype, c_int), &
                            int(op, c_int)))
  end subroutine

  subroutine all_reduce_count32(comm, sendbuf, recvbuf, count, dtype, op, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer, intent(in) :: count, dtype, op
    integer, intent(out) :: ierr
    call all_reduce_count64(comm, sendbuf, recvbuf, int(count, c_int64_t), dtype, op, ierr)
  end subroutine

  !> recvbuf(count*size) receives count elements from each rank, rank r's from r*count + 1.
  !> Blocking; collective.
  !> @param[in] comm a live group.
  !> @param[in] sendbuf count elements.
  !> @param[out] recvbuf count * (group size) elements.
  !> @param[in] count elements each rank contributes.
  !> @param[in] dtype element type (DT_F32, ...).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_HANDLE, DT_ERR_INVALID_ARGUMENT.
  subroutine all_gather_count64(comm, sendbuf, recvbuf, count, dtype, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer(c_int64_t), intent(in) :: count
    integer, intent(in) :: dtype
    integer, intent(out) :: ierr
    if (negative(count, 'dt_all_gather', ierr)) return
    ierr = ret(c_all_gather(comm, sendbuf, recvbuf, int(count, c_size_t), int(dtype, c_int)))
  end subroutine

  subroutine all_gather_count32(comm, sendbuf, recvbuf, count, dtype, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer, intent(in) :: count, dtype
    integer, intent(out) :: ierr
    call all_gather_count64(comm, sendbuf, recvbuf, int(count, c_int64_t), dtype, ierr)
  end subroutine

  !> Rank r receives block r (elements r*count+1 .. (r+1)*count) of sendbuf, reduced over
  !> the ranks. Blocking; collective.
  !> @param[in] comm a live group.
  !> @param[in] sendbuf count * (group size) elements.
  !> @param[out] recvbuf count elements.
  !> @param[in] count elements each rank receives.
  !> @param[in] dtype element type.
  !> @param[in] op reduction.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_HANDLE, DT_ERR_INVALID_ARGUMENT.
  subroutine reduce_scatter_count64(comm, sendbuf, recvbuf, count, dtype, op, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer(c_int64_t), intent(in) :: count
    integer, intent(in) :: dtype, op
    integer, intent(out) :: ierr
    if (negative(count, 'dt_reduce_scatter', ierr)) return
    ierr = ret(c_reduce_scatter(comm, sendbuf, recvbuf, int(count, c_size_t), int(dtype, c_int), &
                                int(op, c_int)))
  end subroutine

  subroutine reduce_scatter_count32(comm, sendbuf, recvbuf, count, dtype, op, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: sendbuf, recvbuf
    integer, intent(in) :: count, dtype, op
    integer, intent(out) :: ierr
    call reduce_scatter_count64(comm, sendbuf, recvbuf, int(count, c_int64_t), dtype, op, ierr)
  end subroutine

  !> buf = root's buf on every rank, in place. Blocking; collective.
  !> @param[in] comm a live group.
  !> @param[inout] buf count elements.
  !> @param[in] count elements.
  !> @param[in] dtype element type.
  !> @param[in] root 0-based rank in comm, as in MPI.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_HANDLE, DT_ERR_INVALID_ARGUMENT (root).
  subroutine broadcast_count64(comm, buf, count, dtype, root, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: buf
    integer(c_int64_t), intent(in) :: count
    integer, intent(in) :: dtype, root
    integer, intent(out) :: ierr
    if (negative(count, 'dt_broadcast', ierr)) return
    ierr = ret(c_broadcast(comm, buf, buf, int(count, c_size_t), int(dtype, c_int), int(root, c_int)))
  end subroutine

  subroutine broadcast_count32(comm, buf, count, dtype, root, ierr)
    type(dt_comm), intent(in) :: comm
    type(*), dimension(*) :: buf
    integer, intent(in) :: count, dtype, root
    integer, intent(out) :: ierr
    call broadcast_count64(comm, buf, int(count, c_int64_t), dtype, root, ierr)
  end subroutine

  ! A negative count (a size that wrapped past 2^31, say) would reach C as a huge size_t:
  ! refused here with its value. Every rank has the same count, so every rank refuses it.
  logical function negative(count, procedure, ierr)
    integer(c_int64_t), intent(in) :: count
    character(len=*), intent(in) :: procedure
    integer, intent(out) :: ierr
    character(len=24) :: text
    negative = count < 0
    if (negative) then
      write(text, '(i0)') count
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, procedure, 'count must not be negative, got ' &
                     //trim(text))
    end if
  end function

  !> Returns when every rank of comm has called it. Collective.
  !> @param[in] comm a live group.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_barrier(comm, ierr)
    type(dt_comm), intent(in) :: comm
    integer, intent(out) :: ierr
    ierr = ret(c_barrier(comm))
  end subroutine

  !> The ranks of comm again, with collectives that also take GPU buffers (dt_comm_device in
  !> docs/c-api.md): pass device addresses, e.g. inside !$acc host_data use_device(a). One
  !> call must not mix host and device buffers. Collective over comm at its first call.
  !> @param[in] comm a live group.
  !> @param[out] device_comm borrowed; valid as long as comm is.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_HANDLE, DT_ERR_UNAVAILABLE (a rank of comm
  !>             has no usable GPU: every rank gets it).
  subroutine dt_comm_device(comm, device_comm, ierr)
    type(dt_comm), intent(in) :: comm
    type(dt_comm), intent(out) :: device_comm
    integer, intent(out) :: ierr
    ierr = ret(c_comm_device(comm, device_comm))
  end subroutine

  !> Process grid over the context's world. Collective.
  !> @param[in] ctx a live context.
  !> @param[out] grid the new grid (null on failure).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_CONFIG when the shape does not fit the world.
  !> @param[in] tp optional tensor-parallel size (default 1).
  !> @param[in] pp optional pipeline-parallel size (default 1).
  !> @param[in] dp optional data-parallel size (default: world / (tp*pp)).
  !> @param[in] order optional placement of the dimensions over the world ranks, fastest first
  !>            (default "tp-dp-pp": a TP group's ranks are consecutive).
  subroutine dt_grid_create(ctx, grid, ierr, tp, pp, dp, order)
    type(dt_context), intent(in) :: ctx
    type(dt_grid), intent(out) :: grid
    integer, intent(out) :: ierr
    integer, intent(in), optional :: tp, pp, dp
    character(len=*), intent(in), optional :: order
    type(grid_config_c) :: cfg
    character(kind=c_char), allocatable, target :: order_c(:)
    cfg = grid_config_c(0_c_size_t, 1, 1, 0, c_null_ptr)
    cfg%struct_size = c_sizeof(cfg)
    if (present(tp)) cfg%tp = tp
    if (present(pp)) cfg%pp = pp
    if (present(dp)) cfg%dp = dp
    if (present(order)) then
      call c_chars(order, order_c)
      cfg%order = c_loc(order_c)
    end if
    ierr = ret(c_grid_create(ctx, cfg, grid))
  end subroutine

  !> Releases a grid and its groups.
  !> @param[inout] grid the grid; null afterwards on success.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_HANDLE; DT_ERR_INVALID_STATE while a model
  !>             or byom uses one of its groups.
  subroutine dt_grid_destroy(grid, ierr)
    type(dt_grid), intent(inout) :: grid
    integer, intent(out) :: ierr
    ierr = ret(c_grid_destroy(grid))
    if (ierr == DT_SUCCESS) grid%ptr = c_null_ptr
  end subroutine

  !> Sizes of the grid's dimensions.
  !> @param[in] grid a live grid.
  !> @param[out] tp tensor-parallel size.
  !> @param[out] pp pipeline-parallel size.
  !> @param[out] dp data-parallel size.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_grid_shape(grid, tp, pp, dp, ierr)
    type(dt_grid), intent(in) :: grid
    integer, intent(out) :: tp, pp, dp, ierr
    integer(c_int) :: t, p, d
    t = 0; p = 0; d = 0
    ierr = ret(c_grid_shape(grid, t, p, d))
    tp = t; pp = p; dp = d
  end subroutine

  !> This rank's coordinates in the grid.
  !> @param[in] grid a live grid.
  !> @param[out] tp_rank 0-based tensor-parallel coordinate.
  !> @param[out] pp_rank 0-based pipeline-parallel coordinate.
  !> @param[out] dp_rank 0-based data-parallel coordinate.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_grid_coords(grid, tp_rank, pp_rank, dp_rank, ierr)
    type(dt_grid), intent(in) :: grid
    integer, intent(out) :: tp_rank, pp_rank, dp_rank, ierr
    integer(c_int) :: t, p, d
    t = -1; p = -1; d = -1
    ierr = ret(c_grid_coords(grid, t, p, d))
    tp_rank = t; pp_rank = p; dp_rank = d
  end subroutine

  !> The group of this rank along one dimension.
  !> @param[in] grid a live grid.
  !> @param[in] group DT_GROUP_WORLD, DT_GROUP_TP, DT_GROUP_PP or DT_GROUP_DP.
  !> @param[out] comm borrowed; valid until the grid is destroyed.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_HANDLE, DT_ERR_INVALID_ARGUMENT (group).
  subroutine dt_grid_comm(grid, group, comm, ierr)
    type(dt_grid), intent(in) :: grid
    integer, intent(in) :: group
    type(dt_comm), intent(out) :: comm
    integer, intent(out) :: ierr
    ierr = ret(c_grid_comm(grid, int(group, c_int), comm))
  end subroutine

end module dtrain_core
