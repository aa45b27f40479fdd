/**
 * @file dtrain.h
 * @brief The stable C ABI of dtrain (C99). See docs/c-api.md for the full guide.
 *
 * Rules every function follows:
 *  - It returns a ::dt_result_t; DT_SUCCESS is 0. Nothing throws, aborts or exits across
 *    this interface (a collective that never completes is still ended by the watchdog, see
 *    DTRAIN_COMM_TIMEOUT).
 *  - Handles are opaque and checked on every call: NULL, destroyed or wrong-kind handles give
 *    DT_ERR_INVALID_HANDLE. Output pointers must not be NULL (DT_ERR_INVALID_ARGUMENT).
 *  - On failure, dt_get_last_error(ctx) returns a message for the context the call used,
 *    and dt_get_last_error(NULL) the last message of the calling thread.
 *  - Ownership: buffers passed in stay owned by the caller. Handles created by a dt_*_create
 *    or dt_init* call are owned by the caller and released by the matching destroy/finalize;
 *    dt_comm_t handles are borrowed from their context or grid and never destroyed.
 *    dt_finalize() releases every handle still alive in that context.
 *  - Binary compatibility: enums only grow; config structs start with struct_size and are
 *    initialised with their DT_*_INIT macro, so fields can be appended in later versions.
 */
#ifndef DTRAIN_H
#define DTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain_version.h"

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
 * specific to the C ABI. Only ever grows.
 */
typedef enum dt_result_t {
  DT_SUCCESS = 0,
  DT_ERR_INVALID_ARGUMENT = 1,  /**< a NULL pointer, a size out of range, an unknown name */
  DT_ERR_INVALID_CONFIG = 2,    /**< a config struct describes something impossible */
  DT_ERR_OUT_OF_MEMORY = 3,
  DT_ERR_IO = 4,
  DT_ERR_COMM = 5,              /**< MPI reported an error */
  DT_ERR_TIMEOUT = 6,
  DT_ERR_NOT_IMPLEMENTED = 7,   /**< a valid request this version cannot do yet */
  DT_ERR_UNAVAILABLE = 8,       /**< e.g. a CUDA device was asked for but none is present */
  DT_ERR_CORRUPT_DATA = 9,
  DT_ERR_INTERNAL = 10,         /**< a bug in dtrain: please report it with the message */
  DT_ERR_INVALID_HANDLE = 1000, /**< NULL, destroyed, finalized or wrong-kind handle */
  DT_ERR_INVALID_STATE = 1001   /**< a call out of order (e.g. register after the first step) */
} dt_result_t;

/* ---- handles --------------------------------------------------------------------------- */

typedef struct dt_context_s* dt_context_t;   /**< one MPI job's dtrain state */
typedef struct dt_comm_s* dt_comm_t;         /**< a group of ranks (borrowed) */
typedef struct dt_grid_s* dt_grid_t;         /**< tensor/pipeline/data-parallel groups */
typedef struct dt_byom_s* dt_byom_t;         /**< buffers the program owns + their optimiser */
typedef struct dt_model_s* dt_model_t;       /**< a built-in model + its optimiser */

/* ---- value enums (values equal dtrain::DType / dtrain::ReduceOp) ------------------------ */

typedef enum dt_dtype_t {
  DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2, DT_F64 = 3, DT_I32 = 4, DT_I64 = 5, DT_U8 = 6
} dt_dtype_t;

/** DT_AVG: sum divided by the group size (integer types truncate toward zero). */
typedef enum dt_reduce_op_t { DT_SUM = 0, DT_AVG = 1, DT_MAX = 2, DT_MIN = 3 } dt_reduce_op_t;

typedef enum dt_group_t { DT_GROUP_WORLD = 0, DT_GROUP_TP = 1, DT_GROUP_PP = 2, DT_GROUP_DP = 3 } dt_group_t;

/* ---- version and errors ---------------------------------------------------------------- */

/** DT_VERSION_CODE of the library actually loaded (may be newer than the header). */
DT_API int dt_get_version(void);

/** A static, human-readable name for code ("invalid argument", ...); never NULL. */
DT_API const char* dt_get_error_string(dt_result_t code);

/**
 * The message of the last failed call that used ctx (thread-safe: the text is copied into
 * storage of the calling thread, valid until its next dt_get_last_error call). With a NULL,
 * destroyed or finalized ctx: the last failure of the calling thread. "" when none.
 */
DT_API const char* dt_get_last_error(dt_context_t ctx);

/* ---- context ------------------------------------------------------------------------- */

/**
 * Starts dtrain over MPI_COMM_WORLD (duplicated). Initialises MPI (MPI_THREAD_MULTIPLE
 * requested) when the program has not; then dt_finalize() finalises it. argc/argv may be
 * NULL. Collective over MPI_COMM_WORLD.
 */
DT_API dt_result_t dt_init(int* argc, char*** argv, dt_context_t* ctx);

/**
 * Starts dtrain over a duplicate of the communicator whose Fortran handle is given
 * (MPI_Comm_c2f(comm), or comm%MPI_VAL of an mpi_f08 type(MPI_Comm)). MPI must already be
 * initialised by the program, which also finalises it. Collective over that communicator.
 * From C with an MPI_Comm, use dt_init_mpi_comm() in dtrain_mpi.h.
 */
DT_API dt_result_t dt_init_fortran_comm(int fortran_comm, dt_context_t* ctx);

/**
 * Releases every handle of ctx still alive (models, buffers, grids, communicators), then the
 * context, and finalises MPI if dt_init() initialised it. Collective. Afterwards any use of
 * ctx or its handles returns DT_ERR_INVALID_HANDLE.
 */
DT_API dt_result_t dt_finalize(dt_context_t ctx);

/** Rank and size of this process in the context's world communicator. */
DT_API dt_result_t dt_context_rank(dt_context_t ctx, int* rank);
DT_API dt_result_t dt_context_size(dt_context_t ctx, int* size);
/** The context's world communicator (borrowed; valid until dt_finalize). */
DT_API dt_result_t dt_context_world(dt_context_t ctx, dt_comm_t* world);

/* ---- communicators and collectives ----------------------------------------------------- */
/*
 * Collective rules (as NCCL): every rank of the group calls the same collective in the same
 * order with matching counts and types; the calls block until the local buffers may be
 * reused; buffers are host memory; count == 0 is legal and does nothing. A call that fails
 * argument checks on one rank only leaves the other ranks waiting (the watchdog ends them).
 */

DT_API dt_result_t dt_comm_rank(dt_comm_t comm, int* rank);
DT_API dt_result_t dt_comm_size(dt_comm_t comm, int* size);
/**
 * World ranks of the members of comm, in group-rank order. capacity: length of ranks;
 * *count receives the group size (ranks may be NULL with capacity 0 to ask for it only);
 * DT_ERR_INVALID_ARGUMENT when capacity is too small.
 */
DT_API dt_result_t dt_comm_world_ranks(dt_comm_t comm, int* ranks, int capacity, int* count);

/** recv = op over ranks of send; in-place when recv == send. */
DT_API dt_result_t dt_all_reduce(dt_comm_t comm, const void* send, void* recv, size_t count,
                                 dt_dtype_t dtype, dt_reduce_op_t op);
/** recv (send_count * size elements) gets block r from rank r. In-place: send == recv +
 *  rank*send_count, or send == recv. */
DT_API dt_result_t dt_all_gather(dt_comm_t comm, const void* send, void* recv, size_t send_count,
                                 dt_dtype_t dtype);
/** send holds recv_count * size elements; rank r receives block r reduced over ranks.
 *  In-place: recv == send + rank*recv_count, or recv == send. */
DT_API dt_result_t dt_reduce_scatter(dt_comm_t comm, const void* send, void* recv,
                                     size_t recv_count, dt_dtype_t dtype, dt_reduce_op_t op);
/** recv = root's send (send is read on root only; send == recv is in-place). root is the
 *  rank in comm (0-based). */
DT_API dt_result_t dt_broadcast(dt_comm_t comm, const void* send, void* recv, size_t count,
                                dt_dtype_t dtype, int root);
DT_API dt_result_t dt_barrier(dt_comm_t comm);

/* ---- process grid ---------------------------------------------------------------------- */

typedef struct dt_grid_config_t {
  size_t struct_size; /**< sizeof(dt_grid_config_t); set by DT_GRID_CONFIG_INIT */
  int tp;             /**< tensor-parallel size (default 1) */
  int pp;             /**< pipeline-parallel size (default 1) */
  int dp;             /**< data-parallel size; 0 = world size / (tp * pp) */
  const char* order;  /**< dimensions fastest first; NULL = "tp-dp-pp" */
} dt_grid_config_t;
#define DT_GRID_CONFIG_INIT {sizeof(dt_grid_config_t), 1, 1, 0, NULL}

/** Collective over the context's world. An invalid shape fails on every rank alike. */
DT_API dt_result_t dt_grid_create(dt_context_t ctx, const dt_grid_config_t* config,
                                  dt_grid_t* grid);
/** DT_ERR_INVALID_STATE while a model or byom handle still uses one of its groups. */
DT_API dt_result_t dt_grid_destroy(dt_grid_t grid);
/** Resolved sizes (dp filled in) and this rank's 0-based coordinates. Any output may be NULL. */
DT_API dt_result_t dt_grid_shape(dt_grid_t grid, int* tp, int* pp, int* dp);
DT_API dt_result_t dt_grid_coords(dt_grid_t grid, int* tp_rank, int* pp_rank, int* dp_rank);
/** The group of this rank along one dimension (borrowed; valid until the grid is destroyed). */
DT_API dt_result_t dt_grid_comm(dt_grid_t grid, dt_group_t group, dt_comm_t* comm);

/* ---- optimiser settings (shared by byom and built-in models) --------------------------- */

typedef struct dt_optimizer_config_t {
  size_t struct_size;  /**< sizeof(dt_optimizer_config_t); set by DT_OPTIMIZER_CONFIG_INIT */
  float beta1, beta2, eps;
  float weight_decay;  /**< decoupled (AdamW); applies to tensors registered with decay */
  float clip_grad;     /**< global-norm clipping threshold; 0 disables */
  int zero_stage;      /**< 0: all-reduce; 1: ZeRO-1 (optimiser state sharded over dp) */
  double bucket_mb;    /**< gradient bucket size for the data-parallel reduction (MiB) */
} dt_optimizer_config_t;
#define DT_OPTIMIZER_CONFIG_INIT {sizeof(dt_optimizer_config_t), 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 25.0}

/* ---- bring your own model -------------------------------------------------------------- */
/*
 * The program owns its parameters and computes their gradients; dtrain averages the
 * gradients over the data-parallel group (bucketed), clips them by the global norm and
 * applies AdamW to the parameters in place.
 */

/** dp: the data-parallel group (the world, or dt_grid_comm(..., DT_GROUP_DP)). */
DT_API dt_result_t dt_byom_create(dt_comm_t dp, const dt_optimizer_config_t* config,
                                  dt_byom_t* byom);
DT_API dt_result_t dt_byom_destroy(dt_byom_t byom);

/** Flags of dt_byom_register. */
#define DT_PARAM_NO_DECAY 1u /**< exclude from weight decay (biases, norms) */

/**
 * Registers a parameter buffer and its gradient buffer (both owned by the program, which
 * keeps them alive and at the same address until the byom handle is destroyed). name: unique
 * global name; shape[ndim]: row-major (C) logical shape, every extent > 0; dtype: DT_F32 only
 * (others: DT_ERR_NOT_IMPLEMENTED). Every rank registers the same tensors in the same
 * order. Only before the first dt_byom_step (then DT_ERR_INVALID_STATE).
 */
DT_API dt_result_t dt_byom_register(dt_byom_t byom, const char* name, int ndim,
                                    const int64_t* shape, dt_dtype_t dtype, void* param,
                                    const void* grad, unsigned flags);

/**
 * One optimiser step, collective over the dp group: averages the registered gradients over
 * dp, computes the global gradient norm (written to *grad_norm unless NULL, before
 * clipping), clips, and updates every parameter with AdamW at learning rate lr. The
 * gradient buffers are read, never written: the program zeroes them for its next backward.
 */
DT_API dt_result_t dt_byom_step(dt_byom_t byom, float lr, float* grad_norm);

/** Optimiser steps taken so far. */
DT_API dt_result_t dt_byom_steps(dt_byom_t byom, long* steps);

/* ---- built-in models ------------------------------------------------------------------- */

typedef struct dt_mlp_config_t {
  size_t struct_size;  /**< sizeof(dt_mlp_config_t); set by DT_MLP_CONFIG_INIT */
  int num_sizes;       /**< entries of sizes (at least 2) */
  const int* sizes;    /**< input, hidden..., classes; copied at creation */
  int max_batch;       /**< largest batch passed to forward */
  uint64_t seed;       /**< weight initialisation (identical on every rank) */
} dt_mlp_config_t;
#define DT_MLP_CONFIG_INIT {sizeof(dt_mlp_config_t), 0, NULL, 32, 1337u}

typedef struct dt_gpt_config_t {
  size_t struct_size;  /**< sizeof(dt_gpt_config_t); set by DT_GPT_CONFIG_INIT */
  int layers, heads, d_model, seq_len, vocab;
  int tie_embeddings;  /**< nonzero: the LM head shares the token embedding */
  int max_batch;       /**< largest number of sequences passed to forward */
  uint64_t seed;
} dt_gpt_config_t;
#define DT_GPT_CONFIG_INIT {sizeof(dt_gpt_config_t), 4, 4, 256, 256, 256, 1, 8, 1337u}

/**
 * Creates a model whose optimiser steps average gradients over dp (the world, or a grid's
 * DT_GROUP_DP). Collective over dp. optimizer may be NULL for the defaults.
 */
DT_API dt_result_t dt_model_create_mlp(dt_comm_t dp, const dt_mlp_config_t* config,
                                       const dt_optimizer_config_t* optimizer, dt_model_t* model);
DT_API dt_result_t dt_model_create_gpt(dt_comm_t dp, const dt_gpt_config_t* config,
                                       const dt_optimizer_config_t* optimizer, dt_model_t* model);
DT_API dt_result_t dt_model_destroy(dt_model_t model);

/**
 * MLP forward + backward on this rank's batch: x[batch][inputs] floats (row-major),
 * labels[batch] in [0, classes). Gradients of the mean cross-entropy ACCUMULATE until the
 * next dt_model_step. *loss (may be NULL) receives this rank's mean loss.
 */
DT_API dt_result_t dt_mlp_forward_backward(dt_model_t model, const float* x,
                                           const int32_t* labels, int batch, float* loss);
/** Mean loss on a batch without touching gradients; labels required. */
DT_API dt_result_t dt_mlp_evaluate(dt_model_t model, const float* x, const int32_t* labels,
                                   int batch, float* loss);
/** Logits of a batch, written to logits[batch][classes]. */
DT_API dt_result_t dt_mlp_predict(dt_model_t model, const float* x, int batch, float* logits);

/**
 * GPT forward + backward: tokens and targets are [batch][seq] int32 in [0, vocab), seq <=
 * seq_len. Gradients accumulate until dt_model_step; *loss (may be NULL) = this rank's mean.
 */
DT_API dt_result_t dt_gpt_forward_backward(dt_model_t model, const int32_t* tokens,
                                           const int32_t* targets, int batch, int seq, float* loss);
DT_API dt_result_t dt_gpt_evaluate(dt_model_t model, const int32_t* tokens,
                                   const int32_t* targets, int batch, int seq, float* loss);

/**
 * Optimiser step, collective over the model's dp group: average the accumulated gradients,
 * clip, AdamW at lr, then zero the gradients. *grad_norm (may be NULL): norm before clipping.
 */
DT_API dt_result_t dt_model_step(dt_model_t model, float lr, float* grad_norm);

/** Number of parameter values (the sum of all tensors' element counts). */
DT_API dt_result_t dt_model_num_parameters(dt_model_t model, size_t* count);
/**
 * Copies every parameter, tensor after tensor in creation order (row-major each; names
 * and shapes in docs/model.md), into dst[capacity]; capacity must be >= the count.
 */
DT_API dt_result_t dt_model_get_parameters(dt_model_t model, float* dst, size_t capacity);

/*
 * Checkpoints (HDF5 save/load of registered tensors and models) are not part of this
 * version of the C ABI; they will be added as new functions, without changing any above.
 */

#ifdef __cplusplus
}
#endif

#endif /* DTRAIN_H */
