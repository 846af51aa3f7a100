#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float ws_affine_value(
    unsigned int q, unsigned short s, unsigned short b, int bf16) {
  if (bf16) {
    const __nv_bfloat16 scale = __ushort_as_bfloat16(s);
    const __nv_bfloat16 bias = __ushort_as_bfloat16(b);
    return __bfloat162float(scale * __uint2bfloat16_rn(q) + bias);
  }
  const __half scale = __ushort_as_half(s);
  const __half bias = __ushort_as_half(b);
  return __half2float(scale * __uint2half_rn(q) + bias);
}
