// The SM copy kernel of `braid perf`'s roofline: copies `n16` 16-byte words from `src`
// to `dst` (on this GPU or a peer's, through peer access), grid-stride, so that the
// roofline is the faster of this and a copy-engine copy. Not part of any collective.
extern "C" __global__ void braid_roofline_copy(const int4* __restrict__ src,
                                               int4* __restrict__ dst,
                                               unsigned long long n16) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n16; i += stride) {
        dst[i] = src[i];
    }
}
