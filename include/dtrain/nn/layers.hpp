#pragma once
// Layers with explicit forward/backward. A layer registers its parameters under a global name
// prefix, binds to their place in the arenas once allocated, and runs its ops through a
// Device. Backward accumulates (+=) into parameter gradients and, unless asked to write it over
// (Device::GradWrite::overwrite), into the input gradient.
// The tensor-parallel variants (column/row/vocab-parallel) are in dtrain/nn/tensor_parallel.hpp;
// on a group of one they compute what these plain layers do.
#include <cstdint>
#include <string>

#include "dtrain/device/device.hpp"
#include "dtrain/nn/parameters.hpp"

namespace dtrain::nn {

// y[N,out] = x[N,in] · W[out,in]^T + b[out]; "<prefix>.weight" [out,in], "<prefix>.bias" [out]
struct DTRAIN_API Linear {
  std::string prefix;
  int in = 0, out = 0;
  bool has_bias = true;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;

  void declare(ParameterStore& ps, const std::string& name, int in_features, int out_features,
               bool bias = true);
  void bind(ParameterStore& ps);
  void forward(Device& dev, float* y, const float* x, int N) const {
    dev.linear_forward(y, x, w, b, N, in, out);
  }
  // dx may be null (input needs no gradient); overwrite writes dx instead of adding into it.
  void backward(Device& dev, float* dx, const float* dy, const float* x, int N,
                Device::GradWrite dx_write = Device::GradWrite::accumulate) const {
    dev.linear_backward(dx, dw, db, dy, x, w, N, in, out, dx_write);
  }
};

// LayerNorm over the last dim C: "<prefix>.weight" [C] (init 1), "<prefix>.bias" [C] (init 0)
struct DTRAIN_API LayerNorm {
  std::string prefix;
  int C = 0;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;

  void declare(ParameterStore& ps, const std::string& name, int channels);
  void bind(ParameterStore& ps);
  // y16 (optional): y's 16-bit copy, written in the same pass (Device::layernorm_forward)
  void forward(Device& dev, float* y, float* mean, float* rstd, const float* x, int N,
               std::uint16_t* y16 = nullptr) const {
    dev.layernorm_forward(y, mean, rstd, x, w, b, N, C, y16);
  }
  // dy16 (optional): dy as 16-bit words of the GEMM operand format, read instead of dy
  // (Device::layernorm_backward's dout16)
  void backward(Device& dev, float* dx, const float* dy, const float* x, const float* mean,
                const float* rstd, int N, const std::uint16_t* dy16 = nullptr) const {
    dev.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C, dy16);
  }
};

}  // namespace dtrain::nn
