#version 450
// add: a, b and out f32. See add.glsl.
#extension GL_GOOGLE_include_directive : require
#define ELEM16 0
#include "add.glsl"
