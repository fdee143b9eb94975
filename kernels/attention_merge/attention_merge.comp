#version 450
// attention_merge: out and part f32. See attention_merge.glsl.
#extension GL_GOOGLE_include_directive : require
#define ELEM16 0
#include "attention_merge.glsl"
