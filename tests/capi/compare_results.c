/* compare_results A B TOLERANCE
 * Compares two results files of the example apps ("name value" per line): same names in the
 * same order, and every |a - b| <= TOLERANCE * max(|a|, |b|, 0.01): relative, and absolute
 * (at TOLERANCE / 100) for values under 0.01, where a parameter's rounding is a large share
 * of it. TOLERANCE 0 asks for equal values. Prints the largest relative difference; exits 1
 * on any mismatch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  FILE *fa, *fb;
  char na[64], nb[64];
  double a, b, tol, scale, worst = 0;
  long n = 0, bad = 0;
  int ra, rb;
  if (argc != 4) {
    fprintf(stderr, "usage: compare_results A B TOLERANCE\n");
    return 2;
  }
  tol = atof(argv[3]);
  fa = fopen(argv[1], "r");
  fb = fopen(argv[2], "r");
  if (!fa || !fb) {
    fprintf(stderr, "compare_results: cannot read %s\n", fa ? argv[2] : argv[1]);
    return 1;
  }
  for (;;) {
    ra = fscanf(fa, "%63s %lf", na, &a);
    rb = fscanf(fb, "%63s %lf", nb, &b);
    if (ra != 2 || rb != 2) break;
    ++n;
    if (strcmp(na, nb) != 0) {
      fprintf(stderr, "compare_results: line %ld is '%s' in one file, '%s' in the other\n", n, na, nb);
      return 1;
    }
    scale = fmax(fmax(fabs(a), fabs(b)), 0.01);
    if (!(fabs(a - b) <= tol * scale)) {
      if (bad++ < 5) fprintf(stderr, "compare_results: line %ld (%s): %.9g vs %.9g\n", n, na, a, b);
    }
    if (fabs(a - b) / scale > worst || a != a || b != b) worst = fabs(a - b) / scale;
  }
  fclose(fa);
  fclose(fb);
  if (ra != rb || ra != EOF || n == 0) {
    fprintf(stderr, "compare_results: the files differ in length or format (%ld lines read)\n", n);
    return 1;
  }
  printf("compare_results: %ld values, max |a - b| / max(|a|, |b|, 0.01) = %.3g (tolerance %g)%s\n", n, worst, tol,
         bad ? ": MISMATCH" : "");
  return bad ? 1 : 0;
}
