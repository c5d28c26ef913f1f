# Cross-compiling for 64-bit ARM Linux (AWS Graviton, and the EFA hosts
# built on it) with Debian's cross compiler (g++-aarch64-linux-gnu) and its
# arm64 libraries (multiarch: libssl-dev:arm64). Header-only dependencies
# (Boost, nlohmann-json, DLPack) are the build machine's.
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# scripts/cross-build-aarch64.sh does it and checks the result.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Libraries only from the target's directories; headers from both (the
# multiarch include tree is shared).
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config sees the target's .pc files only (libfabric is not installed
# for arm64 here: the fabric plugin is skipped, and says so).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
