    const int job = ip[0];
    const long long rows = ip[1], cols = ip[2];
    const int row_step = ip[3], col_step = ip[4], out_cols = ip[5];
    const int row_split = ip[6], col_split = ip[7], tx = ip[8], slots = ip[9];
    const int dt = ip[10];
    const unsigned short* __restrict__ xr = x;
    // One shared pool, carved per job (a static 48 KB bound for all).
    __shared__ double pool[POOL_DOUBLES];
    const int t = threadIdx.x;
    const int threads = blockDim.x;
    if (job == 2) {
        // One block: the mean and spread of the first `slots` finite
        // values in f64, and the centre from them.
        const long long n = rows * cols < (long long)slots ? rows * cols : (long long)slots;
        double s = 0.0, q = 0.0, k = 0.0;
        // Eight loads in flight before any is added (one block: latency
        // is all it waits on).
        for (long long i0 = t; i0 < n; i0 += 8LL * threads) {
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const long long i = i0 + (long long)j * threads;
                v[j] = i < n ? ws_value(xr, i, dt) : __int_as_float(0x7fc00000);
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                if (isfinite(v[j])) {
                    s += (double)v[j];
                    q += (double)v[j] * (double)v[j];
                    k += 1.0;
                }
            }
        }
        pool[t] = s;
        pool[THREADS + t] = q;
        pool[2 * THREADS + t] = k;
        __syncthreads();
        for (int step = threads / 2; step > 0; step /= 2) {
            if (t < step) {
                pool[t] += pool[t + step];
                pool[THREADS + t] += pool[THREADS + t + step];
                pool[2 * THREADS + t] += pool[2 * THREADS + t + step];
            }
            __syncthreads();
        }
        if (t == 0) {
            float centre = 0.0f;
            const double count = pool[2 * THREADS];
            if (count > 0.0) {
                const double mean = pool[0] / count;
                double spread = pool[THREADS] / count - mean * mean;
                if (spread < 0.0) spread = 0.0;
                if (!(mean * mean <= 4.0 * spread)) centre = (float)mean;
            }
            fout[0] = centre;
            fout[1] = 0.0f;
            fout[2] = 0.0f;
            uout[0] = 0u;
        }
        return;
    }
    if (job == 1) {
        const float lo = fp[1], scale = fp[2];
        const long long n = rows * cols;
        const long long stride = (long long)gridDim.x * threads;
        const long long per_thread = (n + stride - 1) / stride;
        // Each thread its own 16-bit counters (no atomics, no waiting on
        // a busy bin) where they fit; else one block histogram.
        const bool own = (long long)slots * threads * 2 <= (long long)sizeof(pool)
            && per_thread <= 65535;
        unsigned short* counters = (unsigned short*)pool;
        unsigned int* shared_hist = (unsigned int*)pool;
        const int words = own ? (slots * threads + 1) / 2 : slots;
        for (int i = t; i < words; i += threads) ((unsigned int*)pool)[i] = 0u;
        __syncthreads();
        // Eight values loaded before any is counted: the loads are in
        // flight together (counting stores to shared memory, which the
        // compiler would otherwise keep the next loads behind).
        for (long long i0 = (long long)blockIdx.x * threads + t; i0 < n; i0 += 8 * stride) {
            float v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const long long i = i0 + k * stride;
                v[k] = i < n ? ws_value(xr, i, dt) : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (i0 + k * stride >= n) break;
                int slot = slots - 1;
                if (isfinite(v[k])) slot = (int)fminf((v[k] - lo) * scale, (float)(slots - 2));
                if (own) {
                    counters[slot * threads + t]++;
                } else {
                    atomicAdd(&shared_hist[slot], 1u);
                }
            }
        }
        __syncthreads();
        for (int s = t; s < slots; s += threads) {
            unsigned int total = 0;
            if (own) {
                // Each thread starts its row at its own column (`j ^ s`,
                // a permutation: `threads` is a power of two): rows are
                // 512 bytes apart, so reading one column together put
                // every thread of a warp on one bank of shared memory.
                const int turn = s & (threads - 1);
                for (int j = 0; j < threads; j++) total += counters[s * threads + (j ^ turn)];
            } else {
                total = shared_hist[s];
            }
            if (total != 0) atomicAdd(&uout[s], total);
        }
        return;
    }
    float* cells = (float*)pool;
    unsigned int* peaks = (unsigned int*)(pool + MAX_CELLS / 2);
    double* red_d = pool + MAX_CELLS;
    float* red_f = (float*)(pool + MAX_CELLS + 2 * THREADS);
    unsigned int* red_u = (unsigned int*)(pool + MAX_CELLS + 3 * THREADS);
    for (int i = t; i < out_cols; i += threads) {
        cells[i] = 0.0f;
        peaks[i] = 0u;
    }
    __syncthreads();
    const double centre = (double)fp[0];
    const int ty_count = threads / tx;
    const int lane_x = t % tx, lane_y = t / tx;
    const int per_cell_row = row_split * col_split;
    const int cell_row = blockIdx.x / per_cell_row;
    const int rs = (blockIdx.x % per_cell_row) / col_split;
    const int cs = blockIdx.x % col_split;
    const long long band0 = (long long)cell_row * row_step;
    const long long band1 = band0 + row_step < rows ? band0 + row_step : rows;
    const long long col_chunk = (cols + col_split - 1) / col_split;
    const long long c0 = (long long)cs * col_chunk;
    const long long c1 = c0 + col_chunk < cols ? c0 + col_chunk : cols;
    const long long row_stride = (long long)row_split * ty_count;
    float lo = __int_as_float(0x7f800000), hi = __int_as_float(0xff800000);
    double sum = 0.0, squares = 0.0;
    unsigned int nans = 0, infs = 0;
    // Four columns a thread at a time (tx apart: a warp's loads stay
    // neighbours), so that each thread has several loads in flight.
    for (long long cb = c0 + lane_x; cb < c1; cb += 4LL * tx) {
        float run[4] = {0.0f, 0.0f, 0.0f, 0.0f}, peak[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        bool has[4];
#pragma unroll
        for (int k = 0; k < 4; k++) has[k] = cb + (long long)k * tx < c1;
#pragma unroll 2
        for (long long r = band0 + (long long)rs * ty_count + lane_y; r < band1; r += row_stride) {
            const long long base = r * cols + cb;
            float v[4];
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = has[k] ? ws_value(xr, base + (long long)k * tx, dt) : 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (!has[k]) continue;
                if (isfinite(v[k])) {
                    lo = fminf(lo, v[k]);
                    hi = fmaxf(hi, v[k]);
                    sum += (double)v[k];
                    const double d = (double)v[k] - centre;
                    squares += d * d;
                    run[k] += v[k];
                    peak[k] = fmaxf(peak[k], fabsf(v[k]));
                } else if (isnan(v[k])) {
                    nans++;
                } else {
                    infs++;
                }
            }
        }
        if (out_cols > 0) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (!has[k]) continue;
                const int cell = (int)((cb + (long long)k * tx) / col_step);
                if (run[k] != 0.0f) atomicAdd(&cells[cell], run[k]);
                if (peak[k] > 0.0f) atomicMax(&peaks[cell], __float_as_uint(peak[k]));
            }
        }
    }
    red_d[t] = sum; red_d[THREADS + t] = squares;
    red_f[t] = lo; red_f[THREADS + t] = hi;
    red_u[t] = nans; red_u[THREADS + t] = infs;
    __syncthreads();
    for (int step = threads / 2; step > 0; step /= 2) {
        if (t < step) {
            red_d[t] += red_d[t + step];
            red_d[THREADS + t] += red_d[THREADS + t + step];
            red_f[t] = fminf(red_f[t], red_f[t + step]);
            red_f[THREADS + t] = fmaxf(red_f[THREADS + t], red_f[THREADS + t + step]);
            red_u[t] += red_u[t + step];
            red_u[THREADS + t] += red_u[THREADS + t + step];
        }
        __syncthreads();
    }
    if (t == 0) {
        float* mine = fout + blockIdx.x * 6;
        const float sum_hi = (float)red_d[0];
        const float sq_hi = (float)red_d[THREADS];
        mine[0] = red_f[0];
        mine[1] = red_f[THREADS];
        mine[2] = sum_hi;
        mine[3] = (float)(red_d[0] - (double)sum_hi);
        mine[4] = sq_hi;
        mine[5] = (float)(red_d[THREADS] - (double)sq_hi);
        uout[blockIdx.x * 2] = red_u[0];
        uout[blockIdx.x * 2 + 1] = red_u[THREADS];
    }
    // A row of cells owned by one block is stored; shared, added.
    const long long blocks = gridDim.x;
    for (int i = t; i < out_cols; i += threads) {
        const long long at = (long long)cell_row * out_cols + i;
        if (per_cell_row == 1) {
            fout[blocks * 6 + at] = cells[i];
            uout[blocks * 2 + at] = peaks[i];
        } else {
            if (cells[i] != 0.0f) atomicAdd(&fout[blocks * 6 + at], cells[i]);
            if (peaks[i] != 0u) atomicMax(&uout[blocks * 2 + at], peaks[i]);
        }
    }
