__global__ void add_vec4(const float4* __restrict__ a, const float4* __restrict__ b, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float4 x = a[i], y = b[i]; out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w); }
}
__global__ void spill_heavy(float* out, int n, int k) {
    float local[256];
    for (int j = 0; j < 256; ++j) local[j] = j * 1.5f + threadIdx.x;
    float acc = 0.f;
    for (int j = 0; j < n; ++j) acc += local[(j * k) & 255];
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
