#version 450
// The decode engine's pass 1 on cooperative matrices (f16 caches). See decode_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define PASS DA_COOP
#define ELEM16 1
#include "decode_attention.glsl"
