# The include-layer check: every include of "<layer>/..." (or <layer/...>) in a file under
# src/<self>/ must name <self> or a layer that cmake/layers.cmake lists for <self>. Anything else
# fails, naming the file, the line, the included header and the two layers.
#
#   cmake [-DSOURCE_ROOT=dir] [-DSTAMP=file] [-DSTRICT=ON] -P cmake/check_layers.cmake
#
# SOURCE_ROOT: the tree to check (default: the one holding this script); its own cmake/layers.cmake
# is the table. STAMP: a file touched when the check passes (the build's witness that it ran).
# STRICT: a listed dependency that no file includes is an error too (otherwise a warning).
# The build runs it before compiling any library (CMakeLists.txt: target tformer_layer_check).

cmake_minimum_required(VERSION 3.20)

if(NOT DEFINED SOURCE_ROOT)
  get_filename_component(SOURCE_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
include("${SOURCE_ROOT}/cmake/layers.cmake")
tformer_validate_layers()

set(errors "")  # one message per bad include, each prefixed by "\n"
set(n_errors 0)

# Every directory under src/ is a layer of the table, and every source file is in one of them.
file(GLOB entries LIST_DIRECTORIES true RELATIVE "${SOURCE_ROOT}/src" "${SOURCE_ROOT}/src/*")
foreach(entry IN LISTS entries)
  if(IS_DIRECTORY "${SOURCE_ROOT}/src/${entry}")
    if(NOT entry IN_LIST TFORMER_LAYERS)
      string(APPEND errors "\nsrc/${entry}/: error: a directory of src/ that is not a layer of cmake/layers.cmake")
      math(EXPR n_errors "${n_errors} + 1")
    endif()
  elseif(entry MATCHES "\\.(h|hh|hpp|hxx|inc|ipp|c|cc|cpp|cxx)$")
    string(APPEND errors "\nsrc/${entry}: error: a source file outside every layer's folder")
    math(EXPR n_errors "${n_errors} + 1")
  endif()
endforeach()

foreach(layer IN LISTS TFORMER_LAYERS)
  set(allowed ${TFORMER_LAYER_DEPS_${layer}})
  if(allowed)
    string(REPLACE ";" ", " allowed_text "${allowed}")
  else()
    set(allowed_text "no other layer")
  endif()
  tformer_layers_below(${layer} below)
  set(used "")

  file(GLOB_RECURSE files RELATIVE "${SOURCE_ROOT}" "${SOURCE_ROOT}/src/${layer}/*")
  list(FILTER files INCLUDE REGEX "\\.(h|hh|hpp|hxx|inc|ipp|c|cc|cpp|cxx)$")
  list(SORT files)
  foreach(file IN LISTS files)
    file(READ "${SOURCE_ROOT}/${file}" rest)
    set(line 1)
    # Each match is one include directive, from the newline before it to its closing delimiter.
    string(REGEX MATCHALL "(^|\n)[ \t]*#[ \t]*include[ \t]*[\"<][^\">\n]*[\">]" directives "${rest}")
    foreach(directive IN LISTS directives)
      # The line number: newlines before this directive, counted from the previous one.
      string(FIND "${rest}" "${directive}" at)
      string(SUBSTRING "${rest}" 0 ${at} before)
      string(REGEX REPLACE "[^\n]" "" newlines "${before}${directive}")
      string(LENGTH "${newlines}" n)
      math(EXPR line "${line} + ${n}")
      string(LENGTH "${directive}" len)
      math(EXPR at "${at} + ${len}")
      string(SUBSTRING "${rest}" ${at} -1 rest)

      string(REGEX REPLACE "^.*include[ \t]*([\"<][^\">\n]*[\">])$" "\\1" spelled "${directive}")
      string(REGEX REPLACE "^.(.*).$" "\\1" header "${spelled}")
      string(REGEX REPLACE "^([^/]*)/.*$" "\\1" other "${header}")
      set(where "${file}:${line}: error: #include ${spelled}")
      if(header MATCHES "(^|/)\\.\\.(/|$)")
        string(APPEND errors "\n${where}: a relative path out of the layer's folder; include \"<layer>/...\" from src/")
        math(EXPR n_errors "${n_errors} + 1")
      elseif(other STREQUAL header OR other STREQUAL layer OR NOT other IN_LIST TFORMER_LAYERS)
        # The layer's own header, or not a header of src/.
      elseif(other IN_LIST allowed)
        list(APPEND used ${other})
      else()
        tformer_layers_below(${other} below_other)
        if(layer IN_LIST below_other)
          set(why "upward include: layer ${layer} includes layer ${other}, which is above it")
        elseif(other IN_LIST below)
          set(why "layer ${layer} includes layer ${other}, which is below it but not listed in TFORMER_LAYER_DEPS_${layer} (add it in cmake/layers.cmake and docs/architecture.md)")
        else()
          set(why "layer ${layer} includes layer ${other}, which is not below it")
        endif()
        string(APPEND errors "\n${where}: ${why}; layer ${layer} may include: ${allowed_text}")
        math(EXPR n_errors "${n_errors} + 1")
      endif()
    endforeach()
  endforeach()

  foreach(dep IN LISTS allowed)
    if(NOT dep IN_LIST used)
      set(msg "cmake/layers.cmake: layer ${layer} lists ${dep}, but no file of src/${layer}/ includes it")
      if(STRICT)
        string(APPEND errors "\n${msg}")
        math(EXPR n_errors "${n_errors} + 1")
      else()
        message(WARNING "${msg}")
      endif()
    endif()
  endforeach()
endforeach()

if(n_errors GREATER 0)
  if(DEFINED STAMP)
    file(REMOVE "${STAMP}")
  endif()
  message(NOTICE "${errors}\n")
  message(FATAL_ERROR "the include-layer check failed (${n_errors} error(s) above; the layers are in cmake/layers.cmake)")
endif()
if(DEFINED STAMP)
  file(TOUCH "${STAMP}")
endif()
