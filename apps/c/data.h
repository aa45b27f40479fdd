/* The synthetic regression task: inputs uniform in [-1, 1]^4, two smooth targets.
 * Sample `id` is a pure function of id, so any split of a batch over ranks sees the same
 * samples. */
#ifndef DTRAIN_C_EXAMPLE_DATA_H
#define DTRAIN_C_EXAMPLE_DATA_H

enum { DATA_INPUTS = 4, DATA_OUTPUTS = 2 };

/* x[DATA_INPUTS], y[DATA_OUTPUTS] of sample id. */
void data_sample(long id, float* x, float* y);

/* First id of the held-out evaluation samples (training ids stay below it). */
#define DATA_EVAL_FIRST 1000000000L

#endif
