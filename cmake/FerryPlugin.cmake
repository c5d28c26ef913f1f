# ferry_add_transport_plugin(<name> SOURCES <files...> [LINK <libs...>])
#
# Builds libferry-<name>.so, a transport plugin that exports only the ABI's
# entry symbol (hidden visibility plus a version script), so two plugins
# never clash and the host sees exactly one symbol. Usable in ferry's own
# tree and, installed with the SDK, from a plugin author's out-of-tree build
# (after find_package(ferry)).
#
# OUTPUT_DIRECTORY  where the .so goes (default: ferry's plugin directory in
#                   ferry's tree, the current binary directory out of tree).
#                   In ferry's tree, a plugin given its own OUTPUT_DIRECTORY
#                   is a test or fixture plugin: it is installed only if
#                   INSTALL_DESTINATION says where.
# INSTALL_DESTINATION  install directory (default: ferry's plugin directory;
#                   out of tree, <CMAKE_INSTALL_LIBDIR>/ferry/plugins of the
#                   project's install prefix, where a ferry installed at the
#                   same prefix finds it).
#
# A plugin is optimised (-O2) when the project sets no CMAKE_BUILD_TYPE: a
# transport built unoptimised by accident would be measured as slow.
#
# Plugins are built with link-time optimisation where the toolchain has it
# (FERRY_PLUGIN_LTO, on by default; off in sanitizer builds): a message's
# path crosses the plugin's files (the ABI entry, the encoder, the event
# queue), and LTO inlines across them, as it would within one file.
include(CheckIPOSupported)
if(NOT DEFINED FERRY_PLUGIN_LTO)
  set(ferry_plugin_lto_default ON)
  if(FERRY_SANITIZE)
    set(ferry_plugin_lto_default OFF)
  endif()
  option(FERRY_PLUGIN_LTO "Build transport plugins with link-time optimisation"
         ${ferry_plugin_lto_default})
endif()
if(FERRY_PLUGIN_LTO AND NOT DEFINED FERRY_PLUGIN_LTO_SUPPORTED)
  get_property(ferry_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  list(FILTER ferry_langs INCLUDE REGEX "^(C|CXX)$")
  cmake_policy(PUSH)
  cmake_policy(SET CMP0069 NEW)  # a plugin project may declare an older minimum
  check_ipo_supported(RESULT ferry_ipo_ok OUTPUT ferry_ipo_why LANGUAGES ${ferry_langs})
  cmake_policy(POP)
  set(FERRY_PLUGIN_LTO_SUPPORTED ${ferry_ipo_ok} CACHE INTERNAL "")
  if(NOT ferry_ipo_ok)
    message(STATUS "transport plugins: no link-time optimisation (${ferry_ipo_why})")
  endif()
endif()

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
  if(FERRY_PLUGIN_LTO AND FERRY_PLUGIN_LTO_SUPPORTED)
    set_target_properties(${target} PROPERTIES INTERPROCEDURAL_OPTIMIZATION ON)
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
  if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    target_compile_options(${target} PRIVATE -O2)
  endif()
  if(ARG_INSTALL_DESTINATION)
    install(TARGETS ${target} LIBRARY DESTINATION ${ARG_INSTALL_DESTINATION})
  elseif(DEFINED FERRY_PLUGIN_OUTPUT_DIR)  # ferry's own tree
    if(DEFINED FERRY_PLUGIN_INSTALL_DIR AND NOT ARG_OUTPUT_DIRECTORY)
      install(TARGETS ${target} LIBRARY DESTINATION ${FERRY_PLUGIN_INSTALL_DIR})
    endif()
  else()
    # Out of ferry's tree (after find_package(ferry)).
    include(GNUInstallDirs)
    install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/ferry/plugins)
  endif()
endfunction()
