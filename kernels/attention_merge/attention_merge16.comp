#version 450
// attention_merge: any mix of f32/f16/bf16 through 16-bit storage. See attention_merge.glsl.
#extension GL_GOOGLE_include_directive : require
#define ELEM16 1
#include "attention_merge.glsl"
