/* Every error class of every entry point of dtrain.h gives its documented code and message:
 * NULL, wrong-kind, destroyed and finalized handles; NULL pointers; wrong sizes; unknown
 * names. The program initialises MPI itself and starts dtrain over a C MPI_Comm
 * (dtrain_mpi.h), so MPI outlives the context and calls after dt_finalize can be tried. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "dtrain_mpi.h"

/* The live handles a call needs besides the one under test. */
typedef struct {
  dt_context_t ctx;
  dt_comm_t comm;
  dt_grid_t grid;
  dt_byom_t byom;
  dt_model_t model;
} handles_t;

/* Calls every entry point that takes a handle with the handles in h, each expected to be
 * refused with DT_ERR_INVALID_HANDLE and "<function>: <argument> is not a live <type> <why>".
 * Other arguments are valid, so the handle check is what fails. */
static void expect_refused(handles_t h, const char* why) {
  char text[256];
  int i = 0;
  long l = 0;
  size_t n = 0;
  float f[4] = {0}, loss = 0;
  int32_t labels[1] = {0};
  int64_t shape[1] = {1};
  dt_comm_t comm = NULL;
  dt_grid_t grid = NULL;
  dt_byom_t byom = NULL;
  dt_model_t model = NULL;
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_gpt_config_t tc = DT_GPT_CONFIG_INIT;
  const int sizes[2] = {1, 2};
  mc.num_sizes = 2;
  mc.sizes = sizes;

#define REFUSED(func, arg, type, call)                                                  \
  do {                                                                                  \
    snprintf(text, sizeof text, "%s: %s is not a live %s %s", func, arg, type, why);    \
    FAILS(DT_ERR_INVALID_HANDLE, NULL, text, call);                                     \
  } while (0)

  REFUSED("dt_context_rank", "ctx", "dt_context_t", dt_context_rank(h.ctx, &i));
  REFUSED("dt_context_size", "ctx", "dt_context_t", dt_context_size(h.ctx, &i));
  comm = (dt_comm_t)&i; /* a failed call sets a handle output to NULL */
  REFUSED("dt_context_world", "ctx", "dt_context_t", dt_context_world(h.ctx, &comm));
  CHECK(comm == NULL);
  REFUSED("dt_context_cpu_threads", "ctx", "dt_context_t", dt_context_cpu_threads(h.ctx, &i));
  REFUSED("dt_grid_create", "ctx", "dt_context_t", dt_grid_create(h.ctx, &gc, &grid));
  CHECK(grid == NULL);
  REFUSED("dt_finalize", "ctx", "dt_context_t", dt_finalize(h.ctx));

  REFUSED("dt_comm_rank", "comm", "dt_comm_t", dt_comm_rank(h.comm, &i));
  REFUSED("dt_comm_size", "comm", "dt_comm_t", dt_comm_size(h.comm, &i));
  REFUSED("dt_comm_world_ranks", "comm", "dt_comm_t", dt_comm_world_ranks(h.comm, NULL, 0, &i));
  REFUSED("dt_all_reduce", "comm", "dt_comm_t", dt_all_reduce(h.comm, f, f, 1, DT_F32, DT_SUM));
  REFUSED("dt_all_gather", "comm", "dt_comm_t", dt_all_gather(h.comm, f, f, 1, DT_F32));
  REFUSED("dt_reduce_scatter", "comm", "dt_comm_t", dt_reduce_scatter(h.comm, f, f, 1, DT_F32, DT_SUM));
  REFUSED("dt_broadcast", "comm", "dt_comm_t", dt_broadcast(h.comm, f, f, 1, DT_F32, 0));
  REFUSED("dt_barrier", "comm", "dt_comm_t", dt_barrier(h.comm));
  REFUSED("dt_comm_device", "comm", "dt_comm_t", dt_comm_device(h.comm, &comm));
  CHECK(comm == NULL);
  REFUSED("dt_checkpoint_find", "comm", "dt_comm_t", dt_checkpoint_find(h.comm, ".", NULL, 0, &n));
  REFUSED("dt_byom_create", "dp", "dt_comm_t", dt_byom_create(h.comm, NULL, &byom));
  REFUSED("dt_model_create_mlp", "dp", "dt_comm_t", dt_model_create_mlp(h.comm, &mc, NULL, &model));
  REFUSED("dt_model_create_gpt", "dp", "dt_comm_t", dt_model_create_gpt(h.comm, &tc, NULL, &model));
  CHECK(byom == NULL && model == NULL);

  REFUSED("dt_grid_shape", "grid", "dt_grid_t", dt_grid_shape(h.grid, &i, &i, &i));
  REFUSED("dt_grid_coords", "grid", "dt_grid_t", dt_grid_coords(h.grid, &i, &i, &i));
  comm = (dt_comm_t)&i;
  REFUSED("dt_grid_comm", "grid", "dt_grid_t", dt_grid_comm(h.grid, DT_GROUP_DP, &comm));
  CHECK(comm == NULL);
  REFUSED("dt_model_create_mlp_grid", "grid", "dt_grid_t", dt_model_create_mlp_grid(h.grid, &mc, NULL, &model));
  CHECK(model == NULL);
  REFUSED("dt_byom_create_grid", "grid", "dt_grid_t", dt_byom_create_grid(h.grid, NULL, &byom));
  CHECK(byom == NULL);
  REFUSED("dt_grid_destroy", "grid", "dt_grid_t", dt_grid_destroy(h.grid));

  REFUSED("dt_byom_register", "byom", "dt_byom_t", dt_byom_register(h.byom, "w", 1, shape, DT_F32, f, f, 0));
  REFUSED("dt_byom_step", "byom", "dt_byom_t", dt_byom_step(h.byom, 0.1f, NULL));
  REFUSED("dt_byom_steps", "byom", "dt_byom_t", dt_byom_steps(h.byom, &l));
  REFUSED("dt_byom_scale_loss", "byom", "dt_byom_t", dt_byom_scale_loss(h.byom, 0));
  REFUSED("dt_byom_loss_scale", "byom", "dt_byom_t", dt_byom_loss_scale(h.byom, NULL, &l));
  REFUSED("dt_byom_save_checkpoint", "byom", "dt_byom_t", dt_byom_save_checkpoint(h.byom, "d", 0));
  REFUSED("dt_byom_load_checkpoint", "byom", "dt_byom_t", dt_byom_load_checkpoint(h.byom, "d"));
  REFUSED("dt_byom_destroy", "byom", "dt_byom_t", dt_byom_destroy(h.byom));

  REFUSED("dt_mlp_forward_backward", "model", "dt_model_t", dt_mlp_forward_backward(h.model, f, labels, 1, &loss));
  REFUSED("dt_mlp_evaluate", "model", "dt_model_t", dt_mlp_evaluate(h.model, f, labels, 1, &loss));
  REFUSED("dt_mlp_predict", "model", "dt_model_t", dt_mlp_predict(h.model, f, 1, f));
  REFUSED("dt_gpt_forward_backward", "model", "dt_model_t", dt_gpt_forward_backward(h.model, labels, labels, 1, 1, &loss));
  REFUSED("dt_gpt_evaluate", "model", "dt_model_t", dt_gpt_evaluate(h.model, labels, labels, 1, 1, &loss));
  REFUSED("dt_gpt_decode", "model", "dt_model_t", dt_gpt_decode(h.model, labels, 1, 1, f));
  REFUSED("dt_model_step", "model", "dt_model_t", dt_model_step(h.model, 0.1f, NULL));
  REFUSED("dt_model_num_parameters", "model", "dt_model_t", dt_model_num_parameters(h.model, &n));
  REFUSED("dt_model_get_parameters", "model", "dt_model_t", dt_model_get_parameters(h.model, f, 4));
  REFUSED("dt_model_steps", "model", "dt_model_t", dt_model_steps(h.model, &l));
  REFUSED("dt_model_device", "model", "dt_model_t", dt_model_device(h.model, NULL, 0, &n));
  REFUSED("dt_model_loss_scale", "model", "dt_model_t", dt_model_loss_scale(h.model, NULL, &l));
  REFUSED("dt_model_num_tensors", "model", "dt_model_t", dt_model_num_tensors(h.model, &i));
  REFUSED("dt_model_tensor_name", "model", "dt_model_t", dt_model_tensor_name(h.model, 0, NULL, 0, &n));
  REFUSED("dt_model_tensor_shape", "model", "dt_model_t", dt_model_tensor_shape(h.model, "w", NULL, 0, &i));
  REFUSED("dt_model_get_tensor", "model", "dt_model_t", dt_model_get_tensor(h.model, "w", f, 4));
  REFUSED("dt_model_set_tensor", "model", "dt_model_t", dt_model_set_tensor(h.model, "w", f, 4));
  REFUSED("dt_model_save_checkpoint", "model", "dt_model_t", dt_model_save_checkpoint(h.model, "d", 0));
  REFUSED("dt_model_load_checkpoint", "model", "dt_model_t", dt_model_load_checkpoint(h.model, "d"));
  REFUSED("dt_model_load_weights", "model", "dt_model_t", dt_model_load_weights(h.model, "d"));
  REFUSED("dt_model_destroy", "model", "dt_model_t", dt_model_destroy(h.model));
#undef REFUSED
}

/* A pointer argument that must not be NULL is refused with "<name> must not be NULL". */
static void null_pointers(handles_t h) {
  dt_context_t ctx = h.ctx;
  float f[64] = {0};
  int32_t labels[4] = {0};
  int64_t shape[1] = {4};
  int i = 0;
  size_t n = 0;
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_grid_t grid = NULL;
  dt_model_t model = NULL;

  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "dt_init: ctx must not be NULL", dt_init(NULL, NULL, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "dt_init_fortran_comm: ctx must not be NULL",
        dt_init_fortran_comm((int)MPI_Comm_c2f(MPI_COMM_WORLD), NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_context_rank: rank must not be NULL", dt_context_rank(ctx, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_context_size: size must not be NULL", dt_context_size(ctx, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_context_world: world must not be NULL", dt_context_world(ctx, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_context_cpu_threads: threads must not be NULL",
        dt_context_cpu_threads(ctx, NULL));
  /* (agreed over the ranks: the message names the rank where there are several) */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "config must not be NULL", dt_grid_create(ctx, NULL, &grid));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "grid must not be NULL", dt_grid_create(ctx, &gc, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_comm_rank: rank must not be NULL", dt_comm_rank(h.comm, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_comm_size: size must not be NULL", dt_comm_size(h.comm, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_comm_world_ranks: count must not be NULL",
        dt_comm_world_ranks(h.comm, NULL, 0, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_comm_world_ranks: ranks must not be NULL",
        dt_comm_world_ranks(h.comm, NULL, 4, &i));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_all_reduce: recv must not be NULL",
        dt_all_reduce(h.comm, f, NULL, 1, DT_F32, DT_SUM));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_all_gather: send must not be NULL",
        dt_all_gather(h.comm, NULL, f, 1, DT_F32));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_reduce_scatter: recv must not be NULL",
        dt_reduce_scatter(h.comm, f, NULL, 1, DT_F32, DT_SUM));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_broadcast: recv must not be NULL",
        dt_broadcast(h.comm, f, NULL, 1, DT_F32, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_grid_comm: comm must not be NULL", dt_grid_comm(h.grid, DT_GROUP_TP, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_byom_create: byom must not be NULL", dt_byom_create(h.comm, NULL, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_byom_register: name must not be NULL",
        dt_byom_register(h.byom, NULL, 1, shape, DT_F32, f, f, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_byom_register: shape must not be NULL",
        dt_byom_register(h.byom, "w", 1, NULL, DT_F32, f, f, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_byom_register: param must not be NULL",
        dt_byom_register(h.byom, "w", 1, shape, DT_F32, NULL, f, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_byom_register: grad must not be NULL",
        dt_byom_register(h.byom, "w", 1, shape, DT_F32, f, NULL, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_byom_steps: steps must not be NULL", dt_byom_steps(h.byom, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_byom_scale_loss: initial_scale must be 0 (65536) or in [1, 16777216]",
        dt_byom_scale_loss(h.byom, -1.0f));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "initial_scale must be", dt_byom_scale_loss(h.byom, 0.5f));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "initial_scale must be", dt_byom_scale_loss(h.byom, 33554432.0f));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "initial_scale must be", dt_byom_scale_loss(h.byom, NAN));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dir must not be NULL",
        dt_byom_save_checkpoint(h.byom, NULL, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "source must not be NULL",
        dt_byom_load_checkpoint(h.byom, NULL));
  /* (agreed over the ranks: "rank 0: " goes before the message at several ranks) */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "model must not be NULL", dt_model_create_mlp(h.comm, NULL, NULL, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "config must not be NULL", dt_model_create_mlp(h.comm, NULL, NULL, &model));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "config must not be NULL",
        dt_model_create_gpt(h.comm, NULL, NULL, &model));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_mlp_forward_backward: x must not be NULL",
        dt_mlp_forward_backward(h.model, NULL, labels, 1, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_mlp_forward_backward: labels must not be NULL",
        dt_mlp_forward_backward(h.model, f, NULL, 1, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_mlp_evaluate: loss must not be NULL",
        dt_mlp_evaluate(h.model, f, labels, 1, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_mlp_predict: logits must not be NULL", dt_mlp_predict(h.model, f, 1, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_num_parameters: count must not be NULL",
        dt_model_num_parameters(h.model, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_get_parameters: dst must not be NULL",
        dt_model_get_parameters(h.model, NULL, 64));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_steps: steps must not be NULL", dt_model_steps(h.model, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_num_tensors: count must not be NULL",
        dt_model_num_tensors(h.model, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "device_comm must not be NULL", dt_comm_device(h.comm, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_device: length must not be NULL",
        dt_model_device(h.model, NULL, 0, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_device: name must not be NULL",
        dt_model_device(h.model, NULL, 8, &n));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_tensor_name: length must not be NULL",
        dt_model_tensor_name(h.model, 0, NULL, 0, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_tensor_name: name must not be NULL",
        dt_model_tensor_name(h.model, 0, NULL, 8, &n));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_tensor_shape: name must not be NULL",
        dt_model_tensor_shape(h.model, NULL, NULL, 0, &i));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_tensor_shape: ndim must not be NULL",
        dt_model_tensor_shape(h.model, "layers.0.bias", NULL, 0, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_get_tensor: dst must not be NULL",
        dt_model_get_tensor(h.model, "layers.0.bias", NULL, 4));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_set_tensor: src must not be NULL",
        dt_model_set_tensor(h.model, "layers.0.bias", NULL, 4));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dir must not be NULL",
        dt_model_save_checkpoint(h.model, NULL, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "source must not be NULL",
        dt_model_load_checkpoint(h.model, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "source must not be NULL",
        dt_model_load_weights(h.model, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "the model is an MLP",
        dt_model_load_weights(h.model, "gpt2"));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dir must not be NULL",
        dt_checkpoint_find(h.comm, NULL, NULL, 0, &n));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "length must not be NULL",
        dt_checkpoint_find(h.comm, ".", NULL, 0, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_gpt_forward_backward: model is not a GPT",
        dt_gpt_forward_backward(h.model, labels, labels, 1, 1, NULL));
  CHECK(grid == NULL && model == NULL);
}

/* Sizes, counts, capacities and struct sizes out of range; names that are not there. */
static void wrong_sizes_and_names(handles_t h, int size) {
  dt_context_t ctx = h.ctx;
  float f[64] = {0}, loss = 0;
  int32_t labels[4] = {0};
  int64_t shape2[2] = {4, 0}, shape[2] = {0, 0};
  int i = 0, ranks[1];
  size_t n = 0;
  dt_grid_t grid = NULL;
  dt_byom_t byom = NULL;
  dt_model_t model = NULL;
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  dt_gpt_config_t tc = DT_GPT_CONFIG_INIT;

  /* Config structs from an older or broken initialiser. */
  gc.struct_size = sizeof(size_t);
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "initialise it with DT_GRID_CONFIG_INIT", dt_grid_create(ctx, &gc, &grid));
  oc.struct_size = 12;
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "initialise it with DT_OPTIMIZER_CONFIG_INIT", dt_byom_create(h.comm, &oc, &byom));
  mc.struct_size = 4;
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "initialise it with DT_MLP_CONFIG_INIT",
        dt_model_create_mlp(h.comm, &mc, NULL, &model));
  tc.struct_size = 4;
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "initialise it with DT_GPT_CONFIG_INIT",
        dt_model_create_gpt(h.comm, &tc, NULL, &model));
  CHECK(grid == NULL && byom == NULL && model == NULL);
  { /* Sizes whose parameter count (2^62, as bytes 0 modulo 2^64) no memory holds. */
    int huge[4] = {2147483646, 1073741824, 1073741824, 1073741823};
    dt_mlp_config_t big = DT_MLP_CONFIG_INIT;
    big.num_sizes = 4;
    big.sizes = huge;
    big.max_batch = 1;
    FAILS(DT_ERR_INVALID_CONFIG, ctx, "parameters: more than 2^50, beyond any machine's memory",
          dt_model_create_mlp(h.comm, &big, NULL, &model));
    CHECK(model == NULL);
  }

  /* Capacities smaller than what is to be written. */
  if (size > 1)
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "capacity is smaller than the group size",
          dt_comm_world_ranks(h.comm, ranks, 1, &i));
  OK(ctx, dt_model_num_parameters(h.model, &n));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "capacity is smaller than dt_model_num_parameters()",
        dt_model_get_parameters(h.model, f, n - 1));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "capacity is smaller than the tensor's number of dimensions",
        dt_model_tensor_shape(h.model, "layers.0.weight", shape, 1, &i));
  CHECK(i == 2);
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "capacity is smaller than the tensor's element count",
        dt_model_get_tensor(h.model, "layers.0.weight", f, 3));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "count is 3 but tensor 'layers.0.bias' has 4 elements",
        dt_model_set_tensor(h.model, "layers.0.bias", f, 3));
  { /* A NaN or infinity is refused and changes nothing. */
    float before[4], bad[4] = {0.5f, -1.0f, 0.0f, 2.0f}, after[4];
    OK(ctx, dt_model_get_tensor(h.model, "layers.0.bias", before, 4));
    bad[2] = NAN;
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "src[2] of tensor 'layers.0.bias' is not finite (nan)",
          dt_model_set_tensor(h.model, "layers.0.bias", bad, 4));
    bad[2] = 0.0f;
    bad[0] = -INFINITY;
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "src[0] of tensor 'layers.0.bias' is not finite (-inf)",
          dt_model_set_tensor(h.model, "layers.0.bias", bad, 4));
    OK(ctx, dt_model_get_tensor(h.model, "layers.0.bias", after, 4));
    CHECK(memcmp(before, after, sizeof before) == 0);
  }

  /* Batches and sequences outside [1, max]. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "batch must be in [1, max_batch]",
        dt_mlp_forward_backward(h.model, f, labels, 0, &loss));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "batch must be in [1, max_batch]",
        dt_mlp_evaluate(h.model, f, labels, 5, &loss));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "batch must be in [1, max_batch]", dt_mlp_predict(h.model, f, -1, f));

  /* Registration: dimensions, extents, flags, dtype, duplicate names. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "ndim must be in [1, 8]", dt_byom_register(h.byom, "w", 9, shape2, DT_F32, f, f, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "every extent of shape must be positive",
        dt_byom_register(h.byom, "w", 2, shape2, DT_F32, f, f, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "unknown flags", dt_byom_register(h.byom, "w", 1, shape2, DT_F32, f, f, 8u));
  FAILS(DT_ERR_NOT_IMPLEMENTED, ctx, "only DT_F32, DT_BF16 and DT_F16 tensors",
        dt_byom_register(h.byom, "w", 1, shape2, DT_F64, f, f, 0));
  OK(ctx, dt_byom_register(h.byom, "w", 1, shape2, DT_F32, f, f + 4, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "parameter 'w' registered twice",
        dt_byom_register(h.byom, "w", 1, shape2, DT_F32, f, f + 4, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "parameter name must not be empty",
        dt_byom_register(h.byom, "", 1, shape2, DT_F32, f, f + 4, 0));
  /* Names that would not come back from a checkpoint as they went in. */
  {
    const char* bad[] = {"sp ace", "tab\there", "a//b", "trailing/", "/leading", "a/./b", "..",
                         "w/exp_avg"};
    const char* why[] = {"holds a space", "holds a space", "an empty part", "an empty part",
                         "an empty part", "a '.' or '..' part", "a '.' or '..' part",
                         "parameter names 'w' and 'w/exp_avg' cannot both be saved"};
    for (int i = 0; i < 8; ++i)
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, why[i], dt_byom_register(h.byom, bad[i], 1, shape2, DT_F32, f, f + 4, 0));
    /* A group of an earlier name, at either depth, and names beside it. */
    OK(ctx, dt_byom_register(h.byom, "x/y/z", 1, shape2, DT_F32, f + 8, f + 12, 0));
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "parameter names 'x/y/z' and 'x/y' cannot both be saved",
          dt_byom_register(h.byom, "x/y", 1, shape2, DT_F32, f, f + 4, 0));
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "parameter names 'x/y/z' and 'x' cannot both be saved",
          dt_byom_register(h.byom, "x", 1, shape2, DT_F32, f, f + 4, 0));
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "parameter names 'x/y/z' and 'x/y/z/w' cannot both be saved",
          dt_byom_register(h.byom, "x/y/z/w", 1, shape2, DT_F32, f, f + 4, 0));
    OK(ctx, dt_byom_register(h.byom, "x/y/zz", 1, shape2, DT_F32, f + 16, f + 20, 0));
    OK(ctx, dt_byom_register(h.byom, "x/yy", 1, shape2, DT_F32, f + 24, f + 28, 0));
  }
  /* Buffers shared with another tensor (a tied weight registered twice: updated twice), or a
   * tensor's gradient inside its parameter. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "the buffers of 'tied' overlap those of 'w'",
        dt_byom_register(h.byom, "tied", 1, shape2, DT_F32, f + 2, f + 32, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "the buffers of 'tied' overlap those of 'x/yy'",
        dt_byom_register(h.byom, "tied", 1, shape2, DT_F32, f + 36, f + 31, 0));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "the param and grad buffers of 'inside' overlap",
        dt_byom_register(h.byom, "inside", 1, shape2, DT_F32, f + 40, f + 42, 0));
  OK(ctx, dt_byom_register(h.byom, "apart", 1, shape2, DT_F32, f + 40, f + 44, 0));

  /* Enum values outside their range. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "unknown dtype 42", dt_all_gather(h.comm, f, f, 1, (dt_dtype_t)42));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "unknown reduce op 9",
        dt_reduce_scatter(h.comm, f, f, 1, DT_F32, (dt_reduce_op_t)9));
  {
    dt_comm_t group = h.comm;
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "unknown group", dt_grid_comm(h.grid, (dt_group_t)4, &group));
    CHECK(group == NULL);
  }
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "root is not a rank", dt_broadcast(h.comm, f, f, 1, DT_F32, -1));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "lr must be a finite value >= 0", dt_model_step(h.model, -1.0f, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "keep must be >= 0", dt_model_save_checkpoint(h.model, "d", -2));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dir must not be empty", dt_model_save_checkpoint(h.model, "", 0));
  /* Collective calls: a bad argument on rank 0 only fails every rank (the others used to wait
   * for it in the step's reduction or the file's collective I/O). */
  if (size > 1) {
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "rank 0: lr must be a finite value >= 0",
          dt_model_step(h.model, my_rank == 0 ? -1.0f : 1e-3f, NULL));
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "rank 0: keep must be >= 0",
          dt_model_save_checkpoint(h.model, "never_written", my_rank == 0 ? -2 : 1));
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "rank 0: source must not be empty",
          dt_model_load_checkpoint(h.model, my_rank == 0 ? "" : "nowhere"));
    { /* The first dt_comm_device is collective: a NULL on one rank fails them all. */
      dt_comm_t dc = NULL;
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_comm_device: rank 1: device_comm must not be NULL",
            dt_comm_device(h.comm, my_rank == 1 ? NULL : &dc));
      CHECK(dc == NULL);
    }
    /* Models and byoms whose settings differ between the ranks: every rank fails (their
     * reductions would not match, and would wait or mix up buffers). */
    {
      dt_optimizer_config_t zero1 = DT_OPTIMIZER_CONFIG_INIT;
      dt_gpt_config_t gc = DT_GPT_CONFIG_INIT;
      dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
      int sizes[3] = {4, 8, 2};
      dt_model_t other = NULL;
      dt_byom_t mismatched = NULL;
      const int64_t mine[1] = {my_rank == 0 ? 2 : 3};
      zero1.zero_stage = 1;
      gc.layers = 1;
      gc.d_model = 32;
      gc.seq_len = 8;
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "settings (config or optimizer) differ between its ranks",
            dt_model_create_gpt(h.comm, &gc, my_rank == 0 ? &zero1 : NULL, &other));
      CHECK(other == NULL);
      sizes[1] = my_rank == 0 ? 8 : 9;
      mc.sizes = sizes;
      mc.num_sizes = 3;
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "settings (config or optimizer) differ between its ranks",
            dt_model_create_mlp(h.comm, &mc, NULL, &other));
      CHECK(other == NULL);
      sizes[1] = 8;
      mc.precision = my_rank == 0 ? "BF16" : "bf16";
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "rank 0: config->precision must be fp32, bf16 or fp16, got 'BF16'",
            dt_model_create_mlp(h.comm, &mc, NULL, &other));
      CHECK(other == NULL);
      OK(ctx, dt_byom_create(h.comm, NULL, &mismatched));
      OK(ctx, dt_byom_register(mismatched, "w", 1, mine, DT_F32, f, f + 32, 0));
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "registered tensors (names, shapes, dtypes, decay), optimizer settings or loss scaling differ",
            dt_byom_step(mismatched, 1e-3f, NULL));
      OK(ctx, dt_byom_destroy(mismatched));
      /* Only rank 0 registered anything: the others do not stop alone at "no tensors". */
      OK(ctx, dt_byom_create(h.comm, NULL, &mismatched));
      if (my_rank == 0) OK(ctx, dt_byom_register(mismatched, "w", 1, mine, DT_F32, f, f + 32, 0));
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "registered tensors (names, shapes, dtypes, decay), optimizer settings or loss scaling differ",
            dt_byom_save_checkpoint(mismatched, "never_written", 0));
      OK(ctx, dt_byom_destroy(mismatched));
    }
    /* Arguments that are each valid but differ between the ranks of a collective call: every
     * rank fails (replicas stepped with different lr drift apart; a grid split two ways, or
     * tensors gathered under different names, used to hang or abort in MPI). */
    {
      dt_byom_t two = NULL;
      dt_model_t zero3 = NULL;
      dt_grid_t grid = NULL;
      dt_grid_config_t g = DT_GRID_CONFIG_INIT;
      dt_optimizer_config_t oc = DT_OPTIMIZER_CONFIG_INIT;
      dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
      const int sizes[3] = {4, 8, 2};
      const int64_t shape1[1] = {2};
      float w[2] = {1, 2}, gw[2] = {0, 0};
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "the ranks were given different lr",
            dt_model_step(h.model, my_rank == 0 ? 1e-3f : 2e-3f, NULL));
      OK(ctx, dt_byom_create(h.comm, NULL, &two));
      OK(ctx, dt_byom_register(two, "w", 1, shape1, DT_F32, w, gw, 0));
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "the ranks were given different lr",
            dt_byom_step(two, my_rank == 0 ? 1e-3f : 2e-3f, NULL));
      OK(ctx, dt_byom_step(two, my_rank == 0 ? -0.0f : 0.0f, NULL)); /* -0 is 0 */
      OK(ctx, dt_byom_destroy(two));
      g.tp = my_rank == 0 ? 2 : 1;
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "the ranks were given different grid shapes",
            dt_grid_create(ctx, &g, &grid));
      CHECK(grid == NULL);
      oc.zero_stage = 3;
      mc.sizes = sizes;
      mc.num_sizes = 3;
      OK(ctx, dt_model_create_mlp(h.comm, &mc, &oc, &zero3));
      FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "named different tensors",
            dt_model_get_tensor(zero3, my_rank == 0 ? "layers.0.weight" : "layers.1.bias", f, 64));
      OK(ctx, dt_model_get_tensor(zero3, "layers.0.weight", f, 64));
      OK(ctx, dt_model_destroy(zero3));
    }
  }
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "is larger than any buffer can hold",
        dt_all_reduce(h.comm, f, f, (size_t)-1, DT_F32, DT_SUM));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "is larger than any buffer can hold",
        dt_reduce_scatter(h.comm, f, f, (size_t)1 << 62, DT_F32, DT_SUM));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "is larger than any buffer can hold",
        dt_broadcast(h.comm, f, f, (size_t)1 << 62, DT_F64, 0));

  OK(ctx, dt_model_device(h.model, NULL, 0, &n));  /* the length: "cpu (OpenBLAS)" */
  CHECK(n == strlen("cpu (OpenBLAS)"));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "capacity is too small for the description and its NUL",
        dt_model_device(h.model, (char*)f, n, &n));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "index must be in [0, dt_model_num_tensors())",
        dt_model_tensor_name(h.model, 4, NULL, 0, &n));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "index must be in [0, dt_model_num_tensors())",
        dt_model_tensor_name(h.model, -1, NULL, 0, &n));

  /* Names the model does not have. */
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_tensor_shape: the model has no parameter named 'nope'",
        dt_model_tensor_shape(h.model, "nope", shape, 2, &i));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_get_tensor: the model has no parameter named 'layers.9.weight'",
        dt_model_get_tensor(h.model, "layers.9.weight", f, 64));
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_model_set_tensor: the model has no parameter named 'wte'",
        dt_model_set_tensor(h.model, "wte", f, 4));

  /* MPI_COMM_NULL, or a Fortran handle of no communicator, is no communicator to start from
   * (an error code, not MPI's abort). */
  {
    dt_context_t other = NULL;
    FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "user communicator is MPI_COMM_NULL",
          dt_init_mpi_comm(MPI_COMM_NULL, &other));
    CHECK(other == NULL);
    FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "names no MPI communicator", dt_init_fortran_comm(12345, &other));
    CHECK(other == NULL);
    /* A context made after those failures has none of its own to report. */
    OK(NULL, dt_init_mpi_comm(MPI_COMM_WORLD, &other));
    CHECK(strcmp(dt_get_last_error(other), "") == 0);
    OK(NULL, dt_finalize(other));
  }
  if (size >= 2) {
    /* An intercommunicator between the even and the odd ranks is refused (MPI would abort
     * at the set-up's first in-place collective); over the even ranks' own communicator,
     * dt_comm_world_ranks numbers the members in that context's world, not MPI_COMM_WORLD. */
    dt_context_t other = NULL;
    dt_comm_t other_world = NULL;
    MPI_Comm half = MPI_COMM_NULL, inter = MPI_COMM_NULL;
    int world_rank = 0, members[2] = {-1, -1}, count = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, world_rank % 2 ? 0 : 1, 7, &inter);
    FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "user communicator is an intercommunicator",
          dt_init_mpi_comm(inter, &other));
    CHECK(other == NULL);
    OK(NULL, dt_init_mpi_comm(half, &other));
    OK(other, dt_context_world(other, &other_world));
    OK(other, dt_comm_world_ranks(other_world, members, 2, &count));
    CHECK(count == (size - world_rank % 2 + 1) / 2 && count <= 2);
    for (int r = 0; r < count && r < 2; ++r) CHECK(members[r] == r);
    OK(NULL, dt_finalize(other));
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }

  /* Element counts beyond any memory (they would wrap), and a dtype that does not exist. */
  {
    const int64_t wraps[2] = {(int64_t)1 << 32, (int64_t)1 << 32}, huge[1] = {INT64_MAX};
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "shape has too many elements",
          dt_byom_register(h.byom, "wraps", 2, wraps, DT_F32, f, f, 0));
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "shape has too many elements",
          dt_byom_register(h.byom, "huge", 1, huge, DT_F32, f, f, 0));
    FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "unknown dtype 99",
          dt_byom_register(h.byom, "v", 1, shape2, (dt_dtype_t)99, f, f, 0));
  }

  /* Settings that are not finite. */
  oc = (dt_optimizer_config_t)DT_OPTIMIZER_CONFIG_INIT;
  oc.weight_decay = INFINITY;
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "weight_decay must be finite", dt_byom_create(h.comm, &oc, &byom));
  oc = (dt_optimizer_config_t)DT_OPTIMIZER_CONFIG_INIT;
  oc.bucket_mb = INFINITY;  /* its bytes would not fit a size_t */
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "bucket_mb must be positive and at most", dt_byom_create(h.comm, &oc, &byom));

  /* A new handle's output is NULL after a failure, also when the input handle is what is
   * wrong. */
  {
    dt_model_t m = (dt_model_t)&failures;
    dt_grid_t g = (dt_grid_t)&failures;
    dt_byom_t y = (dt_byom_t)&failures;
    tc = (dt_gpt_config_t)DT_GPT_CONFIG_INIT;
    mc = (dt_mlp_config_t)DT_MLP_CONFIG_INIT;
    EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_model_create_gpt(NULL, &tc, NULL, &m));
    CHECK(m == NULL);
    m = (dt_model_t)&failures;
    EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_model_create_mlp(NULL, &mc, NULL, &m));
    CHECK(m == NULL);
    EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_grid_create(NULL, &gc, &g));
    CHECK(g == NULL);
    EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_byom_create(NULL, NULL, &y));
    CHECK(y == NULL);
  }
}

/* Grid, byom and model handles made in ctx, plus a comm of the grid. */
/* dt_sample_token's arguments (no handle: the thread's last error). */
static void sampling_errors(void) {
  const float logits[3] = {0, 1, 2};
  dt_sampling_config_t sc = DT_SAMPLING_CONFIG_INIT;
  int32_t t = 0;
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "dt_sample_token: logits must not be NULL",
        dt_sample_token(NULL, 3, NULL, 0.5, &t));
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "token must not be NULL", dt_sample_token(logits, 3, NULL, 0.5, NULL));
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "vocab must be at least 1", dt_sample_token(logits, 0, NULL, 0.5, &t));
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "uniform must be in [0, 1)", dt_sample_token(logits, 3, NULL, 1.0, &t));
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "uniform must be in [0, 1)", dt_sample_token(logits, 3, NULL, -0.1, &t));
  sc.top_p = 0;
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "top_p must be in (0, 1]", dt_sample_token(logits, 3, &sc, 0.5, &t));
  sc = (dt_sampling_config_t)DT_SAMPLING_CONFIG_INIT;
  sc.top_k = -1;
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "top_k must be >= 0", dt_sample_token(logits, 3, &sc, 0.5, &t));
  sc = (dt_sampling_config_t)DT_SAMPLING_CONFIG_INIT;
  sc.temperature = -1;
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "temperature must be finite and >= 0",
        dt_sample_token(logits, 3, &sc, 0.5, &t));
  sc = (dt_sampling_config_t)DT_SAMPLING_CONFIG_INIT;
  sc.struct_size = 8;
  FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "initialise it with DT_SAMPLING_CONFIG_INIT",
        dt_sample_token(logits, 3, &sc, 0.5, &t));
  /* A diverged model's logits: no token is made up from them (a NaN read out of bounds). */
  {
    const float nan_logit[3] = {0, NAN, 2}, infinite[3] = {0, INFINITY, 2};
    const float none[2] = {-INFINITY, -INFINITY}, one[3] = {-INFINITY, 1, -INFINITY};
    sc = (dt_sampling_config_t)DT_SAMPLING_CONFIG_INIT;
    sc.top_p = 0.9;
    FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "the logits hold a NaN", dt_sample_token(nan_logit, 3, &sc, 0.5, &t));
    FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "the largest logit is inf", dt_sample_token(infinite, 3, &sc, 0.5, &t));
    FAILS(DT_ERR_INVALID_ARGUMENT, NULL, "the largest logit is -inf", dt_sample_token(none, 2, &sc, 0.5, &t));
    OK(NULL, dt_sample_token(one, 3, &sc, 0.5, &t));  /* -inf rules a token out */
    CHECK(t == 1);
  }
}

/* config->device: an unknown name is refused; "cuda" without a usable GPU (this test runs
 * where none is, or on its CPU side only) fails every rank alike, also when only one rank asks
 * for it; a caller built before the field existed (a smaller struct_size) gets the CPU. */
static void device_choice(handles_t h) {
  dt_context_t ctx = h.ctx;
  dt_model_t model = NULL;
  dt_gpt_config_t tc = DT_GPT_CONFIG_INIT;
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  static const int sizes[2] = {3, 2};
  char name[64] = "";
  size_t n = 0;
  tc.layers = 1;
  tc.heads = 1;
  tc.d_model = 8;
  tc.seq_len = 4;
  tc.vocab = 8;
  mc.num_sizes = 2;
  mc.sizes = sizes;

  tc.device = "gpu";
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "config->device must be auto, cpu or cuda, got 'gpu'",
        dt_model_create_gpt(h.comm, &tc, NULL, &model));
  mc.device = "CUDA";
  FAILS(DT_ERR_INVALID_CONFIG, ctx, "config->device must be auto, cpu or cuda, got 'CUDA'",
        dt_model_create_mlp(h.comm, &mc, NULL, &model));
  CHECK(model == NULL);

  /* Without a GPU (where this test runs) the documented error; with one, a GPU model. */
  tc.device = "cuda";
  if (dt_model_create_gpt(h.comm, &tc, NULL, &model) == DT_SUCCESS) {
    OK(ctx, dt_model_device(model, name, sizeof name, &n));
    CHECK(strncmp(name, "cuda", 4) == 0);
    OK(ctx, dt_model_destroy(model));
  } else {
    FAILS(DT_ERR_UNAVAILABLE, ctx, "config->device cuda: no CUDA device/plugin available",
          dt_model_create_gpt(h.comm, &tc, NULL, &model));
    MESSAGE(ctx, "use config->device cpu or auto");
    CHECK(model == NULL);
  }
  /* One rank asks for the GPU, the others for the CPU: every rank refuses (with or without a
   * GPU there), none waits in a later collective. */
  tc.device = my_rank == 0 ? "cpu" : "cuda";
  {
    int size = 0;
    OK(ctx, dt_comm_size(h.comm, &size));
    if (size > 1) {
      EXPECT(DT_ERR_UNAVAILABLE, ctx, dt_model_create_gpt(h.comm, &tc, NULL, &model));
      MESSAGE(ctx, "config->device");
      CHECK(model == NULL);
      /* A typo on one rank: every rank fails with its code and reason, named by rank. */
      mc.device = my_rank == size - 1 ? "bogus" : "cpu";
      FAILS(DT_ERR_INVALID_CONFIG, ctx, "config->device must be auto, cpu or cuda, got 'bogus'",
            dt_model_create_mlp(h.comm, &mc, NULL, &model));
      if (my_rank != size - 1) MESSAGE(ctx, "the device choice failed on world rank");
      CHECK(model == NULL);
    }
  }

  /* Collectives on device buffers need a GPU on every rank. */
  {
    dt_comm_t dc = NULL;
    if (dt_comm_device(h.comm, &dc) != DT_SUCCESS) {
      FAILS(DT_ERR_UNAVAILABLE, ctx, "dt_comm_device: this rank has no usable GPU",
            dt_comm_device(h.comm, &dc));
      CHECK(dc == NULL);
    }
  }

  /* A struct that ends before `device` (an older dtrain.h): the CPU, whatever the field says. */
  tc.device = "cuda";
  tc.struct_size = offsetof(dt_gpt_config_t, device);
  OK(ctx, dt_model_create_gpt(h.comm, &tc, NULL, &model));
  OK(ctx, dt_model_device(model, name, sizeof name, &n));
  CHECK(strcmp(name, "cpu (OpenBLAS)") == 0);
  OK(ctx, dt_model_destroy(model));
  tc.struct_size = sizeof tc;
  tc.device = "cpu";
  OK(ctx, dt_model_create_gpt(h.comm, &tc, NULL, &model));
  OK(ctx, dt_model_device(model, name, sizeof name, &n));
  CHECK(strncmp(name, "cpu", 3) == 0 && n == strlen(name));
  OK(ctx, dt_model_destroy(model));
}

static handles_t make_handles(dt_context_t ctx, dt_comm_t world) {
  handles_t h = {ctx, world, NULL, NULL, NULL};
  dt_grid_config_t gc = DT_GRID_CONFIG_INIT;
  dt_mlp_config_t mc = DT_MLP_CONFIG_INIT;
  static const int sizes[3] = {4, 4, 2};
  mc.num_sizes = 3;
  mc.sizes = sizes;
  mc.max_batch = 4;
  OK(ctx, dt_grid_create(ctx, &gc, &h.grid));
  OK(ctx, dt_byom_create(world, NULL, &h.byom));
  OK(ctx, dt_model_create_mlp(world, &mc, NULL, &h.model));
  return h;
}

int main(int argc, char** argv) {
  dt_context_t ctx = NULL;
  dt_comm_t world = NULL, dp = NULL;
  int provided = 0, size = 0, status = 0;
  const char* stale = "(destroyed, finalized, or another kind of handle)";
  handles_t null_handles = {NULL, NULL, NULL, NULL, NULL};
  handles_t h, wrong_kind;

  /* Outside MPI's lifetime the bridge refuses; MPI_Comm_c2f there would abort the job. */
  FAILS(DT_ERR_INVALID_CONFIG, NULL, "MPI is not initialised", dt_init_mpi_comm(MPI_COMM_WORLD, &ctx));
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  OK(NULL, dt_init_mpi_comm(MPI_COMM_WORLD, &ctx));
  OK(ctx, dt_context_world(ctx, &world));
  OK(ctx, dt_context_size(ctx, &size));

  expect_refused(null_handles, "(NULL)");
  h = make_handles(ctx, world);
  /* Each handle passed where another kind is expected. */
  wrong_kind.ctx = (dt_context_t)h.model;
  wrong_kind.comm = (dt_comm_t)h.ctx;
  wrong_kind.grid = (dt_grid_t)h.byom;
  wrong_kind.byom = (dt_byom_t)h.grid;
  wrong_kind.model = (dt_model_t)h.comm;
  expect_refused(wrong_kind, stale);
  null_pointers(h);
  wrong_sizes_and_names(h, size);
  device_choice(h);
  sampling_errors();

  /* Destroyed handles: a grid takes its groups with it. */
  OK(ctx, dt_grid_comm(h.grid, DT_GROUP_DP, &dp));
  OK(ctx, dt_byom_destroy(h.byom));
  OK(ctx, dt_model_destroy(h.model));
  OK(ctx, dt_grid_destroy(h.grid));
  {
    handles_t destroyed = {(dt_context_t)h.grid, dp, h.grid, h.byom, h.model};
    expect_refused(destroyed, stale);
  }
  /* A context's message gives way to a later failure that could not know its context (the
   * handle is gone), and comes back with the context's next failure. */
  EXPECT(DT_ERR_INVALID_ARGUMENT, ctx, dt_context_cpu_threads(ctx, NULL));
  EXPECT(DT_ERR_INVALID_HANDLE, ctx, dt_model_destroy(h.model));
  MESSAGE(ctx, "dt_model_destroy: model is not a live dt_model_t");
  FAILS(DT_ERR_INVALID_ARGUMENT, ctx, "dt_context_cpu_threads", dt_context_cpu_threads(ctx, NULL));

  /* After dt_finalize every handle of the context is refused, and so is the context. */
  h = make_handles(ctx, world);
  status = finish("capi_errors (before dt_finalize)", ctx, world);
  OK(ctx, dt_finalize(ctx));
  h.ctx = ctx;
  expect_refused(h, stale);
  MESSAGE(ctx, "dt_model_destroy: model is not a live dt_model_t"); /* the thread's last error */

  MPI_Finalize();
  FAILS(DT_ERR_INVALID_CONFIG, NULL, "MPI was already finalized", dt_init_mpi_comm(MPI_COMM_WORLD, &ctx));
  if (status != 0 || failures > 0) {
    fprintf(stderr, "[rank %d] capi_errors: %d of %d checks failed\n", my_rank, failures, checks);
    return 1;
  }
  if (my_rank == 0) printf("capi_errors: all %d checks passed\n", checks);
  return 0;
}
