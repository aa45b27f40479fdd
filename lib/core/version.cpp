// The library's own version, compiled in (the headers a program includes carry theirs).
#include "dtrain/version.hpp"

namespace dtrain {

const char* library_version() noexcept { return DTRAIN_VERSION_STRING; }
int library_version_code() noexcept { return DTRAIN_VERSION_CODE; }

}  // namespace dtrain
