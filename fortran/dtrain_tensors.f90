!> @file
!> The parameters of a built-in model: all at once, or one tensor by index or name.
!> @brief Part of module dtrain: reading and writing a built-in model's parameters.
module dtrain_tensors
  use, intrinsic :: iso_c_binding
  use dtrain_types
  use dtrain_c_binding
  implicit none
  private

  public :: dt_model_num_parameters, dt_model_num_logits, dt_model_get_parameters, dt_model_num_tensors, &
            dt_model_tensor_name, dt_model_tensor_shape, dt_model_get_tensor, dt_model_set_tensor

contains

  !> Number of parameter values of a model (all tensors together).
  !> @param[in] model a live model.
  !> @param[out] n the count.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_model_num_parameters(model, n, ierr)
    type(dt_model), intent(in) :: model
    integer(c_size_t), intent(out) :: n
    integer, intent(out) :: ierr
    n = 0
    ierr = ret(c_model_num_parameters(model, n))
  end subroutine

  !> Number of logits a prediction writes per sample: an MLP's classes (dt_mlp_predict), a
  !> GPT's vocabulary (dt_gpt_decode), on every rank and pipeline stage alike.
  !> @param[in] model a live model.
  !> @param[out] n the count.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_model_num_logits(model, n, ierr)
    type(dt_model), intent(in) :: model
    integer, intent(out) :: n
    integer, intent(out) :: ierr
    integer(c_int) :: count
    count = 0
    ierr = ret(c_model_num_logits(model, count))
    n = int(count)
  end subroutine

  !> Every parameter value, tensor after tensor in creation order, each in C (row-major)
  !> order, which is the Fortran order of the reversed shape.
  !> @param[in] model a live model.
  !> @param[inout] values at least dt_model_num_parameters elements.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (values too short).
  subroutine dt_model_get_parameters(model, values, ierr)
    type(dt_model), intent(in) :: model
    real(c_float), dimension(:), contiguous, intent(inout) :: values  ! inout: as dt_mlp_predict's logits
    integer, intent(out) :: ierr
    ierr = ret(c_model_get_parameters(model, values, size(values, kind=c_size_t)))
  end subroutine

  !> Number of parameter tensors of a model.
  !> @param[in] model a live model.
  !> @param[out] n the count; tensors are numbered 1..n.
  !> @param[out] ierr DT_SUCCESS or DT_ERR_INVALID_HANDLE.
  subroutine dt_model_num_tensors(model, n, ierr)
    type(dt_model), intent(in) :: model
    integer, intent(out) :: n, ierr
    integer(c_int) :: v
    v = 0
    ierr = ret(c_model_num_tensors(model, v))
    n = v
  end subroutine

  !> Name of a parameter tensor, in creation order.
  !> @param[in] model a live model.
  !> @param[in] index 1-based, at most dt_model_num_tensors.
  !> @param[out] name the name, e.g. 'layers.0.weight' (the names of the C API).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (index out of range).
  subroutine dt_model_tensor_name(model, index, name, ierr)
    type(dt_model), intent(in) :: model
    integer, intent(in) :: index
    character(len=:), allocatable, intent(out) :: name
    integer, intent(out) :: ierr
    character(kind=c_char), allocatable, target :: buf(:)
    integer(c_size_t) :: n, capacity
    integer(c_int) :: count
    integer :: i
    character(len=48) :: text
    name = ''
    n = 0
    count = 0
    ierr = ret(c_model_num_tensors(model, count))  ! the range in this module's numbering
    if (ierr /= DT_SUCCESS) then  ! a bad handle: refused again under this procedure's name
      ierr = ret(c_model_tensor_name(model, 0_c_int, c_null_ptr, 0_c_size_t, n))
      return
    end if
    if (index < 1 .or. index > count) then
      write(text, '(a, i0, a, i0, a)') 'index ', index, ' is not in [1, ', count, ']'
      call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, 'dt_model_tensor_name', trim(text)//' (dt_model_num_tensors)')
      return
    end if
    ierr = ret(c_model_tensor_name(model, int(index - 1, c_int), c_null_ptr, 0_c_size_t, n))
    if (ierr /= DT_SUCCESS) return
    capacity = n + 1
    allocate(buf(capacity))
    ierr = ret(c_model_tensor_name(model, int(index - 1, c_int), c_loc(buf), capacity, n))
    if (ierr /= DT_SUCCESS) return
    name = repeat(" ", int(n))
    do i = 1, int(n)
      name(i:i) = buf(i)
    end do
  end subroutine

  !> Shape of a parameter tensor in Fortran order (the C shape reversed).
  !> @param[in] model a live model.
  !> @param[in] name a parameter name; unknown: DT_ERR_INVALID_ARGUMENT.
  !> @param[out] shape one extent per dimension, e.g. (in, out) for 'layers.0.weight'.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT.
  subroutine dt_model_tensor_shape(model, name, shape, ierr)
    type(dt_model), intent(in) :: model
    character(len=*), intent(in) :: name
    integer(c_int64_t), allocatable, intent(out) :: shape(:)
    integer, intent(out) :: ierr
    integer(c_int64_t), allocatable, target :: c_shape(:)
    integer(c_int) :: nd, capacity
    nd = 0
    allocate(shape(0))  ! what a failed call leaves
    ierr = ret(c_model_tensor_shape(model, c_string(name), c_null_ptr, 0_c_int, nd))
    if (ierr /= DT_SUCCESS) return
    capacity = nd
    allocate(c_shape(capacity))
    ierr = ret(c_model_tensor_shape(model, c_string(name), c_loc(c_shape), capacity, nd))
    if (ierr /= DT_SUCCESS) return
    shape = c_shape(capacity:1:-1)
  end subroutine

  !> Copies one parameter tensor into an array of any rank: declared with the Fortran shape
  !> (dt_model_tensor_shape), it holds the tensor element for element.
  !> @param[in] model a live model.
  !> @param[in] name a parameter name; unknown: DT_ERR_INVALID_ARGUMENT.
  !> @param[inout] values real(c_float), at least as many elements as the tensor.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (name, values too small).
  subroutine dt_model_get_tensor(model, name, values, ierr)
    type(dt_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_float), dimension(..), contiguous, target, intent(inout) :: values
    integer, intent(out) :: ierr
    integer(c_size_t) :: n
    if (.not. known_size(values, n, ierr, 'dt_model_get_tensor')) then
      call fail_in_c_too(c_model_get_tensor(model, c_string(name), c_null_ptr, 0_c_size_t))
      return
    end if
    ierr = ret(c_model_get_tensor(model, c_string(name), c_loc(values), n))
  end subroutine

  !> Overwrites one parameter tensor (every rank of the dp group must set the same values).
  !> @param[in] model a live model.
  !> @param[in] name a parameter name; unknown: DT_ERR_INVALID_ARGUMENT.
  !> @param[in] values real(c_float), exactly as many elements as the tensor, Fortran order of
  !>            the reversed C shape.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (name, size(values) differs).
  subroutine dt_model_set_tensor(model, name, values, ierr)
    type(dt_model), intent(in) :: model
    character(len=*), intent(in) :: name
    real(c_float), dimension(..), contiguous, target, intent(in) :: values
    integer, intent(out) :: ierr
    integer(c_size_t) :: n
    if (.not. known_size(values, n, ierr, 'dt_model_set_tensor')) then
      call fail_in_c_too(c_model_set_tensor(model, c_string(name), c_null_ptr, 0_c_size_t))
      return
    end if
    ierr = ret(c_model_set_tensor(model, c_string(name), c_loc(values), n))
  end subroutine

  !> Sets n to the elements of an assumed-rank array and returns .true.; for an assumed-size
  !> one (a dummy buf(*) or buf(n,*) passed on), whose last extent Fortran does not know, sets
  !> ierr and returns .false.: SIZE of the whole array is undefined there (gfortran gives -1,
  !> which C would read as SIZE_MAX). The callers then make the C call with no buffer, which
  !> it refuses on every rank of a collective call (ZeRO 3, tensor parallelism) alike.
  logical function known_size(values, n, ierr, procedure)
    real(c_float), dimension(..), intent(in) :: values
    integer(c_size_t), intent(out) :: n
    integer, intent(out) :: ierr
    character(len=*), intent(in) :: procedure
    integer :: d
    known_size = .true.
    n = 1
    do d = 1, rank(values)
      if (size(values, dim=d) < 0) then
        call fail_here(ierr, DT_ERR_INVALID_ARGUMENT, procedure, 'values is an assumed-size array (a '// &
                       'dummy declared buf(*)), whose size Fortran cannot tell: pass a section of known '// &
                       'size, e.g. buf(1:n)')
        known_size = .false.
        return
      end if
      n = n * size(values, dim=d, kind=c_size_t)
    end do
  end function

end module dtrain_tensors
