// The policy's action head on the GPU: for every row (one action token of
// one policy call: `bins` logits), temperature sampling by inverse CDF with
// the row's uniform in [0, 1), the sampled token's log-probability and the
// row's entropy, in double precision, exactly as the CPU path
// (wmrl_kernels::cpu::sample_row, the same arithmetic as
// crates/wmrl-policy/src/policy.rs `draw`). `temperature <= 0` is greedy
// (argmax, first maximum; log-probability under the plain softmax).
// One thread per row.
extern "C" __global__ void sample_action_tokens(
    const float* __restrict__ logits,    // [rows, bins]
    const double* __restrict__ uniforms, // [rows]
    int rows,
    int bins,
    double temperature,
    unsigned int* __restrict__ tokens,   // [rows]
    float* __restrict__ logprobs,        // [rows]
    float* __restrict__ entropy)         // [rows]
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* l = logits + (size_t)r * bins;
    double t = temperature > 0.0 ? temperature : 1.0;
    double mx = (double)l[0] / t;
    for (int i = 1; i < bins; ++i) {
        double z = (double)l[i] / t;
        if (z > mx) mx = z;
    }
    double sum = 0.0;
    for (int i = 0; i < bins; ++i) sum += exp((double)l[i] / t - mx);
    double lse = mx + log(sum);
    int pick;
    if (temperature > 0.0) {
        double u = uniforms[r] * sum;
        double acc = 0.0;
        pick = bins - 1;
        for (int i = 0; i < bins; ++i) {
            acc += exp((double)l[i] / t - mx);
            if (u < acc) { pick = i; break; }
        }
    } else {
        pick = 0;
        double best = (double)l[0] / t;
        for (int i = 1; i < bins; ++i) {
            double z = (double)l[i] / t;
            if (z > best) { best = z; pick = i; }
        }
    }
    double h = 0.0;
    for (int i = 0; i < bins; ++i) {
        double lp = (double)l[i] / t - lse;
        h -= exp(lp) * lp;
    }
    tokens[r] = (unsigned int)pick;
    logprobs[r] = (float)((double)l[pick] / t - lse);
    entropy[r] = (float)h;
}
