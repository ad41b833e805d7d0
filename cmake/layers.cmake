# The layers of src/: the one table that both the build targets and the include check read.
#
# Each directory src/<layer>/ is the static library tformer_<layer>. TFORMER_LAYER_DEPS_<layer> lists
# the layers whose headers the files of <layer> include; the library links exactly those (PUBLIC),
# and cmake/check_layers.cmake fails the build when a file of <layer> includes "<other>/..." for a
# layer not listed there. A layer may list only layers that come before it in TFORMER_LAYERS, so
# the graph has no cycle and "below" means "earlier in the list and reachable".
#
# A new include of a layer below that is not listed yet: add the layer here (and to the picture in
# docs/architecture.md, which the ctest test build.layers_doc compares with this table). An include
# of a layer above or beside: move the piece it needs down instead.

set(TFORMER_LAYERS core kernels tokenizer io plot model generate train serve cli)

set(TFORMER_LAYER_DEPS_core "")
set(TFORMER_LAYER_DEPS_kernels core)
set(TFORMER_LAYER_DEPS_tokenizer core)
set(TFORMER_LAYER_DEPS_io core)
set(TFORMER_LAYER_DEPS_plot core)
set(TFORMER_LAYER_DEPS_model core kernels tokenizer io)
set(TFORMER_LAYER_DEPS_generate core kernels model)
set(TFORMER_LAYER_DEPS_train core kernels tokenizer io model)
set(TFORMER_LAYER_DEPS_serve core kernels tokenizer plot model generate)
set(TFORMER_LAYER_DEPS_cli core kernels tokenizer io plot model generate train serve)

# Fails (FATAL_ERROR) unless every listed dependency is a layer that comes before its user.
function(tformer_validate_layers)
  set(seen "")
  foreach(layer IN LISTS TFORMER_LAYERS)
    if(NOT DEFINED TFORMER_LAYER_DEPS_${layer})
      message(FATAL_ERROR "cmake/layers.cmake: layer ${layer} has no TFORMER_LAYER_DEPS_${layer}")
    endif()
    foreach(dep IN LISTS TFORMER_LAYER_DEPS_${layer})
      if(NOT dep IN_LIST seen)
        message(FATAL_ERROR "cmake/layers.cmake: layer ${layer} lists ${dep}, which is not a layer before it")
      endif()
    endforeach()
    list(APPEND seen ${layer})
  endforeach()
endfunction()

# Sets <out> to every layer below <layer> (its dependencies, theirs, and so on).
function(tformer_layers_below layer out)
  set(below "")
  set(todo ${TFORMER_LAYER_DEPS_${layer}})
  while(todo)
    list(POP_FRONT todo dep)
    if(NOT dep IN_LIST below)
      list(APPEND below ${dep})
      list(APPEND todo ${TFORMER_LAYER_DEPS_${dep}})
    endif()
  endwhile()
  set(${out} "${below}" PARENT_SCOPE)
endfunction()
