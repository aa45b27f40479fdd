!> @file
!> HDF5 checkpoints of registered arrays and built-in models (docs/checkpoint-format.md).
!> @brief Part of module dtrain: saving, loading and finding checkpoints.
module dtrain_checkpoints
  use, intrinsic :: iso_c_binding
  use dtrain_types
  use dtrain_c_binding
  implicit none
  private

  public :: dt_byom_save_checkpoint, dt_byom_load_checkpoint, dt_model_save_checkpoint, &
            dt_model_load_checkpoint, dt_model_load_weights, dt_checkpoint_find

contains

  !> Writes the registered arrays and their optimiser state to dir/step_NNNNNNNN.h5
  !> (NNNNNNNN = dt_byom_steps); each array is stored under /model/name with its C shape,
  !> the Fortran shape reversed. Ends registration. Collective over every rank of the byom (on a grid, its world).
  !> @param[in] byom a live byom with arrays registered.
  !> @param[in] dir the checkpoint directory (created when missing).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_STATE (nothing registered); DT_ERR_IO.
  !> @param[in] keep optional: keep only the newest keep checkpoints in dir; 0 (default)
  !>            keeps all.
  subroutine dt_byom_save_checkpoint(byom, dir, ierr, keep)
    type(dt_byom), intent(in) :: byom
    character(len=*), intent(in) :: dir
    integer, intent(out) :: ierr
    integer, intent(in), optional :: keep
    integer(c_int) :: k
    k = 0
    if (present(keep)) k = keep
    ierr = ret(c_byom_save_checkpoint(byom, c_string(dir), k))
  end subroutine

  !> Loads values, optimiser state and step count into the registered arrays. Every
  !> registered array must be in the checkpoint with its shape. Ends registration.
  !> Collective over every rank of the byom (on a grid, its world).
  !> @param[in] byom a live byom with arrays registered.
  !> @param[in] source a checkpoint file, or a directory (its newest checkpoint).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_IO (nothing to load); DT_ERR_INVALID_CONFIG (an array
  !>             missing from the file, or of another shape); DT_ERR_CORRUPT_DATA.
  subroutine dt_byom_load_checkpoint(byom, source, ierr)
    type(dt_byom), intent(in) :: byom
    character(len=*), intent(in) :: source
    integer, intent(out) :: ierr
    ierr = ret(c_byom_load_checkpoint(byom, c_string(source)))
  end subroutine

  !> Writes a built-in model and its optimiser state to dir/step_NNNNNNNN.h5
  !> (NNNNNNNN = dt_model_steps). Collective over every rank of the model (on a grid, its world).
  !> @param[in] model a live model.
  !> @param[in] dir the checkpoint directory (created when missing).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_IO.
  !> @param[in] keep optional: keep only the newest keep checkpoints; 0 (default) keeps all.
  subroutine dt_model_save_checkpoint(model, dir, ierr, keep)
    type(dt_model), intent(in) :: model
    character(len=*), intent(in) :: dir
    integer, intent(out) :: ierr
    integer, intent(in), optional :: keep
    integer(c_int) :: k
    k = 0
    if (present(keep)) k = keep
    ierr = ret(c_model_save_checkpoint(model, c_string(dir), k))
  end subroutine

  !> Loads a built-in model's parameters, optimiser state and step count; accumulated
  !> gradients are zeroed. Collective over every rank of the model (on a grid, its world).
  !> @param[in] model a live model.
  !> @param[in] source a checkpoint file, or a directory (its newest checkpoint).
  !> @param[out] ierr DT_SUCCESS; DT_ERR_IO; DT_ERR_INVALID_CONFIG (written for another
  !>             model); DT_ERR_CORRUPT_DATA.
  subroutine dt_model_load_checkpoint(model, source, ierr)
    type(dt_model), intent(in) :: model
    character(len=*), intent(in) :: source
    integer, intent(out) :: ierr
    ierr = ret(c_model_load_checkpoint(model, c_string(source)))
  end subroutine

  !> Overwrites a GPT's parameters with pretrained ones: a safetensors file (Hugging Face's
  !> GPT-2, or a directory holding its model.safetensors; nanoGPT's; a dtrain-ckpt export) or
  !> a dtrain checkpoint's model tensors. Optimiser state and step count are kept; a refused
  !> file changes nothing. Collective over every rank of the model (on a grid, its world).
  !> @param[in] model a live GPT.
  !> @param[in] source the file, or a directory holding model.safetensors.
  !> @param[out] ierr DT_SUCCESS; DT_ERR_INVALID_ARGUMENT (an MLP); DT_ERR_INVALID_CONFIG (the
  !>             file holds another model, or a value that is not finite); DT_ERR_IO;
  !>             DT_ERR_CORRUPT_DATA.
  subroutine dt_model_load_weights(model, source, ierr)
    type(dt_model), intent(in) :: model
    character(len=*), intent(in) :: source
    integer, intent(out) :: ierr
    ierr = ret(c_model_load_weights(model, c_string(source)))
  end subroutine

  !> The checkpoint a run would resume from: dir/latest, else the newest complete
  !> step_*.h5 in dir. Rank 0 of comm decides for all. Collective over comm.
  !> @param[in] comm a live group.
  !> @param[in] dir the checkpoint directory; a missing one holds no checkpoint.
  !> @param[out] path the file, '' when there is none.
  !> @param[out] ierr DT_SUCCESS (also when there is none); DT_ERR_IO (dir/latest names a
  !>             missing file).
  subroutine dt_checkpoint_find(comm, dir, path, ierr)
    type(dt_comm), intent(in) :: comm
    character(len=*), intent(in) :: dir
    character(len=:), allocatable, intent(out) :: path
    integer, intent(out) :: ierr
    character(kind=c_char), allocatable, target :: buf(:)
    integer(c_size_t) :: n, capacity
    integer :: i
    path = ''
    n = 0
    ierr = ret(c_checkpoint_find(comm, c_string(dir), c_null_ptr, 0_c_size_t, n))
    if (ierr /= DT_SUCCESS .or. n == 0) return
    ! A second collective: room for what rank 0 found, and for a newer name of equal length.
    capacity = n + 1
    allocate(buf(capacity))
    ierr = ret(c_checkpoint_find(comm, c_string(dir), c_loc(buf), capacity, n))
    if (ierr /= DT_SUCCESS) return
    path = repeat(" ", int(n))
    do i = 1, int(n)
      path(i:i) = buf(i)
    end do
  end subroutine

end module dtrain_checkpoints
