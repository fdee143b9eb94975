#version 450
// The decode engine's register-streamed pass 1; every dtype read as 16-byte words, so no 16-bit storage. See decode_attention.glsl.
#extension GL_GOOGLE_include_directive : require
#define PASS DA_STREAM
#define ELEM16 0
#include "decode_attention.glsl"
