#version 450
// add: any mix of f32/f16/bf16 through 16-bit storage. See add.glsl.
#extension GL_GOOGLE_include_directive : require
#define ELEM16 1
#include "add.glsl"
