/* The program's own model: y = W2 tanh(W1 x + b1) + b2 with its forward and backward in
 * plain C (llm.c style: free functions over pointers, shapes in comments, backward adds into
 * the gradients). Parameters and gradients each live in one flat array; the tensors are
 * offsets into it, which is what the program registers with dtrain.
 *
 * Split over a tensor-parallel group of tp ranks (Megatron's MLP), rank r holds the hidden
 * units [r h, (r + 1) h), h = MLP_HIDDEN / tp: W1's rows and b1 of them (a column-parallel
 * layer), W2's columns of them (a row-parallel layer), and all of b2. Each rank's W2 h gives a
 * partial output; one all-reduce over the group sums them. Backward needs no communication:
 * the input x and the output's gradient are the same on every rank of the group. */
#ifndef DTRAIN_C_EXAMPLE_MLP_H
#define DTRAIN_C_EXAMPLE_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain.h"

enum { MLP_IN = 4, MLP_HIDDEN = 32, MLP_OUT = 2, MLP_MAX_SAMPLES = 256 };

typedef struct {
  int hidden, first; /* hidden units held here, the first of them */
  float *w1, *b1, *w2, *b2; /* [hidden][IN], [hidden], [OUT][hidden], [OUT] */
} mlp_tensors_t;

/* Floats of the flat array holding the tensors of `hidden` units. */
size_t mlp_numel(int hidden);
/* The tensors of hidden units [first, first + hidden) in a flat array of mlp_numel(hidden). */
mlp_tensors_t mlp_view(float* flat, int hidden, int first);

/* The same initial weights on every rank: a fixed pattern of the whole model scaled by
 * 1/sqrt(fan-in), of which p holds its units. */
void mlp_init(mlp_tensors_t p);

/* *loss = the mean over n <= MLP_MAX_SAMPLES samples of 0.5 * |f(x) - y|^2 (x[n][IN],
 * y[n][OUT]). When g is not NULL its tensors receive (+=) the gradient of that mean. tp: the
 * group the hidden units are split over (NULL: p holds them all). Returns the all-reduce's
 * result over tp (DT_SUCCESS without one); on failure nothing is computed. */
dt_result_t mlp_loss(mlp_tensors_t p, const float* x, const float* y, int n, const mlp_tensors_t* g,
                     dt_comm_t tp, float* loss);

/* Registered names, and the shapes of p's part (the split tensors' slices), in
 * mlp_tensors_t order; the flags say how each is split (DT_PARAM_TP_ROWS, DT_PARAM_TP_COLS). */
extern const char* const mlp_names[4];
extern const int mlp_ndims[4];
void mlp_shapes(mlp_tensors_t p, int64_t shapes[4][2]);
extern const unsigned mlp_split[4];

#endif
