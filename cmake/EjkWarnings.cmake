# Warnings for every ejk target; EJK_WERROR turns them into errors.
function(ejk_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wcast-align -Wimplicit-fallthrough)
  if(EJK_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
