// Hostile input: the fuzz corpus replayed on every backend (CUDA compared with the CPU call by
// call), size arithmetic that must refuse instead of wrapping, what non-finite input does to each
// op, and every file of Debian's assimp test models through `frugal spconv --mesh`.
// Run the CUDA cases under compute-sanitizer on a GPU machine:
//   compute-sanitizer --tool memcheck build/tests/test_hostile --gtest_filter='*Cuda*'
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "../fuzz/cases.h"
#include "core/validate.h"
#include "testing.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

// ---- the fuzz corpus ---------------------------------------------------------------------------

// fuzz/corpus/<harness>/ of this source tree, or FRUGAL_FUZZ_CORPUS/<harness>/ (a longer run's).
std::vector<fs::path> corpus(const std::string& harness) {
  const char* env = std::getenv("FRUGAL_FUZZ_CORPUS");
  const fs::path root = env ? fs::path(env) : fs::path(__FILE__).parent_path().parent_path() / "fuzz" / "corpus";
  std::vector<fs::path> files;
  if (fs::is_directory(root / harness))
    for (const auto& e : fs::directory_iterator(root / harness))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint8_t> bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

using fuzz::Case;

fuzz::Record replay(Case run, const std::vector<uint8_t>& input, Device dev, const fs::path& file) {
  fuzz::Record rec;
  try {
    run(input, dev, rec);
  } catch (const fuzz::Broken& e) {
    ADD_FAILURE() << file.filename() << " on " << to_string(dev) << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << file.filename() << " on " << to_string(dev)
                  << ": an exception that is not frugal::Error: " << e.what();
  }
  return rec;
}

void replay_on_cpu(const std::string& harness, Case run) {
  const auto files = corpus(harness);
  ASSERT_FALSE(files.empty()) << "no corpus files for " << harness;
  for (const fs::path& f : files) replay(run, bytes_of(f), Device::cpu(), f);
}

// The same calls on CUDA and on the CPU: the same refusals (a CUDA `unsupported` is allowed, and
// ends the comparison of that case: the GPU lacks that variant), and results within each call's
// tolerance.
void compare_with_cpu(const std::string& harness, Case run) {
  for (const fs::path& f : corpus(harness)) {
    const std::vector<uint8_t> input = bytes_of(f);
    const fuzz::Record cpu = replay(run, input, Device::cpu(), f);
    const fuzz::Record gpu = replay(run, input, Device::cuda(0), f);
    const size_t n = std::min(cpu.outcomes.size(), gpu.outcomes.size());
    for (size_t i = 0; i < n; ++i) {
      const fuzz::Outcome &c = cpu.outcomes[i], &g = gpu.outcomes[i];
      SCOPED_TRACE(f.filename().string() + ": " + c.call);
      if (!g.ok && g.code == ErrorCode::unsupported) break;  // no GPU variant: the rest may diverge
      ASSERT_EQ(c.ok, g.ok) << "cpu: " << (c.ok ? "ok" : c.message) << "\ncuda: " << (g.ok ? "ok" : g.message);
      if (!c.ok) {
        EXPECT_EQ(c.code, g.code) << c.message << "\n" << g.message;
        continue;
      }
      ASSERT_EQ(c.values.size(), g.values.size());
      double num = 0, den = 0;
      for (size_t j = 0; j < c.values.size(); ++j) {
        ASSERT_EQ(std::isnan(c.values[j]), std::isnan(g.values[j])) << "element " << j;
        if (std::isnan(c.values[j]) || std::isinf(c.values[j])) {
          if (!std::isnan(c.values[j])) EXPECT_EQ(c.values[j], g.values[j]) << "element " << j;
          continue;
        }
        num += (c.values[j] - g.values[j]) * (c.values[j] - g.values[j]);
        den += c.values[j] * c.values[j];
      }
      EXPECT_LE(std::sqrt(num), c.tolerance * std::sqrt(den) + 1e-6);
    }
  }
}

TEST(CorpusOnCpu, KvCasesHoldTheirInvariants) { replay_on_cpu("kv", fuzz::run_kv_case); }
TEST(CorpusOnCpu, SpconvCasesHoldTheirInvariants) { replay_on_cpu("spconv", fuzz::run_spconv_case); }

TEST(CorpusOnCuda, KvCasesMatchTheCpu) {
  FRUGAL_SKIP_WITHOUT_GPU();
  compare_with_cpu("kv", fuzz::run_kv_case);
}

TEST(CorpusOnCuda, SpconvCasesMatchTheCpu) {
  FRUGAL_SKIP_WITHOUT_GPU();
  compare_with_cpu("spconv", fuzz::run_spconv_case);
}

// ---- size arithmetic refuses instead of wrapping -------------------------------------------

TEST(CheckedSizes, ProductsThatFitAndThatDoNot) {
  EXPECT_EQ(detail::checked_mul(int64_t{1} << 31, int64_t{1} << 31, "t", "x"), int64_t{1} << 62);
  EXPECT_EQ(detail::checked_product({int64_t{1} << 40, int64_t{1} << 40, 0}, "t", "x"), 0);
  expect_error([] { detail::checked_mul(int64_t{1} << 32, int64_t{1} << 31, "op", "the size"); },
               ErrorCode::invalid_argument, {"[op] the size overflows 64 bits: 4294967296 × 2147483648"});
  expect_error(
      [] {
        detail::checked_product({3, int64_t{1} << 62}, "op", "the size");
      },
      ErrorCode::invalid_argument, {"[op] the size overflows 64 bits: the product of [3, 4611686018427387904]"});
  expect_error([] { detail::checked_mul(-1, 2, "op", "the size"); }, ErrorCode::invalid_argument, {"negative"});
}

TEST(CheckedSizes, AViewWhoseElementCountOverflowsIsRefused) {
  expect_error(
      [] {
        TensorView(nullptr, DType::f32, {int64_t{1} << 40, int64_t{1} << 40});
      },
      ErrorCode::invalid_argument, {"[TensorView] the element count of the shape overflows 64 bits"});
}

TEST(CheckedSizes, AViewWhoseByteSizeOverflowsIsRefused) {
  expect_error([] { TensorView(nullptr, DType::f32, {int64_t{1} << 62}); }, ErrorCode::invalid_argument,
               {"[TensorView] the byte size of the shape overflows 64 bits"});
}

TEST(CheckedSizes, AStridedViewWhoseSpanOverflowsIsRefused) {
  const int64_t shape[] = {3, 2}, strides[] = {int64_t{1} << 62, 1};
  expect_error([&] { TensorView(reinterpret_cast<void*>(64), DType::u8, shape, strides, Device::cpu()); },
               ErrorCode::invalid_argument, {"[TensorView] the span of the strided view"});
}

TEST(CheckedSizes, TensorEmptyNamesItselfAndAllocatesNothing) {
  expect_error(
      [] {
        Tensor::empty({int64_t{1} << 61, 2}, DType::f16);
      },
      ErrorCode::invalid_argument, {"[Tensor::empty] the byte size of the shape overflows 64 bits"});
}

TEST(CheckedSizes, ACacheTooLargeToCountIsRefusedByValidate) {
  kv::CacheConfig c;
  c.num_kv_heads = 8;
  c.head_dim = 4096;
  c.bits = 8;
  c.capacity = std::numeric_limits<int64_t>::max() / 2;
  expect_error([&] { kv::validate(c, "op"); }, ErrorCode::invalid_argument, {"[op]", "overflows 64 bits"});
}

// The allocating dequantize checks the token range before it sizes the output.
TEST(CheckedSizes, DequantizeChecksTheRangeBeforeAllocating) {
  kv::Cache c({.num_kv_heads = 2, .head_dim = 16, .capacity = 8});
  expect_error([&] { (void)c.dequantize(0, 0, int64_t{1} << 40); }, ErrorCode::out_of_range,
               {"[kv::dequantize] token range [0, 1099511627776) passes write_pos 0"});
}

// ---- non-finite input, on every backend ---------------------------------------------------------

std::vector<Device> backends() {
  std::vector<Device> d{Device::cpu()};
  if (cuda_available()) d.push_back(Device::cuda(0));
  return d;
}

// A vector with a NaN, an Inf, or a norm above 2^120 gets a NaN scale and dequantizes to NaN; its
// neighbours, and a vector just below 2^120, stay finite.
TEST(NonFinite, TheCacheFlagsEachBadVectorWithANanScale) {
  for (Device dev : backends()) {
    SCOPED_TRACE(to_string(dev));
    const int T = 5, H = 2, D = 64;
    std::vector<float> x(T * H * D, 0.5f);
    x[(1 * H + 0) * D + 7] = NAN;
    x[(2 * H + 1) * D + 0] = INFINITY;
    for (int i = 0; i < D; ++i) x[(3 * H + 0) * D + i] = 1.7e35f;  // norm 1.4e36 > 2^120 = 1.33e36
    for (int i = 0; i < D; ++i) x[(4 * H + 1) * D + i] = 1.6e35f;  // norm 1.28e36: finite
    kv::Cache c({.num_kv_heads = H, .head_dim = D, .capacity = 8}, dev);
    c.append(testing::host_tensor(x, {T, H, D}).to(dev));
    EXPECT_EQ(kv::count_nonfinite_scales(c), 3);
    const std::vector<double> got = testing::to_double(c.dequantize(0, 0, T));
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const bool bad = (t == 1 && h == 0) || (t == 2 && h == 1) || (t == 3 && h == 0);
        for (int i = 0; i < D; ++i)
          ASSERT_EQ(std::isnan(got[(t * H + h) * D + i]), bad) << "token " << t << " head " << h;
      }
  }
}

// A NaN feature reaches exactly the outputs that sum over it: the conv has no max or compare.
TEST(NonFinite, ANanFeaturePropagatesToTheRowsThatSumOverIt) {
  for (Device dev : backends())
    for (DType dt : {DType::f32, DType::f16}) {
      SCOPED_TRACE(to_string(dev) + std::string(" ") + to_string(dt));
      // Three voxels on a line (0, 1, 2) and one far away (10): voxel 0's NaN reaches 0 and 1 only.
      std::vector<int32_t> rows = {0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 10, 0, 0};
      Tensor coords = Tensor::empty({4, 4}, DType::i32);
      std::copy(rows.begin(), rows.end(), coords.data_as<int32_t>());
      const Tensor nbr = spconv::build_kernel_map(coords.to(dev), 3, 1);
      Tensor feats = Tensor::empty({4, 8}, dt), weight = Tensor::empty({27, 8, 8}, dt);
      for (int64_t i = 0; i < feats.numel(); ++i) testing::store_as(dt, feats.data(), i, i < 8 ? NAN : 0.25f);
      for (int64_t i = 0; i < weight.numel(); ++i) testing::store_as(dt, weight.data(), i, 0.125f);
      const std::vector<double> out = testing::to_double(spconv::submanifold_conv(feats.to(dev), nbr, weight.to(dev)));
      for (int r = 0; r < 4; ++r)
        for (int o = 0; o < 8; ++o) ASSERT_EQ(std::isnan(out[r * 8 + o]), r <= 1) << "row " << r;
    }
}

// ---- refusals every backend shares ----------------------------------------------------------------

TEST(Refusals, TheSameOnEveryBackend) {
  for (Device dev : backends()) {
    SCOPED_TRACE(to_string(dev));
    kv::Cache c({.num_kv_heads = 2, .head_dim = 16, .capacity = 4}, dev);
    const Tensor host_x = testing::host_tensor(std::vector<float>(3 * 2 * 16, 1.0f), {3, 2, 16});
    if (dev.is_cuda())
      expect_error([&] { c.append(host_x); }, ErrorCode::invalid_argument, {"x is on cpu but the cache is on cuda"});
    const Tensor x = host_x.to(dev);
    c.append(x);
    expect_error([&] { c.append(x); }, ErrorCode::out_of_range, {"passes the global cache's capacity 4"});
    EXPECT_EQ(c.write_pos(), 3);

    Tensor dup = Tensor::zeros({2, 4}, DType::i32);
    expect_error([&] { spconv::build_kernel_map(dup.to(dev), 3, 1); }, ErrorCode::invalid_argument, {"duplicate"});
    Tensor far = Tensor::zeros({1, 4}, DType::i32);
    far.data_as<int32_t>()[1] = spconv::kCoordMax + 1;
    expect_error([&] { spconv::build_kernel_map(far.to(dev), 3, 1); }, ErrorCode::out_of_range,
                 {"x = 65536 is outside the packable range"});
    const Tensor empty = spconv::build_kernel_map(Tensor::empty({0, 4}, DType::i32, dev), 3, 1);
    EXPECT_EQ(empty.size(0), 27);
    EXPECT_EQ(empty.size(1), 0);
  }
}

// ---- every assimp test model through the CLI --------------------------------------------------

constexpr const char* kModels = "/usr/share/assimp/models";  // Debian: apt-get install assimp-testmodels

// The frugal program: FRUGAL_CLI, or tools/frugal next to this test's tests/ folder in the build.
fs::path cli_path() {
  if (const char* env = std::getenv("FRUGAL_CLI")) return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self.parent_path().parent_path() / "tools" / "frugal";
}

struct Child {
  fs::path file;
  pid_t pid = -1;
  std::string log;
  std::chrono::steady_clock::time_point start;
};

// `frugal spconv --mesh file` in a child limited to 4 GiB of address space (a header that claims
// billions of vertices fails to allocate instead of filling the machine) and 60 s of CPU time.
Child start(const fs::path& cli, const fs::path& file, const fs::path& log) {
  Child r{file, -1, log.string(), std::chrono::steady_clock::now()};
  r.pid = fork();
  if (r.pid == 0) {
    const rlimit mem{rlim_t{4} << 30, rlim_t{4} << 30}, cpu{60, 60};
    setrlimit(RLIMIT_AS, &mem);
    setrlimit(RLIMIT_CPU, &cpu);
    const int fd = open(r.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    setenv("OMP_NUM_THREADS", "1", 1);
    execl(cli.c_str(), "frugal", "spconv", "--mesh", file.c_str(), "--res", "8", "--channels", "1", "--layers", "1",
          "--device", "cpu", static_cast<char*>(nullptr));
    _exit(127);
  }
  return r;
}

// Exit 0, or exit 2 with "error: [frugal spconv] ..." naming the file and a reason after it.
std::string judge(const Child& r, int status) {
  std::ifstream f(r.log);
  const std::string out{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status)) + "\n" + out;
  if (!WIFEXITED(status)) return "did not exit";
  if (WEXITSTATUS(status) == 0) return "";
  const size_t at = out.find("error: [frugal spconv] ");
  if (WEXITSTATUS(status) != 2 || at == std::string::npos)
    return "exit " + std::to_string(WEXITSTATUS(status)) + "\n" + out;
  const std::string message = out.substr(at, out.find('\n', at) - at);
  const std::string quoted = "'" + r.file.string() + "'";
  const size_t named = message.find(quoted);
  if (named == std::string::npos) return "the error does not name the file: " + message;
  const std::string reason = message.substr(named + quoted.size());
  if (std::none_of(reason.begin(), reason.end(), [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)); }))
    return "the error gives no reason: " + message;
  return "";
}

TEST(MeshFiles, EveryAssimpTestModelLoadsOrIsRefusedWithItsNameAndAReason) {
  if (!fs::is_directory(kModels)) GTEST_SKIP() << kModels << " missing (Debian: apt-get install assimp-testmodels)";
  const fs::path cli = cli_path();
  if (cli.empty() || !fs::exists(cli))
    GTEST_SKIP() << "the frugal program was not built (" << cli << "); set FRUGAL_CLI";
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(kModels))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  const fs::path logs = fs::temp_directory_path() / ("frugal_mesh_models_" + std::to_string(getpid()));
  fs::create_directories(logs);
  const size_t parallel = std::max(1u, std::thread::hardware_concurrency());
  std::map<pid_t, Child> running;
  size_t next = 0, loaded = 0, refused = 0;
  while (next < files.size() || !running.empty()) {
    while (next < files.size() && running.size() < parallel) {
      Child r = start(cli, files[next], logs / (std::to_string(next) + ".log"));
      ++next;
      running.emplace(r.pid, std::move(r));
    }
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done <= 0) {
      for (auto& [pid, r] : running)  // a hang past 120 s of wall time is a failure too
        if (std::chrono::steady_clock::now() - r.start > std::chrono::seconds(120)) kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const auto it = running.find(done);
    if (it == running.end()) continue;
    const std::string problem = judge(it->second, status);
    EXPECT_EQ(problem, "") << it->second.file;
    (WIFEXITED(status) && WEXITSTATUS(status) == 0 ? loaded : refused) += 1;
    running.erase(it);
  }
  fs::remove_all(logs);
  std::printf("%zu files: %zu loaded, %zu refused with a reason\n", files.size(), loaded, refused);
  EXPECT_GT(loaded, files.size() / 3);
}

}  // namespace
}  // namespace frugal
