/* The program's own model: y = W2 tanh(W1 x + b1) + b2 with its forward and backward in
 * plain C (llm.c style: free functions over pointers, shapes in comments, backward adds into
 * the gradients). Parameters and gradients each live in one flat array; the tensors are
 * offsets into it, which is what the program registers with dtrain. */
#ifndef DTRAIN_C_EXAMPLE_MLP_H
#define DTRAIN_C_EXAMPLE_MLP_H

#include <stddef.h>
#include <stdint.h>

enum { MLP_IN = 4, MLP_HIDDEN = 32, MLP_OUT = 2 };

typedef struct {
  float *w1, *b1, *w2, *b2; /* [HIDDEN][IN], [HIDDEN], [OUT][HIDDEN], [OUT] */
} mlp_tensors_t;

/* Offsets of the four tensors in a flat array of mlp_numel() floats. */
size_t mlp_numel(void);
mlp_tensors_t mlp_view(float* flat);

/* The same initial weights on every rank: a fixed pattern scaled by 1/sqrt(fan-in). */
void mlp_init(mlp_tensors_t p);

/* Mean over n samples of 0.5 * |f(x) - y|^2 (x[n][IN], y[n][OUT]). When g is not NULL its
 * tensors receive (+=) the gradient of that mean. */
float mlp_loss(mlp_tensors_t p, const float* x, const float* y, int n, const mlp_tensors_t* g);

/* Registered names and shapes, in mlp_tensors_t order. */
extern const char* const mlp_names[4];
extern const int mlp_ndims[4];
extern const int64_t mlp_shapes[4][2];

#endif
