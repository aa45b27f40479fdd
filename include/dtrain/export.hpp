#pragma once
// One macro marks every exported symbol; everything else is hidden (-fvisibility=hidden).
#if defined(_WIN32)
#define DTRAIN_API
#else
#define DTRAIN_API __attribute__((visibility("default")))
#endif
