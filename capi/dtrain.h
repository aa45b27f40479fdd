/**
 * @file dtrain.h
 * @brief The stable C ABI of dtrain (C99). See docs/c-api.md for the full guide with an
 * example for every function.
 *
 * Rules every function follows:
 *  - It returns a ::dt_result_t; ::DT_SUCCESS is 0. Nothing throws, aborts or exits across
 *    this interface, with one exception: a collective that makes no progress for
 *    DTRAIN_COMM_TIMEOUT seconds (a rank that never joins) makes the watchdog abort the job
 *    (MPI_Abort, exit status 124), as in C++.
 *  - Handles are opaque and checked on every call: NULL, destroyed, finalized or wrong-kind
 *    handles give ::DT_ERR_INVALID_HANDLE. Output pointers must not be NULL unless a function
 *    says so (::DT_ERR_INVALID_ARGUMENT).
 *  - On failure, dt_get_last_error(ctx) returns "FUNCTION: REASON" for the context the
 *    call used (or for a later failure of the calling thread whose handle named no live
 *    context), and dt_get_last_error(NULL) the last message of the calling thread.
 *  - Ownership: buffers passed in stay owned by the caller. Handles created by a dt_*_create
 *    or dt_init* call are owned by the caller and released by the matching destroy/finalize;
 *    ::dt_comm_t handles are borrowed from their context or grid and never destroyed.
 *    dt_finalize() releases every handle still alive in that context.
 *  - Binary compatibility: enums only grow; config structs start with struct_size and are
 *    initialised with their DT_*_INIT macro, so fields can be appended in later versions.
 *  - "Collective over G" means every rank of group G calls the function, in the same order
 *    relative to the other collectives of G.
 */
#ifndef DTRAIN_H
#define DTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_version.h"

/** Marks a function of the C ABI as exported from libdtrain.so (everything else is hidden). */
#if defined(_WIN32)
#define DT_API
#else
#define DT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- results --------------------------------------------------------------------------- */

/**
 * Result of every call. Values 0..999 equal dtrain::Errc one to one; values from 1000 are
 * specific to the C ABI. Only ever grows: treat a value you do not know as an error.
 */
typedef enum dt_result_t {
  DT_SUCCESS = 0,               /**< the call did what it says */
  DT_ERR_INVALID_ARGUMENT = 1,  /**< a NULL pointer, a size out of range, an unknown name */
  DT_ERR_INVALID_CONFIG = 2,    /**< a config describes something impossible, or a checkpoint
                                     was written for another model */
  DT_ERR_OUT_OF_MEMORY = 3,     /**< an allocation failed */
  DT_ERR_IO = 4,                /**< a file could not be created, read or written */
  DT_ERR_COMM = 5,              /**< MPI reported an error */
  DT_ERR_TIMEOUT = 6,           /**< reserved: a collective that makes no progress for
                                     DTRAIN_COMM_TIMEOUT s aborts the job (exit status 124) */
  DT_ERR_NOT_IMPLEMENTED = 7,   /**< a valid request this version cannot do yet */
  DT_ERR_UNAVAILABLE = 8,       /**< e.g. a CUDA device was asked for but none is present */
  DT_ERR_CORRUPT_DATA = 9,      /**< a checkpoint fails its format or checksum checks */
  DT_ERR_INTERNAL = 10,         /**< a bug in dtrain: please report it with the message */
  DT_ERR_INVALID_HANDLE = 1000, /**< NULL, destroyed, finalized or wrong-kind handle */
  DT_ERR_INVALID_STATE = 1001   /**< a call out of order (e.g. register after the first step) */
} dt_result_t;

/* ---- handles --------------------------------------------------------------------------- */

/** One MPI job's dtrain state: made by dt_init*(), released by dt_finalize(). */
typedef struct dt_context_s* dt_context_t;
/** A group of ranks, borrowed from its context or grid (never destroyed by the program). */
typedef struct dt_comm_s* dt_comm_t;
/** A process grid: the tensor-, pipeline- and data-parallel groups of every rank. */
typedef struct dt_grid_s* dt_grid_t;
/** Bring your own model: buffers the program owns, and their optimiser. */
typedef struct dt_byom_s* dt_byom_t;
/** A built-in model (MLP or GPT) with its optimiser. */
typedef struct dt_model_s* dt_model_t;

/* ---- value enums (values equal dtrain::DType / dtrain::ReduceOp) ------------------------ */

/** Element type of a buffer. */
typedef enum dt_dtype_t {
  DT_F32 = 0,  /**< float (IEEE-754 binary32) */
  DT_BF16 = 1, /**< bfloat16, stored as uint16_t */
  DT_F16 = 2,  /**< IEEE-754 binary16, stored as uint16_t */
  DT_F64 = 3,  /**< double */
  DT_I32 = 4,  /**< int32_t */
  DT_I64 = 5,  /**< int64_t */
  DT_U8 = 6,   /**< uint8_t */
  /** Not a type: makes every non-negative int a value the enum can hold, so an unknown
      value reaches the library, which refuses it (::DT_ERR_INVALID_ARGUMENT). */
  DT_DTYPE_ENUM_MAX_ = 0x7fffffff
} dt_dtype_t;

/** Reduction of a collective. */
typedef enum dt_reduce_op_t {
  DT_SUM = 0, /**< sum over the group */
  DT_AVG = 1, /**< sum divided by the group size (integer types: the sum is taken in the type,
                  so it must fit it, e.g. at most 255 for DT_U8; the quotient truncates toward
                  zero) */
  DT_MAX = 2, /**< maximum */
  DT_MIN = 3, /**< minimum */
  /** Not an operation: as ::DT_DTYPE_ENUM_MAX_. */
  DT_REDUCE_OP_ENUM_MAX_ = 0x7fffffff
} dt_reduce_op_t;

/** A dimension of the process grid, for dt_grid_comm(). */
typedef enum dt_group_t {
  DT_GROUP_WORLD = 0, /**< every rank of the grid */
  DT_GROUP_TP = 1,    /**< the tensor-parallel group of this rank */
  DT_GROUP_PP = 2,    /**< the pipeline-parallel group of this rank */
  DT_GROUP_DP = 3,    /**< the data-parallel group of this rank */
  /** Not a group: as ::DT_DTYPE_ENUM_MAX_. */
  DT_GROUP_ENUM_MAX_ = 0x7fffffff
} dt_group_t;

/* ---- version and errors ---------------------------------------------------------------- */

/**
 * @brief Version of the library actually loaded (may be newer than the header).
 * @return DT_VERSION_CODE of the library: major*10000 + minor*100 + patch.
 */
DT_API int dt_get_version(void);

/**
 * @brief A static, human-readable name for a result code.
 * @param code any value; unknown ones give "unknown result code".
 * @return "success", "invalid argument", ...; never NULL, never to be freed.
 */
DT_API const char* dt_get_error_string(dt_result_t code);

/**
 * @brief The message of the last failed call that used ctx.
 *
 * Where the calling thread failed later in a call whose handle named no live context (NULL,
 * destroyed), the message is that call's: it could not know its context, and it is the
 * failure the caller is asking about.
 * Thread-safe: the text is copied into storage of the calling thread, valid until its next
 * dt_get_last_error() call.
 * @param ctx a live context; NULL (or a destroyed or finalized one) for the last failure of
 *            the calling thread, whatever handle it used.
 * @return "FUNCTION: REASON", or "" when nothing failed yet; never NULL.
 */
DT_API const char* dt_get_last_error(dt_context_t ctx);

/* ---- context ------------------------------------------------------------------------- */

/**
 * @brief Starts dtrain over a duplicate of MPI_COMM_WORLD.
 *
 * Initialises MPI (MPI_THREAD_MULTIPLE requested) when the program has not; then
 * dt_finalize() finalises it, with the last of the process's contexts (a second context,
 * from dt_init() or dt_init_fortran_comm(), keeps MPI up until it is finalized too).
 * Collective over MPI_COMM_WORLD.
 * @param argc, argv the program's arguments for MPI_Init_thread; both may be NULL.
 * @param[out] ctx the new context; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_ARGUMENT (ctx NULL), ::DT_ERR_INVALID_CONFIG (MPI
 *         was finalized already), ::DT_ERR_COMM (MPI failed).
 */
DT_API dt_result_t dt_init(int* argc, char*** argv, dt_context_t* ctx);

/**
 * @brief Starts dtrain over a duplicate of the communicator whose Fortran handle is given.
 *
 * The handle is MPI_Comm_c2f(comm) in C, or comm%MPI_VAL of an mpi_f08 type(MPI_Comm). MPI
 * must already be initialised by the program, which also finalises it. Collective over that
 * communicator. From C with an MPI_Comm, use dt_init_mpi_comm() in dtrain_mpi.h.
 * @param fortran_comm the communicator's MPI_Fint handle.
 * @param[out] ctx the new context; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_ARGUMENT (ctx NULL; the handle is MPI_COMM_NULL or
 *         names no communicator), ::DT_ERR_INVALID_CONFIG (MPI not initialised, or
 *         finalized), ::DT_ERR_COMM.
 */
DT_API dt_result_t dt_init_fortran_comm(int fortran_comm, dt_context_t* ctx);

/**
 * @brief Releases every handle of ctx still alive, then the context.
 *
 * Models and byoms go first (newest first), then grids and their groups; MPI is finalised
 * when dt_init() initialised it and this is the process's last context. Collective.
 * Afterwards any use of ctx or its handles returns ::DT_ERR_INVALID_HANDLE.
 * @param ctx the context to finalize.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE.
 */
DT_API dt_result_t dt_finalize(dt_context_t ctx);

/**
 * @brief This process's rank in the context's world communicator.
 * @param ctx a live context.
 * @param[out] rank 0-based rank.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (rank NULL).
 */
DT_API dt_result_t dt_context_rank(dt_context_t ctx, int* rank);

/**
 * @brief Number of ranks in the context's world communicator.
 * @param ctx a live context.
 * @param[out] size the number of ranks.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (size NULL).
 */
DT_API dt_result_t dt_context_size(dt_context_t ctx, int* size);

/**
 * @brief The context's world communicator.
 * @param ctx a live context.
 * @param[out] world borrowed; valid until dt_finalize().
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (world NULL).
 */
DT_API dt_result_t dt_context_world(dt_context_t ctx, dt_comm_t* world);

/**
 * @brief The threads this rank's share of its node's CPUs allows, counted at dt_init*() as
 *        dtrain-gpt counts them (docs/c-api.md, CPU threads). Creating a built-in model on
 *        the CPU sets OpenBLAS's threads and the calling thread's OpenMP threads to it; a
 *        program that runs threads of its own, or a byom's steps, can size them by it.
 * @param ctx a live context.
 * @param[out] threads at least 1.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (threads NULL).
 */
DT_API dt_result_t dt_context_cpu_threads(dt_context_t ctx, int* threads);

/* ---- communicators and collectives ----------------------------------------------------- */
/*
 * Collective rules (as NCCL): every rank of the group calls the same collective in the same
 * order with matching counts and types; the calls block until the local buffers may be
 * reused; buffers are host memory; count == 0 is legal and does nothing (the buffers may
 * then be NULL). A call that fails argument checks on one rank only leaves the other ranks
 * waiting (the watchdog ends them).
 */

/**
 * @brief This process's rank in a group.
 * @param comm a live group.
 * @param[out] rank 0-based rank in comm.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (rank NULL).
 */
DT_API dt_result_t dt_comm_rank(dt_comm_t comm, int* rank);

/**
 * @brief Number of ranks in a group.
 * @param comm a live group.
 * @param[out] size the number of ranks.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (size NULL).
 */
DT_API dt_result_t dt_comm_size(dt_comm_t comm, int* size);

/**
 * @brief Ranks in the context's world (as ::dt_context_rank numbers them) of the members of a
 *        group, in group-rank order; under dt_init_mpi_comm() they are not MPI_COMM_WORLD's.
 * @param comm a live group.
 * @param[out] ranks capacity ints; may be NULL with capacity 0 to ask for the count only.
 * @param capacity length of ranks; smaller than the group size: ::DT_ERR_INVALID_ARGUMENT.
 * @param[out] count the group size (set even when capacity is too small).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer,
 *         capacity too small).
 */
DT_API dt_result_t dt_comm_world_ranks(dt_comm_t comm, int* ranks, int capacity, int* count);

/**
 * @brief recv = op over the ranks of send. Blocking; collective over comm.
 * @param comm a live group.
 * @param send count elements.
 * @param[out] recv count elements; recv == send works in place.
 * @param count elements per rank.
 * @param dtype element type.
 * @param op reduction.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL buffer with
 *         count > 0, unknown dtype or op), ::DT_ERR_COMM.
 */
DT_API dt_result_t dt_all_reduce(dt_comm_t comm, const void* send, void* recv, size_t count,
                                 dt_dtype_t dtype, dt_reduce_op_t op);

/**
 * @brief recv gets block r (send_count elements) from rank r. Blocking; collective.
 * @param comm a live group.
 * @param send send_count elements.
 * @param[out] recv send_count * size elements. In place: send == recv + rank*send_count,
 *             or send == recv.
 * @param send_count elements each rank contributes.
 * @param dtype element type.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL buffer with
 *         send_count > 0, unknown dtype), ::DT_ERR_COMM.
 */
DT_API dt_result_t dt_all_gather(dt_comm_t comm, const void* send, void* recv, size_t send_count,
                                 dt_dtype_t dtype);

/**
 * @brief Rank r receives block r of send, reduced over the ranks. Blocking; collective.
 * @param comm a live group.
 * @param send recv_count * size elements.
 * @param[out] recv recv_count elements. In place: recv == send + rank*recv_count, or
 *             recv == send.
 * @param recv_count elements each rank receives.
 * @param dtype element type.
 * @param op reduction.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL buffer with
 *         recv_count > 0, unknown dtype or op), ::DT_ERR_COMM.
 */
DT_API dt_result_t dt_reduce_scatter(dt_comm_t comm, const void* send, void* recv,
                                     size_t recv_count, dt_dtype_t dtype, dt_reduce_op_t op);

/**
 * @brief recv = root's send. Blocking; collective.
 * @param comm a live group.
 * @param send count elements, read on root only (may be NULL elsewhere).
 * @param[out] recv count elements; send == recv works in place.
 * @param count elements.
 * @param dtype element type.
 * @param root 0-based rank in comm.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (root out of range,
 *         NULL buffer, unknown dtype), ::DT_ERR_COMM.
 */
DT_API dt_result_t dt_broadcast(dt_comm_t comm, const void* send, void* recv, size_t count,
                                dt_dtype_t dtype, int root);

/**
 * @brief Returns when every rank of comm has called it. Collective.
 * @param comm a live group.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_COMM.
 */
DT_API dt_result_t dt_barrier(dt_comm_t comm);

/**
 * @brief The ranks of comm again, with collectives that also take CUDA device buffers.
 *
 * The communicator returned routes each call by its buffers, as a CUDA-aware MPI does: host
 * buffers go over MPI as on comm; device buffers (memory of the GPU dtrain uses on this rank,
 * docs/cuda.md: DTRAIN_CUDA_DEVICE, else the node-local rank modulo the visible GPUs) over
 * NCCL where every rank has a GPU of its own, else over MPI staged through pinned host memory
 * (ranks sharing a GPU). One call must not mix host and device buffers. The work that writes a
 * send buffer must be finished (synchronised) when the call is made; the result is in place
 * when it returns. Collective over comm at the first call for comm; later calls return the
 * same handle and do not communicate.
 * @param comm a live communicator (the world, or a group of a grid).
 * @param[out] device_comm borrowed; valid as long as comm is; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (device_comm NULL),
 *         ::DT_ERR_UNAVAILABLE (some rank of comm has no usable GPU: every rank returns it),
 *         ::DT_ERR_COMM (NCCL's set-up failed).
 */
DT_API dt_result_t dt_comm_device(dt_comm_t comm, dt_comm_t* device_comm);

/* ---- process grid ---------------------------------------------------------------------- */

/** Shape of a process grid; initialise with ::DT_GRID_CONFIG_INIT, then edit fields. */
typedef struct dt_grid_config_t {
  size_t struct_size; /**< sizeof(dt_grid_config_t); set by DT_GRID_CONFIG_INIT */
  int tp;             /**< tensor-parallel size (default 1) */
  int pp;             /**< pipeline-parallel size (default 1) */
  int dp;             /**< data-parallel size; 0 = world size / (tp * pp) */
  const char* order;  /**< dimensions fastest first; NULL = "tp-dp-pp" */
} dt_grid_config_t;
/** Defaults of ::dt_grid_config_t: tp = pp = 1, dp = the rest, order "tp-dp-pp". */
#define DT_GRID_CONFIG_INIT {sizeof(dt_grid_config_t), 1, 1, 0, NULL}

/**
 * @brief Splits the context's world into tensor-, pipeline- and data-parallel groups.
 *
 * Collective over the context's world, whose ranks pass the same shape (compared first:
 * ranks split two ways would build groups that never match). An invalid or differing shape
 * gives ::DT_ERR_INVALID_CONFIG on every rank alike.
 * @param ctx a live context.
 * @param config the shape (struct_size from DT_GRID_CONFIG_INIT).
 * @param[out] grid the new grid; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer,
 *         struct_size too small), ::DT_ERR_INVALID_CONFIG (the shape does not fit the world,
 *         or differs between the ranks).
 */
DT_API dt_result_t dt_grid_create(dt_context_t ctx, const dt_grid_config_t* config,
                                  dt_grid_t* grid);

/**
 * @brief Releases a grid and its groups.
 *
 * Call it on every rank of the grid: it frees the groups' MPI communicators, which the MPI
 * standard counts as collective.
 * ::DT_ERR_INVALID_STATE while a model or byom handle still uses one of its groups.
 * @param grid a live grid.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_STATE (groups still in use).
 */
DT_API dt_result_t dt_grid_destroy(dt_grid_t grid);

/**
 * @brief Resolved sizes of the grid (dp filled in). Any output may be NULL.
 * @param grid a live grid.
 * @param[out] tp, pp, dp sizes of the three dimensions.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE.
 */
DT_API dt_result_t dt_grid_shape(dt_grid_t grid, int* tp, int* pp, int* dp);

/**
 * @brief This rank's 0-based coordinates in the grid. Any output may be NULL.
 * @param grid a live grid.
 * @param[out] tp_rank, pp_rank, dp_rank the coordinates.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE.
 */
DT_API dt_result_t dt_grid_coords(dt_grid_t grid, int* tp_rank, int* pp_rank, int* dp_rank);

/**
 * @brief The group of this rank along one dimension.
 * @param grid a live grid.
 * @param group which dimension; an unknown value gives ::DT_ERR_INVALID_ARGUMENT.
 * @param[out] comm borrowed; valid until the grid is destroyed.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (comm NULL, unknown
 *         group).
 */
DT_API dt_result_t dt_grid_comm(dt_grid_t grid, dt_group_t group, dt_comm_t* comm);

/* ---- optimiser settings (shared by byom and built-in models) --------------------------- */

/**
 * @brief AdamW and data-parallel settings; initialise with ::DT_OPTIMIZER_CONFIG_INIT.
 *
 * ZeRO stages (zero_stage; any other value: ::DT_ERR_INVALID_CONFIG). Every stage trains the
 * same model: stages 1-3 reproduce stage 0 to rounding, the gradient norm is always the
 * whole model's, and a checkpoint written under one stage loads under any other.
 *  - 0: gradients all-reduced in the step; parameters, gradients and AdamW state replicated.
 *  - 1: gradients reduce-scattered in the step; each rank keeps the AdamW moments of its
 *    share of the parameters, updates that share and all-gathers the update.
 *  - 2: as 1, and a built-in model keeps only its share of the gradients: every
 *    dt_mlp_forward_backward() / dt_gpt_forward_backward() reduce-scatters into the shares
 *    (so those calls become collective over dp, and accumulation over several calls before
 *    a step happens in the shares). A byom accepts stage 2 and runs it as stage 1: the
 *    program's buffers hold whole gradients, so only the reduction and the AdamW state are
 *    sharded.
 *  - 3: as 2, and a built-in model keeps only its share of the parameters, gathered while a
 *    pass uses them (a GPT block by block, an MLP whole for each call); its evaluate and
 *    predict calls, dt_model_get_parameters(), dt_model_get_tensor() and the checkpoint
 *    calls become collective over dp. A byom refuses it (::DT_ERR_NOT_IMPLEMENTED at
 *    dt_byom_create()): its parameters live in the program's buffers.
 */
typedef struct dt_optimizer_config_t {
  size_t struct_size;  /**< sizeof(dt_optimizer_config_t); set by DT_OPTIMIZER_CONFIG_INIT */
  float beta1;         /**< first-moment decay, in [0, 1) (default 0.9) */
  float beta2;         /**< second-moment decay, in [0, 1) (default 0.95) */
  float eps;           /**< added to the root of the second moment, > 0 (default 1e-8) */
  float weight_decay;  /**< decoupled (AdamW); applies to tensors registered with decay */
  float clip_grad;     /**< global-norm clipping threshold; 0 disables */
  int zero_stage;      /**< 0: all-reduce; 1: ZeRO-1 (optimiser state sharded over dp);
                            2: ZeRO-2 (gradients too; byom: as 1); 3: ZeRO-3 (parameters too;
                            built-in models only). See ::dt_optimizer_config_t. */
  double bucket_mb;    /**< gradient bucket size for the data-parallel reduction (MiB, at most 1048576) */
} dt_optimizer_config_t;
/** Defaults of ::dt_optimizer_config_t: 0.9, 0.95, 1e-8, decay 0.1, clip 1, ZeRO 0, 25 MiB. */
#define DT_OPTIMIZER_CONFIG_INIT {sizeof(dt_optimizer_config_t), 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 25.0}

/* ---- bring your own model -------------------------------------------------------------- */
/*
 * The program owns its parameters and computes their gradients; dtrain averages the
 * gradients over the data-parallel group (bucketed), clips them by the global norm and
 * applies AdamW to the parameters in place, and saves and loads them in HDF5 checkpoints.
 */

/**
 * @brief An optimiser for buffers the program owns. Not collective.
 * @param dp the data-parallel group (the world, or dt_grid_comm(..., DT_GROUP_DP)). A device
 *        handle of it (dt_comm_device()) makes the registered buffers GPU memory of this
 *        rank's GPU: the reduction, the optimiser state and the update then stay on the GPU.
 * @param config optimiser settings; NULL for the defaults.
 * @param[out] byom the new handle; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (byom NULL,
 *         struct_size too small), ::DT_ERR_INVALID_CONFIG (a setting out of range),
 *         ::DT_ERR_NOT_IMPLEMENTED (zero_stage 3: the program owns the parameters; stage 2
 *         runs as stage 1).
 */
DT_API dt_result_t dt_byom_create(dt_comm_t dp, const dt_optimizer_config_t* config,
                                  dt_byom_t* byom);

/**
 * @brief Releases a byom handle (never the program's buffers).
 * @param byom a live byom.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE.
 */
DT_API dt_result_t dt_byom_destroy(dt_byom_t byom);

/**
 * @brief An optimiser for a model the program splits over a process grid itself (tensor
 * and pipeline parallelism in its own code). Not collective.
 *
 * As dt_byom_create() over the grid's DP group, and the steps know the split: each pipeline
 * stage registers the tensors it holds (names unique over the stages), each TP rank its
 * slice of a tensor split over the TP group (::DT_PARAM_TP_ROWS, ::DT_PARAM_TP_COLS) or the
 * whole of a replicated one. dt_byom_step() averages over dp, takes the whole model's norm
 * (every slice, every stage, replicated tensors once) for the clipping, and is collective over
 * the grid's world, as are the checkpoint calls, whose files hold whole tensors (any
 * layout, a byom on one rank too, loads them). The first step or checkpoint call also checks
 * that every rank has the same optimizer settings and loss scaling and that a TP group's
 * ranks register slices of the same tensors (names, dtypes, whole and slice shapes; else
 * ::DT_ERR_INVALID_CONFIG), and that no name is registered on two stages
 * (::DT_ERR_INVALID_ARGUMENT), on every rank alike. Buffers are
 * host memory.
 * @param grid a live grid (pinned while the byom lives).
 * @param config optimiser settings; NULL for the defaults (zero_stage 3 refused as by
 *        dt_byom_create()).
 * @param[out] byom the new handle; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (byom NULL,
 *         struct_size too small), ::DT_ERR_INVALID_CONFIG (a setting out of range),
 *         ::DT_ERR_NOT_IMPLEMENTED (zero_stage 3).
 */
DT_API dt_result_t dt_byom_create_grid(dt_grid_t grid, const dt_optimizer_config_t* config,
                                       dt_byom_t* byom);

/** Flag of dt_byom_register(): exclude the tensor from weight decay (biases, norms). */
#define DT_PARAM_NO_DECAY 1u
/** Flag of dt_byom_register() on a grid byom: the buffers hold this TP rank's slice of a
 *  tensor split evenly over the TP group along its first dimension (rank r holds rows
 *  [r n, (r + 1) n) of tp x n; a column-parallel layer's weight [out, in] and bias). */
#define DT_PARAM_TP_ROWS 2u
/** Flag of dt_byom_register() on a grid byom: as ::DT_PARAM_TP_ROWS along the last
 *  dimension (a row-parallel layer's weight [out, in]). Without either flag a tensor is
 *  replicated over the TP group: every TP rank holds and updates the whole of it. */
#define DT_PARAM_TP_COLS 4u

/**
 * @brief Registers a parameter buffer and its gradient buffer.
 *
 * Both stay owned by the program, which keeps them alive and at the same address until the
 * byom handle is destroyed. Every rank of the dp group registers the same tensors in the
 * same order (on a grid each stage its own; checked by the first dt_byom_step() or
 * checkpoint call, with the optimizer settings:
 * ::DT_ERR_INVALID_CONFIG on every rank where they differ). Only before the first
 * dt_byom_step() or checkpoint call (then ::DT_ERR_INVALID_STATE).
 * @param byom a live byom.
 * @param name unique global name (the checkpoint dataset is /model/NAME): no spaces or
 *        control characters; '/' only between non-empty parts other than "." and "..";
 *        not a '/'-prefix of another registered name, nor another's of it ("w" with "w/b").
 *        Otherwise ::DT_ERR_INVALID_ARGUMENT.
 * @param ndim number of dimensions, 1..8.
 * @param shape ndim extents, row-major (C) logical shape, every extent > 0; at most 2^58
 *        elements, in this tensor and in all registered together.
 * @param dtype of both buffers: ::DT_F32, or ::DT_BF16 / ::DT_F16 (uint16_t words), for which
 *        dtrain keeps an fp32 master of the parameter: it starts from the program's values
 *        at the first step or checkpoint call, each step updates it from the widened
 *        gradient and writes it back rounded, and where the program changes any of the
 *        tensor's words between calls the tensor's masters become its values (fp16 gradients
 *        are taken as given, or divided by the loss scale after dt_byom_scale_loss(); a step
 *        with an inf or NaN gradient is skipped). Other dtypes:
 *        ::DT_ERR_NOT_IMPLEMENTED; a value that is no ::dt_dtype_t: ::DT_ERR_INVALID_ARGUMENT.
 * @param param the parameter values (updated in place by each step); host memory, or GPU
 *        memory of this rank's GPU when the byom was made over a device handle.
 * @param grad the gradients (read by each step, never written); as param.
 * @param flags 0 or ::DT_PARAM_NO_DECAY, with at most one of ::DT_PARAM_TP_ROWS and
 *        ::DT_PARAM_TP_COLS; shape is then the slice's, and the tensor's is tp times it
 *        along that dimension (without tensor parallelism the slice is the tensor).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer, empty
 *         or duplicate name, ndim, an extent or the element count out of range, unknown
 *         flags or dtype), ::DT_ERR_NOT_IMPLEMENTED (dtype), ::DT_ERR_INVALID_STATE (after the first step or
 *         checkpoint).
 */
DT_API dt_result_t dt_byom_register(dt_byom_t byom, const char* name, int ndim,
                                    const int64_t* shape, dt_dtype_t dtype, void* param,
                                    const void* grad, unsigned flags);

/**
 * @brief One optimiser step. Collective over the dp group.
 *
 * Averages the registered gradients over dp, computes the global gradient norm, clips, and
 * updates every parameter with AdamW at learning rate lr. The gradient buffers are read,
 * never written: the program zeroes them for its next backward. With no tensors registered:
 * ::DT_ERR_INVALID_STATE.
 * @param byom a live byom.
 * @param lr learning rate, >= 0 and below 1e30 (so finite), the same on every rank (checked;
 *        -0 counts as 0).
 * @param[out] grad_norm global norm before clipping; may be NULL.
 * A byom holding an fp16 tensor, or scaling its loss (dt_byom_scale_loss()), skips a step
 * whose gradients hold an inf or NaN on any rank (every rank alike): *grad_norm is NaN, and
 * nothing changes but the loss scale, which halves (when scaling). Any other byom refuses
 * such a step on every rank (::DT_ERR_INVALID_ARGUMENT) and changes nothing either.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (lr out of range or
 *         not the same on every rank; gradients holding an inf or NaN), ::DT_ERR_INVALID_STATE (nothing registered), ::DT_ERR_INVALID_CONFIG (the ranks
 *         registered different tensors or made the byom with different optimizer settings or
 *         loss scaling; gradients that overflow at loss scale 1), ::DT_ERR_COMM.
 */
DT_API dt_result_t dt_byom_step(dt_byom_t byom, float lr, float* grad_norm);

/**
 * @brief Optimiser steps taken so far (restored by dt_byom_load_checkpoint()).
 * @param byom a live byom.
 * @param[out] steps the count.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (steps NULL).
 */
DT_API dt_result_t dt_byom_steps(dt_byom_t byom, long* steps);

/**
 * @brief Dynamic loss scaling, for a program that computes its gradients in fp16. Not
 * collective; every rank of dp makes the same call (checked with the registrations).
 *
 * Before each backward the program multiplies its loss by the scale dt_byom_loss_scale()
 * gives, so that small gradients do not flush to zero in fp16; dt_byom_step() divides the
 * gradients by that scale before the norm, the clipping and AdamW. A step whose gradients
 * hold an inf or NaN on any rank is skipped on every rank (*grad_norm NaN, nothing else
 * changes) and the scale halves; after 2000 clean steps in a row it doubles, up to 2^24. An
 * overflow at scale 1 fails the step with ::DT_ERR_INVALID_CONFIG and changes nothing (the
 * gradients' format cannot hold this training; an initial scale of 1 leaves no room to back
 * off). Checkpoints save the scale, and a load restores it (a file saved without one starts
 * the scale again from initial_scale). Any registered format may
 * be scaled (a program may widen its fp16 gradients to DT_F32 itself).
 * @param byom a live byom, before its first step or checkpoint call.
 * @param initial_scale the first scale, in [1, 16777216]; 0 means 65536.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (initial_scale),
 *         ::DT_ERR_INVALID_STATE (after the first step or checkpoint call).
 */
DT_API dt_result_t dt_byom_scale_loss(dt_byom_t byom, float initial_scale);

/**
 * @brief A byom's loss scale and the steps it skipped.
 * @param byom a live byom.
 * @param[out] scale what the program multiplies its next loss by: 1 without
 *        dt_byom_scale_loss(); may be NULL.
 * @param[out] skipped steps skipped since the byom was made because gradients overflowed
 *        (with or without loss scaling); may be NULL.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE.
 */
DT_API dt_result_t dt_byom_loss_scale(dt_byom_t byom, float* scale, long* skipped);

/* ---- built-in models ------------------------------------------------------------------- */

/** An MLP classifier; initialise with ::DT_MLP_CONFIG_INIT. */
typedef struct dt_mlp_config_t {
  size_t struct_size;  /**< sizeof(dt_mlp_config_t); set by DT_MLP_CONFIG_INIT */
  int num_sizes;       /**< entries of sizes (at least 2) */
  const int* sizes;    /**< input, hidden..., classes; copied at creation */
  int max_batch;       /**< largest batch passed to forward */
  uint64_t seed;       /**< weight initialisation (identical on every rank) */
  const char* device;  /**< where the model's parameters, gradients, optimiser state and
                            activations live and its arithmetic runs: "auto" (a GPU where
                            the CUDA plugin finds one, else the CPU), "cpu" or "cuda"; NULL
                            means "auto". Inputs and outputs of every call stay host memory.
                            Read only when struct_size covers it: callers built with an
                            older dtrain.h get "cpu" */
  const char* precision; /**< "fp32" (NULL means it), "bf16" or "fp16": mixed precision as
                              for dt_gpt_config_t::precision (fp32 master weights, 16-bit
                              parameters and reduced gradients, 16-bit GEMM operands on a GPU,
                              fp16's dynamic loss scale). Read only when struct_size covers it
                              (older callers get fp32) */
} dt_mlp_config_t;
/** Defaults of ::dt_mlp_config_t: no sizes (to be set), max_batch 32, seed 1337, device
 *  "auto", fp32. */
#define DT_MLP_CONFIG_INIT {sizeof(dt_mlp_config_t), 0, NULL, 32, 1337u, NULL, NULL}

/** A GPT-2-style model (docs/model.md); initialise with ::DT_GPT_CONFIG_INIT. */
typedef struct dt_gpt_config_t {
  size_t struct_size;  /**< sizeof(dt_gpt_config_t); set by DT_GPT_CONFIG_INIT */
  int layers;          /**< transformer blocks */
  int heads;           /**< attention heads (must divide d_model) */
  int d_model;         /**< width of the residual stream */
  int seq_len;         /**< longest sequence */
  int vocab;           /**< vocabulary size: tokens are in [0, vocab) */
  int tie_embeddings;  /**< nonzero: the LM head shares the token embedding */
  int max_batch;       /**< largest number of sequences passed to forward */
  uint64_t seed;       /**< weight initialisation (identical on every rank) */
  int recompute;       /**< nonzero: activation recomputation (forward keeps only each block's
                            output; backward runs the block's forward again): less activation
                            memory, the same results bit for bit. Read only when struct_size
                            covers it: callers built with an older dtrain.h get 0 */
  const char* device;  /**< "auto", "cpu" or "cuda", NULL meaning "auto": as
                            dt_mlp_config_t::device (older callers get "cpu") */
  int sequence_parallel; /**< nonzero: with tensor parallelism (dt_model_create_gpt_grid()
                              on a grid with tp > 1), the LayerNorms and the residual stream
                              between the split layers are split by sequence position over
                              the TP group (Megatron's sequence parallelism): less activation
                              memory, the same results to rounding. Read only when
                              struct_size covers it (older callers get 0) */
  const char* precision; /**< "fp32" (NULL means it), "bf16" or "fp16": mixed precision as
                              dtrain-gpt's --precision (docs/mixed-precision.md). The optimiser
                              keeps fp32 master weights; the parameters the model computes
                              with, the gradients after the reduction and the saved activations
                              are 16-bit values; on a GPU the GEMMs run on 16-bit tensor cores.
                              fp16 scales the loss dynamically (a step whose gradients overflow
                              is skipped: dt_model_step() gives a NaN norm). Read only when
                              struct_size covers it (older callers get fp32) */
  const char* schedule;  /**< pipeline parallelism (dt_model_create_gpt_grid() on a grid with
                              pp > 1): "1f1b" (NULL means it), "gpipe" or "interleaved", as
                              dtrain-gpt's --schedule (docs/pipeline-parallel.md). This field
                              and the three below are read only when struct_size covers them;
                              they must keep their defaults without pipeline parallelism */
  int micro_batches;     /**< pipeline parallelism: micro-batches each
                              dt_gpt_forward_backward() and dt_gpt_evaluate() cut their batch
                              into (batch / micro_batches sequences each, at most max_batch);
                              0 means the grid's pp */
  int virtual_stages;    /**< pipeline parallelism: model chunks per stage, more than 1 with
                              "interleaved" only; 0 means 1 */
  const char* pipeline_layers; /**< pipeline parallelism: the layers of each of the pp x
                              virtual_stages chunks in pipeline order, comma-separated ("3,2,2,1"),
                              as dtrain-gpt's --pipeline-layers; NULL: as even as possible. Read
                              only when struct_size covers it */
} dt_gpt_config_t;
/** Defaults of ::dt_gpt_config_t: 4 layers, 4 heads, d_model 256, seq_len 256, vocab 256,
 *  tied embeddings, max_batch 8, seed 1337, no recomputation, device "auto", no sequence
 *  parallelism, fp32, and under pipeline parallelism 1F1B over pp micro-batches with the
 *  layers split evenly. */
#define DT_GPT_CONFIG_INIT \
  {sizeof(dt_gpt_config_t), 4, 4, 256, 256, 256, 1, 8, 1337u, 0, NULL, 0, NULL, NULL, 0, 0, NULL}

/**
 * @brief Creates an MLP classifier: Linear layers with GELU between them, softmax
 * cross-entropy. Parameters "layers.I.weight" [out, in] and "layers.I.bias" [out].
 *
 * Collective over dp (the seeds are checked to agree).
 * @param dp the data-parallel group its steps average over.
 * @param config the layer sizes.
 * @param optimizer optimiser settings; NULL for the defaults.
 * @param[out] model the new model; NULL on failure.
 * On a GPU (config->device) the dp group's collectives on the model's buffers go over NCCL
 * where every rank has a GPU of its own, else over MPI staged through host memory (docs/cuda.md).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer,
 *         struct_size too small, fewer than 2 sizes, max_batch < 1), ::DT_ERR_INVALID_CONFIG (a size or setting
 *         out of range, seeds differ between ranks, an unknown device), ::DT_ERR_UNAVAILABLE
 *         ("cuda" where some rank has no usable GPU, or a GPU on some ranks of dp only: every
 *         rank returns it).
 */
DT_API dt_result_t dt_model_create_mlp(dt_comm_t dp, const dt_mlp_config_t* config,
                                       const dt_optimizer_config_t* optimizer, dt_model_t* model);

/**
 * @brief Creates a GPT model (names and shapes in docs/model.md). Collective over dp.
 * @param dp the data-parallel group its steps average over.
 * @param config the model shape; an impossible one gives ::DT_ERR_INVALID_CONFIG.
 * @param optimizer optimiser settings; NULL for the defaults.
 * @param[out] model the new model; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer,
 *         struct_size too small, max_batch < 1), ::DT_ERR_INVALID_CONFIG (an impossible shape or
 *         setting, seeds differ, an unknown device), ::DT_ERR_UNAVAILABLE (as
 *         dt_model_create_mlp()).
 */
DT_API dt_result_t dt_model_create_gpt(dt_comm_t dp, const dt_gpt_config_t* config,
                                       const dt_optimizer_config_t* optimizer, dt_model_t* model);

/**
 * @brief Creates a GPT model split over a process grid: tensor parallelism (Megatron's
 * column-, row- and vocabulary-parallel layers) over the grid's TP group, pipeline
 * parallelism over its PP group, data parallelism over its DP group. Collective over the
 * grid's world.
 *
 * The ranks of a TP group hold a slice of every split tensor each and compute one model
 * together: every call on the model is collective over the TP group, whose ranks pass the
 * same tokens (checked: different tokens fail the group, or every rank of the model where
 * ZeRO makes the call collective over dp). Losses, logits and gradient norms
 * are the whole model's on every rank; the tensor calls and checkpoints move whole tensors,
 * as in a model on one rank (dt_model_get_tensor() and dt_model_get_parameters() gather the
 * slices over the TP group, dt_model_set_tensor() takes the whole tensor on every rank).
 *
 * With pp > 1 each pipeline stage holds a contiguous share of the blocks (stage 0 also the
 * embedding, the last stage the final LayerNorm and the head, and with tied embeddings a copy
 * of wte whose gradient the step sums with stage 0's). dt_gpt_forward_backward(),
 * dt_gpt_evaluate() and dt_gpt_decode() are collective over the model's replica (its TP
 * groups on every stage), whose ranks all pass the same tokens and targets (checked):
 * config->schedule runs config->micro_batches micro-batches through the stages, and the loss
 * and logits are the last stage's, given to every stage. The tensor calls are the stage's:
 * they see the tensors this stage holds (the step and checkpoints cover the whole model). A
 * tied wte set on either end (dt_model_set_tensor()) reaches the other end's copy at the
 * next pass, step or checkpoint save (the first stage's values where both ends set it).
 * ZeRO 2 and 3 are not available with pp > 1.
 * A grid with tp = pp = 1 gives a data-parallel model over its DP group, as dt_model_create_gpt().
 * @param grid a live grid.
 * @param config the model shape; heads and d_model must be divisible by the grid's tp, layers
 *        at least pp x virtual_stages.
 * @param optimizer optimiser settings; NULL for the defaults.
 * @param[out] model the new model; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer,
 *         struct_size too small, max_batch < 1), ::DT_ERR_INVALID_CONFIG (an impossible shape,
 *         split or schedule, sequence_parallel without tp > 1, pipeline settings without
 *         pp > 1, seeds differ, an unknown device), ::DT_ERR_NOT_IMPLEMENTED (zero_stage 2
 *         or 3 with pp > 1), ::DT_ERR_UNAVAILABLE (as dt_model_create_mlp()).
 */
DT_API dt_result_t dt_model_create_gpt_grid(dt_grid_t grid, const dt_gpt_config_t* config,
                                            const dt_optimizer_config_t* optimizer,
                                            dt_model_t* model);

/**
 * @brief Creates an MLP classifier split over a grid's TP group (Megatron's pairs),
 * data-parallel over its DP group: as dt_model_create_mlp() otherwise.
 *
 * Collective over the grid's world. With tp > 1, layer 0, 2, 4, ... before the last is
 * column-parallel (each rank holds a slice of its outputs, and GELU runs on the slice),
 * layer 1, 3, 5, ... row-parallel (each rank holds the matching slice of its inputs; the
 * outputs are summed over the TP group), and a last layer of even index, whose input is
 * whole, is replicated: a one-layer MLP is computed alike on every rank. The ranks of a TP
 * group compute one model together: every call on the model is collective over the TP group,
 * whose ranks pass the same x and labels (checked, as for dt_model_create_gpt_grid()). Losses,
 * logits and gradient norms are the whole model's on every rank; the tensor calls and
 * checkpoints move whole tensors, as for a model on one rank, so checkpoints load across
 * tp and dp. ZeRO 0 to 3 over the DP group. A grid with tp = 1 gives a data-parallel model
 * over its DP group, as dt_model_create_mlp().
 * @param grid a live grid with pp = 1.
 * @param config the layer sizes; the output size of each column-parallel layer must be
 *        divisible by the grid's tp.
 * @param optimizer optimiser settings; NULL for the defaults.
 * @param[out] model the new model; NULL on failure.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (as
 *         dt_model_create_mlp()), ::DT_ERR_INVALID_CONFIG (as dt_model_create_mlp(), and a
 *         size that does not split over tp), ::DT_ERR_NOT_IMPLEMENTED (pp > 1),
 *         ::DT_ERR_UNAVAILABLE (as dt_model_create_mlp()).
 */
DT_API dt_result_t dt_model_create_mlp_grid(dt_grid_t grid, const dt_mlp_config_t* config,
                                            const dt_optimizer_config_t* optimizer,
                                            dt_model_t* model);

/**
 * @brief Releases a model and its optimiser state.
 *
 * Call it on every rank of the model, as ::dt_grid_destroy: communicators the model made
 * for itself go with it.
 * @param model a live model.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE.
 */
DT_API dt_result_t dt_model_destroy(dt_model_t model);

/**
 * @brief MLP forward and backward on this rank's batch.
 *
 * Gradients of the mean cross-entropy ACCUMULATE until the next dt_model_step(). Not
 * collective, except under zero_stage 2 and 3, where each call reduces its gradients into
 * the ranks' shares (collective over every rank of the model: every rank makes the same
 * number of calls), and under tensor parallelism (dt_model_create_mlp_grid(): collective
 * over the TP group, whose ranks pass the same x and labels).
 * @param model a live MLP.
 * @param x batch * inputs floats, row-major [batch][inputs].
 * @param labels batch class indices in [0, classes).
 * @param batch samples, 1..max_batch.
 * @param[out] loss this rank's mean loss; may be NULL.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (not an MLP, NULL
 *         pointer, batch out of range, a label out of range; under tensor parallelism
 *         inputs that differ within the TP group, on every rank of the call).
 */
DT_API dt_result_t dt_mlp_forward_backward(dt_model_t model, const float* x,
                                           const int32_t* labels, int batch, float* loss);

/**
 * @brief Mean MLP loss on a batch, without touching gradients.
 *
 * Collective over every rank of the model under zero_stage 3 (the parameters are gathered),
 * over the TP group under tensor parallelism (the same inputs on its ranks), else not.
 * @param model a live MLP.
 * @param x [batch][inputs] floats.
 * @param labels batch class indices in [0, classes).
 * @param batch samples, 1..max_batch.
 * @param[out] loss the mean loss.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (not an MLP, NULL
 *         pointer, batch or a label out of range, inputs that differ within the TP group).
 */
DT_API dt_result_t dt_mlp_evaluate(dt_model_t model, const float* x, const int32_t* labels,
                                   int batch, float* loss);

/**
 * @brief MLP logits of a batch.
 *
 * Collective as dt_mlp_evaluate(); under tensor parallelism every rank gets all the logits.
 * @param model a live MLP.
 * @param x [batch][inputs] floats.
 * @param batch samples, 1..max_batch.
 * @param[out] logits [batch][classes] floats.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (not an MLP, NULL
 *         pointer, batch out of range, inputs that differ within the TP group).
 */
DT_API dt_result_t dt_mlp_predict(dt_model_t model, const float* x, int batch, float* logits);

/**
 * @brief GPT forward and backward (next-token cross-entropy).
 *
 * Gradients accumulate until dt_model_step(). Not collective, except under zero_stage 2
 * and 3, where each call reduces its gradients into the ranks' shares as backward produces
 * them (collective over dp: every rank makes the same number of calls), and under tensor or
 * pipeline parallelism (collective over the model's replica: dt_model_create_gpt_grid()).
 * @param model a live GPT.
 * @param tokens [batch][seq] int32 in [0, vocab) (checked).
 * @param targets [batch][seq] int32 in [0, vocab) (checked).
 * @param batch sequences, 1..max_batch; under pipeline parallelism micro_batches micro-batches
 *        of 1..max_batch sequences each.
 * @param seq tokens per sequence, 1..seq_len.
 * @param[out] loss this rank's mean loss; may be NULL.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (not a GPT, NULL
 *         pointer, batch, seq or a token out of range; the message names the first bad token).
 */
DT_API dt_result_t dt_gpt_forward_backward(dt_model_t model, const int32_t* tokens,
                                           const int32_t* targets, int batch, int seq, float* loss);

/**
 * @brief Mean GPT loss on a batch, without touching gradients.
 *
 * Collective over dp under zero_stage 3 (the parameters are gathered), over the model's
 * replica under tensor or pipeline parallelism, else not.
 * @param model a live GPT.
 * @param tokens [batch][seq] int32 in [0, vocab).
 * @param targets [batch][seq] int32 in [0, vocab).
 * @param batch sequences, 1..max_batch; under pipeline parallelism as for
 *        dt_gpt_forward_backward().
 * @param seq tokens per sequence, 1..seq_len.
 * @param[out] loss the mean loss.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (not a GPT, NULL
 *         pointer, batch, seq or a token out of range).
 */
DT_API dt_result_t dt_gpt_evaluate(dt_model_t model, const int32_t* tokens,
                                   const int32_t* targets, int batch, int seq, float* loss);

/**
 * @brief GPT next-token logits for generation, with a key/value cache.
 *
 * Appends tokens to the text the model holds (with new_text nonzero, the text starts anew
 * with them) and writes the logits of the last of them: the distribution of the token that
 * follows. The model keeps every block's query, key and value rows of the text, so each
 * call costs a forward pass over its tokens only; the logits are those of a forward pass
 * over the whole text, up to rounding. A text holds at most seq_len tokens (to go on past
 * that, start a new text with its last tokens). A call that changes the parameters (a step,
 * a tensor set, a checkpoint or weights load) leaves the text's keys and values of the old
 * ones: only a new text may follow (else ::DT_ERR_INVALID_STATE). The first call allocates the cache (per
 * block seq_len x 3 d_model floats). Gradients are untouched. Collective over dp under
 * zero_stage 3 (the parameters are gathered), over the model's replica under tensor or
 * pipeline parallelism (every stage gets the logits), else not.
 * @param model a live GPT.
 * @param tokens count int32 in [0, vocab).
 * @param count tokens to append, at least 1.
 * @param new_text nonzero: forget the text held and start a new one with these tokens.
 * @param[out] logits [vocab] floats.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (not a GPT, NULL
 *         pointer, count < 1, the text longer than seq_len, a token out of range),
 *         ::DT_ERR_INVALID_STATE (appending after the parameters changed).
 */
DT_API dt_result_t dt_gpt_decode(dt_model_t model, const int32_t* tokens, int count,
                                 int new_text, float* logits);

/** How dt_sample_token() chooses; initialise with ::DT_SAMPLING_CONFIG_INIT. */
typedef struct dt_sampling_config_t {
  size_t struct_size; /**< sizeof(dt_sampling_config_t); set by DT_SAMPLING_CONFIG_INIT */
  double temperature; /**< logits are divided by it; 0: always the most likely token */
  int top_k;          /**< > 0: draw among the k most likely tokens only; 0: among all */
  double top_p;       /**< < 1: among the fewest most likely tokens whose probabilities add up
                           to at least top_p (nucleus sampling, after top_k); 1: all */
} dt_sampling_config_t;
/** Defaults of ::dt_sampling_config_t: temperature 1, no top-k, top_p 1 (plain sampling). */
#define DT_SAMPLING_CONFIG_INIT {sizeof(dt_sampling_config_t), 1.0, 0, 1.0}

/**
 * @brief Chooses the next token from one row of logits, as dtrain-gpt --generate does.
 *
 * The token drawn from softmax(logits / temperature), restricted to the top_k most likely
 * tokens, then to the top_p nucleus: walking the kept tokens from the most likely down, the
 * first at which their cumulative probability exceeds uniform. The program supplies uniform
 * from its own random stream, so a value agreed by all ranks gives every rank the same token.
 * Temperature 0 gives the most likely token (the lowest id among equals) whatever uniform is.
 * No handle: not collective, thread-safe; a failure's message is the thread's last error
 * (dt_get_last_error(NULL)).
 * @param logits vocab floats, e.g. dt_gpt_decode()'s.
 * @param vocab the number of logits, at least 1.
 * @param config the sampling settings; NULL for the defaults.
 * @param uniform a number in [0, 1).
 * @param[out] token the chosen id, in [0, vocab).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_ARGUMENT (NULL pointer, vocab < 1, uniform outside
 *         [0, 1), struct_size too small, temperature negative or not finite, top_k < 0,
 *         top_p outside (0, 1], a NaN logit, the largest logit infinite).
 */
DT_API dt_result_t dt_sample_token(const float* logits, int vocab,
                                   const dt_sampling_config_t* config, double uniform,
                                   int32_t* token);

/**
 * @brief Optimiser step. Collective over every rank of the model: its dp group, and on a grid
 * (dt_model_create_gpt_grid()) the grid's world.
 *
 * Averages the accumulated gradients over dp (under zero_stage 2 and 3 the forward-backward
 * calls have already summed them into the ranks' shares), clips by the whole model's norm,
 * applies AdamW at lr, then zeroes the gradients. A model in fp16 whose gradients overflowed
 * (agreed by every rank) skips the update instead: the parameters, the optimiser state and
 * dt_model_steps() stay as they were, the loss scale halves, and *grad_norm is NaN. In fp32
 * and bf16, gradients holding an inf or NaN (a diverged model) fail the step on every rank
 * (::DT_ERR_INVALID_ARGUMENT): the parameters and the optimiser state stay as they were, and
 * the gradients are zeroed.
 * @param model a live model.
 * @param lr learning rate, >= 0 and below 1e30 (so finite), the same on every rank (checked;
 *        -0 counts as 0).
 * @param[out] grad_norm global norm before clipping; may be NULL.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (lr out of range or
 *         not the same on every rank; gradients holding an inf or NaN), ::DT_ERR_COMM,
 *         ::DT_ERR_INVALID_CONFIG (fp16: the gradients overflow at the
 *         smallest loss scale, 1; training cannot go on in fp16).
 */
DT_API dt_result_t dt_model_step(dt_model_t model, float lr, float* grad_norm);

/**
 * @brief A model's fp16 loss scale and the steps it skipped (mixed precision, fp16).
 *
 * The scale seeds the next backward pass; it halves after a skipped step and doubles after
 * 2000 clean steps in a row (MLP and GPT alike). Checkpoints save it, and a load restores
 * it. Other precisions: scale 1, nothing skipped.
 * @param model a live model.
 * @param[out] scale the current loss scale; may be NULL.
 * @param[out] skipped steps skipped on overflow since the model was made; may be NULL.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE.
 */
DT_API dt_result_t dt_model_loss_scale(dt_model_t model, float* scale, long* skipped);

/**
 * @brief Number of parameter values (the sum of all tensors' element counts; under pipeline
 * parallelism, of the tensors this stage holds, as for every tensor call).
 * @param model a live model.
 * @param[out] count the number of floats dt_model_get_parameters() writes.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (count NULL).
 */
DT_API dt_result_t dt_model_num_parameters(dt_model_t model, size_t* count);

/**
 * @brief Number of logits a prediction writes per row: an MLP's classes (dt_mlp_predict()),
 * a GPT's vocabulary (dt_gpt_decode()), on every rank and pipeline stage alike. Local.
 * @param model a live model.
 * @param[out] count the number of logits.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (count NULL).
 */
DT_API dt_result_t dt_model_num_logits(dt_model_t model, int* count);

/**
 * @brief Copies every parameter, tensor after tensor in creation order (each row-major).
 *
 * Whole tensors under every ZeRO stage and under tensor parallelism; under zero_stage 3
 * they are gathered one at a time, so the call is collective over dp, and split tensors are
 * gathered over the TP group (collective over it). Under pipeline parallelism: the tensors
 * this stage holds.
 * @param model a live model.
 * @param[out] dst capacity floats.
 * @param capacity must be >= dt_model_num_parameters().
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (dst NULL, capacity
 *         too small).
 */
DT_API dt_result_t dt_model_get_parameters(dt_model_t model, float* dst, size_t capacity);

/**
 * @brief Optimiser steps taken so far (restored by dt_model_load_checkpoint()).
 * @param model a live model.
 * @param[out] steps the count.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (steps NULL).
 */
DT_API dt_result_t dt_model_steps(dt_model_t model, long* steps);

/**
 * @brief The device a model lives on, as its config->device chose it.
 * @param model a live model.
 * @param[out] name capacity chars for the NUL-terminated description, which starts with
 *             "cpu" or "cuda" (e.g. "cpu (OpenBLAS)"); may be NULL with capacity 0 to ask
 *             the length only.
 * @param capacity length of name; not more than *length: ::DT_ERR_INVALID_ARGUMENT.
 * @param[out] length strlen of the description (set even when capacity is too small).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer,
 *         capacity too small).
 */
DT_API dt_result_t dt_model_device(dt_model_t model, char* name, size_t capacity, size_t* length);

/**
 * @brief Number of parameter tensors of a model (under pipeline parallelism, of this stage).
 * @param model a live model.
 * @param[out] count the number of tensors (names: dt_model_tensor_name()).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (count NULL).
 */
DT_API dt_result_t dt_model_num_tensors(dt_model_t model, int* count);

/**
 * @brief Name of the index-th parameter tensor, in creation order.
 * @param model a live model.
 * @param index 0-based, below dt_model_num_tensors().
 * @param[out] name capacity chars for the NUL-terminated name; may be NULL with capacity 0
 *             to ask the length only.
 * @param capacity length of name; not more than *length: ::DT_ERR_INVALID_ARGUMENT.
 * @param[out] length strlen of the name (set even when capacity is too small).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer,
 *         index out of range, capacity too small).
 */
DT_API dt_result_t dt_model_tensor_name(dt_model_t model, int index, char* name, size_t capacity,
                                        size_t* length);

/**
 * @brief Logical shape of one parameter tensor of a model, by name.
 * @param model a live model.
 * @param name a parameter name (docs/model.md; "layers.I.weight" for the MLP); an unknown
 *             name gives ::DT_ERR_INVALID_ARGUMENT.
 * @param[out] shape capacity extents, row-major; may be NULL with capacity 0 to ask ndim only.
 * @param capacity length of shape; smaller than the tensor's ndim: ::DT_ERR_INVALID_ARGUMENT.
 * @param[out] ndim number of dimensions (set even when capacity is too small).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer, unknown
 *         name, capacity too small).
 */
DT_API dt_result_t dt_model_tensor_shape(dt_model_t model, const char* name, int64_t* shape,
                                         int capacity, int* ndim);

/**
 * @brief Copies one parameter tensor of a model, row-major.
 *
 * The whole tensor under every ZeRO stage and under tensor parallelism; under zero_stage 3
 * it is gathered, so the call is collective over dp, and a tensor split over a TP group is
 * gathered over that group (collective over it); the ranks of a collective call name the
 * same tensor (checked).
 * @param model a live model.
 * @param name a parameter name; unknown: ::DT_ERR_INVALID_ARGUMENT.
 * @param[out] dst capacity floats.
 * @param capacity must be >= the tensor's element count.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer, unknown
 *         name, capacity too small, names that differ between the ranks of a collective call).
 */
DT_API dt_result_t dt_model_get_tensor(dt_model_t model, const char* name, float* dst,
                                       size_t capacity);

/**
 * @brief Overwrites one parameter tensor of a model (e.g. with pretrained values).
 *
 * Not collective (also under zero_stage 3, where each rank keeps its share of the values),
 * but every rank of the dp group must set the same values, or the replicas diverge. Under
 * tensor parallelism every rank passes the whole tensor and keeps its slice; the call is
 * collective over the TP group, and different values there fail every rank of that TP group
 * (::DT_ERR_INVALID_ARGUMENT). A tied wte set on one end of a pipeline reaches the other
 * end at the next pass, step or checkpoint save (a checkpoint load before then discards it).
 * @param model a live model.
 * @param name a parameter name; unknown: ::DT_ERR_INVALID_ARGUMENT.
 * @param src count floats, row-major, all finite.
 * @param count must equal the tensor's element count.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (NULL pointer, unknown
 *         name, count not the element count, a NaN or infinity in src: the model is left
 *         as it was).
 */
DT_API dt_result_t dt_model_set_tensor(dt_model_t model, const char* name, const float* src,
                                       size_t count);

/**
 * @brief Overwrites a GPT's parameters with pretrained ones from a file: a safetensors file
 * (Hugging Face's GPT-2, or a directory holding its model.safetensors; nanoGPT's; a
 * dtrain-ckpt export) or a dtrain checkpoint, of which only the model's tensors are taken
 * (docs/dtrain-gpt.md, Starting from pretrained weights).
 *
 * Collective over every rank of the model (on a grid, its world), which all pass the same
 * source; each rank reads, whole, every tensor of its pipeline stage and keeps what it holds
 * (its tensor-parallel slices, under ZeRO 3 its pieces), in host memory until all are read.
 * The file's model must be this one: layers, d_model, vocab, tie_embeddings, the head count
 * where the file records it (else heads is taken as given), and at least seq_len positions
 * (a longer wpe gives its first rows); a refusal names the config fields that would fit.
 * Every tensor is read and checked before any parameter changes, so a file that is refused
 * leaves the model as it was (a device that then fails to take the values leaves them
 * undefined). Optimiser state and step count are kept; accumulated gradients are zeroed.
 * @param model a live GPT.
 * @param source the file, or a directory holding model.safetensors.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (source NULL or
 *         empty, or not the same on every rank; the model is an MLP), ::DT_ERR_INVALID_CONFIG
 *         (the file holds another model, or a value that is not finite), ::DT_ERR_IO (missing,
 *         unreadable), ::DT_ERR_CORRUPT_DATA (damaged, or neither safetensors nor HDF5),
 *         ::DT_ERR_OUT_OF_MEMORY.
 */
DT_API dt_result_t dt_model_load_weights(dt_model_t model, const char* source);

/* ---- checkpoints (HDF5, docs/checkpoint-format.md) -------------------------------------- */
/*
 * A checkpoint is one HDF5 file, dir/step_NNNNNNNN.h5 (the step, 8 digits), holding every
 * tensor whole under /model/NAME with its logical shape, its AdamW moments under
 * /optimizer/NAME/exp_avg and exp_avg_sq, the step count, and a checksum per dataset. It is
 * written under a temporary name and renamed when complete; dir/latest then names it. Any
 * data-parallel size and ZeRO stage loads what any other wrote.
 */

/**
 * @brief Writes the registered tensors and their optimiser state to a checkpoint.
 *
 * The file is dir/step_NNNNNNNN.h5, NNNNNNNN being dt_byom_steps() (dir is created when
 * missing). The program's parameter buffers are what is saved. Closes registration, as the
 * first step does.
 * Collective over every rank of the byom (its dp group; made by dt_byom_create_grid(), the
 * grid's world, which writes one file of whole tensors), and every one of them must name the
 * same dir (compared as absolute paths with links resolved) and pass the same keep (else
 * ::DT_ERR_INVALID_ARGUMENT on every rank). Separate byoms, such as one made
 * with dt_byom_create() over each DP group of a grid, each need a dir of their own: the
 * first save claims dir for the byom's process until the byom is destroyed or saves
 * elsewhere (a lock on dir/.dtrain-lock held by its rank 0; docs/checkpoint-format.md), and
 * a dir another process holds gives ::DT_ERR_IO naming that process.
 * @param byom a live byom with at least one tensor registered.
 * @param dir the checkpoint directory.
 * @param keep > 0: keep only the newest keep checkpoints in dir; 0: keep all.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (dir NULL or empty,
 *         keep < 0, dirs or keep values that differ between the ranks, or a parameter or
 *         its optimiser state holding a NaN on any rank: nothing is written or pruned, since
 *         a load refuses such a file), ::DT_ERR_INVALID_STATE (nothing
 *         registered), ::DT_ERR_IO (dir cannot be created or written, or another process
 *         holds it).
 */
DT_API dt_result_t dt_byom_save_checkpoint(dt_byom_t byom, const char* dir, int keep);

/**
 * @brief Loads parameters, optimiser state and step count into the registered tensors.
 *
 * The program's parameter buffers receive the values; dt_byom_steps() the step. Every
 * registered tensor must be in the file with the same shape (else ::DT_ERR_INVALID_CONFIG
 * naming it). Closes registration. Collective over every rank of the byom, as
 * dt_byom_save_checkpoint(), which all pass the same source. On any failure the
 * program's buffers, the optimiser state and the step count are left as they were.
 * @param byom a live byom with at least one tensor registered.
 * @param source a checkpoint file, or a directory (its latest complete checkpoint; none:
 *               ::DT_ERR_IO).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (source NULL or
 *         empty, or not the same on every rank), ::DT_ERR_INVALID_STATE (nothing registered),
 *         ::DT_ERR_IO (no such file, no
 *         checkpoint in the directory, not HDF5), ::DT_ERR_INVALID_CONFIG (a registered tensor
 *         missing or of another shape), ::DT_ERR_CORRUPT_DATA (format or checksum, or a NaN in a
 *         dataset).
 */
DT_API dt_result_t dt_byom_load_checkpoint(dt_byom_t byom, const char* source);

/**
 * @brief Writes a built-in model and its optimiser state to a checkpoint.
 *
 * The file is dir/step_NNNNNNNN.h5, NNNNNNNN being dt_model_steps(). Every tensor is
 * written whole; under zero_stage 3 each rank writes its own share, and nothing is
 * gathered. Collective over every rank of the model (its dp group; on a grid, the grid's
 * world, which writes one file), which all name the same dir and pass the same keep. Separate
 * models, such as one made with dt_model_create_gpt() over each DP group of a grid, each need
 * a dir of their own: as dt_byom_save_checkpoint(), the first save claims dir until the model
 * is destroyed or saves elsewhere, and a dir another process holds gives ::DT_ERR_IO.
 * @param model a live model.
 * @param dir the checkpoint directory (created when missing).
 * @param keep > 0: keep only the newest keep checkpoints in dir; 0: keep all.
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (dir NULL or empty,
 *         keep < 0, dirs or keep values that differ between the ranks, or a NaN in the
 *         model or its optimiser state, as dt_byom_save_checkpoint()), ::DT_ERR_IO.
 */
DT_API dt_result_t dt_model_save_checkpoint(dt_model_t model, const char* dir, int keep);

/**
 * @brief Loads a built-in model's parameters, optimiser state and step count.
 *
 * The checkpoint must have been written for the same model configuration (else
 * ::DT_ERR_INVALID_CONFIG); accumulated gradients are zeroed. Collective over every rank of
 * the model, as dt_model_save_checkpoint(), which all pass the same source. On any failure (a corrupt file included) parameters, optimiser state, step count
 * and gradients are left as they were.
 * @param model a live model.
 * @param source a checkpoint file, or a directory (its latest complete checkpoint; none:
 *               ::DT_ERR_IO).
 * @return ::DT_SUCCESS; ::DT_ERR_INVALID_HANDLE, ::DT_ERR_INVALID_ARGUMENT (source NULL or
 *         empty, or not the same on every rank), ::DT_ERR_IO, ::DT_ERR_INVALID_CONFIG
 *         (written for another model),
 *         ::DT_ERR_CORRUPT_DATA.
 */
DT_API dt_result_t dt_model_load_checkpoint(dt_model_t model, const char* source);

/**
 * @brief The checkpoint a run would resume from: dir/latest, else the newest complete
 * step_*.h5 in dir.
 *
 * Rank 0 of comm decides, so every rank gets the same answer. Collective over comm, whose
 * ranks all pass the same dir; a bad argument on one rank fails every rank.
 * @param comm a live group.
 * @param dir the checkpoint directory; a missing directory has no checkpoint, a file there
 *            is ::DT_ERR_IO.
 * @param[out] path capacity chars for the NUL-terminated path, "" when there is none; may be
 *             NULL with capacity 0 to ask the length only.
 * @param capacity length of path; not more than *length: ::DT_ERR_INVALID_ARGUMENT.
 * @param[out] length strlen of the path (0: none); set even when capacity is too small.
 * @return ::DT_SUCCESS (also when there is none); ::DT_ERR_INVALID_HANDLE,
 *         ::DT_ERR_INVALID_ARGUMENT (NULL pointer, empty dir, dirs that differ between the
 *         ranks, capacity too small), ::DT_ERR_IO (dir is not a directory; dir/latest names
 *         a missing file, or is a dangling link or a directory), ::DT_ERR_CORRUPT_DATA
 *         (dir/latest holds something other than the name of a checkpoint file there).
 */
DT_API dt_result_t dt_checkpoint_find(dt_comm_t comm, const char* dir, char* path,
                                      size_t capacity, size_t* length);

#ifdef __cplusplus
}
#endif

#endif /* DTRAIN_H */
