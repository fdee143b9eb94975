#version 450
#extension GL_EXT_control_flow_attributes : require
// matmul with f16 or bf16 storage (DTYPE), read and written through 16-bit buffers: the scalar
// tiled GEMM of matmul.glsl. A module of its own, so f32 runs on devices without 16-bit storage.
#extension GL_EXT_shader_16bit_storage : require
#define ELEM16 1
#include "matmul.glsl"
