    const int job = ip[0];
    const long rows = ip[1], cols = ip[2];
    const int row_step = ip[3], col_step = ip[4], out_cols = ip[5];
    const int row_split = ip[6], col_split = ip[7], tx = ip[8], slots = ip[9];
    const int dt = ip[10];
    const int t = int(thread_position_in_threadgroup.x);
    const int threads = int(threads_per_threadgroup.x);
    const int block = int(threadgroup_position_in_grid.x);
    const int blocks = int(threadgroups_per_grid.x);
    threadgroup float red_hi[2 * THREADS];
    threadgroup float red_lo[2 * THREADS];
    threadgroup float red_f[2 * THREADS];
    threadgroup uint red_u[2 * THREADS];
    threadgroup atomic_uint shared[MAX_SHARED];

    if (job == 2) {
        const long n = rows * cols < long(slots) ? rows * cols : long(slots);
        ws_pair s = ws_pair{0.0f, 0.0f};
        ws_pair q = ws_pair{0.0f, 0.0f};
        uint k = 0;
        for (long i = t; i < n; i += threads) {
            const float v = ws_value(x, i, dt);
            if (isfinite(v)) {
                s = ws_add_value(s, v);
                q = ws_add(q, ws_square(ws_pair{v, 0.0f}));
                k += 1;
            }
        }
        red_hi[t] = s.hi;
        red_lo[t] = s.lo;
        red_hi[THREADS + t] = q.hi;
        red_lo[THREADS + t] = q.lo;
        red_u[t] = k;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int step = threads / 2; step > 0; step /= 2) {
            if (t < step) {
                ws_fold_pairs(red_hi, red_lo, t, step, THREADS);
                red_u[t] += red_u[t + step];
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        if (t == 0) {
            float centre = 0.0f;
            if (red_u[0] > 0u) {
                const float count = float(red_u[0]);
                const float mean = (red_hi[0] + red_lo[0]) / count;
                const float spread = max((red_hi[THREADS] + red_lo[THREADS]) / count - mean * mean, 0.0f);
                if (!(mean * mean <= 4.0f * spread)) centre = mean;
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
        const long n = rows * cols;
        for (int i = t; i < slots; i += threads) atomic_store_explicit(&shared[i], 0u, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const long stride = long(blocks) * threads;
        for (long i = long(block) * threads + t; i < n; i += stride) {
            const float v = ws_value(x, i, dt);
            int slot = slots - 1;
            if (isfinite(v)) slot = int(min((v - lo) * scale, float(slots - 2)));
            atomic_fetch_add_explicit(&shared[slot], 1u, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int i = t; i < slots; i += threads) {
            uout[long(block) * slots + i] = atomic_load_explicit(&shared[i], memory_order_relaxed);
        }
        return;
    }

    for (int i = t; i < out_cols; i += threads) {
        atomic_store_explicit(&shared[i], 0u, memory_order_relaxed);
        atomic_store_explicit(&shared[MAX_CELLS + i], 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float centre = fp[0];
    const int ty_count = threads / tx;
    const int lane_x = t % tx, lane_y = t / tx;
    const int per_cell_row = row_split * col_split;
    const int cell_row = block / per_cell_row;
    const int rs = (block % per_cell_row) / col_split;
    const int cs = block % col_split;
    const long band0 = long(cell_row) * row_step;
    const long band1 = band0 + row_step < rows ? band0 + row_step : rows;
    const long col_chunk = (cols + col_split - 1) / col_split;
    const long c0 = long(cs) * col_chunk;
    const long c1 = c0 + col_chunk < cols ? c0 + col_chunk : cols;
    const long row_stride = long(row_split) * ty_count;
    float lo = INFINITY, hi = -INFINITY;
    ws_pair sum = ws_pair{0.0f, 0.0f};
    ws_pair squares = ws_pair{0.0f, 0.0f};
    uint nans = 0u, infs = 0u;
    for (long cb = c0 + lane_x; cb < c1; cb += 4 * long(tx)) {
        float run[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float peak[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        bool has[4];
        for (int k = 0; k < 4; k++) has[k] = cb + long(k) * tx < c1;
        for (long r = band0 + long(rs) * ty_count + lane_y; r < band1; r += row_stride) {
            const long base = r * cols + cb;
            for (int k = 0; k < 4; k++) {
                if (!has[k]) continue;
                const float v = ws_value(x, base + long(k) * tx, dt);
                if (isfinite(v)) {
                    lo = min(lo, v);
                    hi = max(hi, v);
                    sum = ws_add_value(sum, v);
                    squares = ws_add(squares, ws_square(ws_two_sum(v, -centre)));
                    run[k] += v;
                    peak[k] = max(peak[k], fabs(v));
                } else if (isnan(v)) {
                    nans++;
                } else {
                    infs++;
                }
            }
        }
        if (out_cols > 0) {
            for (int k = 0; k < 4; k++) {
                if (!has[k]) continue;
                const int cell = int((cb + long(k) * tx) / col_step);
                if (run[k] != 0.0f) ws_add_to(&shared[cell], run[k]);
                if (peak[k] > 0.0f) {
                    atomic_fetch_max_explicit(&shared[MAX_CELLS + cell], as_type<uint>(peak[k]),
                                              memory_order_relaxed);
                }
            }
        }
    }
    red_hi[t] = sum.hi;
    red_lo[t] = sum.lo;
    red_hi[THREADS + t] = squares.hi;
    red_lo[THREADS + t] = squares.lo;
    red_f[t] = lo;
    red_f[THREADS + t] = hi;
    red_u[t] = nans;
    red_u[THREADS + t] = infs;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int step = threads / 2; step > 0; step /= 2) {
        if (t < step) {
            ws_fold_pairs(red_hi, red_lo, t, step, THREADS);
            red_f[t] = min(red_f[t], red_f[t + step]);
            red_f[THREADS + t] = max(red_f[THREADS + t], red_f[THREADS + t + step]);
            red_u[t] += red_u[t + step];
            red_u[THREADS + t] += red_u[THREADS + t + step];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (t == 0) {
        const long mine = long(block) * 6;
        fout[mine] = red_f[0];
        fout[mine + 1] = red_f[THREADS];
        fout[mine + 2] = red_hi[0];
        fout[mine + 3] = red_lo[0];
        fout[mine + 4] = red_hi[THREADS];
        fout[mine + 5] = red_lo[THREADS];
        uout[long(block) * 2] = red_u[0];
        uout[long(block) * 2 + 1] = red_u[THREADS];
    }
    // A row of cells is this threadgroup's alone (the host's layout).
    for (int i = t; i < out_cols; i += threads) {
        const long at = long(cell_row) * out_cols + i;
        fout[long(blocks) * 6 + at] = as_type<float>(atomic_load_explicit(&shared[i], memory_order_relaxed));
        uout[long(blocks) * 2 + at] = atomic_load_explicit(&shared[MAX_CELLS + i], memory_order_relaxed);
    }
