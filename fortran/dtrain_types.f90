!> @file
!> Handle types and named constants of module dtrain (the values of dtrain.h).
!> @brief Typed handles and constants; `use dtrain` makes them available.
module dtrain_types
  use, intrinsic :: iso_c_binding, only: c_ptr, c_null_ptr, c_int
  implicit none
  private

  !> One MPI job's dtrain state (dt_context_t): made by dt_init, released by dt_finalize.
  type, bind(C), public :: dt_context
    type(c_ptr) :: ptr = c_null_ptr !< the C handle; null until dt_init
  end type

  !> A group of ranks (dt_comm_t), borrowed from its context or grid; never destroyed.
  type, bind(C), public :: dt_comm
    type(c_ptr) :: ptr = c_null_ptr !< the C handle
  end type

  !> A process grid (dt_grid_t): tensor-, pipeline- and data-parallel groups.
  type, bind(C), public :: dt_grid
    type(c_ptr) :: ptr = c_null_ptr !< the C handle
  end type

  !> Bring your own model (dt_byom_t): arrays the program owns, and their optimiser.
  type, bind(C), public :: dt_byom
    type(c_ptr) :: ptr = c_null_ptr !< the C handle
  end type

  !> A built-in model, MLP or GPT, with its optimiser (dt_model_t).
  type, bind(C), public :: dt_model
    type(c_ptr) :: ptr = c_null_ptr !< the C handle
  end type

  integer(c_int), parameter, public :: DT_SUCCESS = 0 !< the call did what it says
  integer(c_int), parameter, public :: DT_ERR_INVALID_ARGUMENT = 1 !< a bad argument or name
  integer(c_int), parameter, public :: DT_ERR_INVALID_CONFIG = 2 !< an impossible configuration
  integer(c_int), parameter, public :: DT_ERR_OUT_OF_MEMORY = 3 !< an allocation failed
  integer(c_int), parameter, public :: DT_ERR_IO = 4 !< a file could not be read or written
  integer(c_int), parameter, public :: DT_ERR_COMM = 5 !< MPI reported an error
  integer(c_int), parameter, public :: DT_ERR_TIMEOUT = 6 !< reserved (a stuck collective aborts the job)
  integer(c_int), parameter, public :: DT_ERR_NOT_IMPLEMENTED = 7 !< not possible in this version
  integer(c_int), parameter, public :: DT_ERR_UNAVAILABLE = 8 !< e.g. no CUDA device
  integer(c_int), parameter, public :: DT_ERR_CORRUPT_DATA = 9 !< a checkpoint fails its checks
  integer(c_int), parameter, public :: DT_ERR_INTERNAL = 10 !< a bug in dtrain
  integer(c_int), parameter, public :: DT_ERR_INVALID_HANDLE = 1000 !< null, destroyed or finalized
  integer(c_int), parameter, public :: DT_ERR_INVALID_STATE = 1001 !< a call out of order

  integer(c_int), parameter, public :: DT_F32 = 0 !< real(c_float)
  integer(c_int), parameter, public :: DT_BF16 = 1 !< bfloat16 in integer(c_int16_t)
  integer(c_int), parameter, public :: DT_F16 = 2 !< IEEE half in integer(c_int16_t)
  integer(c_int), parameter, public :: DT_F64 = 3 !< real(c_double)
  integer(c_int), parameter, public :: DT_I32 = 4 !< integer(c_int32_t)
  integer(c_int), parameter, public :: DT_I64 = 5 !< integer(c_int64_t)
  integer(c_int), parameter, public :: DT_U8 = 6 !< integer(c_int8_t), read as unsigned

  integer(c_int), parameter, public :: DT_SUM = 0 !< sum over the group
  integer(c_int), parameter, public :: DT_AVG = 1 !< sum / group size (integers truncate)
  integer(c_int), parameter, public :: DT_MAX = 2 !< maximum
  integer(c_int), parameter, public :: DT_MIN = 3 !< minimum

  integer(c_int), parameter, public :: DT_GROUP_WORLD = 0 !< every rank of the grid
  integer(c_int), parameter, public :: DT_GROUP_TP = 1 !< this rank's tensor-parallel group
  integer(c_int), parameter, public :: DT_GROUP_PP = 2 !< this rank's pipeline-parallel group
  integer(c_int), parameter, public :: DT_GROUP_DP = 3 !< this rank's data-parallel group

end module dtrain_types
