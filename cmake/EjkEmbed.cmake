# Embeds kernel sources (OpenCL C text) and compiled SPIR-V into the library, keyed by a path
# relative to kernels/ ("matmul/matmul.cl", "matmul/matmul.spv"). Everything generated lives
# in the build tree.

set(EJK_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/EjkEmbedFile.cmake)

# ejk_embed_files(OUT_VAR "file=key"...) -> list of generated .cpp files in OUT_VAR
function(ejk_embed_files out_var)
  set(generated)
  set(decls "")
  set(entries "")
  foreach(item IN LISTS ARGN)
    string(REGEX REPLACE "=[^=]*$" "" file "${item}")
    string(REGEX REPLACE "^.*=" "" key "${item}")
    string(MAKE_C_IDENTIFIER "${key}" ident)
    set(cpp ${CMAKE_CURRENT_BINARY_DIR}/embedded/${ident}.cpp)
    add_custom_command(
      OUTPUT ${cpp}
      COMMAND ${CMAKE_COMMAND} -DINPUT=${file} -DOUTPUT=${cpp} -DKEY=${key} -DIDENT=${ident}
              -P ${EJK_EMBED_SCRIPT}
      DEPENDS ${file} ${EJK_EMBED_SCRIPT}
      COMMENT "Embedding ${key}"
      VERBATIM)
    list(APPEND generated ${cpp})
    string(APPEND decls "const EmbeddedFile& embedded_${ident}();\n")
    string(APPEND entries "      &embedded_${ident}(),\n")
  endforeach()
  # One index that references every file, so a static library keeps them all.
  set(index ${CMAKE_CURRENT_BINARY_DIR}/embedded/index.cpp)
  file(CONFIGURE OUTPUT ${index} CONTENT "// Generated; do not edit.
#include \"core/embedded.hpp\"
namespace ejk::detail {
${decls}
std::span<const EmbeddedFile* const> embedded_files() {
  static const EmbeddedFile* const files[] = {
${entries}      nullptr};
  return {files, sizeof(files) / sizeof(files[0]) - 1};
}
}  // namespace ejk::detail
")
  list(APPEND generated ${index})
  set(${out_var} ${generated} PARENT_SCOPE)
endfunction()

# ejk_compile_spirv(OUT_VAR ROOT shader.comp...) compiles each shader with glslc into
# <name>.spv under the build tree, keeping its folder below ROOT. glslc's depfile names every
# file a shader includes (its .glsl, common/philox.h, the GLSL prelude), so an edit to any of
# them rebuilds exactly the shaders that include it.
function(ejk_compile_spirv out_var root)
  set(outputs)
  foreach(src IN LISTS ARGN)
    file(RELATIVE_PATH rel ${root} ${src})
    string(REGEX REPLACE "\\.comp$" ".spv" rel_spv ${rel})
    set(spv ${CMAKE_CURRENT_BINARY_DIR}/spirv/${rel_spv})
    get_filename_component(dir ${spv} DIRECTORY)
    get_filename_component(srcdir ${src} DIRECTORY)
    add_custom_command(
      OUTPUT ${spv}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
      COMMAND Vulkan::glslc --target-env=vulkan1.2 -O -I ${srcdir} -I ${root} -MD -MF ${spv}.d -o ${spv} ${src}
      DEPENDS ${src}
      DEPFILE ${spv}.d
      COMMENT "glslc ${rel}"
      VERBATIM)
    list(APPEND outputs ${spv})
  endforeach()
  set(${out_var} ${outputs} PARENT_SCOPE)
endfunction()
