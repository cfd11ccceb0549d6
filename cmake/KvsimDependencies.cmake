# Third-party dependencies, all from Debian 12 packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(fmt REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(nlohmann_json 3.10 REQUIRED)

# xxHash ships no CMake config on Debian: an imported target by hand.
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY NAMES xxhash REQUIRED)
add_library(kvsim_xxhash INTERFACE)
target_include_directories(kvsim_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(kvsim_xxhash INTERFACE ${XXHASH_LIBRARY})

if(KVSIM_BUILD_TESTS)
  find_package(Catch2 2.13 REQUIRED)
  include(Catch)
endif()
if(TARGET yaml-cpp AND NOT TARGET yaml-cpp::yaml-cpp)
  add_library(yaml-cpp::yaml-cpp ALIAS yaml-cpp)
endif()
