# ferry_add_transport_plugin(<name> SOURCES <files...> [LINK <libs...>])
#
# Builds libferry-<name>.so, a transport plugin that exports only the ABI's
# entry symbol (hidden visibility plus a version script), so two plugins
# never clash and the host sees exactly one symbol. Usable in ferry's own
# tree and, installed with the SDK, from a plugin author's out-of-tree build
# (after find_package(ferry)).
#
# OUTPUT_DIRECTORY  where the .so goes (default: ferry's plugin directory).
#                   A plugin given its own OUTPUT_DIRECTORY is a test or
#                   fixture plugin: it is installed only if INSTALL_DESTINATION
#                   says where.
# INSTALL_DESTINATION  install directory (default: ferry's plugin directory).
function(ferry_add_transport_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY;INSTALL_DESTINATION" "SOURCES;LINK" ${ARGN})
  set(target ferry-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "ferry-${name}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  elseif(DEFINED FERRY_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${FERRY_PLUGIN_OUTPUT_DIR})
  endif()
  set(script ${CMAKE_CURRENT_BINARY_DIR}/${target}.map)
  file(WRITE ${script} "{ global: ferry_transport_negotiate; local: *; };\n")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${script}" "LINKER:--no-undefined")
  if(TARGET ferry::abi)
    target_link_libraries(${target} PRIVATE ferry::abi)
  else()
    target_link_libraries(${target} PRIVATE ferry_abi)
  endif()
  if(ARG_LINK)
    target_link_libraries(${target} PRIVATE ${ARG_LINK})
  endif()
  if(ARG_INSTALL_DESTINATION)
    install(TARGETS ${target} LIBRARY DESTINATION ${ARG_INSTALL_DESTINATION})
  elseif(DEFINED FERRY_PLUGIN_INSTALL_DIR AND NOT ARG_OUTPUT_DIRECTORY)
    install(TARGETS ${target} LIBRARY DESTINATION ${FERRY_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
