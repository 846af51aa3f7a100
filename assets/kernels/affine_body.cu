    const int job = ip[0], bits = ip[1], group = ip[2];
    const int row_step = ip[3], col_step = ip[4], out_cols = ip[5];
    const int bf16 = ip[6], slots = ip[7];
    const long long rows = w_shape[0], words = w_shape[1];
    const long long groups = scales_shape[1];
    const int pack = 32 / bits;
    const unsigned int mask = bits == 32 ? 0xffffffffu : ((1u << bits) - 1u);
    __shared__ unsigned int hist[MAX_SLOTS];
    __shared__ float cells[MAX_CELLS];
    __shared__ unsigned int peaks[MAX_CELLS];
    __shared__ double red_d[2][THREADS];
    __shared__ float red_f[2][THREADS];
    __shared__ unsigned int red_u[2][THREADS];
    const int t = threadIdx.x;
    if (job == 1) {
        for (int i = t; i < slots; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        const float lo = fp[1], scale = fp[2];
        for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
            for (int wi = t; wi < words; wi += blockDim.x) {
                const unsigned int word = w[row * words + wi];
                const long long g = row * groups + (wi * pack) / group;
                const unsigned short s = scales[g], b = biases[g];
                for (int i = 0; i < pack; i++) {
                    const float v = ws_affine_value((word >> (bits * i)) & mask, s, b, bf16);
                    int slot = slots - 1;
                    if (isfinite(v)) slot = (int)fminf((v - lo) * scale, (float)(slots - 2));
                    atomicAdd(&hist[slot], 1u);
                }
            }
        }
        __syncthreads();
        for (int i = t; i < slots; i += blockDim.x) {
            if (hist[i] != 0) atomicAdd(&uout[i], hist[i]);
        }
        return;
    }
    for (int i = t; i < out_cols; i += blockDim.x) {
        cells[i] = 0.0f;
        peaks[i] = 0u;
    }
    __syncthreads();
    const double centre = (double)fp[0];
    const long long r0 = (long long)blockIdx.x * row_step;
    const long long r1 = r0 + row_step < rows ? r0 + row_step : rows;
    float lo = __int_as_float(0x7f800000), hi = __int_as_float(0xff800000);
    double sum = 0.0, squares = 0.0;
    unsigned int nans = 0, infs = 0;
    for (long long row = r0; row < r1; row++) {
        for (int wi = t; wi < words; wi += blockDim.x) {
            const unsigned int word = w[row * words + wi];
            const int col0 = wi * pack;
            const long long g = row * groups + col0 / group;
            const unsigned short s = scales[g], b = biases[g];
            int cell = col0 / col_step;
            int next = (cell + 1) * col_step;
            float run = 0.0f, peak = 0.0f;
            for (int i = 0; i < pack; i++) {
                const float v = ws_affine_value((word >> (bits * i)) & mask, s, b, bf16);
                while (col0 + i >= next) {
                    atomicAdd(&cells[cell], run);
                    if (peak > 0.0f) atomicMax(&peaks[cell], __float_as_uint(peak));
                    cell++;
                    next += col_step;
                    run = 0.0f;
                    peak = 0.0f;
                }
                if (isfinite(v)) {
                    lo = fminf(lo, v);
                    hi = fmaxf(hi, v);
                    sum += (double)v;
                    const double d = (double)v - centre;
                    squares += d * d;
                    run += v;
                    peak = fmaxf(peak, fabsf(v));
                } else if (isnan(v)) {
                    nans++;
                } else {
                    infs++;
                }
            }
            atomicAdd(&cells[cell], run);
            if (peak > 0.0f) atomicMax(&peaks[cell], __float_as_uint(peak));
        }
    }
    red_d[0][t] = sum; red_d[1][t] = squares;
    red_f[0][t] = lo; red_f[1][t] = hi;
    red_u[0][t] = nans; red_u[1][t] = infs;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if (t < step) {
            red_d[0][t] += red_d[0][t + step];
            red_d[1][t] += red_d[1][t + step];
            red_f[0][t] = fminf(red_f[0][t], red_f[0][t + step]);
            red_f[1][t] = fmaxf(red_f[1][t], red_f[1][t + step]);
            red_u[0][t] += red_u[0][t + step];
            red_u[1][t] += red_u[1][t + step];
        }
        __syncthreads();
    }
    const long long out_rows = gridDim.x;
    if (t == 0) {
        float* mine = fout + blockIdx.x * 6;
        const float sum_hi = (float)red_d[0][0];
        const float sq_hi = (float)red_d[1][0];
        mine[0] = red_f[0][0];
        mine[1] = red_f[1][0];
        mine[2] = sum_hi;
        mine[3] = (float)(red_d[0][0] - (double)sum_hi);
        mine[4] = sq_hi;
        mine[5] = (float)(red_d[1][0] - (double)sq_hi);
        uout[blockIdx.x * 2] = red_u[0][0];
        uout[blockIdx.x * 2 + 1] = red_u[1][0];
    }
    for (int i = t; i < out_cols; i += blockDim.x) {
        fout[out_rows * 6 + (long long)blockIdx.x * out_cols + i] = cells[i];
        uout[out_rows * 2 + (long long)blockIdx.x * out_cols + i] = peaks[i];
    }
