!> @file
!> module dtrain: the C ABI (dtrain.h) for Fortran 2008 programs. See docs/fortran.md.
!>
!> Conventions:
!>  * every procedure is a subroutine (but dt_get_error_string and dt_get_last_error) whose
!>    last non-optional argument is ierr: DT_SUCCESS = 0, otherwise a DT_ERR_* code, with
!>    dt_get_last_error(ctx) giving the message; optional arguments after it;
!>  * handles are typed (type(dt_context), type(dt_comm), ...) and start out null;
!>  * communicators come from mpi_f08 (type(MPI_Comm)), or as integer handles (fcomm);
!>  * arrays are passed in Fortran order; a tensor of Fortran shape (n1, n2, ...) is the
!>    row-major C tensor of shape (..., n2, n1): only this module reverses dimensions;
!>  * ranks and roots are 0-based as in MPI, class labels and token ids are 0-based values;
!>    array indices, and the index of a tensor in dt_model_tensor_name, are 1-based.
!> @brief The dtrain Fortran module: `use dtrain`.
module dtrain
  use dtrain_types
  use dtrain_core
  use dtrain_byom
  use dtrain_models
  use dtrain_tensors
  use dtrain_checkpoints
  implicit none
  public
end module dtrain
