!> @file
!> Built-in models (MLP classifier, GPT): creation, forward and backward on the program's
!> batches, evaluation, prediction and the optimiser step.
!> @brief Part of module dtrain: the built-in MLP and GPT.
module dtrain_models
  use, intrinsic :: iso_c_binding
  use dtrain_types
  use dtrain_c_binding
  use dtrain_tensors, only: dt_model_num_tensors, dt_model_tensor_name, dt_model_tensor_shape
  implicit none
  private

  public :: dt_model_create_mlp, dt_model_create_gpt, dt_model_destroy, dt_model_device, &
            dt_sample_token, dt_model_loss_scale, &
            dt_model_step, &
            dt_model_steps, dt_mlp_forward_backward, dt_mlp_evaluate, dt_mlp_predict, &
            dt_gpt_forward_backward, dt_gpt_evaluate, dt_gpt_decode

  !> dt_model_create_mlp(dp, ...) for a data-parallel MLP over a group, and
  !> dt_model_create_mlp(grid, ...) for one split over a grid's TP group (see each form).
  interface dt_model_create_mlp
    module procedure create_mlp_dp, create_mlp_grid
  end interface

  !> dt_model_create_gpt(dp, ...) for a data-parallel GPT over a group, and
  !> dt_model_create_gpt(grid, ...) for one split over a grid's TP group (see each form).
  interface dt_model_create_gpt
    module procedure create_gpt_dp, create_gpt_grid
  end interface

contains

  !> The built-in MLP classifier: Linear layers with GELU between them, softmax
  !> cross-entropy; parameters 'layers.I.weight' and 'layers.I.bias'. Collective over dp.
  !> Called as dt_model_create_mlp(dp, sizes, max_batch, model, ierr, ...).
  !> @param[in] dp the data-parallel group its steps average over.
  !> @param[in] sizes integer(c_int) (inputs, hidden..., classes), at least 2 entries.
  !> @param[in] max_batch largest batch passed to forward.
  !> @param[out] model the new model (null on failure).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (fewer than 2 sizes);
  !>             DT_ERR_INVALID_CONFIG (a size, a setting, or seeds that differ over dp).
  !> @param[in] seed optional integer(c_int64_t) weight initialisation (default 1337).
  !> @param[in] weight_decay optional, as for dt_byom_create (default 0.1).
  !> @param[in] clip_grad optional (default 1).
  !> @param[in] zero_stage optional 0 to 3 (default 0); 2 and 3 make each forward-backward
  !>            collective over dp, 3 also the evaluate and tensor-reading calls (docs/c-api.md).
  !> @param[in] beta1 optional (default 0.9).
  !> @param[in] beta2 optional (default 0.95).
  !> @param[in] eps optional (default 1e-8).
  !> @param[in] bucket_mb optional real(c_double) (default 25).
  !> @param[in] device optional 'auto' (default: a GPU where the CUDA plugin finds one, else
  !>            the CPU), 'cpu' or 'cuda'; where the model lives and computes (docs/c-api.md).
  !>            'cuda' where some rank of dp has no usable GPU gives DT_ERR_UNAVAILABLE.
  !> @param[in] precision optional 'fp32' (default), 'bf16' or 'fp16' (mixed precision, as for
  !>            the GPT).
  subroutine create_mlp_dp(dp, sizes, max_batch, model, ierr, seed, weight_decay, &
                           clip_grad, zero_stage, beta1, beta2, eps, bucket_mb, device, &
                           precision)
    type(dt_comm), intent(in) :: dp
    integer(c_int), dimension(:), target, contiguous, intent(in) :: sizes
    integer, intent(in) :: max_batch
    type(dt_model), intent(out) :: model
    integer, intent(out) :: ierr
    integer(c_int64_t), intent(in), optional :: seed
    real, intent(in), optional :: weight_decay, clip_grad, beta1, beta2, eps
    integer, intent(in), optional :: zero_stage
    real(c_double), intent(in), optional :: bucket_mb
    character(len=*), intent(in), optional :: device, precision
    type(mlp_config_c) :: cfg
    character(kind=c_char), allocatable, target :: device_c(:), precision_c(:)
    call mlp_config(cfg, device_c, precision_c, sizes, max_batch, seed, device, precision)
    ierr = ret(c_model_create_mlp(dp, cfg, optimizer_config(weight_decay, clip_grad, zero_stage, &
                                                            beta1, beta2, eps, bucket_mb), model))
  end subroutine

  !> The MLP split over a grid's TP group (Megatron's column- and row-parallel pairs),
  !> data-parallel over its DP group (dt_model_create_mlp_grid in docs/c-api.md); the grid's
  !> pp must be 1. Collective over the grid's world; every call on the model is collective
  !> over its TP group, whose ranks pass the same x and labels. Called as
  !> dt_model_create_mlp(grid, sizes, max_batch, model, ierr, ...).
  !> @param[in] grid the process grid.
  !> @param[in] sizes integer(c_int), as for the data-parallel form; the output size of each
  !>            column-parallel layer (layers 1, 3, ... in Fortran's counting, before the last)
  !>            divisible by the grid's tp.
  !> @param[in] max_batch largest batch passed to forward.
  !> @param[out] model the new model (null on failure).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_CONFIG (as the data-parallel form, or a size
  !>             that does not split over tp); DT_ERR_NOT_IMPLEMENTED (pp > 1).
  !> @param[in] seed optional integer(c_int64_t), as for the data-parallel form; so are the others.
  !> @param[in] weight_decay optional.
  !> @param[in] clip_grad optional.
  !> @param[in] zero_stage optional 0 to 3, over the DP group.
  !> @param[in] beta1 optional.
  !> @param[in] beta2 optional.
  !> @param[in] eps optional.
  !> @param[in] bucket_mb optional real(c_double).
  !> @param[in] device optional 'auto' (default), 'cpu' or 'cuda'.
  !> @param[in] precision optional 'fp32' (default), 'bf16' or 'fp16'.
  subroutine create_mlp_grid(grid, sizes, max_batch, model, ierr, seed, weight_decay, &
                             clip_grad, zero_stage, beta1, beta2, eps, bucket_mb, device, &
                             precision)
    type(dt_grid), intent(in) :: grid
    integer(c_int), dimension(:), target, contiguous, intent(in) :: sizes
    integer, intent(in) :: max_batch
    type(dt_model), intent(out) :: model
    integer, intent(out) :: ierr
    integer(c_int64_t), intent(in), optional :: seed
    real, intent(in), optional :: weight_decay, clip_grad, beta1, beta2, eps
    integer, intent(in), optional :: zero_stage
    real(c_double), intent(in), optional :: bucket_mb
    character(len=*), intent(in), optional :: device, precision
    type(mlp_config_c) :: cfg
    character(kind=c_char), allocatable, target :: device_c(:), precision_c(:)
    call mlp_config(cfg, device_c, precision_c, sizes, max_batch, seed, device, precision)
    ierr = ret(c_model_create_mlp_grid(grid, cfg, optimizer_config(weight_decay, clip_grad, &
                                       zero_stage, beta1, beta2, eps, bucket_mb), model))
  end subroutine

  ! DT_MLP_CONFIG_INIT with the sizes and the arguments present; device_c and precision_c
  ! hold the names for the call (cfg%device and cfg%precision point into them).
  subroutine mlp_config(cfg, device_c, precision_c, sizes, max_batch, seed, device, precision)
    type(mlp_config_c), intent(out) :: cfg
    character(kind=c_char), allocatable, target, intent(inout) :: device_c(:), precision_c(:)
    integer(c_int), dimension(:), target, contiguous, intent(in) :: sizes
    integer, intent(in) :: max_batch
    integer(c_int64_t), intent(in), optional :: seed
    character(len=*), intent(in), optional :: device, precision
    cfg = mlp_config_c(0_c_size_t, size(sizes), c_loc(sizes), max_batch, 1337_c_int64_t, &
                       c_null_ptr, c_null_ptr)
    cfg%struct_size = c_sizeof(cfg)
    if (present(seed)) cfg%seed = seed
    if (present(device)) then
      call c_chars(device, device_c)
      cfg%device = c_loc(device_c)
    end if
    if (present(precision)) then
      call c_chars(precision, precision_c)
      cfg%precision = c_loc(precision_c)
    end if
  end subroutine

  !> A GPT-2-style model (names and shapes in docs/model.md), data-parallel over dp.
  !> Collective over dp. Called as dt_model_create_gpt(dp, model, ierr, ...).
  !> @param[in] dp the data-parallel group its steps average over.
  !> @param[out] model the new model (null on failure).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_CONFIG (an impossible shape or setting).
  !> @param[in] layers optional transformer blocks (default 4).
  !> @param[in] heads optional attention heads, dividing d_model (default 4).
  !> @param[in] d_model optional width (default 256).
  !> @param[in] seq_len optional longest sequence (default 256).
  !> @param[in] vocab optional vocabulary size (default 256).
  !> @param[in] tie_embeddings optional; .false. gives the LM head its own weights.
  !> @param[in] max_batch optional largest number of sequences per forward (default 8).
  !> @param[in] seed optional integer(c_int64_t) weight initialisation (default 1337).
  !> @param[in] weight_decay optional, as for dt_byom_create (default 0.1).
  !> @param[in] clip_grad optional (default 1).
  !> @param[in] zero_stage optional 0 to 3 (default 0); 2 and 3 make each forward-backward
  !>            collective over dp, 3 also the evaluate and tensor-reading calls (docs/c-api.md).
  !> @param[in] beta1 optional (default 0.9).
  !> @param[in] beta2 optional (default 0.95).
  !> @param[in] eps optional (default 1e-8).
  !> @param[in] bucket_mb optional real(c_double) (default 25).
  !> @param[in] recompute optional; .true. keeps only each block's output for backward and
  !>            recomputes the rest (less activation memory, the same results bit for bit).
  !> @param[in] device optional 'auto' (default), 'cpu' or 'cuda', as for dt_model_create_mlp.
  !> @param[in] precision optional 'fp32' (default), 'bf16' or 'fp16': mixed precision with
  !>            fp32 master weights (docs/c-api.md); in fp16 an overflowing step is skipped
  !>            and dt_model_step's grad_norm is NaN.
  subroutine create_gpt_dp(dp, model, ierr, layers, heads, d_model, seq_len, vocab, &
                           tie_embeddings, max_batch, seed, weight_decay, clip_grad, &
                           zero_stage, beta1, beta2, eps, bucket_mb, recompute, device, &
                           precision)
    type(dt_comm), intent(in) :: dp
    type(dt_model), intent(out) :: model
    integer, intent(out) :: ierr
    integer, intent(in), optional :: layers, heads, d_model, seq_len, vocab, max_batch
    logical, intent(in), optional :: tie_embeddings
    integer(c_int64_t), intent(in), optional :: seed
    real, intent(in), optional :: weight_decay, clip_grad, beta1, beta2, eps
    integer, intent(in), optional :: zero_stage
    real(c_double), intent(in), optional :: bucket_mb
    logical, intent(in), optional :: recompute
    character(len=*), intent(in), optional :: device, precision
    type(gpt_config_c) :: cfg
    character(kind=c_char), allocatable, target :: device_c(:), precision_c(:)
    call gpt_config(cfg, device_c, precision_c, layers, heads, d_model, seq_len, vocab, &
                    tie_embeddings, max_batch, seed, recompute, device, precision)
    ierr = ret(c_model_create_gpt(dp, cfg, optimizer_config(weight_decay, clip_grad, zero_stage, &
                                                            beta1, beta2, eps, bucket_mb), model))
  end subroutine

  !> A GPT-2-style model split over a process grid: tensor parallelism over its TP group,
  !> pipeline parallelism over its PP group, data parallelism over its DP group
  !> (dt_model_create_gpt_grid in docs/c-api.md). Collective over the grid's world; every
  !> pass through the model is collective over its replica (the TP groups on every stage),
  !> whose ranks pass the same tokens. Called as dt_model_create_gpt(grid, model, ierr, ...).
  !> @param[in] grid the process grid.
  !> @param[out] model the new model (null on failure).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_CONFIG (an impossible shape, split or
  !>             schedule), DT_ERR_NOT_IMPLEMENTED (zero_stage 2 or 3 with pp > 1).
  !> @param[in] layers optional, as for the data-parallel form above; so are the others.
  !> @param[in] heads optional, divisible by the grid's tp.
  !> @param[in] d_model optional, divisible by the grid's tp.
  !> @param[in] seq_len optional.
  !> @param[in] vocab optional.
  !> @param[in] tie_embeddings optional logical.
  !> @param[in] max_batch optional.
  !> @param[in] seed optional integer(c_int64_t).
  !> @param[in] weight_decay optional.
  !> @param[in] clip_grad optional.
  !> @param[in] zero_stage optional 0 to 3, over the DP group.
  !> @param[in] beta1 optional.
  !> @param[in] beta2 optional.
  !> @param[in] eps optional.
  !> @param[in] bucket_mb optional real(c_double).
  !> @param[in] recompute optional logical.
  !> @param[in] device optional 'auto' (default), 'cpu' or 'cuda'.
  !> @param[in] sequence_parallel optional logical; .true. splits the LayerNorms and the
  !>            residual stream by sequence position over the TP group (needs tp > 1).
  !> @param[in] precision optional 'fp32' (default), 'bf16' or 'fp16'.
  !> @param[in] schedule optional, pp > 1 only: '1f1b' (default), 'gpipe' or 'interleaved'.
  !> @param[in] micro_batches optional, pp > 1 only: micro-batches a batch is cut into
  !>            (default: the grid's pp).
  !> @param[in] virtual_stages optional, pp > 1 only: model chunks per stage (default 1).
  !> @param[in] pipeline_layers optional, pp > 1 only: the layers of each chunk, e.g. '3,1'
  !>            (default: as even as possible).
  subroutine create_gpt_grid(grid, model, ierr, layers, heads, d_model, seq_len, vocab, &
                             tie_embeddings, max_batch, seed, weight_decay, clip_grad, &
                             zero_stage, beta1, beta2, eps, bucket_mb, recompute, device, &
                             sequence_parallel, precision, schedule, micro_batches, &
                             virtual_stages, pipeline_layers)
    type(dt_grid), intent(in) :: grid
    type(dt_model), intent(out) :: model
    integer, intent(out) :: ierr
    integer, intent(in), optional :: layers, heads, d_model, seq_len, vocab, max_batch
    logical, intent(in), optional :: tie_embeddings
    integer(c_int64_t), intent(in), optional :: seed
    real, intent(in), optional :: weight_decay, clip_grad, beta1, beta2, eps
    integer, intent(in), optional :: zero_stage
    real(c_double), intent(in), optional :: bucket_mb
    logical, intent(in), optional :: recompute, sequence_parallel
    character(len=*), intent(in), optional :: device, precision, schedule, pipeline_layers
    integer, intent(in), optional :: micro_batches, virtual_stages
    type(gpt_config_c) :: cfg
    character(kind=c_char), allocatable, target :: device_c(:), precision_c(:), schedule_c(:), &
                                                   layers_c(:)
    call gpt_config(cfg, device_c, precision_c, layers, heads, d_model, seq_len, vocab, &
                    tie_embeddings, max_batch, seed, recompute, device, precision)
    if (present(sequence_parallel)) cfg%sequence_parallel = merge(1, 0, sequence_parallel)
    if (present(schedule)) then
      call c_chars(schedule, schedule_c)
      cfg%schedule = c_loc(schedule_c)
    end if
    if (present(micro_batches)) cfg%micro_batches = micro_batches
    if (present(virtual_stages)) cfg%virtual_stages = virtual_stages
    if (present(pipeline_layers)) then
      call c_chars(pipeline_layers, layers_c)
      cfg%pipeline_layers = c_loc(layers_c)
    end if
    ierr = ret(c_model_create_gpt_grid(grid, cfg, optimizer_config(weight_decay, clip_grad, &
                                       zero_stage, beta1, beta2, eps, bucket_mb), model))
  end subroutine

  ! DT_GPT_CONFIG_INIT with the arguments present; device_c and precision_c hold the names
  ! for the call (cfg%device and cfg%precision point into them).
  subroutine gpt_config(cfg, device_c, precision_c, layers, heads, d_model, seq_len, vocab, &
                        tie_embeddings, max_batch, seed, recompute, device, precision)
    type(gpt_config_c), intent(out) :: cfg
    character(kind=c_char), allocatable, target, intent(inout) :: device_c(:), precision_c(:)
    integer, intent(in), optional :: layers, heads, d_model, seq_len, vocab, max_batch
    logical, intent(in), optional :: tie_embeddings, recompute
    integer(c_int64_t), intent(in), optional :: seed
    character(len=*), intent(in), optional :: device, precision
    cfg = gpt_config_c(0_c_size_t, 4, 4, 256, 256, 256, 1, 8, 1337_c_int64_t, 0, c_null_ptr, 0, &
                       c_null_ptr, c_null_ptr, 0, 0, c_null_ptr)
    cfg%struct_size = c_sizeof(cfg)
    if (present(layers)) cfg%layers = layers
    if (present(heads)) cfg%heads = heads
    if (present(d_model)) cfg%d_model = d_model
    if (present(seq_len)) cfg%seq_len = seq_len
    if (present(vocab)) cfg%vocab = vocab
    if (present(max_batch)) cfg%max_batch = max_batch
    if (present(tie_embeddings)) cfg%tie_embeddings = merge(1, 0, tie_embeddings)
    if (present(seed)) cfg%seed = seed
    if (present(recompute)) cfg%recompute = merge(1, 0, recompute)
    if (present(device)) then
      call c_chars(device, device_c)
      cfg%device = c_loc(device_c)
    end if
    if (present(precision)) then
      call c_chars(precision, precision_c)
      cfg%precision = c_loc(precision_c)
    end if
  end subroutine

  !> Releases a model and its optimiser state.
  !> @param[inout] model the model; null afterwards on success.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_model_destroy(model, ierr)
    type(dt_model), intent(inout) :: model
    integer, intent(out) :: ierr
    ierr = ret(c_model_destroy(model))
    if (ierr == DT_SUCCESS) model%ptr = c_null_ptr
  end subroutine

  !> The next token from one row of logits, as dtrain-gpt --generate chooses it
  !> (dt_sample_token in docs/c-api.md).
  !> @param[in] logits real(c_float) logits(vocab), e.g. dt_gpt_decode's.
  !> @param[in] uniform real(c_double) in [0, 1), from the program's random stream (the same
  !>            value on every rank gives every rank the same token).
  !> @param[out] token integer(c_int32_t): the chosen id, 0-based as the model's tokens.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (a setting or uniform out of range).
  !> @param[in] temperature optional real(c_double) (default 1; 0: the most likely token).
  !> @param[in] top_k optional: only the k most likely tokens (default 0: all).
  !> @param[in] top_p optional real(c_double): nucleus sampling (default 1: all).
  subroutine dt_sample_token(logits, uniform, token, ierr, temperature, top_k, top_p)
    real(c_float), dimension(:), contiguous, intent(in) :: logits
    real(c_double), intent(in) :: uniform
    integer(c_int32_t), intent(out) :: token
    integer, intent(out) :: ierr
    real(c_double), intent(in), optional :: temperature, top_p
    integer, intent(in), optional :: top_k
    type(sampling_config_c) :: cfg
    cfg = sampling_config_c(0_c_size_t, 1.0d0, 0, 1.0d0)
    cfg%struct_size = c_sizeof(cfg)
    if (present(temperature)) cfg%temperature = temperature
    if (present(top_k)) cfg%top_k = top_k
    if (present(top_p)) cfg%top_p = top_p
    token = -1
    ierr = ret(c_sample_token(logits, int(size(logits), c_int), cfg, uniform, token))
  end subroutine

  !> A model's fp16 loss scale and the steps it skipped (1 and 0 in other precisions).
  !> @param[in] model a live model.
  !> @param[out] scale real(c_float): the factor the next backward is seeded with.
  !> @param[out] skipped integer(c_long): steps skipped on overflow so far.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_model_loss_scale(model, scale, skipped, ierr)
    type(dt_model), intent(in) :: model
    real(c_float), intent(out) :: scale
    integer(c_long), intent(out) :: skipped
    integer, intent(out) :: ierr
    scale = 1  ! what a failed call leaves, as dt_byom_loss_scale
    skipped = 0
    ierr = ret(c_model_loss_scale(model, scale, skipped))
  end subroutine

  !> The device a model lives on.
  !> @param[in] model a live model.
  !> @param[out] name its description, starting with 'cpu' or 'cuda' (e.g. 'cpu (OpenBLAS)').
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_model_device(model, name, ierr)
    type(dt_model), intent(in) :: model
    character(len=:), allocatable, intent(out) :: name
    integer, intent(out) :: ierr
    character(kind=c_char), allocatable, target :: buf(:)
    integer(c_size_t) :: n, capacity
    name = ''
    n = 0
    ierr = ret(c_model_device(model, c_null_ptr, 0_c_size_t, n))
    if (ierr /= DT_SUCCESS) return
    capacity = n + 1  ! not n + 1 in the call: n is also its output
    allocate(buf(capacity))
    ierr = ret(c_model_device(model, c_loc(buf), capacity, n))
    if (ierr == DT_SUCCESS) name = from_c(c_loc(buf))
  end subroutine

  ! Inputs and classes of an MLP, from the shapes of its first and last tensors; 0 when the
  ! handle is bad or not an MLP (the C call then refuses it before touching any array).
  subroutine mlp_dims(model, inputs, classes)
    type(dt_model), intent(in) :: model
    integer, intent(out) :: inputs, classes
    character(len=:), allocatable :: first, last
    integer(c_int64_t), allocatable :: s_in(:), s_out(:)
    integer :: n, ierr
    inputs = 0
    classes = 0
    call dt_model_num_tensors(model, n, ierr)
    if (ierr /= DT_SUCCESS) return
    call dt_model_tensor_name(model, 1, first, ierr)
    if (ierr /= DT_SUCCESS .or. first /= 'layers.0.weight') return
    call dt_model_tensor_name(model, n, last, ierr)
    if (ierr /= DT_SUCCESS) return
    call dt_model_tensor_shape(model, first, s_in, ierr)
    if (ierr /= DT_SUCCESS) return
    call dt_model_tensor_shape(model, last, s_out, ierr)
    if (ierr /= DT_SUCCESS) return
    inputs = int(s_in(1))
    classes = int(s_out(1))
  end subroutine

  ! Checks x(inputs, batch), labels(batch) (nlabels < 0: none) and logits(classes, batch)
  ! (logits_shape(1) < 0: none) against the model; .false. with ierr set when they do not fit.
  logical function mlp_arrays_fit(model, x, nlabels, logits_shape, procedure, ierr) result(ok)
    type(dt_model), intent(in) :: model
    real(c_float), dimension(:, :), intent(in) :: x
    integer, intent(in) :: nlabels, logits_shape(2)
    character(len=*), intent(in) :: procedure
    integer, intent(out) :: ierr
    integer :: inputs, classes
    ok = .false.
    ierr = DT_SUCCESS
    call mlp_dims(model, inputs, classes)
    if (inputs > 0 .and. size(x, 1) /= inputs) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, procedure, 'x must have one row per input')
    else if (nlabels >= 0 .and. nlabels /= size(x, 2)) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, procedure, &
                     'labels must have one entry per column of x')
    else if (classes > 0 .and. logits_shape(1) >= 0 .and. &
             any(logits_shape /= [classes, size(x, 2)])) then
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, procedure, &
                     'logits must be (classes, batch) with batch the columns of x')
    else
      ok = .true.
    end if
  end function

  !> MLP forward and backward on this rank's batch; gradients accumulate until dt_model_step.
  !> @param[in] model a live MLP.
  !> @param[in] x real(c_float) x(inputs, batch): one sample per column.
  !> @param[in] labels integer(c_int) labels(batch), 0-based classes (values, not indices).
  !> @param[out] loss this rank's mean cross-entropy.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (shapes, batch > max_batch, a label
  !>             out of range, not an MLP).
  subroutine dt_mlp_forward_backward(model, x, labels, loss, ierr)
    type(dt_model), intent(in) :: model
    real(c_float), dimension(:, :), contiguous, intent(in) :: x
    integer(c_int), dimension(:), contiguous, intent(in) :: labels
    real, intent(out) :: loss
    integer, intent(out) :: ierr
    real(c_float) :: l
    l = 0
    loss = 0
    if (.not. mlp_arrays_fit(model, x, size(labels), [-1, -1], 'dt_mlp_forward_backward', ierr)) then
      call fail_in_c_too(c_mlp_forward_backward(model, x, labels, 0_c_int, l))
      return
    end if
    ierr = ret(c_mlp_forward_backward(model, x, labels, int(size(x, 2), c_int), l))
    loss = l
  end subroutine

  !> Mean MLP loss on a batch, gradients untouched.
  !> @param[in] model a live MLP.
  !> @param[in] x real(c_float) x(inputs, batch).
  !> @param[in] labels integer(c_int) labels(batch), 0-based classes.
  !> @param[out] loss the mean cross-entropy.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT.
  subroutine dt_mlp_evaluate(model, x, labels, loss, ierr)
    type(dt_model), intent(in) :: model
    real(c_float), dimension(:, :), contiguous, intent(in) :: x
    integer(c_int), dimension(:), contiguous, intent(in) :: labels
    real, intent(out) :: loss
    integer, intent(out) :: ierr
    real(c_float) :: l
    l = 0
    loss = 0
    if (.not. mlp_arrays_fit(model, x, size(labels), [-1, -1], 'dt_mlp_evaluate', ierr)) then
      call fail_in_c_too(c_mlp_evaluate(model, x, labels, 0_c_int, l))
      return
    end if
    ierr = ret(c_mlp_evaluate(model, x, labels, int(size(x, 2), c_int), l))
    loss = l
  end subroutine

  !> MLP logits of a batch.
  !> @param[in] model a live MLP.
  !> @param[in] x real(c_float) x(inputs, batch).
  !> @param[inout] logits real(c_float) logits(classes, batch); the predicted class of sample
  !>             s is maxloc(logits(:, s)) - 1.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (shapes, not an MLP).
  subroutine dt_mlp_predict(model, x, logits, ierr)
    type(dt_model), intent(in) :: model
    real(c_float), dimension(:, :), contiguous, intent(in) :: x
    ! inout, not out: a strided section is copied back whole, and out left its elements that C
    ! does not write (all of them on a refusal) undefined
    real(c_float), dimension(:, :), contiguous, intent(inout) :: logits
    integer, intent(out) :: ierr
    if (.not. mlp_arrays_fit(model, x, -1, shape(logits), 'dt_mlp_predict', ierr)) then
      call fail_in_c_too(c_mlp_predict(model, x, 0_c_int, logits))
      return
    end if
    ierr = ret(c_mlp_predict(model, x, int(size(x, 2), c_int), logits))
  end subroutine

  ! tokens and targets of one shape; .false. with ierr set otherwise.
  logical function same_shape(tokens, targets, procedure, ierr) result(ok)
    integer(c_int32_t), dimension(:, :), intent(in) :: tokens, targets
    character(len=*), intent(in) :: procedure
    integer, intent(out) :: ierr
    ok = all(shape(tokens) == shape(targets))
    ierr = DT_SUCCESS
    if (.not. ok) call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, procedure, &
                                 'tokens and targets must have the same shape')
  end function

  !> GPT forward and backward (next-token cross-entropy); gradients accumulate until
  !> dt_model_step.
  !> @param[in] model a live GPT.
  !> @param[in] tokens integer(c_int32_t) tokens(seq, batch): one sequence per column, token
  !>            ids in [0, vocab) (values, not indices).
  !> @param[in] targets integer(c_int32_t) targets(seq, batch), ids in [0, vocab).
  !> @param[out] loss this rank's mean loss.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (shapes, seq > seq_len, batch >
  !>             max_batch, a token out of range, not a GPT).
  subroutine dt_gpt_forward_backward(model, tokens, targets, loss, ierr)
    type(dt_model), intent(in) :: model
    integer(c_int32_t), dimension(:, :), contiguous, intent(in) :: tokens, targets
    real, intent(out) :: loss
    integer, intent(out) :: ierr
    real(c_float) :: l
    l = 0
    loss = 0
    if (.not. same_shape(tokens, targets, 'dt_gpt_forward_backward', ierr)) then
      call fail_in_c_too(c_gpt_forward_backward(model, tokens, targets, 0_c_int, 0_c_int, l))
      return
    end if
    ierr = ret(c_gpt_forward_backward(model, tokens, targets, int(size(tokens, 2), c_int), &
                                      int(size(tokens, 1), c_int), l))
    loss = l
  end subroutine

  !> Mean GPT loss on a batch, gradients untouched.
  !> @param[in] model a live GPT.
  !> @param[in] tokens integer(c_int32_t) tokens(seq, batch), ids in [0, vocab).
  !> @param[in] targets integer(c_int32_t) targets(seq, batch).
  !> @param[out] loss the mean loss.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT.
  subroutine dt_gpt_evaluate(model, tokens, targets, loss, ierr)
    type(dt_model), intent(in) :: model
    integer(c_int32_t), dimension(:, :), contiguous, intent(in) :: tokens, targets
    real, intent(out) :: loss
    integer, intent(out) :: ierr
    real(c_float) :: l
    l = 0
    loss = 0
    if (.not. same_shape(tokens, targets, 'dt_gpt_evaluate', ierr)) then
      call fail_in_c_too(c_gpt_evaluate(model, tokens, targets, 0_c_int, 0_c_int, l))
      return
    end if
    ierr = ret(c_gpt_evaluate(model, tokens, targets, int(size(tokens, 2), c_int), &
                              int(size(tokens, 1), c_int), l))
    loss = l
  end subroutine

  !> GPT next-token logits for generation, with a key/value cache: appends tokens to the
  !> text the model holds and returns the logits of the last of them, those of a forward
  !> pass over the whole text up to rounding, for the cost of one over the new tokens. A text
  !> holds at most seq_len tokens. Collective over dp under zero_stage 3; on a grid, also
  !> over the TP group and the pipeline's stages (every stage gets the logits).
  !> @param[in] model a live GPT.
  !> @param[in] tokens integer(c_int32_t) tokens(count), ids in [0, vocab), count >= 1.
  !> @param[in] new_text .true.: forget the text held and start a new one with tokens.
  !> @param[inout] logits real(c_float) logits(vocab); the most likely next token is
  !>             maxloc(logits, 1) - 1.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (not a GPT, no tokens, the text
  !>             longer than seq_len, a token out of range, logits other than vocab long);
  !>             DT_ERR_INVALID_STATE (appending after a step, a tensor set or a load: start
  !>             a new text).
  subroutine dt_gpt_decode(model, tokens, new_text, logits, ierr)
    type(dt_model), intent(in) :: model
    integer(c_int32_t), dimension(:), contiguous, intent(in) :: tokens
    logical, intent(in) :: new_text
    real(c_float), dimension(:), contiguous, intent(inout) :: logits  ! inout: as dt_mlp_predict's
    integer, intent(out) :: ierr
    integer(c_int) :: vocab, rc
    ! Every rank checks (a pipeline's middle stages hold no vocabulary-sized tensor), and C
    ! fails the collective call alike on the others.
    vocab = 0
    rc = c_model_num_logits(model, vocab)
    if (rc == DT_SUCCESS) then
      if (size(logits) /= vocab) then
        ! C refuses a call without tokens, a model other than a GPT first: that is the
        ! problem to report then.
        rc = c_gpt_decode(model, tokens, 0_c_int, 0_c_int, logits)
        if (rc /= DT_SUCCESS .and. index(from_c(c_get_last_error(dt_context())), 'model is not a GPT') > 0) then
          ierr = ret(rc)
        else
          call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_gpt_decode', 'logits must have vocab entries')
          call fail_in_c_too(rc)
        end if
        return
      end if
    end if
    ierr = ret(c_gpt_decode(model, tokens, int(size(tokens), c_int), &
                            merge(1_c_int, 0_c_int, new_text), logits))
  end subroutine

  !> Optimiser step: average the accumulated gradients over dp, clip, AdamW, zero the
  !> gradients. Collective over every rank of the model (on a grid, its world).
  !> @param[in] model a live model.
  !> @param[in] lr learning rate, >= 0.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (lr).
  !> @param[out] grad_norm optional global gradient norm before clipping.
  subroutine dt_model_step(model, lr, ierr, grad_norm)
    type(dt_model), intent(in) :: model
    real, intent(in) :: lr
    integer, intent(out) :: ierr
    real, intent(out), optional :: grad_norm
    real(c_float) :: norm
    norm = 0
    ierr = ret(c_model_step(model, real(lr, c_float), norm))
    if (present(grad_norm)) grad_norm = norm
  end subroutine

  !> Optimiser steps taken (restored by dt_model_load_checkpoint).
  !> @param[in] model a live model.
  !> @param[out] steps the count.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_model_steps(model, steps, ierr)
    type(dt_model), intent(in) :: model
    integer, intent(out) :: steps, ierr
    integer(c_long) :: n
    n = 0
    ierr = ret(c_model_steps(model, n))
    steps = int(n)
  end subroutine

end module dtrain_models
