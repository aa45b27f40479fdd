#!/bin/sh
# check_abi.sh [--update] LIB SOURCE_DIR
# Compares the C ABI (the dt_* functions and every type they reach) of the built library with
# the reference dump SOURCE_DIR/capi/abi/dtrain-c.abi. Exit 77 (skipped) without
# abigail-tools (Debian package abigail-tools). After an intended, compatible addition,
# regenerate the reference with --update and commit it.
set -u
update=0
if [ "${1:-}" = "--update" ]; then update=1; shift; fi
# src made absolute: abidw counts as public only the types declared in the header at the
# path the debug info names, so a relative path would drop every enumerator and member.
lib=$1 src=$(cd "$2" && pwd) || exit 1
reference=$src/capi/abi/dtrain-c.abi
suppr=$src/capi/abi/c-api.suppr
command -v abidw >/dev/null 2>&1 && command -v abidiff >/dev/null 2>&1 || {
  echo "abidw/abidiff not found (Debian package abigail-tools): skipped"; exit 77; }
current=$(mktemp) || exit 1
trap 'rm -f "$current" "$current.raw"' EXIT
# The header given by absolute path marks every type defined elsewhere (the handles'
# internals) as private, so they stay opaque. Build paths are stripped from the dump.
abidw --header-file "$src/capi/dtrain.h" --drop-private-types --no-show-locs --no-corpus-path \
      --suppressions "$suppr" --out-file "$current.raw" "$lib" || exit 1
sed -e "s| comp-dir-path='[^']*'||" -e "s|path='[^']*/capi/|path='capi/|" "$current.raw" > "$current"
if [ $update -eq 1 ]; then
  cp "$current" "$reference" && echo "wrote $reference"
  exit $?
fi
# Both dumps hold only dt_* functions already; additions are compatible (--no-added-syms).
abidiff --no-added-syms "$reference" "$current"
rc=$?
if [ $rc -ne 0 ]; then
  echo "C ABI differs from $reference (abidiff status $rc)"
  exit 1
fi
echo "C ABI matches $reference"
