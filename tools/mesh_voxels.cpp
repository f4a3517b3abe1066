// See mesh_voxels.h.
#include "mesh_voxels.h"

#include <assimp/postprocess.h>
#include <assimp/scene.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <assimp/Importer.hpp>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <unordered_set>

#include "frugal/error.h"
#include "host_memory.h"

namespace frugal::tools {

namespace {

constexpr const char* kOp = "frugal spconv";

// assimp's validation runs before every other step, so the steps after it (triangulation, the
// pre-transform that applies node transforms and needs a well-formed node graph) only ever see
// scenes it accepted: files whose scene graph has a null node or a light without a node crash
// the pre-transform otherwise.
constexpr unsigned kImportFlags =
    aiProcess_ValidateDataStructure | aiProcess_Triangulate | aiProcess_PreTransformVertices;

std::string reason_of(const Assimp::Importer& importer) {
  std::string r = importer.GetErrorString();
  while (!r.empty() && std::isspace(static_cast<unsigned char>(r.back()))) r.pop_back();
  return r.empty() ? std::string("assimp gave no reason") : r;
}

std::vector<Triangle> triangles_of(const aiScene* scene, const Assimp::Importer& importer, const std::string& name) {
  FRUGAL_CHECK(scene != nullptr, invalid_argument, kOp, "cannot load mesh '" << name << "': " << reason_of(importer));
  FRUGAL_CHECK(!(scene->mFlags & AI_SCENE_FLAGS_INCOMPLETE), invalid_argument, kOp,
               "cannot load mesh '" << name << "': assimp read an incomplete scene (no meshes) from it");
  std::vector<Triangle> tris;
  for (unsigned m = 0; m < scene->mNumMeshes; ++m) {
    const aiMesh* mesh = scene->mMeshes[m];
    if (mesh == nullptr || mesh->mVertices == nullptr) continue;
    for (unsigned f = 0; f < mesh->mNumFaces; ++f) {
      const aiFace& face = mesh->mFaces[f];
      if (face.mNumIndices != 3) continue;  // points and lines survive triangulation; skip them
      Triangle t;
      for (int c = 0; c < 3; ++c) {
        const unsigned i = face.mIndices[c];
        FRUGAL_CHECK(
            i < mesh->mNumVertices, invalid_argument, kOp,
            "mesh '" << name << "' has a face index " << i << " past its " << mesh->mNumVertices << " vertices");
        const aiVector3D& v = mesh->mVertices[i];
        FRUGAL_CHECK(std::isfinite(v.x) && std::isfinite(v.y) && std::isfinite(v.z), invalid_argument, kOp,
                     "mesh '" << name << "' has a non-finite vertex");
        t[c] = {v.x, v.y, v.z};
      }
      tris.push_back(t);
    }
  }
  FRUGAL_CHECK(!tris.empty(), invalid_argument, kOp, "mesh '" << name << "' holds no triangles");
  return tris;
}

// assimp reports most failures through a null scene, but an allocation failure (a header that
// claims billions of vertices) can escape as an exception.
template <typename Read>
std::vector<Triangle> import_with(const std::string& name, Read read) {
  Assimp::Importer importer;
  const aiScene* scene = nullptr;
  try {
    scene = read(importer);
  } catch (const std::bad_alloc&) {
    FRUGAL_FAIL(invalid_argument, kOp, "cannot load mesh '" << name << "': out of memory while importing it");
  } catch (const std::exception& e) {
    FRUGAL_FAIL(invalid_argument, kOp, "cannot load mesh '" << name << "': " << e.what());
  }
  return triangles_of(scene, importer, name);
}

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// CPU seconds an import may take: assimp reads a million-triangle file in a few.
constexpr rlim_t kImportCpuSeconds = 10;

// The child's side: the triangles ('T', a count, 9 floats each) or the error ('E', its code, its
// message) down the pipe, then _exit (no destructor or stdio flush of the parent's state runs).
template <typename Import>
[[noreturn]] void import_in_child(int fd, Import import) {
  // A crash ends the child with its signal, whatever handlers the parent had installed.
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, SIG_DFL);
  // Past what the machine has available, an allocation fails (and is reported) instead of
  // swapping the machine or waking the OOM killer.
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  statm >> pages;
  const double cap = pages * static_cast<double>(sysconf(_SC_PAGESIZE)) + host_memory_available();
  const rlimit limit{static_cast<rlim_t>(cap), static_cast<rlim_t>(cap)};
  setrlimit(RLIMIT_AS, &limit);
  // An importer that loops on a malformed file is stopped (SIGXCPU) instead of hanging the program.
  const rlimit cpu{kImportCpuSeconds, kImportCpuSeconds + 1};
  setrlimit(RLIMIT_CPU, &cpu);
  try {
    const std::vector<Triangle> tris = import();
    const uint64_t n = tris.size();
    const bool ok =
        write_all(fd, "T", 1) && write_all(fd, &n, sizeof n) && write_all(fd, tris.data(), n * sizeof(Triangle));
    _exit(ok ? 0 : 1);
  } catch (const Error& e) {
    const uint8_t code = static_cast<uint8_t>(e.code());
    const std::string m = e.what();
    _exit(write_all(fd, "E", 1) && write_all(fd, &code, 1) && write_all(fd, m.data(), m.size()) ? 0 : 1);
  } catch (...) {
    _exit(1);
  }
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
    return "the importer ran past its " + std::to_string(kImportCpuSeconds) + " s CPU-time limit reading it";
  if (WIFSIGNALED(status)) {
    const char* sig = strsignal(WTERMSIG(status));
    return "the importer crashed reading it (signal " + std::to_string(WTERMSIG(status)) + ": " +
           (sig ? sig : "unknown") + ")";
  }
  return "the importer exited with status " + std::to_string(WEXITSTATUS(status)) + " reading it";
}

// Runs `import` in a child process: assimp aborts on some malformed files (its assertions are
// compiled in) or reads past a buffer, and that must be an error naming the file, not the end of
// the program. The triangles come back through a pipe.
template <typename Import>
std::vector<Triangle> isolated(const std::string& name, Import import) {
  int fds[2];
  FRUGAL_CHECK(pipe(fds) == 0, internal, kOp, "cannot load mesh '" << name << "': pipe() failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    import_in_child(fds[1], import);
  }
  close(fds[1]);
  FRUGAL_CHECK(pid > 0, internal, kOp, "cannot load mesh '" << name << "': fork() failed");
  std::string got;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got.append(buf, static_cast<size_t>(r));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!got.empty() && got[0] == 'E' && got.size() >= 2) throw Error(static_cast<ErrorCode>(got[1]), got.substr(2));
  uint64_t n = 0;
  const bool whole = got.size() >= 1 + sizeof n && got[0] == 'T' &&
                     (std::memcpy(&n, got.data() + 1, sizeof n), got.size() == 1 + sizeof n + n * sizeof(Triangle));
  FRUGAL_CHECK(whole && WIFEXITED(status) && WEXITSTATUS(status) == 0, invalid_argument, kOp,
               "cannot load mesh '" << name << "': " << describe_status(status));
  std::vector<Triangle> tris(n);
  std::memcpy(tris.data(), got.data() + 1 + sizeof n, n * sizeof(Triangle));
  return tris;
}

using Point = std::array<double, 3>;

// The triangle in voxel coordinates: (v - lo) · scale + 1.
std::array<Point, 3> to_grid(const Triangle& t, const Point& lo, double scale) {
  std::array<Point, 3> g;
  for (int c = 0; c < 3; ++c)
    for (int a = 0; a < 3; ++a) g[c][a] = (static_cast<double>(t[c][a]) - lo[a]) * scale + 1.0;
  return g;
}

double distance(const Point& a, const Point& b) {
  return std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) + (a[2] - b[2]) * (a[2] - b[2]));
}

// Grid steps along each edge: at most half a voxel each.
int64_t steps_of(const std::array<Point, 3>& g) {
  const double longest = std::max({distance(g[0], g[1]), distance(g[1], g[2]), distance(g[2], g[0])});
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(longest / 0.5)));
}

}  // namespace

std::vector<Triangle> read_mesh(const std::string& path) {
  std::error_code ec;
  FRUGAL_CHECK(std::filesystem::exists(path, ec), invalid_argument, kOp, "mesh file '" << path << "' does not exist");
  FRUGAL_CHECK(std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > 0 && !ec,
               invalid_argument, kOp, "mesh file '" << path << "' is empty or not a regular file");
  return isolated(
      path, [&] { return import_with(path, [&](Assimp::Importer& im) { return im.ReadFile(path, kImportFlags); }); });
}

std::vector<Triangle> read_mesh(std::span<const uint8_t> bytes, const char* hint, const std::string& name) {
  FRUGAL_CHECK(!bytes.empty(), invalid_argument, kOp, "mesh '" << name << "' is empty");
  return isolated(name, [&] {
    return import_with(name, [&](Assimp::Importer& im) {
      return im.ReadFileFromMemory(bytes.data(), bytes.size(), kImportFlags, hint);
    });
  });
}

std::vector<int32_t> voxelize(const std::vector<Triangle>& tris, int res, const std::string& name, int64_t max_voxels,
                              int64_t max_samples) {
  FRUGAL_CHECK(res >= 4 && res <= 4096, invalid_argument, kOp, "--res must be in [4, 4096], got " << res);
  FRUGAL_CHECK(!tris.empty(), invalid_argument, kOp, "mesh '" << name << "' holds no triangles");
  Point lo{INFINITY, INFINITY, INFINITY}, hi{-INFINITY, -INFINITY, -INFINITY};
  for (const Triangle& t : tris)
    for (const auto& v : t)
      for (int a = 0; a < 3; ++a) {
        FRUGAL_CHECK(std::isfinite(v[a]), invalid_argument, kOp, "mesh '" << name << "' has a non-finite vertex");
        lo[a] = std::min(lo[a], static_cast<double>(v[a]));
        hi[a] = std::max(hi[a], static_cast<double>(v[a]));
      }
  const double extent = std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]});
  FRUGAL_CHECK(extent > 0, invalid_argument, kOp, "mesh '" << name << "' has zero extent: every vertex is one point");
  FRUGAL_CHECK(extent >= FLT_MIN && extent <= FLT_MAX, invalid_argument, kOp,
               "mesh '" << name << "' has an extent of " << extent << ", outside the normal floats [" << FLT_MIN << ", "
                        << FLT_MAX << "] its f32 coordinates can resolve: rescale it");
  const double scale = (res - 3) / extent;

  int64_t samples = 0;
  for (const Triangle& t : tris) {
    const int64_t s = steps_of(to_grid(t, lo, scale));
    samples += (s + 1) * (s + 2) / 2;  // s ≤ 2·(res - 3)·√3 + 1: no overflow before the check below
    FRUGAL_CHECK(samples <= max_samples, invalid_argument, kOp,
                 "mesh '" << name << "' needs more than " << max_samples << " surface samples at res " << res
                          << " (the work limit): lower --res");
  }

  std::unordered_set<uint64_t> seen;
  std::vector<int32_t> c;
  auto add = [&](const Point& p) {
    int v[3];
    for (int a = 0; a < 3; ++a) v[a] = std::clamp(static_cast<int>(std::floor(p[a])), 0, res - 1);
    if (!seen.insert((static_cast<uint64_t>(v[0]) * res + v[1]) * res + v[2]).second) return;
    FRUGAL_CHECK(static_cast<int64_t>(seen.size()) <= max_voxels, invalid_argument, kOp,
                 "mesh '" << name << "' gives more than " << max_voxels << " voxels at res " << res
                          << ", more than the host memory holds: lower --res");
    c.insert(c.end(), {0, v[0], v[1], v[2]});
  };
  for (const Triangle& t : tris) {
    const std::array<Point, 3> g = to_grid(t, lo, scale);
    const int64_t steps = steps_of(g);
    for (int64_t i = 0; i <= steps; ++i)
      for (int64_t j = 0; i + j <= steps; ++j) {
        const double a = static_cast<double>(i) / steps, b = static_cast<double>(j) / steps;
        Point p;
        for (int k = 0; k < 3; ++k) p[k] = g[0][k] + (g[1][k] - g[0][k]) * a + (g[2][k] - g[0][k]) * b;
        add(p);
      }
  }
  return c;
}

}  // namespace frugal::tools
