// reference/embedding.h — the plain math of layers/embedding.h: token and (learned, GPT-2) position
// embeddings, in the [s, b, h] layout (row r = s·B + b), forward and backward as loops.
//
//   token:    out[r, :] = wte_local[tokens[r] − v_begin, :]  if v_begin <= tokens[r] < v_begin + V_local,
//                         else 0                           (vocab-parallel: a rank holds V_local rows; the
//                                                            sum over the TP group is the full lookup)
//             dwte_local[tokens[r] − v_begin, :] += dout[r, :]   for the rows whose token the rank holds
//   position: out[s, b, :] += wpe[s_offset + s, :]          (global positions: a sequence shard under SP)
//             dwpe[s_offset + s, :] += Σ_b dout[s, b, :]
//
// Sums in double; T is the storage of the outputs and gradients (float like the op, or double for a test's
// oracle). Host only: the tests check the fast CPU path and the CUDA kernels against these functions.
#pragma once
#include <cstdint>

template <class T>
inline void ref_token_embedding_forward(T* out, const int32_t* tokens, const float* wte_local, int64_t v_begin,
                                        int V_local, int N, int C) {
    for (int r = 0; r < N; r++) {
        const bool own = tokens[r] >= v_begin && tokens[r] < v_begin + V_local;
        for (int c = 0; c < C; c++) out[(int64_t)r * C + c] = own ? (T)wte_local[(tokens[r] - v_begin) * C + c] : (T)0;
    }
}

template <class T>
inline void ref_token_embedding_backward(T* dwte_local, const float* dout, const int32_t* tokens, int64_t v_begin,
                                         int V_local, int N, int C) {
    for (int r = 0; r < N; r++)
        if (tokens[r] >= v_begin && tokens[r] < v_begin + V_local)
            for (int c = 0; c < C; c++) {
                T& g = dwte_local[(tokens[r] - v_begin) * C + c];
                g = (T)((double)g + dout[(int64_t)r * C + c]);
            }
}

template <class T>
inline void ref_position_embedding_forward(T* out, const float* wpe, int64_t s_offset, int S_loc, int B, int C) {
    for (int s = 0; s < S_loc; s++)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++) {
                T& o = out[((int64_t)s * B + b) * C + c];
                o = (T)((double)o + wpe[(s_offset + s) * C + c]);
            }
}

template <class T>
inline void ref_position_embedding_backward(T* dwpe, const float* dout, int64_t s_offset, int S_loc, int B, int C) {
    for (int s = 0; s < S_loc; s++)
        for (int c = 0; c < C; c++) {
            double g = dwpe[(s_offset + s) * C + c];
            for (int b = 0; b < B; b++) g += dout[((int64_t)s * B + b) * C + c];
            dwpe[(s_offset + s) * C + c] = (T)g;
        }
}
