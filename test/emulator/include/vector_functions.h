// vector_functions.h for the EMULATED device: the make_* constructors of CUDA's vector types. The toolkit's
// own pulls in its cuda_runtime_api.h, which the emulated runtime replaces; its cuda_bf16.h includes this one.
#pragma once
#include "vector_types.h"

static inline int2 make_int2(int x, int y) { int2 v; v.x = x; v.y = y; return v; }
static inline int4 make_int4(int x, int y, int z, int w) { int4 v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }
static inline uint2 make_uint2(unsigned x, unsigned y) { uint2 v; v.x = x; v.y = y; return v; }
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { uint3 v; v.x = x; v.y = y; v.z = z; return v; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    uint4 v; v.x = x; v.y = y; v.z = z; v.w = w; return v;
}
static inline float2 make_float2(float x, float y) { float2 v; v.x = x; v.y = y; return v; }
static inline float3 make_float3(float x, float y, float z) { float3 v; v.x = x; v.y = y; v.z = z; return v; }
static inline float4 make_float4(float x, float y, float z, float w) {
    float4 v; v.x = x; v.y = y; v.z = z; v.w = w; return v;
}
static inline double2 make_double2(double x, double y) { double2 v; v.x = x; v.y = y; return v; }
