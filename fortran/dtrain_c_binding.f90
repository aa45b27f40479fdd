! The C ABI as seen from Fortran: bind(C) interfaces of dtrain.h, mirrors of its config
! structs, string conversion, and the message of checks this module makes before calling C.
! Internal to module dtrain (whose procedures document the user-facing behaviour).
module dtrain_c_binding
  use, intrinsic :: iso_c_binding
  use dtrain_types
  implicit none
  private

  ! ---- mirrors of the C config structs (struct_size set from c_sizeof) --------------------
  type, bind(C), public :: grid_config_c
    integer(c_size_t) :: struct_size
    integer(c_int) :: tp, pp, dp
    type(c_ptr) :: order
  end type
  type, bind(C), public :: optimizer_config_c
    integer(c_size_t) :: struct_size
    real(c_float) :: beta1, beta2, eps, weight_decay, clip_grad
    integer(c_int) :: zero_stage
    real(c_double) :: bucket_mb
  end type
  type, bind(C), public :: mlp_config_c
    integer(c_size_t) :: struct_size
    integer(c_int) :: num_sizes
    type(c_ptr) :: sizes
    integer(c_int) :: max_batch
    integer(c_int64_t) :: seed
    type(c_ptr) :: device
    type(c_ptr) :: precision
  end type
  type, bind(C), public :: gpt_config_c
    integer(c_size_t) :: struct_size
    integer(c_int) :: layers, heads, d_model, seq_len, vocab, tie_embeddings, max_batch
    integer(c_int64_t) :: seed
    integer(c_int) :: recompute
    type(c_ptr) :: device
    integer(c_int) :: sequence_parallel
    type(c_ptr) :: precision
    type(c_ptr) :: schedule
    integer(c_int) :: micro_batches, virtual_stages
    type(c_ptr) :: pipeline_layers
  end type

  type, bind(C), public :: sampling_config_c
    integer(c_size_t) :: struct_size
    real(c_double) :: temperature
    integer(c_int) :: top_k
    real(c_double) :: top_p
  end type

  public :: from_c, c_string, c_chars, optimizer_config, ret, fail_here, fail_in_c_too, &
            fortran_error

  ! Scalar outputs are intent(inout), not intent(out): the wrappers set what a failed call
  ! leaves (-1 for a rank, 0 for a count or a norm), and under intent(out) the compiler may drop
  ! that store as dead, so a failed call handed back whatever was on the stack.
  interface
    ! The message of the calling thread's last failure found by this module's own checks
    ! (shapes of Fortran arrays the C library cannot see); cleared by every call into C.
    ! Kept in C (thread_error.c): Fortran has no thread-local variables.
    subroutine c_set_fortran_error(text, length) bind(C, name="dtrain_fortran_set_error")
      import :: c_char, c_size_t
      character(kind=c_char), intent(in) :: text(*)
      integer(c_size_t), value :: length
    end subroutine
    type(c_ptr) function c_fortran_error() bind(C, name="dtrain_fortran_error")
      import :: c_ptr
    end function
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
      type(dt_context), intent(inout) :: ctx
    end function
    integer(c_int) function c_init_fortran_comm(fcomm, ctx) bind(C, name="dt_init_fortran_comm")
      import :: c_int, dt_context
      integer(c_int), value :: fcomm
      type(dt_context), intent(inout) :: ctx
    end function
    integer(c_int) function c_finalize(ctx) bind(C, name="dt_finalize")
      import :: c_int, dt_context
      type(dt_context), value :: ctx
    end function
    integer(c_int) function c_context_rank(ctx, v) bind(C, name="dt_context_rank")
      import :: c_int, dt_context
      type(dt_context), value :: ctx
      integer(c_int), intent(inout) :: v
    end function
    integer(c_int) function c_context_size(ctx, v) bind(C, name="dt_context_size")
      import :: c_int, dt_context
      type(dt_context), value :: ctx
      integer(c_int), intent(inout) :: v
    end function
    integer(c_int) function c_context_cpu_threads(ctx, v) bind(C, name="dt_context_cpu_threads")
      import :: c_int, dt_context
      type(dt_context), value :: ctx
      integer(c_int), intent(inout) :: v
    end function
    integer(c_int) function c_context_world(ctx, comm) bind(C, name="dt_context_world")
      import :: c_int, dt_context, dt_comm
      type(dt_context), value :: ctx
      type(dt_comm), intent(inout) :: comm
    end function
    integer(c_int) function c_comm_rank(comm, v) bind(C, name="dt_comm_rank")
      import :: c_int, dt_comm
      type(dt_comm), value :: comm
      integer(c_int), intent(inout) :: v
    end function
    integer(c_int) function c_comm_size(comm, v) bind(C, name="dt_comm_size")
      import :: c_int, dt_comm
      type(dt_comm), value :: comm
      integer(c_int), intent(inout) :: v
    end function
    integer(c_int) function c_comm_world_ranks(comm, ranks, capacity, count) &
        bind(C, name="dt_comm_world_ranks")
      import :: c_int, c_ptr, dt_comm
      type(dt_comm), value :: comm
      type(c_ptr), value :: ranks
      integer(c_int), value :: capacity
      integer(c_int), intent(inout) :: count
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
    integer(c_int) function c_comm_device(comm, device_comm) bind(C, name="dt_comm_device")
      import :: c_int, dt_comm
      type(dt_comm), value :: comm
      type(dt_comm), intent(inout) :: device_comm
    end function
    integer(c_int) function c_grid_create(ctx, cfg, grid) bind(C, name="dt_grid_create")
      import :: c_int, dt_context, grid_config_c, dt_grid
      type(dt_context), value :: ctx
      type(grid_config_c), intent(in) :: cfg
      type(dt_grid), intent(inout) :: grid
    end function
    integer(c_int) function c_grid_destroy(grid) bind(C, name="dt_grid_destroy")
      import :: c_int, dt_grid
      type(dt_grid), value :: grid
    end function
    integer(c_int) function c_grid_shape(grid, tp, pp, dp) bind(C, name="dt_grid_shape")
      import :: c_int, dt_grid
      type(dt_grid), value :: grid
      integer(c_int), intent(inout) :: tp, pp, dp
    end function
    integer(c_int) function c_grid_coords(grid, tp, pp, dp) bind(C, name="dt_grid_coords")
      import :: c_int, dt_grid
      type(dt_grid), value :: grid
      integer(c_int), intent(inout) :: tp, pp, dp
    end function
    integer(c_int) function c_grid_comm(grid, group, comm) bind(C, name="dt_grid_comm")
      import :: c_int, dt_grid, dt_comm
      type(dt_grid), value :: grid
      integer(c_int), value :: group
      type(dt_comm), intent(inout) :: comm
    end function
    integer(c_int) function c_byom_create(dp, cfg, byom) bind(C, name="dt_byom_create")
      import :: c_int, dt_comm, optimizer_config_c, dt_byom
      type(dt_comm), value :: dp
      type(optimizer_config_c), intent(in) :: cfg
      type(dt_byom), intent(inout) :: byom
    end function
    integer(c_int) function c_byom_create_grid(grid, cfg, byom) bind(C, name="dt_byom_create_grid")
      import :: c_int, dt_grid, optimizer_config_c, dt_byom
      type(dt_grid), value :: grid
      type(optimizer_config_c), intent(in) :: cfg
      type(dt_byom), intent(inout) :: byom
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
      real(c_float), intent(inout) :: norm
    end function
    integer(c_int) function c_byom_steps(byom, steps) bind(C, name="dt_byom_steps")
      import :: c_int, c_long, dt_byom
      type(dt_byom), value :: byom
      integer(c_long), intent(inout) :: steps
    end function
    integer(c_int) function c_byom_scale_loss(byom, initial_scale) bind(C, name="dt_byom_scale_loss")
      import :: c_int, c_float, dt_byom
      type(dt_byom), value :: byom
      real(c_float), value :: initial_scale
    end function
    integer(c_int) function c_byom_loss_scale(byom, scale, skipped) bind(C, name="dt_byom_loss_scale")
      import :: c_int, c_float, c_long, dt_byom
      type(dt_byom), value :: byom
      real(c_float), intent(inout) :: scale
      integer(c_long), intent(inout) :: skipped
    end function
    integer(c_int) function c_model_create_mlp(dp, cfg, opt, model) bind(C, name="dt_model_create_mlp")
      import :: c_int, dt_comm, mlp_config_c, optimizer_config_c, dt_model
      type(dt_comm), value :: dp
      type(mlp_config_c), intent(in) :: cfg
      type(optimizer_config_c), intent(in) :: opt
      type(dt_model), intent(inout) :: model
    end function
    integer(c_int) function c_model_create_mlp_grid(grid, cfg, opt, model) &
        bind(C, name="dt_model_create_mlp_grid")
      import :: c_int, dt_grid, mlp_config_c, optimizer_config_c, dt_model
      type(dt_grid), value :: grid
      type(mlp_config_c), intent(in) :: cfg
      type(optimizer_config_c), intent(in) :: opt
      type(dt_model), intent(inout) :: model
    end function
    integer(c_int) function c_model_create_gpt(dp, cfg, opt, model) bind(C, name="dt_model_create_gpt")
      import :: c_int, dt_comm, gpt_config_c, optimizer_config_c, dt_model
      type(dt_comm), value :: dp
      type(gpt_config_c), intent(in) :: cfg
      type(optimizer_config_c), intent(in) :: opt
      type(dt_model), intent(inout) :: model
    end function
    integer(c_int) function c_model_create_gpt_grid(grid, cfg, opt, model) &
        bind(C, name="dt_model_create_gpt_grid")
      import :: c_int, dt_grid, gpt_config_c, optimizer_config_c, dt_model
      type(dt_grid), value :: grid
      type(gpt_config_c), intent(in) :: cfg
      type(optimizer_config_c), intent(in) :: opt
      type(dt_model), intent(inout) :: model
    end function
    integer(c_int) function c_sample_token(logits, vocab, cfg, uniform, token) &
        bind(C, name="dt_sample_token")
      import :: c_int, c_float, c_double, c_int32_t, sampling_config_c
      real(c_float), dimension(*), intent(in) :: logits
      integer(c_int), value :: vocab
      type(sampling_config_c), intent(in) :: cfg
      real(c_double), value :: uniform
      integer(c_int32_t), intent(inout) :: token
    end function
    integer(c_int) function c_model_loss_scale(model, scale, skipped) &
        bind(C, name="dt_model_loss_scale")
      import :: c_int, c_float, c_long, dt_model
      type(dt_model), value :: model
      real(c_float), intent(inout) :: scale
      integer(c_long), intent(inout) :: skipped
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
      real(c_float), intent(inout) :: loss
    end function
    integer(c_int) function c_mlp_evaluate(model, x, labels, batch, loss) bind(C, name="dt_mlp_evaluate")
      import :: c_int, c_float, dt_model
      type(dt_model), value :: model
      real(c_float), dimension(*), intent(in) :: x
      integer(c_int), dimension(*), intent(in) :: labels
      integer(c_int), value :: batch
      real(c_float), intent(inout) :: loss
    end function
    integer(c_int) function c_mlp_predict(model, x, batch, logits) bind(C, name="dt_mlp_predict")
      import :: c_int, c_float, dt_model
      type(dt_model), value :: model
      real(c_float), dimension(*), intent(in) :: x
      integer(c_int), value :: batch
      real(c_float), dimension(*), intent(out) :: logits
    end function
    integer(c_int) function c_gpt_forward_backward(model, tokens, targets, batch, seq, loss) &
        bind(C, name="dt_gpt_forward_backward")
      import :: c_int, c_int32_t, c_float, dt_model
      type(dt_model), value :: model
      integer(c_int32_t), dimension(*), intent(in) :: tokens, targets
      integer(c_int), value :: batch, seq
      real(c_float), intent(inout) :: loss
    end function
    integer(c_int) function c_gpt_decode(model, tokens, count, new_text, logits) &
        bind(C, name="dt_gpt_decode")
      import :: c_int, c_int32_t, c_float, dt_model
      type(dt_model), value :: model
      integer(c_int32_t), dimension(*), intent(in) :: tokens
      integer(c_int), value :: count, new_text
      real(c_float), dimension(*), intent(out) :: logits
    end function
    integer(c_int) function c_gpt_evaluate(model, tokens, targets, batch, seq, loss) &
        bind(C, name="dt_gpt_evaluate")
      import :: c_int, c_int32_t, c_float, dt_model
      type(dt_model), value :: model
      integer(c_int32_t), dimension(*), intent(in) :: tokens, targets
      integer(c_int), value :: batch, seq
      real(c_float), intent(inout) :: loss
    end function
    integer(c_int) function c_model_step(model, lr, norm) bind(C, name="dt_model_step")
      import :: c_int, c_float, dt_model
      type(dt_model), value :: model
      real(c_float), value :: lr
      real(c_float), intent(inout) :: norm
    end function
    integer(c_int) function c_model_steps(model, steps) bind(C, name="dt_model_steps")
      import :: c_int, c_long, dt_model
      type(dt_model), value :: model
      integer(c_long), intent(inout) :: steps
    end function
    integer(c_int) function c_model_num_logits(model, n) bind(C, name="dt_model_num_logits")
      import :: c_int, dt_model
      type(dt_model), value :: model
      integer(c_int), intent(inout) :: n
    end function
    integer(c_int) function c_model_num_parameters(model, n) bind(C, name="dt_model_num_parameters")
      import :: c_int, c_size_t, dt_model
      type(dt_model), value :: model
      integer(c_size_t), intent(inout) :: n
    end function
    integer(c_int) function c_model_get_parameters(model, dst, capacity) &
        bind(C, name="dt_model_get_parameters")
      import :: c_int, c_float, c_size_t, dt_model
      type(dt_model), value :: model
      real(c_float), dimension(*), intent(out) :: dst
      integer(c_size_t), value :: capacity
    end function
    integer(c_int) function c_model_num_tensors(model, n) bind(C, name="dt_model_num_tensors")
      import :: c_int, dt_model
      type(dt_model), value :: model
      integer(c_int), intent(inout) :: n
    end function
    integer(c_int) function c_model_device(model, name, capacity, length) &
        bind(C, name="dt_model_device")
      import :: c_int, c_ptr, c_size_t, dt_model
      type(dt_model), value :: model
      type(c_ptr), value :: name
      integer(c_size_t), value :: capacity
      integer(c_size_t), intent(inout) :: length
    end function
    integer(c_int) function c_model_tensor_name(model, index, name, capacity, length) &
        bind(C, name="dt_model_tensor_name")
      import :: c_int, c_ptr, c_size_t, dt_model
      type(dt_model), value :: model
      integer(c_int), value :: index
      type(c_ptr), value :: name
      integer(c_size_t), value :: capacity
      integer(c_size_t), intent(inout) :: length
    end function
    integer(c_int) function c_model_tensor_shape(model, name, shape, capacity, ndim) &
        bind(C, name="dt_model_tensor_shape")
      import :: c_int, c_char, c_ptr, dt_model
      type(dt_model), value :: model
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_ptr), value :: shape
      integer(c_int), value :: capacity
      integer(c_int), intent(inout) :: ndim
    end function
    integer(c_int) function c_model_get_tensor(model, name, dst, capacity) &
        bind(C, name="dt_model_get_tensor")
      import :: c_int, c_char, c_ptr, c_size_t, dt_model
      type(dt_model), value :: model
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_ptr), value :: dst
      integer(c_size_t), value :: capacity
    end function
    integer(c_int) function c_model_set_tensor(model, name, src, count) &
        bind(C, name="dt_model_set_tensor")
      import :: c_int, c_char, c_ptr, c_size_t, dt_model
      type(dt_model), value :: model
      character(kind=c_char), dimension(*), intent(in) :: name
      type(c_ptr), value :: src
      integer(c_size_t), value :: count
    end function
    integer(c_int) function c_byom_save_checkpoint(byom, dir, keep) bind(C, name="dt_byom_save_checkpoint")
      import :: c_int, c_char, dt_byom
      type(dt_byom), value :: byom
      character(kind=c_char), dimension(*), intent(in) :: dir
      integer(c_int), value :: keep
    end function
    integer(c_int) function c_byom_load_checkpoint(byom, source) bind(C, name="dt_byom_load_checkpoint")
      import :: c_int, c_char, dt_byom
      type(dt_byom), value :: byom
      character(kind=c_char), dimension(*), intent(in) :: source
    end function
    integer(c_int) function c_model_save_checkpoint(model, dir, keep) bind(C, name="dt_model_save_checkpoint")
      import :: c_int, c_char, dt_model
      type(dt_model), value :: model
      character(kind=c_char), dimension(*), intent(in) :: dir
      integer(c_int), value :: keep
    end function
    integer(c_int) function c_model_load_checkpoint(model, source) bind(C, name="dt_model_load_checkpoint")
      import :: c_int, c_char, dt_model
      type(dt_model), value :: model
      character(kind=c_char), dimension(*), intent(in) :: source
    end function
    integer(c_int) function c_model_load_weights(model, source) bind(C, name="dt_model_load_weights")
      import :: c_int, c_char, dt_model
      type(dt_model), value :: model
      character(kind=c_char), dimension(*), intent(in) :: source
    end function
    integer(c_int) function c_checkpoint_find(comm, dir, path, capacity, length) &
        bind(C, name="dt_checkpoint_find")
      import :: c_int, c_char, c_ptr, c_size_t, dt_comm
      type(dt_comm), value :: comm
      character(kind=c_char), dimension(*), intent(in) :: dir
      type(c_ptr), value :: path
      integer(c_size_t), value :: capacity
      integer(c_size_t), intent(inout) :: length
    end function
    pure integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
      import :: c_size_t, c_ptr
      type(c_ptr), value, intent(in) :: s
    end function
  end interface

  public :: c_get_version, c_get_error_string, c_get_last_error, c_init, c_init_fortran_comm, &
            c_finalize, c_context_rank, c_context_size, c_context_world, c_context_cpu_threads, &
            c_comm_rank, c_comm_size, c_comm_world_ranks, c_all_reduce, c_all_gather, &
            c_reduce_scatter, c_broadcast, c_barrier, &
            c_comm_device, c_grid_create, c_grid_destroy, c_grid_shape, c_grid_coords, c_grid_comm, &
            c_byom_create, c_byom_destroy, c_byom_register, c_byom_step, c_byom_steps, &
            c_byom_scale_loss, c_byom_loss_scale, c_byom_create_grid, &
            c_model_create_mlp, c_model_create_mlp_grid, c_model_create_gpt, c_model_create_gpt_grid, c_model_destroy, &
            c_sample_token, c_model_loss_scale, c_mlp_forward_backward, &
            c_mlp_evaluate, c_mlp_predict, c_gpt_forward_backward, c_gpt_evaluate, c_gpt_decode, &
            c_model_step, &
            c_model_steps, c_model_num_parameters, c_model_num_logits, c_model_get_parameters, c_model_num_tensors, &
            c_model_device, c_model_tensor_name, c_model_tensor_shape, c_model_get_tensor, c_model_set_tensor, &
            c_byom_save_checkpoint, c_byom_load_checkpoint, c_model_save_checkpoint, &
            c_model_load_checkpoint, c_model_load_weights, c_checkpoint_find

contains

  ! A NUL-terminated C string as a Fortran string ('' for a null pointer).
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

  ! A Fortran string for C: trailing blanks dropped, NUL appended.
  pure function c_string(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: c
    c = trim(s)//c_null_char
  end function

  ! s as a NUL-terminated array of C characters, for a char* field of a C struct (c_loc).
  subroutine c_chars(s, chars)
    character(len=*), intent(in) :: s
    character(kind=c_char), allocatable, intent(out) :: chars(:)
    integer :: i
    allocate(chars(len_trim(s) + 1))
    do i = 1, len_trim(s)
      chars(i) = s(i:i)
    end do
    chars(len_trim(s) + 1) = c_null_char
  end subroutine

  ! Optimiser settings from optional arguments; absent ones keep DT_OPTIMIZER_CONFIG_INIT's.
  function optimizer_config(weight_decay, clip_grad, zero_stage, beta1, beta2, eps, bucket_mb) result(o)
    real, intent(in), optional :: weight_decay, clip_grad, beta1, beta2, eps
    integer, intent(in), optional :: zero_stage
    real(c_double), intent(in), optional :: bucket_mb
    type(optimizer_config_c) :: o
    o = optimizer_config_c(0_c_size_t, 0.9, 0.95, 1e-8, 0.1, 1.0, 0, 25.0d0)
    o%struct_size = c_sizeof(o)
    if (present(weight_decay)) o%weight_decay = weight_decay
    if (present(clip_grad)) o%clip_grad = clip_grad
    if (present(zero_stage)) o%zero_stage = zero_stage
    if (present(beta1)) o%beta1 = beta1
    if (present(beta2)) o%beta2 = beta2
    if (present(eps)) o%eps = eps
    if (present(bucket_mb)) o%bucket_mb = bucket_mb
  end function

  ! The calling thread's message from this module's own checks; '' when the last call into C
  ! came after it.
  function fortran_error() result(s)
    character(len=:), allocatable :: s
    s = from_c(c_fortran_error())
  end function

  subroutine set_fortran_error(text)
    character(len=*), intent(in) :: text
    call c_set_fortran_error(text, int(len(text), c_size_t))
  end subroutine

  ! The result of a call into C; the Fortran-side message no longer applies.
  integer function ret(code)
    integer(c_int), intent(in) :: code
    call set_fortran_error('')
    ret = code
  end function

  ! After a failure found here: `code` is the C call's result, made with arguments it refuses
  ! (no samples, no tokens), so that where the call is collective the other ranks fail with
  ! this one instead of waiting for it. The message stays the one found here.
  subroutine fail_in_c_too(code)
    integer(c_int), intent(in) :: code
    if (code == 0_c_int) call set_fortran_error(fortran_error()//' (the C call did not refuse it)')
  end subroutine

  ! A failure found here, before calling C: code, and "procedure: message" for dt_get_last_error.
  subroutine fail_here(ierr, code, procedure, message)
    integer, intent(out) :: ierr
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: procedure, message
    ierr = code
    call set_fortran_error(procedure//': '//message)
  end subroutine

end module dtrain_c_binding
