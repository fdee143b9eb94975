#version 450
// flash_attention forward on cooperative matrices. See flash_attention_fwd_coopmat.glsl.
#extension GL_GOOGLE_include_directive : require
#include "flash_attention_fwd_coopmat.glsl"
