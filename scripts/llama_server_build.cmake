# Included by scripts/setup_llama_server.sh into every project() of llama.cpp's build (CMAKE_PROJECT_INCLUDE).
# The build compiles llama.cpp's C++ outside ggml (the model loader, the server, its JSON, its chat templates and
# multimodal code: about 90% of the compile time) in unity batches, so each heavy header is parsed once per batch, at
# the script's level (-O0 for the tests, -O1 for the benchmarks); ggml, where the inference runs, gets its own level
# (TRTKIT_GGML_FLAGS: -O1 for the tests, -O3 for the benchmarks) and one object per file. On 2 quiet cores, the
# benchmarks' build: 307 s -> 170 s of wall.
if(PROJECT_NAME STREQUAL "ggml")
  set(CMAKE_C_FLAGS_RELEASE "${TRTKIT_GGML_FLAGS}")
  set(CMAKE_CXX_FLAGS_RELEASE "${TRTKIT_GGML_FLAGS}")
  set(CMAKE_UNITY_BUILD OFF)
elseif(CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
  # Files that do not build inside a unity batch: json.cpp specializes templates other files instantiate first,
  # and the mtmd helpers refuse to see mtmd's internal headers. Set once every target exists.
  function(trtkit_unity_exceptions)
    set_source_files_properties(common/json.cpp DIRECTORY common PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    set_source_files_properties(tools/mtmd/mtmd-helper.cpp tools/mtmd/mtmd-helper-gen.cpp DIRECTORY tools/mtmd
                                PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL trtkit_unity_exceptions)
endif()
