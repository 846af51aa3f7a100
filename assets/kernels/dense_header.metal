#pragma METAL fp math_mode(safe)
#pragma METAL fp contract(off)

struct ws_pair {
  float hi;
  float lo;
};

// a + b exactly, as a pair (two-sum).
inline ws_pair ws_two_sum(float a, float b) {
  const float s = a + b;
  const float bb = s - a;
  return ws_pair{s, (a - (s - bb)) + (b - bb)};
}

inline ws_pair ws_add(ws_pair a, ws_pair b) {
  const ws_pair s = ws_two_sum(a.hi, b.hi);
  const float lo = s.lo + (a.lo + b.lo);
  const float hi = s.hi + lo;
  return ws_pair{hi, lo - (hi - s.hi)};
}

inline ws_pair ws_add_value(ws_pair a, float b) {
  const ws_pair s = ws_two_sum(a.hi, b);
  const float lo = s.lo + a.lo;
  const float hi = s.hi + lo;
  return ws_pair{hi, lo - (hi - s.hi)};
}

// d * d for a pair d, as a pair (the product's rounding error by fma).
inline ws_pair ws_square(ws_pair d) {
  const float p = d.hi * d.hi;
  const float e = fma(d.hi, d.hi, -p) + 2.0f * d.hi * d.lo;
  const float hi = p + e;
  return ws_pair{hi, e - (hi - p)};
}

inline float ws_value(const device uint16_t* x, long i, int dt) {
  if (dt == 0) return reinterpret_cast<const device float*>(x)[i];
  const ushort h = x[i];
  if (dt == 1) return float(as_type<half>(h));
  return as_type<float>(uint(h) << 16);
}

// The pairs at t + step added into those at t, in both halves of hi and
// lo (sums at 0, squares at `half`).
inline void ws_fold_pairs(threadgroup float* hi, threadgroup float* lo, int t, int step, int half) {
  for (int h = 0; h <= half; h += half) {
    const ws_pair a = ws_add(ws_pair{hi[h + t], lo[h + t]}, ws_pair{hi[h + t + step], lo[h + t + step]});
    hi[h + t] = a.hi;
    lo[h + t] = a.lo;
  }
}

// v added to the f32 whose bits `at` holds.
inline void ws_add_to(threadgroup atomic_uint* at, float v) {
  uint seen = atomic_load_explicit(at, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(
      at, &seen, as_type<uint>(as_type<float>(seen) + v),
      memory_order_relaxed, memory_order_relaxed)) {
  }
}
