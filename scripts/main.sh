#!/usr/bin/env bash
# Installs what is missing, builds dtrain, and trains the default GPT on the built-in corpus
# with 2 MPI ranks. Extra arguments go to dtrain-gpt (see docs/dtrain-gpt.md).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
configure_and_build --target main-job  # the trainer only: the tests are scripts/test.sh's
mpi_environment
exec mpiexec -n "${DTRAIN_RANKS:-2}" "$BUILD_DIR/apps/dtrain-gpt/dtrain-gpt" "$@"
