#!/bin/sh
# check_docs.sh SOURCE_DIR GENERATED_INCLUDE_DIR
# Every declaration of the installed C headers (dtrain.h, dtrain_mpi.h, dtrain_version.h) and
# every public procedure of the Fortran module carries a Doxygen comment, with each
# parameter and return value of the C functions described: doxygen must print no warning.
# Exit 77 (skipped) without doxygen (Debian package doxygen).
set -u
src=$1 gen=$2
command -v doxygen >/dev/null 2>&1 || { echo "doxygen not found: skipped"; exit 77; }
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
cat > "$work/Doxyfile" <<CONF
PROJECT_NAME = dtrain
INPUT = $src/capi/dtrain.h $src/capi/dtrain_mpi.h $gen/dtrain_version.h $src/fortran
FILE_PATTERNS = *.f90
# The bind(C) interfaces are the C functions above; their Fortran side is documented.
EXCLUDE = $src/fortran/dtrain_c_binding.f90
EXTENSION_MAPPING = f90=FortranFree
OUTPUT_DIRECTORY = $work/out
QUIET = YES
WARN_IF_UNDOCUMENTED = YES
WARN_IF_DOC_ERROR = YES
WARN_NO_PARAMDOC = YES
WARN_LOGFILE = $work/warnings.txt
ENABLE_PREPROCESSING = YES
MACRO_EXPANSION = YES
EXPAND_ONLY_PREDEF = YES
PREDEFINED = DT_API=
# Parameter checks run while HTML is written (doxygen 1.9), so it is generated and dropped.
GENERATE_HTML = YES
GENERATE_LATEX = NO
HAVE_DOT = NO
CLASS_GRAPH = NO
COLLABORATION_GRAPH = NO
INCLUDE_GRAPH = NO
INCLUDED_BY_GRAPH = NO
GENERATE_LEGEND = NO
CONF
doxygen "$work/Doxyfile" || exit 1
if [ -s "$work/warnings.txt" ]; then
  echo "undocumented or badly documented declarations:"
  cat "$work/warnings.txt"
  exit 1
fi
echo "every declaration of the C headers and the Fortran module is documented"
