#version 450
#extension GL_EXT_control_flow_attributes : require
// matmul with f32 storage: the scalar tiled GEMM of matmul.glsl.
#define ELEM16 0
#include "matmul.glsl"
