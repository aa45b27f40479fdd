#!/usr/bin/env bash
# Installs what is missing, builds dtrain with its tests, and runs the whole suite.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
install_packages
configure_and_build -DDTRAIN_BUILD_TESTS=ON
cd "$BUILD_DIR"
ctest --output-on-failure -j "${DTRAIN_TEST_JOBS:-2}" "$@"
