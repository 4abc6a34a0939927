# hmc_python_package(TARGET DIR EXTENSION): the `hmc` package assembled in DIR, the pure-Python layer
# (python/hmc/*.py) copied beside the extension module EXTENSION, which is built into DIR; TARGET
# builds both by default. The product's package and the tests' one (with emulators) are made alike.
function(hmc_python_package target dir extension)
  file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/hmc/*.py)
  set(copies)
  foreach(src ${sources})
    get_filename_component(name ${src} NAME)
    add_custom_command(OUTPUT ${dir}/${name} COMMAND ${CMAKE_COMMAND} -E copy_if_different ${src} ${dir}/${name}
                       DEPENDS ${src})
    list(APPEND copies ${dir}/${name})
  endforeach()
  set_target_properties(${extension} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${dir})
  add_custom_target(${target} ALL DEPENDS ${copies} ${extension})
endfunction()
