#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float ws_value(const unsigned short* x, long long i, int dt) {
  if (dt == 0) return reinterpret_cast<const float*>(x)[i];
  const unsigned short h = x[i];
  if (dt == 1) return __half2float(__ushort_as_half(h));
  return __bfloat162float(__ushort_as_bfloat16(h));
}
