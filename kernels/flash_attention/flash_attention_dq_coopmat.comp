#version 450
// flash_attention's backward dq pass on cooperative matrices. See flash_attention_bwd_coopmat.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS FA_DQ_CM
#include "flash_attention_bwd_coopmat.glsl"
