# cmake -P script: writes OUTPUT, a C++ file that registers INPUT's bytes under KEY. Its names
# carry IDENT, so unity builds may put several such files in one translation unit.
file(READ ${INPUT} hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUTPUT} "// Generated from ${KEY}; do not edit.
#include \"core/embedded.hpp\"
namespace {
alignas(4) const unsigned char data_${IDENT}[] = {
${bytes}0};
const ejk::detail::EmbeddedFile file_${IDENT}{\"${KEY}\", data_${IDENT}, ${size}};
}  // namespace
namespace ejk::detail {
const EmbeddedFile& embedded_${IDENT}() { return file_${IDENT}; }
}  // namespace ejk::detail
")
