# The test `install_package`: installs the build folder BUILD_DIR into a prefix inside it, builds this
# example against the installed package with find_package(factorjit), and runs it.
#   cmake -DBUILD_DIR=... -DGENERATOR=Ninja -P check.cmake
set(prefix ${BUILD_DIR}/install_package/prefix)
set(tool ${BUILD_DIR}/install_package/tool)
file(REMOVE_RECURSE ${BUILD_DIR}/install_package)
foreach(step
    "${CMAKE_COMMAND};--install;${BUILD_DIR};--prefix;${prefix}"
    "${CMAKE_COMMAND};-S;${CMAKE_CURRENT_LIST_DIR};-B;${tool};-G;${GENERATOR};-DCMAKE_BUILD_TYPE=Release;-DCMAKE_PREFIX_PATH=${prefix}"
    "${CMAKE_COMMAND};--build;${tool}"
    "${tool}/tool")
  execute_process(COMMAND ${step} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_package: `${step}` failed (${rc})")
  endif()
endforeach()
