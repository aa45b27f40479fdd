#include "options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char* const kUsage =
    "usage: mpiexec -n N dtrain-c-example [--steps N] [--lr X] [--save-dir DIR]\n"
    "       [--save-every K] [--keep K] [--resume PATH|DIR|auto] [--out FILE] [--tp N]\n";

static int report_usage = 1;

static int usage(const char* why) {
  if (report_usage) fprintf(stderr, "dtrain-c-example: %s\n%s", why, kUsage);
  return 1;
}

/* usage() with what was given: "%s" in why stands for it. */
static int usage_of(const char* why, const char* given) {
  char text[512];
  snprintf(text, sizeof text, why, given);
  return usage(text);
}

void print_usage(FILE* to) { fputs(kUsage, to); }

/* A whole, non-negative number. */
static int parse_count(const char* s, int* v) {
  char* end = NULL;
  const long x = strtol(s, &end, 10);
  if (!*s || *end || x < 0 || x > 1000000000L) return 1;
  *v = (int)x;
  return 0;
}

int parse_options(int argc, char** argv, options_t* o, int report) {
  report_usage = report;
  o->steps = 300;
  o->lr = 0.01f;
  o->save_dir = NULL;
  o->save_every = 0;
  o->keep = 0;
  o->resume = NULL;
  o->out = NULL;
  o->tp = 1;
  for (int i = 1; i < argc; ++i) {
    const char* name = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) return -1;
    if (strncmp(name, "--", 2) != 0) return usage_of("unexpected argument '%s': options are --name value", name);
    if (!value) return usage("every option takes a value");
    /* An empty value (an unset variable in a job script) would mean no checkpoints. */
    if (!*value) return usage_of("%s was given an empty value", name);
    ++i;
    if (strcmp(name, "--steps") == 0) {
      if (parse_count(value, &o->steps)) return usage("--steps needs a whole number");
    } else if (strcmp(name, "--lr") == 0) {
      char* end = NULL;
      o->lr = strtof(value, &end);
      if (end == value || *end || !(o->lr > 0) || o->lr > 1e30f) return usage("--lr needs a positive number");
    } else if (strcmp(name, "--save-dir") == 0) {
      o->save_dir = value;
    } else if (strcmp(name, "--save-every") == 0) {
      if (parse_count(value, &o->save_every)) return usage("--save-every needs a whole number");
    } else if (strcmp(name, "--keep") == 0) {
      if (parse_count(value, &o->keep)) return usage("--keep needs a whole number");
    } else if (strcmp(name, "--resume") == 0) {
      o->resume = value;
    } else if (strcmp(name, "--out") == 0) {
      o->out = value;
    } else if (strcmp(name, "--tp") == 0) {
      if (parse_count(value, &o->tp) || o->tp < 1) return usage("--tp needs a positive whole number");
    } else {
      return usage("unknown option");
    }
  }
  if (o->resume && strcmp(o->resume, "auto") == 0 && !o->save_dir)
    return usage("--resume auto needs --save-dir");
  /* Found now, not at the first save after the training. */
  struct stat st;
  if (o->save_dir && stat(o->save_dir, &st) == 0 && !S_ISDIR(st.st_mode))
    return usage_of("--save-dir '%s' exists and is not a directory", o->save_dir);
  return 0;
}
