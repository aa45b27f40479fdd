/* Command line of dtrain-c-example. */
#ifndef DTRAIN_C_EXAMPLE_OPTIONS_H
#define DTRAIN_C_EXAMPLE_OPTIONS_H

#include <stdio.h>

typedef struct {
  int steps;            /* --steps N: train until N optimiser steps are done (300) */
  float lr;             /* --lr X: AdamW learning rate (0.01) */
  const char* save_dir; /* --save-dir DIR: write checkpoints there */
  int save_every;       /* --save-every K: after every K steps (0: once, at the end) */
  int keep;             /* --keep K: newest checkpoints kept (0: all) */
  const char* resume;   /* --resume PATH|DIR|auto: continue from a checkpoint */
  const char* out;      /* --out FILE: final evaluation loss and parameters, one per line */
  int tp;               /* --tp N: the hidden layer split over N ranks (1) */
} options_t;

/* 0 when argv holds valid options; -1 for --help; otherwise returns 1, having printed why
 * and the usage to stderr where `report` is set (one rank reports: every rank parses the
 * same options). */
int parse_options(int argc, char** argv, options_t* o, int report);
/* The usage lines. */
void print_usage(FILE* to);

#endif
