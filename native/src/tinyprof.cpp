// tinyprof's implementation, compiled once: the CMake target tinyprof::tinyprof,
// and the object the native tests link into every test program.
#define TINYPROF_IMPLEMENTATION
#include <tinyprof/tinyprof.hpp>
