// Mesh files (any format assimp reads) to triangles, and triangles to the voxels they pass
// through, for `frugal spconv --mesh`. Every failure is a frugal::Error naming the file and why.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace frugal::tools {

using Triangle = std::array<std::array<float, 3>, 3>;

// The triangles of every mesh in the file, in scene coordinates (node transforms applied).
// Refuses, with the file's name and a reason: a missing or empty file, what assimp cannot read or
// its validation step rejects, a scene without triangles, a non-finite vertex. assimp runs in a
// child process capped at the available memory, so its crashes and assertions on malformed files
// are refusals too ("the importer crashed reading it (signal 6: Aborted)").
std::vector<Triangle> read_mesh(const std::string& path);
// The same for a file's bytes in memory; `hint` is its extension ("obj", "ply", ...) and `name`
// what the errors call it.
std::vector<Triangle> read_mesh(std::span<const uint8_t> bytes, const char* hint, const std::string& name);

// Samples each triangle on a barycentric grid whose step is at most half a voxel along every edge
// (computed in double), the mesh scaled to fit [1, res - 2]³, and returns the voxels hit as rows
// (0, x, y, z), each once. Refuses a mesh whose extent is 0 or not a normal finite float (the f32
// coordinates cannot resolve it), more than `max_samples` samples (the work), or more than
// `max_voxels` voxels (the memory the caller can give).
constexpr int64_t kMaxMeshSamples = int64_t{1} << 31;  // about a minute of sampling on one core
std::vector<int32_t> voxelize(const std::vector<Triangle>& tris, int res, const std::string& name, int64_t max_voxels,
                              int64_t max_samples = kMaxMeshSamples);

}  // namespace frugal::tools
