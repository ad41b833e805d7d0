# The table of targets in docs/architecture.md says what cmake/layers.cmake says: one row
#   | `tformer_<layer>` | <the layers it links, separated by spaces or commas; "—" for none> | ... |
# per layer, listing exactly the layers of TFORMER_LAYER_DEPS_<layer>, and no row for a layer that
# does not exist. Run by ctest (build.layers_doc) as
#   cmake [-DSOURCE_ROOT=dir] -P cmake/check_layers_doc.cmake
cmake_minimum_required(VERSION 3.20)

if(NOT DEFINED SOURCE_ROOT)
  get_filename_component(SOURCE_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
include("${SOURCE_ROOT}/cmake/layers.cmake")
tformer_validate_layers()
set(doc "${SOURCE_ROOT}/docs/architecture.md")
file(READ "${doc}" text)

set(errors "")
string(REGEX MATCHALL "\n\\| `tformer_[a-z_]+` \\|" rows "${text}")
foreach(row IN LISTS rows)
  string(REGEX REPLACE "^\n\\| `tformer_([a-z_]+)` \\|$" "\\1" name "${row}")
  if(NOT name IN_LIST TFORMER_LAYERS AND NOT name STREQUAL "lib")
    string(APPEND errors "\ndocs/architecture.md: a row for tformer_${name}, which is no layer of cmake/layers.cmake")
  endif()
endforeach()

foreach(layer IN LISTS TFORMER_LAYERS)
  string(REGEX MATCH "\n\\| `tformer_${layer}` \\| ([^|\n]*) \\|" row "${text}")
  if(NOT row)
    string(APPEND errors "\ndocs/architecture.md: no row | `tformer_${layer}` | ... | in the table of targets")
    continue()
  endif()
  set(field "${CMAKE_MATCH_1}")
  string(REGEX REPLACE "[ ,]+" ";" listed "${field}")
  list(REMOVE_ITEM listed "—" "")
  set(expected ${TFORMER_LAYER_DEPS_${layer}})
  list(SORT listed)
  list(SORT expected)
  if(NOT "${listed}" STREQUAL "${expected}")
    string(REPLACE ";" " " listed_text "${listed}")
    string(REPLACE ";" " " expected_text "${expected}")
    string(APPEND errors "\ndocs/architecture.md: tformer_${layer} links \"${listed_text}\" there but \"${expected_text}\" in cmake/layers.cmake")
  endif()
endforeach()

if(errors)
  message(NOTICE "${errors}\n")
  message(FATAL_ERROR "docs/architecture.md disagrees with cmake/layers.cmake")
endif()
