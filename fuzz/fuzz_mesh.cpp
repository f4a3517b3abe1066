// libFuzzer harness: `frugal spconv --mesh` on arbitrary bytes. The first byte picks the format
// assimp is told, the second the grid resolution; the rest is the file. Loading and voxelizing
// must return voxels inside the grid or throw frugal::Error naming the input and a reason.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../tools/mesh_voxels.h"
#include "frugal/error.h"

namespace {

// Formats assimp reads from memory without other files beside them.
constexpr const char* kHints[] = {"obj", "off",  "ply", "stl", "3ds", "ac",  "ase",  "dae",     "x",
                                  "glb", "gltf", "fbx", "md2", "md3", "mdl", "ms3d", "nff",     "raw",
                                  "smd", "ogex", "cob", "q3o", "dxf", "lwo", "ter",  "irrmesh", "xgl",
                                  "b3d", "3d",   "hmp", "amf", "csm", "bvh", "m3d",  "sib",     "mdc"};
constexpr size_t kHintCount = sizeof(kHints) / sizeof(kHints[0]);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const char* hint = kHints[data[0] % kHintCount];
  const int res = 4 + data[1] % 61;
  const std::string name = std::string("fuzz input.") + hint;
  try {
    const auto tris = frugal::tools::read_mesh({data + 2, size - 2}, hint, name);
    const auto voxels = frugal::tools::voxelize(tris, res, name, int64_t{1} << 20, int64_t{1} << 24);
    for (size_t i = 0; i < voxels.size(); i += 4)
      for (int a = 1; a < 4; ++a)
        if (voxels[i + a] < 0 || voxels[i + a] >= res) {
          std::fprintf(stderr, "voxel %zu outside the grid of %d\n", i / 4, res);
          std::abort();
        }
  } catch (const frugal::Error& e) {
    // "[frugal spconv] ... 'fuzz input.obj' ...: <a reason with at least one letter>"
    const std::string m = e.what();
    const size_t named = m.find("'" + name + "'");
    const bool reason = named != std::string::npos && std::any_of(m.begin() + named + name.size() + 2, m.end(),
                                                                  [](char c) { return std::isalpha(c); });
    if (!reason) {
      std::fprintf(stderr, "an error that does not name the input and a reason: %s\n", m.c_str());
      std::abort();
    }
  }
  return 0;
}
